"""Non-planarity and aspect ratio of polygons against their definitions computed one polygon at a
time, and on known shapes."""

from __future__ import annotations

import numpy as np
import pytest

from domino_pipeline.inputs.meshes.cell_geometry import surface_geometry
from domino_pipeline.inputs.statistics.cell_quality import CellQuality, polygon_quality


def _quality(points: np.ndarray, polygons: list[list[int]]):
    ends = np.cumsum([len(p) for p in polygons])
    begins = ends - [len(p) for p in polygons]
    ids = np.concatenate(polygons)
    centres, normals, areas = surface_geometry(points, begins, ends, ids)
    return (polygon_quality(points, begins, ends, ids, centres, normals, areas),
            (begins, ends, ids, centres, normals, areas))


def _one_by_one(points: np.ndarray, polygon: list[int], centre: np.ndarray) -> tuple[float, float]:
    """The definitions, written out for one polygon: its area vector is Newell's, half the sum of
    its vertices' cross products."""
    p = points[polygon].astype(np.float64)
    edges = [np.linalg.norm(p[(i + 1) % len(p)] - p[i]) for i in range(len(p))]
    if len(p) == 3:
        return 0.0, max(edges) / min(edges)
    vector = sum(np.cross(p[i], p[(i + 1) % len(p)]) for i in range(len(p))) / 2.0
    normal, area = vector / np.linalg.norm(vector), np.linalg.norm(vector)
    return max(abs((q - centre) @ normal) for q in p) / np.sqrt(area), max(edges) / min(edges)


def test_known_shapes():
    points = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [4, 0, 0], [4, 1, 0], [0.5, 0.5, 0.8]], float)
    (non_planarity, aspect), _ = _quality(points, [[0, 1, 2, 3], [0, 4, 5, 3], [0, 1, 6]])
    np.testing.assert_allclose(non_planarity, [0.0, 0.0, 0.0], atol=1e-7)  # flat quads, a triangle
    np.testing.assert_allclose(aspect, [1.0, 4.0, np.sqrt(0.25 + 0.25 + 0.64) / 1.0], rtol=1e-6)
    lifted = points[:4] + [[0, 0, 0.01], [0, 0, -0.01], [0, 0, 0.01], [0, 0, -0.01]]
    (warp, _), _ = _quality(lifted, [[0, 1, 2, 3]])
    assert warp[0] == pytest.approx(0.01, rel=1e-4)  # corners 0.01 off the mean plane, a unit square


def test_warped_polygons_match_the_definition_one_by_one():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(60, 3))
    polygons = [list(rng.choice(60, size=k, replace=False)) for k in (4, 5, 6, 4, 3, 7, 4) for _ in range(3)]
    (non_planarity, aspect), (_, _, _, centres, _, _) = _quality(points, polygons)
    for i, polygon in enumerate(polygons):
        want = _one_by_one(points, polygon, centres[i].astype(np.float64))
        assert non_planarity[i] == pytest.approx(want[0], rel=1e-4, abs=1e-6)
        assert aspect[i] == pytest.approx(want[1], rel=1e-5)
    assert non_planarity.max() > 0.2  # random polygons are far from flat: the measure sees it


def test_the_run_summary_and_zero_edges():
    points = np.array([[0, 0, 0], [2, 0, 0], [2, 1, 0.5], [0, 1, 0], [0, 0, 0]], float)
    (non_planarity, aspect), block = _quality(points, [[0, 1, 2, 3], [0, 1, 4]])
    quality = CellQuality()
    quality.add(points, *block)
    summary = quality.summary()
    assert summary["zero_edge_cells"] == 1 and np.isinf(aspect[1])
    assert summary["aspect_ratio_max"] == pytest.approx(aspect[0]) == summary["aspect_ratio_mean"]
    assert summary["non_planarity_mean"] == pytest.approx(non_planarity.sum() / 2)
    assert CellQuality().summary() == {}
