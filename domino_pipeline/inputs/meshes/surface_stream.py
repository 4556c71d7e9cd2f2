"""A run's boundary surface (a VTP, or a VTU of polygon cells) as blocks of rows (centres, unit
normals, areas, raw fields) in bounded memory; a row is a boundary cell or a boundary point
(``SurfaceRows.location``). docs/raw_inputs.md, "The meshes by rows"."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.meshes import mesh_stream
from domino_pipeline.inputs.meshes.cell_geometry import (
    CellGeometryError,
    polygon_vertex_shares,
    require_no_strips,
    surface_geometry,
)
from domino_pipeline.inputs.meshes.mesh_rows import (
    SURFACE_ARRAYS,
    SurfaceRows,
    field_columns,
    nonfinite,
    published_areas,
    require_finite_points,
    require_names,
    require_polygon_types,
    source_arrays,
    unit_rows,
)
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_surface
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile

SurfaceBlock = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_DATA = {"cells": ("CellData", "cell"), "points": ("PointData", "point")}
CellsObserver = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


@dataclass
class SurfaceStream:
    """The rows of a run's boundary surface: ``n_cells`` (rows) and ``blocks(rows)``."""

    path: Path  # or a remote file (remote_files.RemoteFile), which names it
    variables: Mapping[str, str]
    n_cells: int
    file: VtkXmlFile | None = None  # None: read whole with VTK
    arrays: Mapping[str, list[str]] | None = None  # variable -> the arrays it is read from
    rows: SurfaceRows = field(default_factory=SurfaceRows)

    def blocks(self, cells: int, on_cells: CellsObserver | None = None) -> Iterator[SurfaceBlock]:
        """(centres, unit normals, areas, raw fields), float32, of ``cells`` rows at a time, in file
        order; for cell rows read by rows, each block's polygons are shown to ``on_cells`` (CellQuality.add)."""
        if self.file is None:
            whole = read_surface(self.path, self.variables, self.arrays, self.rows)
            for start in range(0, self.n_cells, cells):
                yield tuple(whole[name][start:start + cells] for name in SURFACE_ARRAYS)
            return
        names = _array_names(self.variables, self.arrays, self.rows)
        read = self._cell_blocks if self.rows.location == "cells" else self._point_blocks
        with mesh_stream.prepared_rows(self.file, surface_arrays(self.file, names, self.rows)):
            yield from mesh_stream.read_errors_named(read(self.file, cells, on_cells), self.path)

    def _fields(self, file: VtkXmlFile, start: int, stop: int) -> np.ndarray:
        section, where = _DATA[self.rows.location]
        names = source_arrays(self.variables, self.arrays)
        data = {name: file.read(section, name, start, stop) for name in names}
        return field_columns(data, self.variables, self.path, where, self.arrays)

    def _cell_blocks(self, file: VtkXmlFile, cells: int, on_cells: CellsObserver | None) -> Iterator[SurfaceBlock]:
        with tempfile.TemporaryDirectory(prefix="surface_points_") as tmp:
            points = self._points(file, Path(tmp), cells)
            for start in range(0, self.n_cells, cells):
                stop = min(start + cells, self.n_cells)
                fields = self._fields(file, start, stop)
                begins, ends, ids = mesh_stream.cell_vertices(file, cell_section(file), start, stop, len(points))
                try:
                    geometry = surface_geometry(points, begins, ends, ids)
                except CellGeometryError as err:
                    raise RunError(f"{self.path}: {err} among cells {start}..{stop}") from err
                if on_cells is not None:
                    on_cells(points, begins, ends, ids, *geometry)
                yield (*geometry, fields)

    def _point_blocks(self, file: VtkXmlFile, rows: int, on_cells: CellsObserver | None) -> Iterator[SurfaceBlock]:
        with tempfile.TemporaryDirectory(prefix="surface_points_") as tmp:
            sums = None
            if self.rows.normals is None or self.rows.areas is None:
                sums = point_sums(file, self._points(file, Path(tmp), rows), Path(tmp), rows, self.path)
            areas = published_areas(self.rows.areas, file.n_points) if self.rows.areas else sums[1]
            for start in range(0, file.n_points, rows):
                stop = min(start + rows, file.n_points)
                centres = file.read("Points", "Points", start, stop)
                require_finite_points(nonfinite(centres), self.path)
                if self.rows.normals is None:
                    normals = sums[0][start:stop]
                else:
                    normals = field_columns({self.rows.normals: file.read("PointData", self.rows.normals, start, stop)},
                                            {self.rows.normals: "vector"}, self.path, "point")
                yield (np.asarray(centres, np.float32), unit_rows(normals),
                       np.asarray(areas[start:stop], np.float32), self._fields(file, start, stop))

    def _points(self, file: VtkXmlFile, tmp: Path, rows: int) -> np.ndarray:
        points = mesh_stream.points_table(file, tmp, rows)
        require_finite_points(sum(nonfinite(points[start:start + rows]) for start in range(0, len(points), rows)),
                              self.path)
        return points


