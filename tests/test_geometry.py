"""geometry.knn against scipy's cKDTree and geometry.signed_distance against brute force.

The brute-force SDF reference is written here: the closest point on every triangle (Ericson,
Real-Time Collision Detection, 5.1.5) and the winding number as a sum of solid angles (Van
Oosterom and Strackee), both in float64 over all triangles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
import warp as wp
from conftest import import_benchmark
from scipy.spatial import cKDTree

from domino_pipeline.compute import geometry

wp.config.quiet = True
HAS_CUDA = geometry.resolve_device("auto").startswith("cuda")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")


# ----------------------------------------------------------------------------------- kNN helpers


def assert_exact_knn(points, queries, k, index, distance, self_query=False):
    """Same neighbours as cKDTree wherever the k-th distance is not tied; distances to 1e-6."""
    p64 = points.astype(np.float64)
    q64 = (points if queries is None else queries).astype(np.float64)
    extra = 1 if k < len(points) else 0
    ref_d, ref_i = cKDTree(p64).query(q64, k=k + extra)
    ref_d, ref_i = ref_d.reshape(len(q64), -1), ref_i.reshape(len(q64), -1)
    scale = float(np.ptp(p64, axis=0).max())
    assert index.shape == distance.shape == (len(q64), k)
    assert index.dtype == np.int32 and distance.dtype == np.float32
    np.testing.assert_allclose(distance, ref_d[:, :k], rtol=1e-6, atol=1e-7 * scale)
    true_d = np.linalg.norm(p64[index] - q64[:, None, :], axis=-1)
    np.testing.assert_allclose(distance, true_d, rtol=1e-6, atol=1e-7 * scale)
    assert np.all(np.diff(distance, axis=1) >= 0)
    assert all(len(set(row)) == k for row in index)
    untied = ref_d[:, k - 1] < ref_d[:, k] * (1 - 1e-6) if extra else np.ones(len(q64), bool)
    assert untied.mean() > 0.5
    got = np.sort(index[untied], axis=1)
    assert np.array_equal(got, np.sort(ref_i[untied, :k], axis=1))
    if self_query:
        assert np.array_equal(index[:, 0], np.arange(len(points)))


def uniform_cloud(n, rng):
    return rng.random((n, 3)).astype(np.float32)


def clustered_cloud(rng):
    """A dense cluster (cell size ~1e-5) inside a sparse cloud (cell size ~0.1)."""
    dense = 0.5 + 1e-3 * rng.random((3000, 3))
    sparse = rng.random((400, 3))
    return rng.permutation(np.concatenate([dense, sparse])).astype(np.float32)


def surface_centres(raw_dir: Path) -> np.ndarray:
    boundary = pv.read(raw_dir / "run_1" / "boundary_1.vtp")
    return np.asarray(boundary.cell_centers().points, dtype=np.float32)


# ------------------------------------------------------------------------------------ kNN tests


@pytest.mark.parametrize("backend", ["warp", "ckdtree"])
@pytest.mark.parametrize("k", [1, 7, 32])
def test_knn_uniform_cloud_matches_ckdtree(backend, k):
    points = uniform_cloud(3000, np.random.default_rng(0))
    index, distance = geometry.knn(points, k, device="cpu", backend=backend)
    assert_exact_knn(points, None, k, index, distance, self_query=True)


def test_knn_cloud_far_from_origin_matches_ckdtree():
    points = (1000.0 + 0.2 * uniform_cloud(3000, np.random.default_rng(16))).astype(np.float32)
    index, distance = geometry.knn(points, 7, device="cpu", backend="warp")
    assert_exact_knn(points, None, 7, index, distance, self_query=True)


@pytest.mark.parametrize("backend", ["warp", "ckdtree"])
def test_knn_clustered_cloud_matches_ckdtree(backend):
    points = clustered_cloud(np.random.default_rng(1))
    index, distance = geometry.knn(points, 7, device="cpu", backend=backend)
    assert_exact_knn(points, None, 7, index, distance, self_query=True)


@pytest.mark.parametrize("backend", ["warp", "ckdtree"])
def test_knn_car_surface_matches_ckdtree(tiny_raw_dir, backend):
    points = surface_centres(tiny_raw_dir)
    index, distance = geometry.knn(points, 7, device="cpu", backend=backend)
    assert_exact_knn(points, None, 7, index, distance, self_query=True)


@pytest.mark.parametrize("backend", ["warp", "ckdtree"])
def test_knn_queries_subset_and_outside(backend):
    rng = np.random.default_rng(2)
    points = clustered_cloud(rng)
    queries = np.concatenate([points[rng.choice(len(points), 200, replace=False)],
                              rng.normal(0.5, 2.0, (200, 3))]).astype(np.float32)
    index, distance = geometry.knn(points, 5, queries=queries, device="cpu", backend=backend)
    assert_exact_knn(points, queries, 5, index, distance)


@pytest.mark.parametrize("backend", ["warp", "ckdtree"])
def test_knn_duplicates_self_first_then_lower_index(backend):
    rng = np.random.default_rng(3)
    points = uniform_cloud(500, rng)
    copies = [3, 40, 41, 77, 100, 250, 251, 300, 499]  # nine copies of point 3: more than k
    points[copies] = points[3]
    points[[10, 20]] = points[15]
    index, distance = geometry.knn(points, 7, device="cpu", backend=backend)
    assert_exact_knn(points, None, 7, index, distance, self_query=True)
    for i in copies:
        others = [c for c in copies if c != i]
        assert index[i].tolist() == [i] + others[:6]
        assert np.all(distance[i] == 0)
    assert index[15, :3].tolist() == [15, 10, 20]
    assert index[20, :3].tolist() == [20, 10, 15]


def test_knn_backends_agree_exactly():
    points = clustered_cloud(np.random.default_rng(4))
    points[7] = points[8]
    warp_index, warp_distance = geometry.knn(points, 7, device="cpu", backend="warp")
    tree_index, tree_distance = geometry.knn(points, 7, device="cpu", backend="ckdtree")
    assert np.array_equal(warp_index, tree_index)
    np.testing.assert_allclose(warp_distance, tree_distance, rtol=1e-6)


@pytest.mark.parametrize("cloud", ["uniform", "clustered", "duplicates"])
def test_knn_every_pair_search_matches_ckdtree_and_the_grid_search(monkeypatch, cloud):
    """The one-launch search of every pair (``_knn_brute``, small searches) returns the grid
    search's rows bit for bit, all points or other queries, on one thread or several."""
    rng = np.random.default_rng(12)
    points = {"uniform": lambda: uniform_cloud(1500, rng), "clustered": lambda: clustered_cloud(rng)[::3],
              "duplicates": lambda: np.repeat(uniform_cloud(300, rng), 4, axis=0)}[cloud]()
    queries = np.concatenate([points[::7], rng.normal(0.5, 1.0, (100, 3))]).astype(np.float32)
    results = {}
    for name, pairs in (("grid", 0), ("brute", 1 << 40)):
        monkeypatch.setattr(geometry, "BRUTE_PAIRS", {"cpu": pairs, "cuda": pairs})
        index = geometry.KnnIndex(points, device="cpu", cpu_threads=3)
        assert (index.grid is None) == (name == "brute")  # no host preparation for a search of every pair
        results[name] = (index.query(7), index.query(7, queries),
                         geometry.knn(points, 7, device="cpu", cpu_threads=1))
    for grid, brute in zip(results["grid"], results["brute"]):
        assert np.array_equal(grid[0], brute[0]) and np.array_equal(grid[1], brute[1])
    if cloud != "duplicates":  # cKDTree's order of exact ties is its own
        assert_exact_knn(points, None, 7, *results["brute"][0], self_query=True)
        assert_exact_knn(points, queries, 7, *results["brute"][1])


