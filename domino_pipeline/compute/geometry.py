"""Exact k-nearest neighbours and signed distance to a triangle mesh with NVIDIA Warp, on CUDA when present, else on the
CPU (launches split into chunks on a pool of ``cpu_threads``, default all cores: a launch releases the GIL).
kNN: each query searches a hash grid out to its own radius (the local density scaled by a pilot sample), accepted when
its k-th candidate lies inside it, else retried at twice the radius; few point-query pairs (``BRUTE_PAIRS``): every
pair in one launch. k <= ``MAX_K`` (32) for Warp; rows hold k neighbours, with the same distances and tie order on every
device and backend (``distance_sq``; docs/gpu.md). ``signed_distance``: positive outside, negative inside (winding
number), zero-area triangles skipped. Empty queries give empty results; empty clouds or meshes, no usable triangle,
NaN or infinite coordinates are ValueErrors. Coordinates are float32."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Literal

import numpy as np
import warp as wp

from domino_pipeline.runtime.devices import cuda_index

wp.set_module_options({"enable_backward": False})

MAX_K = 32
# Searches of at most this many point-query pairs try every pair in one launch (``_knn_brute``), not the grid's rounds:
# per device kind, from benchmark_geometry.py's small cases (docs/benchmarks.md, "Geometry engine").
BRUTE_PAIRS = {"cpu": 1 << 20, "cuda": 1 << 30}
_KNN_BACKENDS = ("auto", "warp", "ckdtree")
_ACCEPT = wp.constant(0.999)  # k-th neighbour accepted only this far inside the radius
_EPS32 = wp.constant(float(np.finfo(np.float32).eps))
_SLACK_ULPS = wp.constant(8.0)
_LEVEL_RATIO = float(np.sqrt(2.0))  # radius range of one hash grid level
_PILOT_QUERIES = 1024
_PILOT_QUANTILE = 0.9
_PILOT_START = 2.0  # the pilot's first radius, in spacing estimates: its k-th distances are exact from any start
_SDF_BATCH = 1 << 20
_CKDTREE_BATCH = 1 << 18
_MIN_THREAD_CHUNK = 4096  # CPU launches smaller than this stay on one thread
_CHUNKS_PER_THREAD = 4  # dense and sparse regions cost differently: balance with more chunks

_vec_kd = wp.types.vector(length=MAX_K, dtype=wp.float64)
_vec_ki = wp.types.vector(length=MAX_K, dtype=wp.int32)


def resolve_device(device: str = "auto") -> str:
    """The Warp device ("auto", "cuda": this process's GPU), checked, so a missing GPU fails here."""
    wp.init()
    if device == "auto":
        device = "cuda" if wp.is_cuda_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not wp.is_cuda_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available")
        name = f"cuda:{cuda_index(wp.get_cuda_device_count())}" if device == "cuda" else device
        try:
            return str(wp.get_device(name))
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"unknown CUDA device {device!r}: {err}") from err
    raise ValueError(f"unknown device {device!r}; expected 'auto', 'cpu', 'cuda' or 'cuda:N'")


def _cpu_threads(requested: int | None) -> int:
    if requested is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if requested < 1:
        raise ValueError(f"cpu_threads must be at least 1; got {requested}")
    return int(requested)


