"""Exact k-nearest neighbours and signed distance to a triangle mesh, with NVIDIA Warp.

These are the two expensive per-run computations of the DoMINO preprocessing (surface
neighbours, SDF of grid and volume points). Both run as Warp kernels on CUDA when a GPU is
present and on the CPU otherwise (``resolve_device``).

kNN is exact: each query searches a hash grid whose cell width equals the search radius and
accepts its k best candidates only when the k-th lies inside that radius; the rest retry with a
doubled radius on a coarser grid, so dense and sparse regions of one cloud are both exact.

Limits and sentinels:
- ``knn``: k <= ``MAX_K`` (32) for the Warp backend; k > N is a ValueError. Indices are int32,
  so N < 2**31. Distance ties are broken by preferring the query's own index (when ``queries``
  is None) and then the lower index, so with duplicates each point is still its own first
  neighbour. No sentinel values: every row holds k real neighbours.
- ``signed_distance``: positive outside, negative inside (winding number, so open or imperfect
  meshes still get a sensible sign); points exactly on the surface have |sdf| ~ 0 and either
  sign. Triangles that are degenerate (zero area) are ignored by Warp's closest-point search;
  a mesh made only of such triangles is a ValueError. No NaN sentinels are returned.
- Empty query arrays give empty results; empty point clouds or meshes are ValueErrors.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import warp as wp

MAX_K = 32
_KNN_BACKENDS = ("auto", "warp", "ckdtree")
_ACCEPT = 0.999  # accept the k-th neighbour only this far inside the radius (float rounding)
_PILOT_QUERIES = 1024
_PILOT_QUANTILE = 0.75
_SDF_BATCH = 1 << 20
_CKDTREE_BATCH = 1 << 18

_vec_kf = wp.types.vector(length=MAX_K, dtype=wp.float32)
_vec_ki = wp.types.vector(length=MAX_K, dtype=wp.int32)


def resolve_device(device: str = "auto") -> str:
    """Return the Warp device to run on: "cuda:0" when CUDA is available for "auto", else "cpu".

    Explicit names ("cpu", "cuda", "cuda:N") are checked, so a request for a GPU that is not
    there fails here with a clear message instead of deep inside a kernel launch.
    """
    wp.init()
    if device == "auto":
        return "cuda:0" if wp.is_cuda_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not wp.is_cuda_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available")
        name = "cuda:0" if device == "cuda" else device
        try:
            return str(wp.get_device(name))
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"unknown CUDA device {device!r}: {err}") from err
    raise ValueError(f"unknown device {device!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'")


# ----------------------------------------------------------------------------------------------
# kNN


@wp.func
def _precedes(d_a: wp.float32, key_a: wp.int32, d_b: wp.float32, key_b: wp.int32) -> bool:
    """Total order of candidates: distance, then key (the query itself has key -1)."""
    return d_a < d_b or (d_a == d_b and key_a < key_b)


@wp.kernel
def _knn_round(
    grid: wp.uint64,
    points: wp.array(dtype=wp.vec3),
    queries: wp.array(dtype=wp.vec3),
    active: wp.array(dtype=wp.int32),
    self_query: wp.int32,
    k: wp.int32,
    radius: wp.float32,
    accept_d2: wp.float32,
    out_index: wp.array2d(dtype=wp.int32),
    out_d2: wp.array2d(dtype=wp.float32),
    done: wp.array(dtype=wp.int32),
):
    """k best candidates of one query among the grid cells within ``radius``; done if exact."""
    t = wp.tid()
    qi = active[t]
    q = queries[qi]
    best_d = _vec_kf()
    best_key = _vec_ki()
    count = wp.int32(0)
    neighbours = wp.hash_grid_query(grid, q, radius)
    for pi in neighbours:
        d2 = wp.length_sq(points[pi] - q)
        key = pi
        if self_query != 0 and pi == qi:
            key = -1
        if count < k or _precedes(d2, key, best_d[k - 1], best_key[k - 1]):
            j = wp.min(count, k - 1)
            while j > 0 and _precedes(d2, key, best_d[j - 1], best_key[j - 1]):
                best_d[j] = best_d[j - 1]
                best_key[j] = best_key[j - 1]
                j -= 1
            best_d[j] = d2
            best_key[j] = key
            count = wp.min(count + 1, k)
    finished = count >= k and best_d[k - 1] <= accept_d2
    if finished:
        for j in range(k):
            key = best_key[j]
            if key < 0:
                key = qi
            out_index[qi, j] = key
            out_d2[qi, j] = best_d[j]
        done[t] = 1
    else:
        done[t] = 0


def _as_points(name: str, array, allow_empty: bool = False) -> np.ndarray:
    """Validate an (n, 3) finite coordinate array and return it as contiguous float32."""
    arr = np.asarray(array)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3); got {arr.shape}")
    if arr.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty (shape {arr.shape}); need at least one point")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        bad = int(np.count_nonzero(~np.isfinite(arr).all(axis=1)))
        raise ValueError(f"{name} holds {bad} rows with NaN or infinite coordinates")
    return arr


def _check_k(k: int, n_points: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer; got {k!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1; got {k}")
    if k > n_points:
        raise ValueError(f"k={k} exceeds the number of points N={n_points}")
    return int(k)


def _grid_dim(n_points: int) -> int:
    """Hash grid side: about one physical cell per point, between 8 and 128 per axis."""
    return int(np.clip(round(n_points ** (1.0 / 3.0)), 8, 128))


def _initial_radius(points: np.ndarray, queries: np.ndarray, k: int) -> float:
    """A small first radius from the bounding box, taking the cloud as a surface or a volume."""
    lo = np.minimum(points.min(axis=0), queries.min(axis=0)).astype(np.float64)
    hi = np.maximum(points.max(axis=0), queries.max(axis=0)).astype(np.float64)
    a, b, c = np.maximum(hi - lo, 0.0)
    n = len(points)
    diag = float(np.sqrt(a * a + b * b + c * c))
    estimates = [np.sqrt(2.0 * (a * b + b * c + c * a) * k / n), np.cbrt(a * b * c * k / n)]
    positive = [e for e in estimates if e > 0.0]
    guess = 0.5 * min(positive) if positive else diag
    return max(guess, diag * 1e-7, 1e-30)


def _bounding_diagonal(points: np.ndarray, queries: np.ndarray) -> float:
    lo = np.minimum(points.min(axis=0), queries.min(axis=0)).astype(np.float64)
    hi = np.maximum(points.max(axis=0), queries.max(axis=0)).astype(np.float64)
    return float(np.linalg.norm(hi - lo))


class _WarpKnnSearch:
    """Runs the expanding-radius rounds over one point cloud on one device."""

    def __init__(self, points: np.ndarray, queries: np.ndarray, self_query: bool, k: int, device: str):
        self.device = device
        self.k = k
        self.self_query = self_query
        self.n_queries = len(queries)
        self.points = wp.array(points, dtype=wp.vec3, device=device)
        self.queries = self.points if self_query else wp.array(queries, dtype=wp.vec3, device=device)
        self.out_index = wp.zeros((len(queries), k), dtype=wp.int32, device=device)
        self.out_d2 = wp.zeros((len(queries), k), dtype=wp.float32, device=device)
        dim = _grid_dim(len(points))
        self.grid = wp.HashGrid(dim, dim, dim, device=device)
        self.grid_radius = None
        # A radius beyond the bounding diagonal holds every point, so that round is always exact.
        self.max_radius = _bounding_diagonal(points, queries) / _ACCEPT * 1.01 + 1e-30

    def _build(self, radius: float) -> None:
        if self.grid_radius != radius:
            self.grid.build(self.points, radius)
            self.grid_radius = radius

    def run_round(self, active: np.ndarray, radius: float) -> np.ndarray:
        """Search ``active`` query ids at ``radius``; return the ids still not exact."""
        final = radius >= self.max_radius
        self._build(radius)
        active_wp = wp.array(active, dtype=wp.int32, device=self.device)
        done = wp.zeros(len(active), dtype=wp.int32, device=self.device)
        accept = np.float32(np.inf) if final else np.float32((radius * _ACCEPT) ** 2)
        wp.launch(
            _knn_round,
            dim=len(active),
            inputs=[self.grid.id, self.points, self.queries, active_wp, int(self.self_query), self.k,
                    float(radius), float(accept), self.out_index, self.out_d2, done],
            device=self.device,
        )
        return active[done.numpy() == 0]

    def search(self, active: np.ndarray, radius: float) -> None:
        """Double the radius until every query in ``active`` is exact."""
        remaining = active
        while len(remaining):
            radius = min(radius, self.max_radius)
            remaining = self.run_round(remaining, radius)
            radius *= 2.0


def _pilot_radius(search: _WarpKnnSearch, n_queries: int, first_radius: float) -> float:
    """Pick the first radius from the exact k-th distances of a small random query sample."""
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(n_queries, size=min(n_queries, _PILOT_QUERIES), replace=False))
    search.search(sample.astype(np.int32), first_radius)
    kth = np.sqrt(search.out_d2.numpy()[sample, search.k - 1].astype(np.float64))
    radius = float(np.quantile(kth, _PILOT_QUANTILE)) / _ACCEPT
    return max(radius, first_radius * 1e-3, 1e-30)


def _knn_warp(points: np.ndarray, queries: np.ndarray | None, k: int, device: str):
    if k > MAX_K:
        raise ValueError(f"k={k} exceeds the Warp kNN limit MAX_K={MAX_K}; use backend='ckdtree'")
    self_query = queries is None
    q = points if self_query else queries
    search = _WarpKnnSearch(points, q, self_query, k, device)
    radius = _pilot_radius(search, len(q), _initial_radius(points, q, k))
    search.search(np.arange(len(q), dtype=np.int32), radius)
    index = search.out_index.numpy()
    distance = np.sqrt(search.out_d2.numpy())
    return index, distance


def _knn_ckdtree(points: np.ndarray, queries: np.ndarray | None, k: int):
    """cKDTree on all cores, then the same tie order as the Warp kernel (self, then index)."""
    from scipy.spatial import cKDTree

    self_query = queries is None
    q = points if self_query else queries
    tree = cKDTree(points.astype(np.float64))
    extra = 1 if k < len(points) else 0
    index = np.empty((len(q), k), dtype=np.int32)
    distance = np.empty((len(q), k), dtype=np.float32)
    for start in range(0, len(q), _CKDTREE_BATCH):
        stop = min(start + _CKDTREE_BATCH, len(q))
        qb = q[start:stop].astype(np.float64)
        d, i = tree.query(qb, k=k + extra, workers=-1)
        d = d.reshape(len(qb), k + extra)
        i = i.reshape(len(qb), k + extra)
        ids = np.arange(start, stop) if self_query else None
        bi, bd = _order_ties(points, qb, d, i, k, ids, tree)
        index[start:stop] = bi
        distance[start:stop] = bd
    return index, distance


def _order_ties(points, qb, d, i, k, ids, tree):
    """Sort each row by (float32 distance, self first, index); redo rows tied at the k-th place."""
    d32 = _float32_distance(points, qb, i)
    key = i.astype(np.int64)
    if ids is not None:
        key = np.where(i == ids[:, None], -1, key)
    order = np.lexsort((key, d32), axis=-1)
    d32 = np.take_along_axis(d32, order, axis=1)
    i = np.take_along_axis(i, order, axis=1)
    if d.shape[1] > k:
        tied = np.nonzero(d32[:, k - 1] >= d32[:, k])[0]
        for row in tied:
            i[row, :k], d32[row, :k] = _exact_row(points, qb[row], d[row].max(), k,
                                                  None if ids is None else ids[row], tree)
    return i[:, :k].astype(np.int32), d32[:, :k]


def _float32_distance(points, qb, i):
    diff = points[i] - qb.astype(np.float32)[:, None, :]
    return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))


def _exact_row(points, qpoint, radius, k, self_id, tree):
    """All points within ``radius`` of one query, ordered like the Warp kernel; first k."""
    cand = np.asarray(tree.query_ball_point(qpoint, r=radius * (1 + 1e-6) + 1e-30), dtype=np.int64)
    d32 = _float32_distance(points, qpoint[None, :], cand[None, :])[0]
    key = np.where(cand == self_id, -1, cand) if self_id is not None else cand
    order = np.lexsort((key, d32))[:k]
    return cand[order], d32[order]


def knn(
    points,
    k: int,
    queries=None,
    device: str = "auto",
    backend: Literal["auto", "warp", "ckdtree"] = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of ``queries`` (default: every point) among ``points``.

    Returns int32 indices (Q, k) and float32 Euclidean distances (Q, k), ascending. With
    ``queries=None`` each point is its own first neighbour, even among duplicates. Ties are
    broken by lower index. Memory is O((N + Q) k): nothing of size N x N is formed.

    ``backend``: "warp" (Warp kernel on ``device``), "ckdtree" (scipy, all CPU cores) or
    "auto": Warp on CUDA; on the CPU cKDTree, because Warp CPU kernels run on one thread and
    benchmark_geometry.py measures cKDTree faster there for the same exact result.
    """
    if backend not in _KNN_BACKENDS:
        raise ValueError(f"unknown kNN backend {backend!r}; expected one of {_KNN_BACKENDS}")
    pts = _as_points("points", points)
    qry = None if queries is None else _as_points("queries", queries, allow_empty=True)
    k = _check_k(k, len(pts))
    if qry is not None and len(qry) == 0:
        return np.empty((0, k), dtype=np.int32), np.empty((0, k), dtype=np.float32)
    dev = resolve_device(device)
    if backend == "auto":
        backend = "warp" if dev.startswith("cuda") else "ckdtree"
    if backend == "ckdtree":
        return _knn_ckdtree(pts, qry, k)
    return _knn_warp(pts, qry, k, dev)