def test_knn_picks_every_pair_only_for_small_searches(monkeypatch):
    monkeypatch.setattr(geometry, "BRUTE_PAIRS", {"cpu": 1000 * 50, "cuda": 0})
    points = uniform_cloud(1000, np.random.default_rng(13))
    calls = []
    monkeypatch.setattr(geometry.KnnIndex, "_brute", lambda self, k, q: calls.append(len(q)) or ("brute", None))
    index = geometry.KnnIndex(points, device="cpu")
    assert index.grid is not None                   # 1000 x 1000 pairs: the grid is prepared at once
    assert index.query(3, points[:50]) == ("brute", None) and calls == [50]
    assert index.query(3, points[:51])[0].shape == (51, 3) and calls == [50]  # one pair too many: the grid


def test_knn_all_identical_points():
    points = np.ones((20, 3), dtype=np.float32)
    index, distance = geometry.knn(points, 4, device="cpu", backend="warp")
    assert index[5].tolist() == [5, 0, 1, 2]
    assert np.all(distance == 0)


def test_knn_ckdtree_batches_agree(monkeypatch):
    points = uniform_cloud(1000, np.random.default_rng(5))
    whole = geometry.knn(points, 7, device="cpu", backend="ckdtree")
    monkeypatch.setattr(geometry, "_CKDTREE_BATCH", 97)
    batched = geometry.knn(points, 7, device="cpu", backend="ckdtree")
    assert np.array_equal(whole[0], batched[0]) and np.array_equal(whole[1], batched[1])