def _launch(kernel, n: int, inputs: Callable[[int, int], list], device: str, threads: int) -> None:
    """Launch ``kernel`` over ``n`` threads, ``inputs(start, stop)`` the arguments of a range."""
    if device != "cpu" or threads == 1 or n < 2 * _MIN_THREAD_CHUNK:
        wp.launch(kernel, dim=n, inputs=inputs(0, n), device=device)
        return
    chunks = int(min(threads * _CHUNKS_PER_THREAD, n // _MIN_THREAD_CHUNK))
    bounds = np.linspace(0, n, chunks + 1).astype(np.int64)

    def run(start: int, stop: int) -> None:
        wp.launch(kernel, dim=int(stop - start), inputs=inputs(int(start), int(stop)), device=device)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(run, bounds[:-1], bounds[1:]))


# ---- kNN

def distance_sq(points, queries) -> np.ndarray:
    """Squared distances with the kNN kernel's bits on every device (float32 differences, float64 squares)."""
    diff = (np.asarray(points, dtype=np.float32) - np.asarray(queries, dtype=np.float32)).astype(np.float64)
    return (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2]


@wp.func
def _distance_sq(p: wp.vec3, q: wp.vec3) -> wp.float64:
    """``distance_sq`` in a kernel: the same bits on the CPU and on CUDA."""
    d = p - q
    x = wp.float64(d[0])
    y = wp.float64(d[1])
    z = wp.float64(d[2])
    return (x * x + y * y) + z * z


@wp.func
def _precedes(d_a: wp.float64, key_a: wp.int32, d_b: wp.float64, key_b: wp.int32) -> bool:
    """Total order of candidates: distance, then key (the query itself has key -1)."""
    return d_a < d_b or (d_a == d_b and key_a < key_b)


@wp.kernel
def _knn_round(grid: wp.uint64, points: wp.array(dtype=wp.vec3), point_ids: wp.array(dtype=wp.int32),
               queries: wp.array(dtype=wp.vec3), query_ids: wp.array(dtype=wp.int32), active: wp.array(dtype=wp.int32),
               radii: wp.array(dtype=wp.float32), self_query: wp.int32, k: wp.int32, max_radius: wp.float32,
               coord_scale: wp.float32, out_index: wp.array2d(dtype=wp.int32), out_d2: wp.array2d(dtype=wp.float64),
               done: wp.array(dtype=wp.int32)):
    """k best candidates of query ``active[t]`` within ``radii[t]``, written out (``done[t]``) when exact."""
    t = wp.tid()
    qi = active[t]
    q = queries[qi]
    best_d = _vec_kd()
    best_key = _vec_ki()
    count = wp.int32(0)
    radius = radii[t]
    # Widen the box by a few float32 roundings of the coordinates, so that no point within the
    # radius falls outside it however the cell coordinates round.
    reach = radius + _SLACK_ULPS * _EPS32 * (coord_scale + radius)
    neighbours = wp.hash_grid_query(grid, q, reach)
    for pi in neighbours:
        d2 = _distance_sq(points[pi], q)
        key = point_ids[pi]
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
    inside = wp.float64(_ACCEPT * radius)
    finished = count >= k and (best_d[k - 1] <= inside * inside or radius >= max_radius)
    if finished:
        row = query_ids[qi]
        for j in range(k):
            key = best_key[j]
            if key < 0:
                key = point_ids[qi]
            out_index[row, j] = key
            out_d2[row, j] = best_d[j]
        done[t] = 1
    else:
        done[t] = 0


@wp.kernel
def _knn_brute(points: wp.array(dtype=wp.vec3), queries: wp.array(dtype=wp.vec3), first: wp.int32, self_query: wp.int32,
               k: wp.int32, out_index: wp.array2d(dtype=wp.int32), out_d2: wp.array2d(dtype=wp.float64)):
    """The k best of all points for query ``first + tid`` in ``_knn_round``'s order, no grid (small searches)."""
    t = first + wp.tid()
    q = queries[t]
    best_d = _vec_kd()
    best_key = _vec_ki()
    count = wp.int32(0)
    for pi in range(points.shape[0]):
        d2 = _distance_sq(points[pi], q)
        key = wp.int32(pi)
        if self_query != 0 and pi == t:
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
    for j in range(k):
        key = best_key[j]
        if key < 0:
            key = t
        out_index[t, j] = key
        out_d2[t, j] = best_d[j]


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


def _morton_order(xyz: np.ndarray, lo: np.ndarray, extent: float) -> np.ndarray:
    """Permutation that sorts points along a Z-order curve (10 bits per axis) for locality."""
    cells = np.clip((xyz - lo) * (1023.0 / max(extent, 1e-30)), 0, 1023).astype(np.uint64)
    code = np.zeros(len(xyz), dtype=np.uint64)
    for axis in range(3):
        x = cells[:, axis]
        x = (x | (x << np.uint64(16))) & np.uint64(0x030000FF)
        x = (x | (x << np.uint64(8))) & np.uint64(0x0300F00F)
        x = (x | (x << np.uint64(4))) & np.uint64(0x030C30C3)
        x = (x | (x << np.uint64(2))) & np.uint64(0x09249249)
        code |= x << np.uint64(axis)
    return np.argsort(code, kind="stable")


class _Density:
    """Point counts on a coarse grid over the cloud's bounding cube; a query counts its 3 x 3 x 3 block of cells."""

    def __init__(self, points: np.ndarray, lo: np.ndarray, extent: float) -> None:
        self.side = int(np.clip(round(np.sqrt(len(points) / 16.0)), 2, 1024))
        self.width = max(extent, 1e-30) / self.side
        self.lo = lo
        self.occupied, counts = np.unique(self._cell_ids(points), return_counts=True)
        # Cell ids leave a margin of one cell so that neighbour offsets never wrap a row.
        s = self.side + 2
        offsets = np.array([(dz * s + dy) * s + dx for dz in (-1, 0, 1) for dy in (-1, 0, 1)
                            for dx in (-1, 0, 1)], dtype=np.int64)
        self.block = sum(self._count_at(self.occupied + o, counts) for o in offsets)

    def _cell_ids(self, xyz: np.ndarray) -> np.ndarray:
        c = np.clip(((xyz - self.lo) / self.width).astype(np.int64), 0, self.side - 1)
        return (c[..., 2] * (self.side + 2) + c[..., 1]) * (self.side + 2) + c[..., 0]

    def _count_at(self, cells: np.ndarray, counts: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(self.occupied, cells), len(self.occupied) - 1)
        return np.where(self.occupied[at] == cells, counts[at], 0)

    def spacing(self, queries: np.ndarray, k: int) -> np.ndarray:
        """Rough k-th neighbour distance per query, 3w sqrt(k / (pi c)) of its block's c points (ratios only)."""
        c = self._count_at(self._cell_ids(queries), self.block).astype(np.float64)
        return 3.0 * self.width * np.sqrt(k / (np.pi * np.maximum(c, 0.5)))


class KnnIndex:
    """Exact kNN over one point cloud, prepared once, then ``query`` per block; ``backend``: warp, ckdtree, auto."""

    def __init__(self, points, device: str = "auto",
                 backend: Literal["auto", "warp", "ckdtree"] = "auto", cpu_threads: int | None = None):
        if backend not in _KNN_BACKENDS:
            raise ValueError(f"unknown kNN backend {backend!r}; expected one of {_KNN_BACKENDS}")
        self.points = _as_points("points", points)
        self.device = resolve_device(device)
        self.threads = _cpu_threads(cpu_threads)
        self.backend = "warp" if backend == "auto" else backend
        self.lo = self.points.min(axis=0).astype(np.float64)
        self.hi = self.points.max(axis=0).astype(np.float64)
        self.extent = float((self.hi - self.lo).max())
        if self.backend == "ckdtree":
            from scipy.spatial import cKDTree
            self.tree = cKDTree(self.points.astype(np.float64))
            return
        self.brute_pairs = BRUTE_PAIRS["cpu" if self.device == "cpu" else "cuda"]
        self.grid: wp.HashGrid | None = None
        self._device_points: wp.array | None = None
        if len(self.points) ** 2 > self.brute_pairs:  # an all-points search needs the grid: prepare it now
            self.prepare_grid()

    def prepare_grid(self) -> None:
        """The grid search's host preparation, once: Z-order, density counts, sorted points on the device."""
        if self.grid is not None:
            return
        self.order = _morton_order(self.points, self.lo, self.extent)
        self.density = _Density(self.points, self.lo, self.extent)
        self.sorted_points = wp.array(self.points[self.order], dtype=wp.vec3, device=self.device)
        self.sorted_ids = wp.array(self.order.astype(np.int32), dtype=wp.int32, device=self.device)
        dim = int(np.clip(round(len(self.points) ** (1.0 / 3.0)), 8, 128))  # about one cell per point
        self.grid = wp.HashGrid(dim, dim, dim, device=self.device)
        self.grid_width: float | None = None

    def query(self, k: int, queries=None) -> tuple[np.ndarray, np.ndarray]:
        """``knn``'s result for ``queries`` (None: every point, each its own first neighbour)."""
        k = _check_k(k, len(self.points))
        qry = None if queries is None else _as_points("queries", queries, allow_empty=True)
        if qry is not None and len(qry) == 0:
            return np.empty((0, k), dtype=np.int32), np.empty((0, k), dtype=np.float32)
        if self.backend == "ckdtree":
            return _knn_ckdtree(self.points, qry, k, self.threads, self.tree)
        if k > MAX_K:
            raise ValueError(f"k={k} exceeds the Warp kNN limit MAX_K={MAX_K}; use backend='ckdtree'")
        if len(self.points) * (len(self.points) if qry is None else len(qry)) <= self.brute_pairs:
            return self._brute(k, qry)
        self.prepare_grid()
        search = _WarpKnnSearch(self, qry, k)
        scale, piloted = _calibrate(search)
        rest = np.ones(len(search.query_order), dtype=bool)
        rest[piloted] = False  # the pilot's rows are final
        rest = np.flatnonzero(rest).astype(np.int32)
        search.search(rest, search.spacing[rest] * max(scale, 1e-6))
        return search.out_index.numpy(), np.sqrt(search.out_d2.numpy()).astype(np.float32)  # in the queries' order

    def _brute(self, k: int, queries: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Every pair in one launch (``_knn_brute``): the points go to the device once per index."""
        if self._device_points is None:
            self._device_points = wp.array(self.points, dtype=wp.vec3, device=self.device)
        points = self._device_points
        q = points if queries is None else wp.array(queries, dtype=wp.vec3, device=self.device)
        n = q.shape[0]
        out_index = wp.empty((n, k), dtype=wp.int32, device=self.device)
        out_d2 = wp.empty((n, k), dtype=wp.float64, device=self.device)

        def inputs(start: int, stop: int) -> list:
            return [points, q, start, int(queries is None), k, out_index, out_d2]

        _launch(_knn_brute, n, inputs, self.device, self.threads)
        return out_index.numpy(), np.sqrt(out_d2.numpy()).astype(np.float32)


class _WarpKnnSearch:
    """Expanding-radius search of one query set, level by level; an inexact query retries at twice its radius."""

    def __init__(self, index: KnnIndex, queries: np.ndarray | None, k: int):
        self.index, self.device, self.threads, self.k = index, index.device, index.threads, k
        self.self_query = queries is None
        q = index.points if queries is None else queries
        if self.self_query:
            self.query_order = index.order
            self.queries, self.query_ids = index.sorted_points, index.sorted_ids
        else:
            self.query_order = _morton_order(q, index.lo, index.extent)
            self.queries = wp.array(q[self.query_order], dtype=wp.vec3, device=self.device)
            self.query_ids = wp.array(self.query_order.astype(np.int32), dtype=wp.int32, device=self.device)
        self.spacing = index.density.spacing(q[self.query_order], k)
        self.out_index = wp.zeros((len(q), k), dtype=wp.int32, device=self.device)
        self.out_d2 = wp.zeros((len(q), k), dtype=wp.float64, device=self.device)
        lo = np.minimum(index.lo, q.min(axis=0))
        hi = np.maximum(index.hi, q.max(axis=0))
        # A radius beyond the bounding diagonal holds every point, so that round is always exact.
        self.max_radius = float(np.linalg.norm(hi - lo)) * 1.01 + 1e-30
        self.coord_scale = float(np.abs(np.concatenate([lo, hi])).max())
        self.base = max(float(self.spacing.min()) * 1e-3, self.max_radius * 1e-9, 1e-30)

    def _run_level(self, active: np.ndarray, radii: np.ndarray, width: float) -> np.ndarray:
        """One kernel launch; returns a boolean mask of the queries that are exact now."""
        index = self.index
        if index.grid_width != width:  # (re)build the hash grid for cells of ``width``
            index.grid.build(index.sorted_points, width)
            index.grid_width = width
        done = wp.zeros(len(active), dtype=wp.int32, device=self.device)
        active_wp = wp.array(active, dtype=wp.int32, device=self.device)
        radii_wp = wp.array(radii, dtype=wp.float32, device=self.device)

        def inputs(start: int, stop: int) -> list:
            return [index.grid.id, index.sorted_points, index.sorted_ids, self.queries, self.query_ids,
                    active_wp[start:stop], radii_wp[start:stop], int(self.self_query), self.k,
                    float(self.max_radius), self.coord_scale, self.out_index, self.out_d2, done[start:stop]]

        _launch(_knn_round, len(active), inputs, self.device, self.threads)
        return done.numpy() != 0

    def search(self, active: np.ndarray, radii: np.ndarray, level_ratio: float = _LEVEL_RATIO) -> None:
        """Search ``active`` from ``radii`` until all are exact, radii within ``level_ratio`` sharing one launch."""
        radii = np.minimum(radii.astype(np.float64), self.max_radius)
        while len(active):
            levels = np.floor(np.log(np.maximum(radii / self.base, 1.0)) / np.log(level_ratio)).astype(np.int64)
            level = levels.min()
            now = levels == level
            exact = self._run_level(active[now], radii[now], float(radii[now].max()))
            retry = np.zeros(len(active), dtype=bool)
            retry[np.nonzero(now)[0][~exact]] = True
            radii[retry] = np.minimum(radii[retry] * 2.0, self.max_radius)
            keep = ~now | retry
            active, radii = active[keep], radii[keep]


def _calibrate(search: _WarpKnnSearch) -> tuple[float, np.ndarray]:
    """Scale from the spacing estimate to a starting radius such that ``_PILOT_QUANTILE`` of a sample of queries finish
    in one round; the sample's positions, final already."""
    n_queries = len(search.query_order)
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(n_queries, size=min(n_queries, _PILOT_QUERIES), replace=False)).astype(np.int32)
    search.search(sample, search.spacing[sample] * _PILOT_START, level_ratio=4.0)
    ratio = np.sqrt(search.out_d2.numpy()[search.query_order[sample], search.k - 1]) / search.spacing[sample]
    return float(np.quantile(ratio, _PILOT_QUANTILE)) / float(_ACCEPT), sample


def _knn_ckdtree(points: np.ndarray, queries: np.ndarray | None, k: int, threads: int, tree):
    """cKDTree on all cores, then the same distances and tie order as the Warp kernel."""
    self_query = queries is None
    q = points if self_query else queries
    extra = 1 if k < len(points) else 0
    index = np.empty((len(q), k), dtype=np.int32)
    distance = np.empty((len(q), k), dtype=np.float32)
    for start in range(0, len(q), _CKDTREE_BATCH):
        stop = min(start + _CKDTREE_BATCH, len(q))
        qb = q[start:stop]
        d, i = (a.reshape(len(qb), k + extra) for a in tree.query(qb.astype(np.float64), k=k + extra, workers=threads))
        ids = np.arange(start, stop) if self_query else None
        bi, bd2 = _order_ties(points, qb, d, i, k, ids, tree)
        index[start:stop] = bi
        distance[start:stop] = np.sqrt(bd2)
    return index, distance


def _order_ties(points, qb, d, i, k, ids, tree):
    """Sort each row by (``distance_sq``, self first, index); redo rows tied at the k-th place."""
    d2 = distance_sq(points[i], qb[:, None, :])
    key = i.astype(np.int64)
    if ids is not None:
        key = np.where(i == ids[:, None], -1, key)
    order = np.lexsort((key, d2), axis=-1)
    d2 = np.take_along_axis(d2, order, axis=1)
    i = np.take_along_axis(i, order, axis=1)
    if d.shape[1] > k:
        tied = np.nonzero(d2[:, k - 1] >= d2[:, k])[0]
        for row in tied:
            i[row, :k], d2[row, :k] = _exact_row(points, qb[row], d[row].max(), k,
                                                 None if ids is None else ids[row], tree)
    return i[:, :k].astype(np.int32), d2[:, :k]


def _exact_row(points, qpoint, radius, k, self_id, tree):
    """All points within ``radius`` of one query, ordered like the Warp kernel; first k."""
    cand = np.asarray(tree.query_ball_point(qpoint.astype(np.float64), r=radius * (1 + 1e-6) + 1e-30), dtype=np.int64)
    d2 = distance_sq(points[cand], qpoint)
    key = np.where(cand == self_id, -1, cand) if self_id is not None else cand
    order = np.lexsort((key, d2))[:k]
    return cand[order], d2[order]


def knn(points, k: int, queries=None, device: str = "auto", backend: Literal["auto", "warp", "ckdtree"] = "auto",
        cpu_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours (Q, k) of ``queries`` (None: every point), by ``distance_sq``, then index."""
    return KnnIndex(points, device=device, backend=backend, cpu_threads=cpu_threads).query(k, queries)


# ---- Signed distance

@wp.kernel
def _signed_distance(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), max_dist: wp.float32,
                     sdf: wp.array(dtype=wp.float32), closest: wp.array(dtype=wp.vec3),
                     found: wp.array(dtype=wp.int32)):
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
    if arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[1] != 3):
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


class SdfMesh:
    """A triangle mesh on one device (a ``wp.Mesh`` with winding numbers), built once, queried in batches."""

    def __init__(self, vertices, faces, device: str = "auto", cpu_threads: int | None = None):
        self.vertices = _as_points("vertices", vertices)
        faces = _as_faces(faces, len(self.vertices))
        self.device = resolve_device(device)
        self.threads = _cpu_threads(cpu_threads)
        self.mesh = wp.Mesh(points=wp.array(self.vertices, dtype=wp.vec3, device=self.device),
                            indices=wp.array(faces, dtype=wp.int32, device=self.device), support_winding_number=True)

    def query(self, queries) -> tuple[np.ndarray, np.ndarray]:
        """``signed_distance``'s result for ``queries`` (Q, 3) against this mesh."""
        qry = _as_points("queries", queries, allow_empty=True)
        sdf = np.empty(len(qry), dtype=np.float32)
        closest = np.empty((len(qry), 3), dtype=np.float32)
        if len(qry) == 0:
            return sdf, closest
        lo = np.minimum(self.vertices.min(axis=0), qry.min(axis=0)).astype(np.float64)
        hi = np.maximum(self.vertices.max(axis=0), qry.max(axis=0)).astype(np.float64)
        max_dist = 2.0 * float(np.linalg.norm(hi - lo)) + 1.0
        # Z-ordered queries walk the BVH coherently: 1.8x faster on the CPU for shuffled points.
        order = _morton_order(qry, lo, float((hi - lo).max()))
        for start in range(0, len(qry), _SDF_BATCH):
            rows = order[start:start + _SDF_BATCH]
            sdf[rows], closest[rows] = _sdf_batch(self.mesh, qry[rows], max_dist, self.device, self.threads)
        return sdf, closest


def signed_distance(vertices, faces, queries, device: str = "auto",
                    cpu_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Signed distance (Q,) of each query to a triangle mesh and its closest mesh point (Q, 3)."""
    return SdfMesh(vertices, faces, device=device, cpu_threads=cpu_threads).query(queries)


def _sdf_batch(mesh: wp.Mesh, queries: np.ndarray, max_dist: float, device: str, threads: int):
    q = wp.array(queries, dtype=wp.vec3, device=device)
    sdf = wp.zeros(len(queries), dtype=wp.float32, device=device)
    closest = wp.zeros(len(queries), dtype=wp.vec3, device=device)
    found = wp.zeros(len(queries), dtype=wp.int32, device=device)

    def inputs(start: int, stop: int) -> list:
        return [mesh.id, q[start:stop], float(max_dist), sdf[start:stop], closest[start:stop], found[start:stop]]

    _launch(_signed_distance, len(queries), inputs, device, threads)
    if not found.numpy().all():
        raise ValueError("the mesh has no usable triangle (all faces are degenerate)")
    return sdf.numpy(), closest.numpy()
