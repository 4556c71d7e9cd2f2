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
from collections.abc import Iterator, Mapping
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


@dataclass
class SurfaceStream:
    """The cells of a run's boundary surface: ``n_cells`` and ``blocks(cells)``."""

    path: Path  # or a remote file (remote_runs.RemoteFile), which names it
    variables: Mapping[str, str]
    n_cells: int
    file: VtkXmlFile | None = None  # None: read whole with VTK

    def blocks(self, cells: int) -> Iterator[SurfaceBlock]:
        """(centres (n, 3), unit normals (n, 3), areas (n,), raw fields (n, F)), float32, of
        ``cells`` cells at a time, in file order."""
        if self.file is None:
            whole = read_surface(self.path, self.variables)
            for start in range(0, self.n_cells, cells):
                yield tuple(whole[name][start:start + cells] for name in SURFACE_ARRAYS)
            return
        yield from mesh_stream.read_errors_named(self._read_blocks(self.file, cells), self.path)

    def _read_blocks(self, file: VtkXmlFile, cells: int) -> Iterator[SurfaceBlock]:
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
                yield (*geometry, fields)


def open_surface(path, variables: Mapping[str, str], file: VtkXmlFile | None = None) -> SurfaceStream:
    """The boundary surface of ``path`` (a VTP) as blocks of cells with the fields ``variables``;
    ``file``: its header opened already (a remote file's, named by ``path``).

    RunError naming the file for a missing field or an empty file, CellGeometryError for triangle
    strips; a file that cannot be read by cells falls back to VTK with a WholeFileFallback warning.
    """
    file = mesh_stream.open_rows(path) if file is None else file
    require_no_strips(file.piece_counts.get("NumberOfStrips", 0), path)
    require_names(file.names("CellData"), variables, path, "cell")
    mesh_stream.require_rows(file, path, file.n_cells)
    reason = _unstreamable(file)
    if reason:
        mesh_stream.fall_back_to_vtk(file, path, reason)
        return SurfaceStream(Path(path), dict(variables), file.n_cells, None)
    mesh_stream.prepare_rows(file, surface_arrays(variables))
    return SurfaceStream(path, dict(variables), file.n_cells, file)


def surface_arrays(variables: Mapping[str, str]) -> list[tuple[str, str]]:
    """The arrays (section, name) that the blocks of a surface with the fields ``variables`` read."""
    return [("Points", "Points"), ("Polys", "offsets"), ("Polys", "connectivity"),
            *(("CellData", name) for name in variables)]


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