def test_knn_threaded_cpu_launches_agree():
    points = clustered_cloud(np.random.default_rng(9))
    points = np.concatenate([points, uniform_cloud(10_000, np.random.default_rng(10))])
    one = geometry.knn(points, 7, device="cpu", backend="warp", cpu_threads=1)
    three = geometry.knn(points, 7, device="cpu", backend="warp", cpu_threads=3)
    assert np.array_equal(one[0], three[0]) and np.array_equal(one[1], three[1])
    assert_exact_knn(points, None, 7, *three, self_query=True)


def test_knn_k_equal_to_n():
    points = uniform_cloud(9, np.random.default_rng(6))
    index, distance = geometry.knn(points, 9, device="cpu", backend="warp")
    assert_exact_knn(points, None, 9, index, distance, self_query=True)


def test_knn_empty_queries_give_empty_result():
    points = uniform_cloud(10, np.random.default_rng(7))
    index, distance = geometry.knn(points, 3, queries=np.zeros((0, 3)), device="cpu")
    assert index.shape == distance.shape == (0, 3)


@pytest.mark.parametrize(
    ("points", "k", "kwargs", "match"),
    [
        (np.zeros((5, 3)), 6, {}, "k=6 exceeds the number of points N=5"),
        (np.zeros((5, 3)), 0, {}, "k must be at least 1"),
        (np.zeros((40, 3)), 33, {"backend": "warp"}, "MAX_K"),
        (np.zeros((0, 3)), 1, {}, "points is empty"),
        (np.zeros((5, 2)), 1, {}, r"points must have shape \(n, 3\)"),
        (np.array([[0, 0, 0], [np.nan, 0, 0]]), 1, {}, "points holds 1 rows with NaN"),
        (np.zeros((5, 3)), 1, {"queries": np.full((2, 3), np.inf)}, "queries holds 2 rows"),
        (np.zeros((5, 3)), 1, {"backend": "faiss"}, "unknown kNN backend 'faiss'"),
        (np.zeros((5, 3)), 1, {"device": "tpu"}, "unknown device 'tpu'"),
        (np.zeros((5, 3)), 1, {"cpu_threads": 0}, "cpu_threads must be at least 1"),
    ],
)
def test_knn_rejects_bad_input(points, k, kwargs, match):
    with pytest.raises(ValueError, match=match):
        geometry.knn(points, k, **{"device": "cpu", **kwargs})


