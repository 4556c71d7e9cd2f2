"""Face and cell geometry by OpenFOAM's definitions, a block of cells at a time: each polygon's
area vector and centre, each 3-D cell's volume-weighted centre, each surface point's dual area.
The definitions and why not VTK's: docs/processed_runs.md, "Geometry"."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkCommonDataModel import (
    VTK_PIXEL,
    vtkHexahedron,
    vtkLine,
    vtkPixel,
    vtkPyramid,
    vtkQuad,
    vtkTetra,
    vtkTriangle,
    vtkVertex,
    vtkVoxel,
    vtkWedge,
)

VSMALL = 1.0e-300  # OpenFOAM's double-precision VSMALL and ROOTVSMALL
ROOTVSMALL = 1.0e-150
CHUNK_CELLS = 1 << 16  # cells computed at a time: bounds the float64 temporaries
POLYHEDRON = 42  # VTK_POLYHEDRON
# VTK's cells of at most two dimensions, whose volume rows sit at VTK's parametric centre
POINT_WEIGHTED = {1: vtkVertex, 3: vtkLine, 5: vtkTriangle, 8: vtkPixel, 9: vtkQuad}
# VTK's fixed-size 3-D cells, whose faces come from VTK's own cell
SOLID = {10: vtkTetra, 11: vtkVoxel, 12: vtkHexahedron, 13: vtkWedge, 14: vtkPyramid}
CELL_TYPES = frozenset(POINT_WEIGHTED) | frozenset(SOLID) | {POLYHEDRON}


class CellGeometryError(ValueError):
    """Cells whose geometry cannot be computed (no vertices, wrong vertex counts, faceless polyhedra)."""


@dataclass(frozen=True)
class Faces:
    """The faces of a block's polyhedra: face j bounds cell ``cell[j]`` (an index into the block,
    ascending, each cell's faces in file order) and has the point ids ``ids[begins[j]:ends[j]]``."""

    cell: np.ndarray
    begins: np.ndarray
    ends: np.ndarray
    ids: np.ndarray

    def cells(self, start: int, stop: int) -> Faces:
        """The faces of cells ``start:stop``, numbered from ``start``."""
        first, last = np.searchsorted(self.cell, [start, stop])
        return Faces(self.cell[first:last] - start, self.begins[first:last], self.ends[first:last], self.ids)

    def point_ids(self) -> np.ndarray:
        """The point ids of every face, face after face."""
        lengths = self.ends - self.begins
        starts = np.cumsum(lengths) - lengths
        return self.ids[np.arange(int(lengths.sum())) + np.repeat(self.begins - starts, lengths)]


@dataclass(frozen=True)
class CellBlock:
    """Cells as a VTU stores them: cell i, of VTK type ``types[i]``, has the point ids
    ``ids[begins[i]:ends[i]]``; ``faces`` holds the faces of its polyhedra (None: it has none)."""

    types: np.ndarray
    begins: np.ndarray
    ends: np.ndarray
    ids: np.ndarray
    faces: Faces | None = None

    def cells(self, start: int, stop: int) -> CellBlock:
        """Cells ``start:stop`` of the block."""
        faces = None if self.faces is None else self.faces.cells(start, stop)
        return CellBlock(self.types[start:stop], self.begins[start:stop], self.ends[start:stop], self.ids, faces)


