"""cell_geometry against references computed apart (tests/cell_references.py): OpenFOAM's face
centres and area vectors of warped polygons of 3 to 8 vertices one polygon at a time, Newell's
vector area, the shoelace area and centroid of planar polygons, and cell centroids of convex
cells by a Delaunay tetrahedralisation of their vertices (scipy)."""

from __future__ import annotations

import numpy as np
import pytest
from cell_references import convex_centroid, newell, openfoam_cell, openfoam_face, shoelace
from scipy.spatial.transform import Rotation

import domino_pipeline.inputs.meshes.cell_geometry as cell_geometry
from domino_pipeline.inputs.meshes.cell_geometry import (
    SOLID,
    CellBlock,
    CellGeometryError,
    Faces,
    cell_centres,
    polygon_geometry,
    polygon_vector_areas,
    solid_faces,
    surface_geometry,
)


def star_polygon(rng: np.random.Generator, k: int, warp: float, convex: bool = False) -> np.ndarray:
    """``k`` vertices around a centre, wound counter-clockwise in the x-y plane, lifted out of it
    by up to ``warp``, then turned and moved at random."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, k)) if not convex else np.linspace(0, 2 * np.pi, k, endpoint=False)
    radii = np.ones(k) if convex else rng.uniform(0.3, 1.0, k)
    xy = np.column_stack([radii * np.cos(angles), radii * np.sin(angles)]) * rng.uniform(0.5, 2.0, 2)
    local = np.column_stack([xy, rng.uniform(-warp, warp, k)])
    return Rotation.random(random_state=rng).apply(local) + rng.uniform(-5, 5, 3)


def as_cells(polygons: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(points, begins, ends, ids) of polygons stored as VTK stores cells, points shuffled."""
    points = np.concatenate(polygons)
    order = np.random.default_rng(0).permutation(len(points))
    ids = np.argsort(order)  # ids[j]: where point j of the concatenation went
    ends = np.cumsum([len(p) for p in polygons])
    return points[order], ends - [len(p) for p in polygons], ends, ids


def test_warped_polygons_get_openfoams_centres_and_area_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cell_geometry, "CHUNK_CELLS", 7)  # many chunks
    rng = np.random.default_rng(1)
    polygons = [star_polygon(rng, int(k), warp=0.4) for k in rng.integers(3, 9, 300)]
    points, begins, ends, ids = as_cells(polygons)
    centres, vectors = polygon_geometry(points, begins, ends, ids)
    reference = [openfoam_face(p) for p in polygons]
    np.testing.assert_allclose(centres, [c for c, _ in reference], rtol=0, atol=1e-12)
    np.testing.assert_allclose(vectors, [v for _, v in reference], rtol=0, atol=1e-12)
    np.testing.assert_allclose(vectors, [newell(p) for p in polygons], rtol=0, atol=1e-10)
    got_centres, normals, areas = surface_geometry(points, begins, ends, ids)
    assert got_centres.dtype == normals.dtype == areas.dtype == np.float32
    np.testing.assert_array_equal(areas, np.linalg.norm(vectors, axis=1).astype(np.float32))
    np.testing.assert_allclose(normals, vectors / areas[:, None], atol=1e-6)
    np.testing.assert_array_equal(got_centres, centres.astype(np.float32))
    offsets = np.append(begins, ends[-1])
    np.testing.assert_allclose(polygon_vector_areas(points, offsets, ids), vectors, rtol=0, atol=1e-15)


def test_a_warped_polygon_is_not_measured_by_its_triangulation() -> None:
    """A strongly warped hexagon: OpenFOAM's area (the magnitude of the summed area vector) lies
    below the sum of its fan triangles' areas, which a triangulating filter reports."""
    rng = np.random.default_rng(2)
    hexagon = star_polygon(rng, 6, warp=1.5)
    _, vector = polygon_geometry(hexagon, np.array([0]), np.array([6]), np.arange(6))
    triangles = [0.5 * np.linalg.norm(np.cross(hexagon[i] - hexagon[0], hexagon[i + 1] - hexagon[0]))
                 for i in range(1, 5)]
    assert np.linalg.norm(vector) < 0.95 * sum(triangles)
    np.testing.assert_allclose(vector[0], openfoam_face(hexagon)[1], atol=1e-12)