def test_resolve_device_without_cuda():
    if HAS_CUDA:
        assert geometry.resolve_device("cuda") == "cuda:0"
    else:
        assert geometry.resolve_device() == "cpu"
        with pytest.raises(ValueError, match="CUDA is not available"):
            geometry.resolve_device("cuda:0")


@needs_cuda
def test_knn_cuda_matches_ckdtree():
    points = clustered_cloud(np.random.default_rng(8))
    index, distance = geometry.knn(points, 7, device="cuda:0", backend="warp")
    assert_exact_knn(points, None, 7, index, distance, self_query=True)
    auto_index, _ = geometry.knn(points, 7, device="cuda:0")
    assert np.array_equal(auto_index, index)


# ------------------------------------------------------------------------------- SDF reference


def closest_on_triangles(p, a, b, c):
    """Closest point to p (3,) on each triangle (a, b, c: (F, 3)); Ericson's region tests."""
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = np.einsum("ij,ij->i", ab, ap), np.einsum("ij,ij->i", ac, ap)
    bp = p - b
    d3, d4 = np.einsum("ij,ij->i", ab, bp), np.einsum("ij,ij->i", ac, bp)
    cp = p - c
    d5, d6 = np.einsum("ij,ij->i", ab, cp), np.einsum("ij,ij->i", ac, cp)
    va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = 1.0 / (va + vb + vc)
        v, w = vb * denom, vc * denom
        result = a + ab * v[:, None] + ac * w[:, None]  # inside the face
        t_ab = d1 / (d1 - d3)
        t_ac = d2 / (d2 - d6)
        t_bc = (d4 - d3) / ((d4 - d3) + (d5 - d6))
    regions = [
        (va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0), b + (c - b) * t_bc[:, None],
        (vb <= 0) & (d2 >= 0) & (d6 <= 0), a + ac * t_ac[:, None],
        (d6 >= 0) & (d5 <= d6), c,
        (vc <= 0) & (d1 >= 0) & (d3 <= 0), a + ab * t_ab[:, None],
        (d3 >= 0) & (d4 <= d3), b,
        (d1 <= 0) & (d2 <= 0), a,
    ]
    # Ericson tests A, B, AB, C, AC, BC in turn and takes the first match: apply in reverse.
    for mask, point in zip(regions[::2], regions[1::2]):
        result = np.where(mask[:, None], point, result)
    return result


def brute_force_distance(vertices, faces, queries):
    """Unsigned distance and closest point over all triangles, float64."""
    v = vertices.astype(np.float64)
    a, b, c = v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]]
    dist = np.empty(len(queries))
    closest = np.empty((len(queries), 3))
    for n, p in enumerate(queries.astype(np.float64)):
        cand = closest_on_triangles(p, a, b, c)
        d = np.linalg.norm(cand - p, axis=1)
        best = np.argmin(d)
        dist[n], closest[n] = d[best], cand[best]
    return dist, closest


def tied_closest_points(vertices, faces, query, tolerance):
    """Each face's closest point to ``query`` that is as close as the nearest one, to ``tolerance``;
    float64."""
    v = vertices.astype(np.float64)
    candidates = closest_on_triangles(query.astype(np.float64), v[faces[:, 0]], v[faces[:, 1]], v[faces[:, 2]])
    distance = np.linalg.norm(candidates - query, axis=1)
    return candidates[distance <= distance.min() + tolerance]


def winding_number(vertices, faces, queries):
    """Sum of signed solid angles of all triangles over 4 pi (1 inside, 0 outside)."""
    v = vertices.astype(np.float64)
    out = np.empty(len(queries))
    for n, p in enumerate(queries.astype(np.float64)):
        a, b, c = (v[faces[:, j]] - p for j in range(3))
        la, lb, lc = (np.linalg.norm(x, axis=1) for x in (a, b, c))
        det = np.einsum("ij,ij->i", a, np.cross(b, c))
        div = (la * lb * lc + np.einsum("ij,ij->i", a, b) * lc + np.einsum("ij,ij->i", a, c) * lb
               + np.einsum("ij,ij->i", b, c) * la)
        out[n] = 2.0 * np.arctan2(det, div).sum() / (4.0 * np.pi)
    return out