def polygon_geometry(points: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                     ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and area vectors (n, 3), float64, of polygons ``ids[begins[i]:ends[i]]`` of ``points``."""
    counts = np.asarray(ends) - np.asarray(begins)
    if counts.size and counts.min() < 1:
        raise CellGeometryError(f"{int(np.count_nonzero(counts < 1))} polygons with no vertices")
    centres, vectors = np.empty((len(counts), 3)), np.empty((len(counts), 3))
    for count in np.unique(counts):
        rows = np.flatnonzero(counts == count)
        corners = np.asarray(points[ids[begins[rows][:, None] + np.arange(count)]], dtype=np.float64)
        centres[rows], vectors[rows] = (_triangles if count == 3 else _fans)(corners)
    return centres, vectors


def _triangles(corners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and area vectors (m, 3) of triangles (m, 3, 3)."""
    p0, p1, p2 = np.ascontiguousarray(corners.transpose(1, 2, 0))  # each (3, m)
    return ((p0 + p1 + p2) / 3.0).T, (0.5 * _cross(p1 - p0, p2 - p0)).T


def _fans(corners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and area vectors (m, 3) of polygons (m, k, 3), summed vertex after vertex as OpenFOAM does."""
    p = np.ascontiguousarray(corners.transpose(1, 2, 0))  # (k, 3, m): each vertex's coordinates contiguous
    k = len(p)
    estimate = p.sum(axis=0) / k
    vector, moment, total = np.zeros_like(estimate), np.zeros_like(estimate), np.zeros(estimate.shape[1])
    for i in range(k):
        this, following = p[i], p[(i + 1) % k]
        doubled = _cross(following - this, estimate - this)  # twice the triangle's area vector
        weight = np.sqrt(doubled[0] ** 2 + doubled[1] ** 2 + doubled[2] ** 2)
        vector += doubled
        total += weight
        moment += weight * (this + following + estimate)
    some = total >= ROOTVSMALL
    centres = np.where(some, moment / (3.0 * np.where(some, total, 1.0)), estimate)
    return centres.T, np.where(some, 0.5 * vector, 0.0).T


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross products of vectors stored by component, (3, m) x (3, m)."""
    return np.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def polygon_vector_areas(points: np.ndarray, offsets: np.ndarray, connectivity: np.ndarray) -> np.ndarray:
    """Each polygon's area vector (N, 3), float64, polygons as VTK stores them (offsets, connectivity)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    connectivity = np.asarray(connectivity, dtype=np.int64)
    parts = [polygon_geometry(points, offsets[a:b], offsets[a + 1:b + 1], connectivity)[1]
             for a, b in _chunks(len(offsets) - 1)]
    return np.concatenate(parts) if parts else np.zeros((0, 3))


def surface_geometry(points: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                     ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centres, unit normals (zero for no area) and areas of polygons, float32, from float64 by chunks."""
    centres, normals, areas = [np.zeros((0, 3))], [np.zeros((0, 3))], [np.zeros(0)]
    for a, b in _chunks(len(begins)):
        centre, vector = polygon_geometry(points, begins[a:b], ends[a:b], ids)
        area = np.linalg.norm(vector, axis=1)
        centres.append(centre)
        normals.append(vector / np.maximum(area, 1e-30)[:, None])
        areas.append(area)
    return tuple(np.concatenate(part).astype(np.float32) for part in (centres, normals, areas))


def polygon_vertex_shares(points: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                          ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per vertex of each polygon: point id, dual area share, the polygon's area vector (float64)."""
    counts = np.asarray(ends) - np.asarray(begins)
    if counts.size and counts.min() < 3:
        raise CellGeometryError(f"{int(np.count_nonzero(counts < 3))} polygons with fewer than 3 vertices")
    _, vectors = polygon_geometry(points, begins, ends, ids)
    vertex, share, vector = [np.zeros(0, np.int64)], [np.zeros(0)], [np.zeros((0, 3))]
    for count in np.unique(counts):
        rows = np.flatnonzero(counts == count)
        corner_ids = ids[begins[rows][:, None] + np.arange(count)]
        corners = np.asarray(points[corner_ids], dtype=np.float64)
        mean = corners.mean(axis=1, keepdims=True)
        fan = 0.5 * np.linalg.norm(np.cross(corners - mean, np.roll(corners, -1, axis=1) - mean), axis=2)
        vertex.append(corner_ids.ravel())
        share.append((0.5 * (fan + np.roll(fan, 1, axis=1))).ravel())
        vector.append(np.repeat(vectors[rows], count, axis=0))
    return np.concatenate(vertex).astype(np.int64), np.concatenate(share), np.concatenate(vector)


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(a, min(a + CHUNK_CELLS, n)) for a in range(0, n, CHUNK_CELLS)]


@functools.cache
def centre_weights(cell_type: int) -> np.ndarray:
    """The weights of a cell type's vertices at its parametric centre (vtkCellCenters'), from VTK's cell."""
    cell = POINT_WEIGHTED[cell_type]()
    centre = [0.0, 0.0, 0.0]
    cell.GetParametricCenter(centre)
    weights = [0.0] * cell.GetNumberOfPoints()
    cell.InterpolateFunctions(centre, weights)
    return np.array(weights)


@functools.cache
def vertex_count(cell_type: int) -> int:
    """The number of vertices of a fixed-size 3-D cell type."""
    return SOLID[cell_type]().GetNumberOfPoints()


@functools.cache
def solid_faces(cell_type: int) -> tuple[tuple[int, ...], ...]:
    """The faces of a fixed-size 3-D cell type as its vertices' places, wound outward, from VTK's
    own cell (a voxel's faces are pixels, whose points VTK orders row by row: put in cyclic order)."""
    cell = SOLID[cell_type]()
    for i in range(cell.GetNumberOfPoints()):
        cell.GetPointIds().SetId(i, i)
    faces = []
    for f in range(cell.GetNumberOfFaces()):
        face = cell.GetFace(f)
        ids = [face.GetPointId(k) for k in range(face.GetNumberOfPoints())]
        faces.append(tuple(ids[i] for i in (0, 1, 3, 2)) if face.GetCellType() == VTK_PIXEL else tuple(ids))
    return tuple(faces)


def cell_centres(points: np.ndarray, block: CellBlock) -> np.ndarray:
    """Centres (n, 3), float64, of a block's cells; NaN for cell types outside CELL_TYPES."""
    parts = [_chunk_centres(points, block.cells(a, b)) for a, b in _chunks(len(block.types))]
    return np.concatenate(parts) if parts else np.zeros((0, 3))


def _chunk_centres(points: np.ndarray, block: CellBlock) -> np.ndarray:
    centres = np.full((len(block.types), 3), np.nan)
    for cell_type in np.unique(block.types).tolist():
        if cell_type in POINT_WEIGHTED:
            rows = np.flatnonzero(block.types == cell_type)
            weights = centre_weights(cell_type)
            corners = np.asarray(points[_vertex_ids(block, rows, cell_type, len(weights))], dtype=np.float64)
            centres[rows] = np.einsum("k,mkd->md", weights, corners)
    solid = np.isin(block.types, list(SOLID) + [POLYHEDRON])
    if solid.any():
        centres[solid] = _centroids(points, block)[solid]
    return centres


def _vertex_ids(block: CellBlock, rows: np.ndarray, cell_type: int, count: int) -> np.ndarray:
    """The point ids (m, count) of cells ``rows`` of a fixed-size type."""
    if np.any(block.ends[rows] - block.begins[rows] != count):
        raise CellGeometryError(f"cells of type {cell_type} with other than {count} vertices")
    return block.ids[block.begins[rows][:, None] + np.arange(count)]


def _face_geometry(points: np.ndarray, block: CellBlock) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cell of each face, face centres, outward area vectors) of the block's 3-D cells."""
    parts = []  # (cells, face centres, area vectors) of each face of each type, then of the polyhedra
    for cell_type in sorted(set(np.unique(block.types).tolist()) & set(SOLID)):
        rows = np.flatnonzero(block.types == cell_type)
        ids = _vertex_ids(block, rows, cell_type, vertex_count(cell_type))
        for face in solid_faces(cell_type):
            corners = np.asarray(points[ids[:, face]], dtype=np.float64)
            parts.append((rows, *(_triangles if len(face) == 3 else _fans)(corners)))
    if np.any(block.types == POLYHEDRON):
        faces = _polyhedron_faces(block)
        parts.append((faces.cell, *polygon_geometry(points, faces.begins, faces.ends, faces.ids)))
    return tuple(np.concatenate(part) for part in zip(*parts))


def _polyhedron_faces(block: CellBlock) -> Faces:
    """The block's polyhedron faces; CellGeometryError for a polyhedron without any."""
    polyhedra = np.flatnonzero(block.types == POLYHEDRON)
    have = np.zeros(len(block.types), bool)
    if block.faces is not None:
        have[block.faces.cell] = True
    if not have[polyhedra].all():
        raise CellGeometryError(f"{int(np.count_nonzero(~have[polyhedra]))} polyhedron cells without faces")
    keep = block.types[block.faces.cell] == POLYHEDRON
    return Faces(block.faces.cell[keep], block.faces.begins[keep], block.faces.ends[keep], block.faces.ids)


def _centroids(points: np.ndarray, block: CellBlock) -> np.ndarray:
    """Volume centroids (n, 3) of the block's 3-D cells (NaN for its other cells)."""
    n = len(block.types)
    cell, face_centres, face_vectors = _face_geometry(points, block)
    count = np.bincount(cell, minlength=n)
    solid = count > 0
    estimate = _sum_by_cell(cell, face_centres, n)
    estimate[solid] /= count[solid][:, None]
    estimate[~solid] = np.nan
    apex = estimate[cell]
    volumes3 = np.einsum("ij,ij->i", face_vectors, face_centres - apex)  # 3 x each pyramid's volume
    pyramid_centres = 0.75 * face_centres + 0.25 * apex
    total = np.bincount(cell, weights=volumes3, minlength=n)
    moment = _sum_by_cell(cell, volumes3[:, None] * pyramid_centres, n)
    some = np.abs(total) > VSMALL
    centres = estimate.copy()
    centres[some] = moment[some] / total[some][:, None]
    return centres


def _sum_by_cell(cell: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.stack([np.bincount(cell, weights=values[:, d], minlength=n) for d in range(3)], axis=1)


def require_no_strips(count: int, path) -> None:
    """CellGeometryError naming ``path`` when a boundary surface has ``count`` > 0 triangle strips."""
    if count:
        raise CellGeometryError(f"{path}: {count} triangle strip cells, which are not read "
                                "(a boundary surface holds polygons)")


def polydata_geometry(mesh, path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``surface_geometry`` of a VTK PolyData read whole (vertex, line cells: their mean, no area)."""
    require_no_strips(mesh.GetNumberOfStrips(), path)
    points = np.asarray(mesh.points)
    parts = []
    for cells, flat in ((mesh.GetVerts(), True), (mesh.GetLines(), True), (mesh.GetPolys(), False)):
        offsets = vtk_to_numpy(cells.GetOffsetsArray()).astype(np.int64)
        ids = vtk_to_numpy(cells.GetConnectivityArray()).astype(np.int64)
        if len(offsets) < 2:
            continue
        try:
            parts.append(_flat_geometry(points, offsets, ids) if flat else
                         surface_geometry(points, offsets[:-1], offsets[1:], ids))
        except CellGeometryError as err:
            raise CellGeometryError(f"{path}: {err}") from err
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(3))


def _flat_geometry(points: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """Vertex means, zero normals and zero areas of vertex or line cells."""
    sums = np.add.reduceat(np.asarray(points[ids], dtype=np.float64), offsets[:-1], axis=0)
    centres = (sums / np.diff(offsets)[:, None]).astype(np.float32)
    return centres, np.zeros_like(centres), np.zeros(len(centres), np.float32)


def grid_cell_centres(grid, path) -> np.ndarray:
    """``cell_centres`` of a VTK UnstructuredGrid read whole; CellGeometryError naming ``path``."""
    cells = grid.GetCells()
    offsets = vtk_to_numpy(cells.GetOffsetsArray()).astype(np.int64)
    block = CellBlock(np.asarray(grid.celltypes), offsets[:-1], offsets[1:],
                      vtk_to_numpy(cells.GetConnectivityArray()).astype(np.int64), _grid_faces(grid))
    try:
        centres = cell_centres(np.asarray(grid.points), block)
    except CellGeometryError as err:
        raise CellGeometryError(f"{path}: {err}") from err
    other = np.isnan(centres[:, 0])
    if other.any():
        centres[other] = np.asarray(grid.cell_centers().points, dtype=np.float64)[other]
    return centres


def _grid_faces(grid) -> Faces | None:
    """The polyhedron faces of a VTK UnstructuredGrid (VTK 9.4's face arrays), None without any."""
    locations, faces = grid.GetPolyhedronFaceLocations(), grid.GetPolyhedronFaces()
    if locations is None or faces is None or locations.GetNumberOfCells() == 0:
        return None
    where = vtk_to_numpy(locations.GetOffsetsArray()).astype(np.int64)
    face_ids = vtk_to_numpy(locations.GetConnectivityArray()).astype(np.int64)
    face_offsets = vtk_to_numpy(faces.GetOffsetsArray()).astype(np.int64)
    cell = np.repeat(np.arange(len(where) - 1), np.diff(where))
    return Faces(cell, face_offsets[face_ids], face_offsets[face_ids + 1],
                 vtk_to_numpy(faces.GetConnectivityArray()).astype(np.int64))
