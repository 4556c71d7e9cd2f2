"""Tie-proof kNN: a lattice full of exact ties gives the same neighbours on every call, every
backend (Warp CPU kernel on one and several threads, the cKDTree path) and a brute-force
reference written here, in the documented order (squared distance, the query itself, the lower
index); and the squared distance is immune to fused multiply-add, so CUDA gives the same bits."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from domino_pipeline.compute import geometry


def lattice(shape=(9, 7, 4), spacing=0.1, origin=(1000.3, -7.1, 2.9), seed=0) -> np.ndarray:
    """A shuffled float32 lattice far from the origin: every interior point has 6 neighbours at
    one distance, 12 at the next, so ties abound, and its coordinates round."""
    axes = [np.arange(n) * spacing for n in shape]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3) + np.asarray(origin)
    return grid[np.random.default_rng(seed).permutation(len(grid))].astype(np.float32)


def brute_force(points: np.ndarray, queries: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair: float32 differences, squared and summed in float64 x + y then + z; rows
    ordered by (squared distance, self first, index)."""
    q = points if queries is None else queries
    diff = (points[None, :, :] - q[:, None, :]).astype(np.float64)
    d2 = (np.square(diff[..., 0]) + np.square(diff[..., 1])) + np.square(diff[..., 2])
    key = np.broadcast_to(np.arange(len(points)), d2.shape).copy()
    if queries is None:
        key[np.arange(len(q)), np.arange(len(q))] = -1
    order = np.lexsort((key, d2), axis=-1)[:, :k]
    index = np.where(np.take_along_axis(key, order, 1) < 0, np.arange(len(q))[:, None], order)
    return index.astype(np.int32), np.sqrt(np.take_along_axis(d2, order, 1)).astype(np.float32)


SEARCHES = {"grid": 0, "brute": 1 << 40}  # geometry.BRUTE_PAIRS forcing the grid's rounds or every pair


@pytest.fixture(params=list(SEARCHES))
def search(request, monkeypatch):
    """The Warp kNN's grid search or its one-launch search of every pair, on every device."""
    monkeypatch.setattr(geometry, "BRUTE_PAIRS", {"cpu": SEARCHES[request.param], "cuda": SEARCHES[request.param]})
    return request.param


@pytest.mark.parametrize("k", [7, 8, 19])  # 8: ties at the k-th place for every interior point
def test_lattice_neighbours_are_the_same_on_every_backend_and_call(k, search):
    points = lattice()
    expected = brute_force(points, None, k)
    tied = (np.diff(expected[1], axis=1) == 0).any(axis=1)
    assert tied.mean() > 0.5  # the test is about ties: most rows have some
    runs = [geometry.knn(points, k, device="cpu", backend="warp", cpu_threads=1),
            geometry.knn(points, k, device="cpu", backend="warp", cpu_threads=1),
            geometry.knn(points, k, device="cpu", backend="warp", cpu_threads=3),
            geometry.knn(points, k, device="cpu", backend="ckdtree")]
    for index, distance in runs:
        assert np.array_equal(index, expected[0])
        assert np.array_equal(distance, expected[1])


def test_lattice_queries_in_blocks_of_one_index_match_brute_force(search):
    points = lattice(seed=1)
    queries = points[::3]
    expected = brute_force(points, queries, 8)
    for backend in ("warp", "ckdtree"):
        index = geometry.KnnIndex(points, device="cpu", backend=backend)
        blocks = [index.query(8, queries[start:start + 50]) for start in range(0, len(queries), 50)]
        assert np.array_equal(np.concatenate([b[0] for b in blocks]), expected[0])
        assert np.array_equal(np.concatenate([b[1] for b in blocks]), expected[1])


def test_squared_distance_is_exact_per_product_so_fused_multiply_add_changes_nothing():
    rng = np.random.default_rng(2)
    a = (rng.normal(size=(2000, 3)) * 10.0 ** rng.integers(-3, 4, (2000, 1))).astype(np.float32)
    b = (a + rng.normal(scale=0.01, size=a.shape)).astype(np.float32)
    d2 = geometry.distance_sq(a, b)
    diff = a - b
    for row in range(0, 2000, 97):
        x, y, z = (Fraction(float(v)) for v in diff[row])
        # each square is exact in float64; a fused x*x + (y*y) rounds the exact sum once, which
        # is what the separate add does too; likewise for + z*z
        assert Fraction(float(np.float64(diff[row, 0]) ** 2)) == x * x
        assert Fraction(float(np.float64(diff[row, 1]) ** 2)) == y * y
        fused_xy = float(x * x + y * y)  # one rounding of the exact value, as fma(x, x, y*y)
        assert float(fused_xy + float(z * z)) == float(Fraction(fused_xy) + z * z)
        assert d2[row] == float(Fraction(fused_xy) + z * z)


def test_warp_kernel_distances_have_the_bits_of_distance_sq():
    rng = np.random.default_rng(3)
    points = (rng.normal(size=(3000, 3)) * 3 + 500).astype(np.float32)
    index, distance = geometry.knn(points, 5, device="cpu", backend="warp")
    reference = np.sqrt(geometry.distance_sq(points[index], points[:, None, :])).astype(np.float32)
    assert np.array_equal(distance, reference)


HAS_CUDA = geometry.resolve_device("auto").startswith("cuda")


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_cuda_gives_the_same_bits_as_the_cpu_on_a_lattice_and_a_cloud(search):
    points = lattice()
    expected = brute_force(points, None, 8)
    on_cuda = geometry.knn(points, 8, device="cuda")
    assert np.array_equal(on_cuda[0], expected[0]) and np.array_equal(on_cuda[1], expected[1])
    cloud = (np.random.default_rng(4).normal(size=(20_000, 3)) * 0.3 + 100.0).astype(np.float32)
    cpu, cuda = geometry.knn(cloud, 7, device="cpu"), geometry.knn(cloud, 7, device="cuda")
    assert np.array_equal(cpu[0], cuda[0]) and np.array_equal(cpu[1], cuda[1])