def triangle_mesh(surface: pv.PolyData) -> tuple[np.ndarray, np.ndarray]:
    surface = surface.triangulate().clean()
    return np.asarray(surface.points, np.float32), surface.faces.reshape(-1, 4)[:, 1:].astype(np.int32)


def surface_samples(vertices, faces, n, rng):
    tri = rng.integers(0, len(faces), n)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    a, b, c = (vertices[faces[tri, j]].astype(np.float64) for j in range(3))
    return (a + (b - a) * u[:, None] + (c - a) * v[:, None]).astype(np.float32)


def check_sdf(vertices, faces, queries, sdf, closest, inside):
    """Distances to 1e-5 relative (1e-6 of the mesh size absolute), signs, closest points."""
    scale = float(np.ptp(vertices, axis=0).max())
    ref, _ = brute_force_distance(vertices, faces, queries)
    assert sdf.shape == (len(queries),) and closest.shape == (len(queries), 3)
    assert sdf.dtype == np.float32 and closest.dtype == np.float32
    np.testing.assert_allclose(np.abs(sdf), ref, rtol=1e-5, atol=1e-6 * scale)
    off = ref > 1e-5 * scale
    assert off.sum() > len(queries) // 2
    assert np.array_equal(sdf[off] < 0, inside[off])
    on_mesh, _ = brute_force_distance(vertices, faces, closest)
    assert on_mesh.max() < 1e-6 * scale
    gap = np.linalg.norm(queries.astype(np.float64) - closest, axis=1)
    np.testing.assert_allclose(gap, np.abs(sdf), rtol=1e-5, atol=1e-6 * scale)