# ----------------------------------------------------------------------------------------------
# Signed distance


@wp.kernel
def _signed_distance(
    mesh: wp.uint64,
    queries: wp.array(dtype=wp.vec3),
    max_dist: wp.float32,
    sdf: wp.array(dtype=wp.float32),
    closest: wp.array(dtype=wp.vec3),
    found: wp.array(dtype=wp.int32),
):
    """Distance to the closest point on the mesh, signed by the winding number."""
    t = wp.tid()
    p = queries[t]
    hit = wp.mesh_query_point_sign_winding_number(mesh, p, max_dist)
    if hit.result:
        c = wp.mesh_eval_position(mesh, hit.face, hit.u, hit.v)
        sdf[t] = hit.sign * wp.length(p - c)
        closest[t] = c
        found[t] = 1
    else:
        found[t] = 0


def _as_faces(faces, n_vertices: int) -> np.ndarray:
    """Validate (F, 3) or flat (3F,) face indices, int or integral float; return flat int32."""
    arr = np.asarray(faces)
    if arr.ndim == 2 and arr.shape[1] != 3 or arr.ndim not in (1, 2):
        raise ValueError(f"faces must have shape (F, 3) or (3F,); got {arr.shape}")
    flat = arr.reshape(-1)
    if flat.size == 0:
        raise ValueError("faces is empty; need at least one triangle")
    if flat.size % 3:
        raise ValueError(f"flat faces must have a length divisible by 3; got {flat.size}")
    if not np.issubdtype(flat.dtype, np.integer):
        if not np.issubdtype(flat.dtype, np.floating):
            raise ValueError(f"faces must be integer or float indices; got dtype {flat.dtype}")
        if not np.isfinite(flat).all() or np.any(flat != np.round(flat)):
            raise ValueError("faces holds non-integral or non-finite float indices")
    lo, hi = flat.min(), flat.max()
    if lo < 0 or hi >= n_vertices:
        raise ValueError(f"face indices range [{lo}, {hi}] outside the {n_vertices} vertices")
    return np.ascontiguousarray(flat, dtype=np.int32)


