"""A run's volume VTU as blocks of rows (positions and raw fields), in bounded memory.

Rows are the VTU's points with point data, or its cells' centres with cell data (VTK's
parametric centre: a fixed weighting of each cell type's vertices, taken from VTK's cells), in
file order, as ``drivaerml_reader.read_volume`` reads them whole with VTK. A file this reader
cannot read by rows (inline ascii data, other cell types when centres are asked for) is read
whole with VTK instead, after a warning naming the memory that takes.

    volume = open_volume(files.volume, {"UMeanTrim": "vector", "pMeanTrim": "scalar"}, "points")
    for centres, fields in volume.blocks(1 << 21):
        ...
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vtkmodules.vtkCommonDataModel import (
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

from domino_pipeline.inputs.drivaerml_reader import (
    VOLUME_SOURCES,
    RunError,
    field_columns,
    nonfinite,
    read_volume,
    require_finite_points,
    volume_source_used,
)
from domino_pipeline.inputs.mesh_stream import (  # noqa: F401 (WholeFileFallback: re-exported)
    WholeFileFallback,
    cell_vertices,
    fall_back_to_vtk,
    open_rows,
    points_table,
    read_errors_named,
    require_rows,
)
from domino_pipeline.inputs.vtk_xml_stream import VtkXmlFile

# VTK's fixed-size linear cells (vertex, line, triangle, pixel, quad, tetra, voxel, hexahedron,
# wedge, pyramid), whose centres are read by rows
_CELLS = {1: vtkVertex, 3: vtkLine, 5: vtkTriangle, 8: vtkPixel, 9: vtkQuad, 10: vtkTetra,
          11: vtkVoxel, 12: vtkHexahedron, 13: vtkWedge, 14: vtkPyramid}
_SECTION = {"points": "PointData", "cells": "CellData"}


@dataclass
class VolumeStream:
    """The rows of a run's volume: ``n_rows`` and ``blocks(rows)``; ``source`` is the one used."""

    path: Path
    variables: Mapping[str, str]
    source: str
    n_rows: int
    notes: list[str] = field(default_factory=list)
    file: VtkXmlFile | None = None  # None: read whole with VTK
    _whole: dict[str, np.ndarray] | None = None

    def blocks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions (n, 3) float32, raw fields (n, F) float32) of ``rows`` rows at a time."""
        if self.file is None:
            yield from _whole_blocks(self, rows)
            return
        yield from read_errors_named(self._read_blocks(self.file, rows), self.path)

    def _read_blocks(self, file: VtkXmlFile, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        section = _SECTION[self.source]
        with tempfile.TemporaryDirectory(prefix="volume_points_") as tmp:
            points = None if self.source == "points" else points_table(file, Path(tmp), rows)
            for start in range(0, self.n_rows, rows):
                stop = min(start + rows, self.n_rows)
                data = {name: file.read(section, name, start, stop) for name in self.variables}
                fields = field_columns(data, self.variables, self.path, self.source[:-1])
                if points is None:
                    centres = file.read("Points", "Points", start, stop)
                else:
                    centres = cell_centres(file, points, start, stop)
                centres = np.asarray(centres, dtype=np.float32)
                require_finite_points(nonfinite(centres), self.path)
                yield centres, fields


def _whole_blocks(volume: VolumeStream, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    whole = volume._whole
    if whole is None:
        whole, _, _ = read_volume(volume.path, volume.variables, volume.source)
    for start in range(0, len(whole["volume_mesh_centers"]), rows):
        yield (whole["volume_mesh_centers"][start:start + rows],
               whole["volume_fields"][start:start + rows])


def open_volume(path: Path, variables: Mapping[str, str], source: str) -> VolumeStream:
    """The volume of ``path`` (a VTU or its ``.part`` pieces) as rows of ``source``.

    When a requested field is not ``source`` data but all are the other one's, the other is used
    and a note says so (as ``read_volume``). A file that cannot be streamed falls back to VTK
    with a WholeFileFallback warning.
    """
    file = open_rows(path)
    available = {s: file.names(_SECTION[s]) for s in VOLUME_SOURCES}
    source, notes = volume_source_used(available, variables, source, path)
    n_rows = file.n_points if source == "points" else file.n_cells
    require_rows(file, path, n_rows)
    reason = _unstreamable(file, source)
    if reason:
        fall_back_to_vtk(file, path, reason)
        return VolumeStream(Path(path), dict(variables), source, n_rows, notes, None)
    return VolumeStream(Path(path), dict(variables), source, n_rows, notes, file)


def _unstreamable(file: VtkXmlFile, source: str) -> str:
    """Why ``file`` cannot be read by rows for ``source`` ("" when it can)."""
    if not file.streamable:
        return "its data is inline ascii, which cannot be read by rows"
    if source == "cells":
        rows, step = file.rows("Cells", "types"), 1 << 24
        for start in range(0, rows, step):
            types = np.unique(file.read("Cells", "types", start, min(start + step, rows)))
            other = sorted(set(types.tolist()) - set(_CELLS))
            if other:
                return f"cell types {other} have no fixed vertex count, so their centres are not read by rows"
    return ""


@functools.cache
def centre_weights(cell_type: int) -> np.ndarray:
    """The weights of a cell type's vertices at its parametric centre, from VTK's own cell
    (the centre VTK's vtkCellCenters computes)."""
    cell = _CELLS[cell_type]()
    centre = [0.0, 0.0, 0.0]
    cell.GetParametricCenter(centre)
    weights = [0.0] * cell.GetNumberOfPoints()
    cell.InterpolateFunctions(centre, weights)
    return np.array(weights)


def cell_centres(file: VtkXmlFile, points: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Centres (float64) of cells ``start:stop``, reading only their connectivity and types."""
    begins, ends, ids = cell_vertices(file, "Cells", start, stop, len(points))
    types = file.read("Cells", "types", start, stop)[:, 0]
    centres = np.empty((stop - start, 3))
    for cell_type in np.unique(types):
        weights = centre_weights(int(cell_type))
        cells = np.flatnonzero(types == cell_type)
        if np.any(ends[cells] - begins[cells] != len(weights)):
            raise RunError(f"{file.path}: cells of type {cell_type} with other than {len(weights)} "
                           f"vertices among cells {start}..{stop}")
        vertex = ids[begins[cells][:, None] + np.arange(len(weights))]
        centres[cells] = np.einsum("k,mkd->md", weights, np.asarray(points[vertex], dtype=np.float64))
    return centres