def mixed_queries(vertices, faces, rng, n=300, spread=1.5):
    centre = vertices.mean(axis=0)
    size = np.ptp(vertices, axis=0)
    box = centre + (rng.random((n, 3)) - 0.5) * size * spread
    near = surface_samples(vertices, faces, n // 3, rng)
    normal_jitter = rng.normal(0, 1e-3 * size.max(), near.shape)
    on = surface_samples(vertices, faces, n // 6, rng)
    return np.concatenate([box, near + normal_jitter, on]).astype(np.float32)


# ------------------------------------------------------------------------------------ SDF tests


def test_sdf_box_matches_analytic_sign_and_brute_force():
    vertices, faces = triangle_mesh(pv.Box(bounds=(-1, 2, -0.5, 0.5, 0, 0.8), level=2))
    rng = np.random.default_rng(10)
    queries = mixed_queries(vertices, faces, rng)
    sdf, closest = geometry.signed_distance(vertices, faces, queries, device="cpu")
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    inside = np.all((queries > lo) & (queries < hi), axis=1)
    check_sdf(vertices, faces, queries, sdf, closest, inside)


def test_sdf_sphere_matches_winding_number_and_brute_force():
    vertices, faces = triangle_mesh(pv.Sphere(radius=1.0, theta_resolution=24, phi_resolution=24))
    rng = np.random.default_rng(11)
    queries = mixed_queries(vertices, faces, rng)
    sdf, closest = geometry.signed_distance(vertices, faces, queries, device="cpu")
    inside = winding_number(vertices, faces, queries) > 0.5
    far = np.abs(np.linalg.norm(queries, axis=1) - 1.0) > 0.05
    assert np.array_equal(inside[far], np.linalg.norm(queries[far], axis=1) < 1.0)
    check_sdf(vertices, faces, queries, sdf, closest, inside)


def test_sdf_car_stl_matches_brute_force(tiny_raw_dir):
    vertices, faces = triangle_mesh(pv.read(tiny_raw_dir / "run_1" / "drivaer_1.stl"))
    rng = np.random.default_rng(12)
    queries = mixed_queries(vertices, faces, rng, n=240)
    sdf, closest = geometry.signed_distance(vertices, faces, queries, device="cpu")
    inside = winding_number(vertices, faces, queries) > 0.5
    check_sdf(vertices, faces, queries, sdf, closest, inside)


def test_sdf_accepts_flat_float_faces_and_batches(monkeypatch):
    vertices, faces = triangle_mesh(pv.Sphere(theta_resolution=12, phi_resolution=12))
    queries = (np.random.default_rng(13).random((257, 3)) * 2 - 1).astype(np.float32)
    sdf, closest = geometry.signed_distance(vertices, faces, queries, device="cpu")
    monkeypatch.setattr(geometry, "_SDF_BATCH", 50)
    flat_sdf, flat_closest = geometry.signed_distance(
        vertices, faces.reshape(-1).astype(np.float32), queries, device="cpu")
    assert np.array_equal(sdf, flat_sdf) and np.array_equal(closest, flat_closest)


def test_sdf_threaded_cpu_launches_agree():
    vertices, faces = triangle_mesh(pv.Sphere(theta_resolution=16, phi_resolution=16))
    queries = (np.random.default_rng(15).random((20_000, 3)) * 3 - 1.5).astype(np.float32)
    one = geometry.signed_distance(vertices, faces, queries, device="cpu", cpu_threads=1)
    three = geometry.signed_distance(vertices, faces, queries, device="cpu", cpu_threads=3)
    assert np.array_equal(one[0], three[0]) and np.array_equal(one[1], three[1])


def test_sdf_empty_queries():
    vertices, faces = triangle_mesh(pv.Box())
    sdf, closest = geometry.signed_distance(vertices, faces, np.zeros((0, 3)), device="cpu")
    assert sdf.shape == (0,) and closest.shape == (0, 3)


TRIANGLE = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float32)


@pytest.mark.parametrize(
    ("vertices", "faces", "queries", "match"),
    [
        (TRIANGLE, np.zeros((0, 3), np.int32), np.zeros((1, 3)), "faces is empty"),
        (TRIANGLE, np.array([[0, 1, 3]]), np.zeros((1, 3)), r"face indices range \[0, 3\]"),
        (TRIANGLE, np.array([[0, -1, 2]]), np.zeros((1, 3)), r"face indices range \[-1, 2\]"),
        (TRIANGLE, np.array([0.0, 1.5, 2.0]), np.zeros((1, 3)), "non-integral"),
        (TRIANGLE, np.array([0, 1, 2, 0]), np.zeros((1, 3)), "divisible by 3"),
        (TRIANGLE, np.array([[0, 1, 2, 0]]), np.zeros((1, 3)), r"faces must have shape \(F, 3\)"),
        (np.zeros((0, 3)), np.array([[0, 1, 2]]), np.zeros((1, 3)), "vertices is empty"),
        (TRIANGLE, np.array([[0, 1, 2]]), np.array([[0, np.nan, 0]]), "queries holds 1 rows"),
        (TRIANGLE, np.array([[0, 1, 2]]), np.zeros((1, 4)), r"queries must have shape \(n, 3\)"),
        (np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]]), np.array([[0, 1, 2]]), np.zeros((1, 3)), "degenerate"),
    ],
)
def test_sdf_rejects_bad_input(vertices, faces, queries, match):
    with pytest.raises(ValueError, match=match):
        geometry.signed_distance(vertices, faces, queries, device="cpu")


@needs_cuda
def test_sdf_cuda_matches_cpu():
    vertices, faces = triangle_mesh(pv.Sphere(theta_resolution=24, phi_resolution=24))
    queries = mixed_queries(vertices, faces, np.random.default_rng(14))
    cpu = geometry.signed_distance(vertices, faces, queries, device="cpu")
    gpu = geometry.signed_distance(vertices, faces, queries, device="cuda:0")
    scale = float(np.ptp(vertices, axis=0).max())
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-5, atol=1e-6 * scale)
    check_sdf(vertices, faces, queries, *gpu, winding_number(vertices, faces, queries) > 0.5)
    # The closest points agree except where two faces of the curved mesh are equally close to
    # float32 precision (3 of 450 queries on an H200): there each device picks one of the tied points.
    moved = np.linalg.norm(gpu[1] - cpu[1], axis=1) > 1e-6 * scale
    for n in np.flatnonzero(moved):
        tied = tied_closest_points(vertices, faces, queries[n], 1e-6 * scale)
        for picked in (cpu[1][n], gpu[1][n]):
            assert np.linalg.norm(tied - picked, axis=1).min() < 1e-6 * scale, (n, picked, tied)


