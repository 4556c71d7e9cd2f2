"""A run's boundary VTP as blocks of cells (centres, unit normals, areas, raw fields), in
bounded memory.

DrivAerML's boundary holds ~8.8M polygon cells (quads and triangles); VTK reads it whole. Here
a block of cells is read from the file's connectivity, offsets and cell data, its points are
taken from a points table (``mesh_stream.points_table``), and its geometry is OpenFOAM's face
geometry (``cell_geometry.surface_geometry``), as ``drivaerml_reader.read_surface`` computes it
for the whole file: each cell's values depend on its own vertices, so the rows equal the
whole-file ones exactly. A file this reader cannot read by cells (inline ascii data; vertex or
line cells, which come before the polygons in cell order) is read whole with VTK, after a
warning naming the memory that takes; triangle strips are refused.

    surface = open_surface(files.surface, {"pMeanTrim": "scalar"})
    for centres, normals, areas, fields in surface.blocks(1 << 20):
        ...
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.inputs import mesh_stream
from domino_pipeline.inputs.cell_geometry import CellGeometryError, require_no_strips, surface_geometry
from domino_pipeline.inputs.drivaerml_reader import (
    SURFACE_ARRAYS,
    RunError,
    field_columns,
    nonfinite,
    read_surface,
    require_finite_points,
    require_names,
)
from domino_pipeline.inputs.vtk_xml_stream import VtkXmlFile

SurfaceBlock = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
CellsObserver = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


@dataclass
class SurfaceStream:
    """The cells of a run's boundary surface: ``n_cells`` and ``blocks(cells)``."""

    path: Path
    variables: Mapping[str, str]
    n_cells: int
    file: VtkXmlFile | None = None  # None: read whole with VTK

    def blocks(self, cells: int, on_cells: CellsObserver | None = None) -> Iterator[SurfaceBlock]:
        """(centres (n, 3), unit normals (n, 3), areas (n,), raw fields (n, F)), float32, of
        ``cells`` cells at a time, in file order. ``on_cells(points, begins, ends, ids, centres,
        normals, areas)`` is shown each block's polygons (their point ids are ``ids[begins[i]:ends[i]]``)
        with their geometry, as for cell_quality.CellQuality.add; not when the file is read whole."""
        if self.file is None:
            whole = read_surface(self.path, self.variables)
            for start in range(0, self.n_cells, cells):
                yield tuple(whole[name][start:start + cells] for name in SURFACE_ARRAYS)
            return
        yield from mesh_stream.read_errors_named(self._read_blocks(self.file, cells, on_cells), self.path)

    def _read_blocks(self, file: VtkXmlFile, cells: int, on_cells: CellsObserver | None) -> Iterator[SurfaceBlock]:
        with tempfile.TemporaryDirectory(prefix="surface_points_") as tmp:
            points = mesh_stream.points_table(file, Path(tmp), cells)
            require_finite_points(sum(nonfinite(points[start:start + cells])
                                      for start in range(0, len(points), cells)), self.path)
            for start in range(0, self.n_cells, cells):
                stop = min(start + cells, self.n_cells)
                data = {name: file.read("CellData", name, start, stop) for name in self.variables}
                fields = field_columns(data, self.variables, self.path, "cell")
                begins, ends, ids = mesh_stream.cell_vertices(file, "Polys", start, stop, len(points))
                try:
                    geometry = surface_geometry(points, begins, ends, ids)
                except CellGeometryError as err:
                    raise RunError(f"{self.path}: {err} among cells {start}..{stop}") from err
                if on_cells is not None:
                    on_cells(points, begins, ends, ids, *geometry)
                yield (*geometry, fields)


def open_surface(path: Path, variables: Mapping[str, str]) -> SurfaceStream:
    """The boundary surface of ``path`` (a VTP) as blocks of cells with the fields ``variables``.

    RunError naming the file for a missing field or an empty file, CellGeometryError for triangle
    strips; a file that cannot be read by cells falls back to VTK with a WholeFileFallback warning.
    """
    file = mesh_stream.open_rows(path)
    require_no_strips(file.piece_counts.get("NumberOfStrips", 0), path)
    require_names(file.names("CellData"), variables, path, "cell")
    mesh_stream.require_rows(file, path, file.n_cells)
    reason = _unstreamable(file)
    if reason:
        mesh_stream.fall_back_to_vtk(file, path, reason)
        return SurfaceStream(Path(path), dict(variables), file.n_cells, None)
    return SurfaceStream(Path(path), dict(variables), file.n_cells, file)


def _unstreamable(file: VtkXmlFile) -> str:
    """Why ``file`` cannot be read by cells ("" when it can)."""
    if file.kind != "PolyData":
        return f"it is {file.kind}, not PolyData"
    if not file.streamable:
        return "its data is inline ascii, which cannot be read by rows"
    other = [kind for section, kind in (("Verts", "vertex"), ("Lines", "line"))
             if file.piece_counts.get(f"NumberOf{section}", 0)]
    if other:
        return f"it has {' and '.join(other)} cells besides polygons, which are not read by cells"
    return ""