@pytest.mark.parametrize("convex", [True, False])
def test_a_planar_polygon_has_its_shoelace_area(convex: bool) -> None:
    rng = np.random.default_rng(3)
    for k in range(3, 9):
        angles = np.linspace(0, 2 * np.pi, k, endpoint=False) + rng.uniform(0, 0.2, k)
        radii = np.ones(k) if convex else rng.uniform(0.4, 1.0, k)
        xy = np.column_stack([radii * np.cos(angles), radii * np.sin(angles)])
        turn, shift = Rotation.random(random_state=rng), rng.uniform(-3, 3, 3)
        polygon = turn.apply(np.column_stack([xy, np.zeros(k)])) + shift
        centres, normals, areas = surface_geometry(polygon, np.array([0]), np.array([k]), np.arange(k))
        area, centroid = shoelace(xy)
        assert areas[0] == pytest.approx(area, rel=1e-6)
        np.testing.assert_allclose(normals[0], turn.apply([0, 0, 1]), atol=1e-6)  # counter-clockwise: +z turned
        if convex:  # the fan about the vertex mean covers it once: the centre is its centroid
            np.testing.assert_allclose(centres[0], turn.apply([*centroid, 0]) + shift, atol=1e-5)
        reverse = polygon[::-1]
        _, flipped, _ = surface_geometry(reverse, np.array([0]), np.array([k]), np.arange(k))
        np.testing.assert_allclose(flipped[0], -normals[0], atol=1e-6)


def test_triangles_and_degenerate_polygons() -> None:
    rng = np.random.default_rng(4)
    triangle = rng.normal(size=(3, 3))
    centres, vectors = polygon_geometry(triangle, np.array([0]), np.array([3]), np.arange(3))
    np.testing.assert_allclose(centres[0], triangle.mean(axis=0), atol=1e-15)
    np.testing.assert_allclose(vectors[0], 0.5 * np.cross(triangle[1] - triangle[0], triangle[2] - triangle[0]))
    line = np.array([[0.0, 0, 0], [1, 0, 0], [2, 0, 0], [1, 0, 0]])  # a quad folded onto a line
    centres, normals, areas = surface_geometry(line, np.array([0]), np.array([4]), np.arange(4))
    assert areas[0] == 0 and not normals.any()
    np.testing.assert_allclose(centres[0], [1, 0, 0])
    with pytest.raises(CellGeometryError, match="1 polygons with no vertices"):
        polygon_geometry(line, np.array([0, 2]), np.array([2, 2]), np.arange(4))


# ----------------------------------------------------------------------------- cells


def reference_cell(cell_type: int) -> np.ndarray:
    """The vertices of VTK's reference cell of a type (its parametric coordinates)."""
    cell = SOLID[cell_type]()
    coords = cell.GetParametricCoords()
    return np.array([coords[i] for i in range(3 * cell.GetNumberOfPoints())]).reshape(-1, 3)


def one_type(points: np.ndarray, cell_type: int, cells: np.ndarray) -> np.ndarray:
    """cell_centres of cells (m, k) of one fixed-size type."""
    m, k = cells.shape
    block = CellBlock(np.full(m, cell_type, np.uint8), np.arange(m) * k, np.arange(1, m + 1) * k, cells.ravel())
    return cell_centres(points, block)


@pytest.mark.parametrize("cell_type", sorted(SOLID))
def test_vtks_faces_of_each_cell_type_are_wound_outward(cell_type: int) -> None:
    vertices = reference_cell(cell_type)
    got = one_type(vertices, cell_type, np.arange(len(vertices))[None])
    np.testing.assert_allclose(got[0], convex_centroid(vertices), atol=1e-12)
    # outward: each face's area vector points away from the centroid
    for face in solid_faces(cell_type):
        centre, vector = openfoam_face(vertices[list(face)])
        assert np.dot(vector, centre - got[0]) > 0