def _array_names(variables: Mapping[str, str], arrays: Mapping[str, list[str]] | None, rows: SurfaceRows) -> list[str]:
    """The data arrays the fields ``variables`` (and ``rows``' published normals) are read from."""
    return source_arrays(variables, arrays) + ([rows.normals] if rows.normals else [])


def cell_section(file: VtkXmlFile) -> str:
    """The section holding the surface's cells: Polys of a VTP, Cells of a VTU."""
    return "Polys" if file.kind == "PolyData" else "Cells"


def point_sums(file: VtkXmlFile, points: np.ndarray, tmp: Path, cells: int, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Per point, its cells' summed area vectors and its dual area: float64 memory maps in ``tmp``."""
    vectors = np.memmap(tmp / "normal_sums.f8", dtype=np.float64, mode="w+", shape=(file.n_points, 3))
    areas = np.memmap(tmp / "dual_areas.f8", dtype=np.float64, mode="w+", shape=(file.n_points,))
    section = cell_section(file)
    for start in range(0, file.n_cells, cells):
        stop = min(start + cells, file.n_cells)
        begins, ends, ids = mesh_stream.cell_vertices(file, section, start, stop, len(points))
        try:
            vertex, share, vector = polygon_vertex_shares(points, begins, ends, ids)
        except CellGeometryError as err:
            raise RunError(f"{path}: {err} among cells {start}..{stop}") from err
        low, high = int(vertex.min()), int(vertex.max()) + 1  # the points of this block's cells
        local = vertex - low
        areas[low:high] += np.bincount(local, weights=share, minlength=high - low)
        for d in range(3):
            vectors[low:high, d] += np.bincount(local, weights=vector[:, d], minlength=high - low)
    return vectors, areas


def open_surface(path, variables: Mapping[str, str], arrays: Mapping[str, list[str]] | None = None,
                 rows: SurfaceRows = SurfaceRows(), file: VtkXmlFile | None = None) -> SurfaceStream:
    """The boundary surface of ``path`` as blocks of ``rows`` with the fields ``variables``; RunError naming
    the file for a missing field, no rows or non-polygons; a file not readable by rows falls back to VTK."""
    file = mesh_stream.open_rows(path) if file is None else file
    require_no_strips(file.piece_counts.get("NumberOfStrips", 0), path)
    section, where = _DATA[rows.location]
    names = _array_names(variables, arrays, rows)
    require_names(file.names(section), names, path, where)
    n_rows = file.n_cells if rows.location == "cells" else file.n_points
    mesh_stream.require_rows(file, path, n_rows)
    reason = _unstreamable(file)
    if reason:
        mesh_stream.fall_back_to_vtk(file, path, reason)
        return SurfaceStream(Path(path), dict(variables), n_rows, None, arrays, rows)
    return SurfaceStream(path, dict(variables), n_rows, file, arrays, rows)


def surface_arrays(file: VtkXmlFile, names: list[str], rows: SurfaceRows) -> list[tuple[str, str]]:
    """The arrays (section, name) the blocks of ``rows`` read (connectivity unless all published)."""
    section = _DATA[rows.location][0]
    cells = rows.location == "cells" or rows.normals is None or rows.areas is None
    connectivity = [(cell_section(file), "offsets"), (cell_section(file), "connectivity")] if cells else []
    return [("Points", "Points"), *connectivity, *((section, name) for name in names)]


def _unstreamable(file: VtkXmlFile) -> str:
    """Why ``file`` cannot be read by rows ("" when it can); RunError for a VTU of non-polygon cells."""
    if not file.streamable:
        return "its data is inline ascii, which cannot be read by rows"
    if file.kind == "UnstructuredGrid":
        require_polygon_types(mesh_stream.cell_types(file), file.path)
        return ""
    other = [kind for section, kind in (("Verts", "vertex"), ("Lines", "line"))
             if file.piece_counts.get(f"NumberOf{section}", 0)]
    if other:
        return f"it has {' and '.join(other)} cells besides polygons, which are not read by cells"
    return ""
