"""benchmarks/shape_geometry.py: descriptors of boxes and a sphere against their formulas and
pyvista's own measures, the frontal area of bodies that hide one another, and the surface distance
against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import pyvista as pv
from conftest import import_benchmark
from scipy.spatial.distance import cdist


def corners_of(mesh: pv.PolyData) -> np.ndarray:
    mesh = mesh.triangulate()
    return np.asarray(mesh.points, dtype=np.float64)[mesh.faces.reshape(-1, 4)[:, 1:]]


def box(x: tuple, y: tuple, z: tuple) -> np.ndarray:
    return corners_of(pv.Box(bounds=(*x, *y, *z)))


def test_a_box_measures_as_its_formulas_say():
    geometry = import_benchmark("shape_geometry")
    found = geometry.descriptors(box((0.0, 4.0), (-0.9, 0.9), (0.1, 1.4)))
    assert found["length"] == pytest.approx(4.0) and found["width"] == pytest.approx(1.8)
    assert found["height"] == pytest.approx(1.3)
    assert found["wetted_area"] == pytest.approx(2 * (4.0 * 1.8 + 4.0 * 1.3 + 1.8 * 1.3))
    assert found["volume"] == pytest.approx(4.0 * 1.8 * 1.3)
    assert found["frontal_area"] == pytest.approx(1.8 * 1.3, rel=0.01)  # a pixel's width round the edge


def test_a_sphere_measures_as_pyvista_and_the_convex_projection_formula_say():
    geometry = import_benchmark("shape_geometry")
    sphere = pv.Sphere(radius=0.8, theta_resolution=60, phi_resolution=60)
    corners = corners_of(sphere)
    found = geometry.descriptors(corners)
    assert found["volume"] == pytest.approx(sphere.volume, rel=1e-9)
    assert found["wetted_area"] == pytest.approx(sphere.area, rel=1e-9)
    # a convex closed body's shadow: half the sum of |n_x| x area over its triangles
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert found["frontal_area"] == pytest.approx(0.25 * np.abs(normals[:, 0]).sum(), rel=0.005)
    assert found["frontal_area"] == pytest.approx(np.pi * 0.8**2, rel=0.01)


def test_a_part_hidden_behind_another_counts_once_in_the_frontal_area():
    geometry = import_benchmark("shape_geometry")
    # two boxes one behind the other along x, their shadows overlapping over 0.5 x 1.0 of 1.0 x 1.0 each
    corners = np.concatenate([box((0, 1), (0, 1), (0, 1)), box((2, 3), (0.5, 1.5), (0, 1))])
    assert geometry.frontal_area(corners) == pytest.approx(1.5, rel=0.01)
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert 0.25 * np.abs(normals[:, 0]).sum() == pytest.approx(2.0)  # what counting each box would give


def test_points_are_drawn_on_the_surface_by_area():
    geometry = import_benchmark("shape_geometry")
    corners = box((0, 4), (0, 1), (0, 1))  # the four long faces hold 16 of the 18 square metres
    points = geometry.sample_surface(corners, 20_000, np.random.default_rng(0))
    on_face = np.isclose(points, 0) | np.isclose(points, [4, 1, 1])
    assert np.all(on_face.any(axis=1)) and np.all((points >= -1e-12) & (points <= np.array([4, 1, 1]) + 1e-12))
    assert np.mean(on_face[:, 0]) == pytest.approx(2 / 18, abs=0.01)


def test_the_surface_distance_is_the_brute_force_one():
    geometry = import_benchmark("shape_geometry")
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(300, 3)), rng.normal(size=(200, 3)) + 0.3, rng.normal(size=(250, 3))
    pairs = cdist(a, b)
    expected = 0.5 * (pairs.min(axis=1).mean() + pairs.min(axis=0).mean())
    assert geometry.surface_distance(a, b) == pytest.approx(expected, rel=1e-12)
    assert geometry.surface_distance(b, a) == pytest.approx(expected, rel=1e-12) and geometry.surface_distance(a, a) == 0
    matrix = geometry.distance_matrix([a, b], [b, c])
    np.testing.assert_allclose(matrix, [[geometry.surface_distance(x, y) for y in (b, c)] for x in (a, b)], rtol=1e-12)