def planar_cells(rng: np.random.Generator, cell_type: int, n: int) -> np.ndarray:
    """``n`` convex cells with planar faces of a type: frusta (a base and its shrunk, shifted
    copy) for wedges and hexahedra, any tetra, a pyramid on a planar base, boxes for voxels,
    each through a random affine map (which keeps faces planar)."""
    cells = []
    for _ in range(n):
        base = reference_cell(cell_type)
        if cell_type in (12, 13):
            top = base[:, 2] > 0.5
            shrink = rng.uniform(0.3, 0.9)
            base[top, :2] = shrink * base[top, :2] + rng.uniform(0, 1 - shrink, 2)
        elif cell_type in (10, 14):
            base[-1] = [*rng.uniform(0.1, 0.9, 2), rng.uniform(0.3, 2.0)]
        if cell_type == 11:
            cells.append(base * rng.uniform(0.2, 2.0, 3) + rng.uniform(-5, 5, 3))
        else:
            cells.append(base @ (np.eye(3) + rng.uniform(-0.4, 0.4, (3, 3))).T + rng.uniform(-5, 5, 3))
    return np.array(cells)


@pytest.mark.parametrize("cell_type", sorted(SOLID))
def test_cell_centres_are_the_volume_centroids_of_convex_cells(cell_type: int) -> None:
    cells = planar_cells(np.random.default_rng(cell_type), cell_type, 40)
    m, k, _ = cells.shape
    got = one_type(cells.reshape(-1, 3), cell_type, np.arange(m * k).reshape(m, k))
    np.testing.assert_allclose(got, [convex_centroid(c) for c in cells], rtol=0, atol=1e-12)
    if cell_type in (12, 13, 14):  # VTK's parametric centre is another point on distorted cells
        vertex_weighted = np.array([_vtk_parametric_centre(cell_type, c) for c in cells])
        assert np.abs(vertex_weighted - got).max() > 1e-2


def _vtk_parametric_centre(cell_type: int, vertices: np.ndarray) -> np.ndarray:
    cell = SOLID[cell_type]()
    centre, weights = [0.0] * 3, [0.0] * len(vertices)
    cell.GetParametricCenter(centre)
    cell.InterpolateFunctions(centre, weights)
    return np.array(weights) @ vertices


def warped_hexahedra(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit cubes with each vertex moved up to 0.25 at random: warped, non-planar faces."""
    return np.array([reference_cell(12) + rng.uniform(-0.25, 0.25, (8, 3)) + rng.uniform(-9, 9, 3)
                     for _ in range(n)])


def test_a_warped_hexahedron_is_the_same_cell_as_a_polyhedron_of_its_faces() -> None:
    cells = warped_hexahedra(np.random.default_rng(5), 50)
    points = cells.reshape(-1, 3)
    vertex_ids = np.arange(len(points)).reshape(-1, 8)
    as_hexahedra = one_type(points, 12, vertex_ids)
    faces = [vertex_ids[c][list(face)] for c in range(len(cells)) for face in solid_faces(12)]
    lengths = np.array([len(f) for f in faces])
    ends = np.cumsum(lengths)
    polyhedra = CellBlock(np.full(len(cells), 42, np.uint8), np.arange(len(cells)) * 8, np.arange(1, len(cells) + 1) * 8,
                          vertex_ids.ravel(), Faces(np.repeat(np.arange(len(cells)), 6), ends - lengths, ends,
                                                    np.concatenate(faces)))
    np.testing.assert_allclose(cell_centres(points, polyhedra), as_hexahedra, rtol=0, atol=1e-12)
    reference = [openfoam_cell([c[list(face)] for face in solid_faces(12)]) for c in cells]
    np.testing.assert_allclose(as_hexahedra, reference, rtol=0, atol=1e-12)


def test_point_cells_keep_the_vertex_mean_and_unknown_types_are_nan() -> None:
    points = np.random.default_rng(6).normal(size=(9, 3))
    block = CellBlock(np.array([1, 3, 9, 7], np.uint8), np.array([0, 1, 3, 7]), np.array([1, 3, 7, 9]), np.arange(9))
    got = cell_centres(points, block)
    np.testing.assert_allclose(got[:3], [points[0], points[1:3].mean(0), points[3:7].mean(0)], atol=1e-15)
    assert np.isnan(got[3]).all()


def test_bad_cells_are_refused() -> None:
    points = np.zeros((8, 3))
    with pytest.raises(CellGeometryError, match="cells of type 12 with other than 8 vertices"):
        cell_centres(points, CellBlock(np.array([12], np.uint8), np.array([0]), np.array([7]), np.arange(8)))
    with pytest.raises(CellGeometryError, match="1 polyhedron cells without faces"):
        cell_centres(points, CellBlock(np.array([42], np.uint8), np.array([0]), np.array([8]), np.arange(8)))