# ------------------------------------------------------------------------------ benchmark smoke


@pytest.mark.slow
def test_benchmark_geometry_runs_cases_in_fresh_processes(tmp_path):
    bench = import_benchmark("benchmark_geometry")

    sizes = {"knn_sizes": (300, 600), "brute_knn_size": 200, "stl_triangles": 400,
             "volume_points": 500, "grid": (4, 3, 2)}
    paths = bench.write_inputs(tmp_path, sizes, seed=0)
    planned = bench.plan_cases(paths, sizes, cuda=False, repeats=1, sdf_repeats=1)
    assert all(c["device"] == "cpu" for c in planned)
    wanted = {"knn_warp_cpu_600", "knn_ckdtree_cpu_600", "knn_scipy_cpu_600", "sdf_warp_cpu"}
    cases = [c for c in planned if c["id"] in wanted]
    results = bench.run_cases(cases, tmp_path, {"sdf": 4 * 3 * 2 + 500})
    assert [r["id"] for r in results] == [c["id"] for c in cases]
    assert all("error" not in r and r["seconds"] > 0 and r["peak_mb"] >= 0 for r in results)
    notes = bench.agreement(tmp_path, results)
    assert "rows identical to the ckdtree backend in 100.0000%" in notes["knn_warp_cpu_600"]
    table = bench.markdown_table(results)
    assert table.count("\n") == len(results) + 1 and "| sdf_warp | cpu | all | 524 |" in table


def test_benchmark_geometry_plans_cuda_cases():
    bench = import_benchmark("benchmark_geometry")

    sizes = {**bench.QUICK}
    paths = {f"surface_{n}": Path(f"s{n}.npy") for n in (*sizes["knn_sizes"], sizes["brute_knn_size"])}
    paths.update({k: Path(k) for k in ("stl_vertices", "stl_faces", "sdf_queries")})
    ids = [c["id"] for c in bench.plan_cases(paths, sizes, cuda=True, repeats=1, sdf_repeats=1)]
    assert "knn_warp_cuda_100000" in ids and "sdf_warp_cuda" in ids and "sdf_physicsnemo_cuda" in ids
    assert any(i.startswith("knn_physicsnemo_cuda_") for i in ids)


def test_benchmark_geometry_can_plan_cuda_cases_only():
    bench = import_benchmark("benchmark_geometry")

    sizes = {**bench.QUICK}
    paths = {f"surface_{n}": Path(f"s{n}.npy") for n in (*sizes["knn_sizes"], sizes["brute_knn_size"])}
    paths.update({k: Path(k) for k in ("stl_vertices", "stl_faces", "sdf_queries")})
    planned = bench.plan_cases(paths, sizes, cuda=True, repeats=1, sdf_repeats=1, cpu=False)
    assert planned and all(c["device"].startswith("cuda") for c in planned)


def test_benchmark_geometry_counts_one_knn_host_preparation_per_cache_build(tmp_path):
    bench = import_benchmark("benchmark_geometry")

    points = clustered_cloud(np.random.default_rng(11))
    np.save(tmp_path / "points.npy", points)
    figures = bench.host_preparation(tmp_path / "points.npy", "cpu", blocks=4)
    assert figures["per_run"]["count"] == 1 and figures["per_block"]["count"] == 4
    assert figures["same_neighbours"] and figures["per_run"]["seconds"] > 0
    assert "1 time(s)" in bench.host_preparation_line(figures)