def signed_distance(
    vertices,
    faces,
    queries,
    device: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Signed distance from each query point to a triangle mesh, and the closest mesh point.

    ``vertices`` (V, 3); ``faces`` (F, 3) or flat (3F,), int or integral float; ``queries``
    (Q, 3). Returns sdf float32 (Q,), positive outside and negative inside (winding number),
    and the closest point on the mesh float32 (Q, 3). The mesh is built once per call and
    queries run in batches, so grid and volume points may be passed together.
    """
    verts = _as_points("vertices", vertices)
    tris = _as_faces(faces, len(verts))
    qry = _as_points("queries", queries, allow_empty=True)
    sdf = np.empty(len(qry), dtype=np.float32)
    closest = np.empty((len(qry), 3), dtype=np.float32)
    if len(qry) == 0:
        return sdf, closest
    dev = resolve_device(device)
    mesh = wp.Mesh(
        points=wp.array(verts, dtype=wp.vec3, device=dev),
        indices=wp.array(tris, dtype=wp.int32, device=dev),
        support_winding_number=True,
    )
    max_dist = 2.0 * _bounding_diagonal(verts, qry) + 1.0
    for start in range(0, len(qry), _SDF_BATCH):
        stop = min(start + _SDF_BATCH, len(qry))
        sdf[start:stop], closest[start:stop] = _sdf_batch(mesh, qry[start:stop], max_dist, dev)
    return sdf, closest


def _sdf_batch(mesh: wp.Mesh, queries: np.ndarray, max_dist: float, device: str):
    q = wp.array(queries, dtype=wp.vec3, device=device)
    sdf = wp.zeros(len(queries), dtype=wp.float32, device=device)
    closest = wp.zeros(len(queries), dtype=wp.vec3, device=device)
    found = wp.zeros(len(queries), dtype=wp.int32, device=device)
    wp.launch(_signed_distance, dim=len(queries), inputs=[mesh.id, q, float(max_dist), sdf, closest, found],
              device=device)
    if not found.numpy().all():
        raise ValueError("the mesh has no usable triangle (all faces are degenerate)")
    return sdf.numpy(), closest.numpy()
