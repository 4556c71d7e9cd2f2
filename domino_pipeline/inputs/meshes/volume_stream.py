"""A run's volume VTU as blocks of rows (points with point data, or OpenFOAM cell centres with
cell data; positions and raw fields) in bounded memory. docs/raw_inputs.md, "The meshes by rows"."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.meshes.cell_geometry import (
    CELL_TYPES,
    POLYHEDRON,
    CellBlock,
    CellGeometryError,
    cell_centres,
)
from domino_pipeline.inputs.meshes.mesh_rows import field_columns, nonfinite, require_finite_points, source_arrays
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import VOLUME_SOURCES, read_volume, volume_source_used
from domino_pipeline.inputs.meshes.mesh_stream import (
    cell_types,
    cell_vertices,
    fall_back_to_vtk,
    open_rows,
    points_table,
    prepared_rows,
    read_errors_named,
    require_point_ids,
    require_rows,
)
from domino_pipeline.inputs.meshes.polyhedron_faces import PolyhedronFaces
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile

GEOMETRY_CELLS = 1 << 16  # cells whose connectivity and faces are read at a time
_SECTION = {"points": "PointData", "cells": "CellData"}


@dataclass
class VolumeStream:
    """The rows of a run's volume: ``n_rows`` and ``blocks(rows)``; ``source`` is the one used."""

    path: Path  # or a remote file (remote_files.RemoteFile), which names it
    variables: Mapping[str, str]
    source: str
    n_rows: int
    notes: list[str] = field(default_factory=list)
    file: VtkXmlFile | None = None  # None: read whole with VTK
    arrays: Mapping[str, list[str]] | None = None  # variable -> the arrays it is read from

    def blocks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions (n, 3), raw fields (n, F)), float32, ``rows`` at a time (remote arrays staged)."""
        if self.file is None:
            whole, _, _ = read_volume(self.path, self.variables, self.source, self.arrays)
            for start in range(0, len(whole["volume_mesh_centers"]), rows):
                yield whole["volume_mesh_centers"][start:start + rows], whole["volume_fields"][start:start + rows]
            return
        with prepared_rows(self.file, volume_arrays(self.file, source_arrays(self.variables, self.arrays), self.source)):
            yield from read_errors_named(self._read_blocks(self.file, rows), self.path)

    def _read_blocks(self, file: VtkXmlFile, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        section = _SECTION[self.source]
        with tempfile.TemporaryDirectory(prefix="volume_points_") as tmp:
            points = None if self.source == "points" else points_table(file, Path(tmp), rows)
            faces = None if points is None else PolyhedronFaces.open(file)
            for start in range(0, self.n_rows, rows):
                stop = min(start + rows, self.n_rows)
                data = {name: file.read(section, name, start, stop)
                        for name in source_arrays(self.variables, self.arrays)}
                fields = field_columns(data, self.variables, self.path, self.source[:-1], self.arrays)
                if points is None:
                    centres = file.read("Points", "Points", start, stop)
                else:
                    centres = block_centres(file, points, faces, start, stop)
                centres = np.asarray(centres, dtype=np.float32)
                require_finite_points(nonfinite(centres), self.path)
                yield centres, fields


def open_volume(path, variables: Mapping[str, str], source: str, arrays: Mapping[str, list[str]] | None = None,
                file: VtkXmlFile | None = None) -> VolumeStream:
    """The volume of ``path`` as rows of ``source`` (or of the other, with a note, if only it has every
    field) with the fields ``variables``; a file not readable by rows falls back to VTK."""
    file = open_rows(path) if file is None else file
    available = {s: file.names(_SECTION[s]) for s in VOLUME_SOURCES}
    source, notes = volume_source_used(available, source_arrays(variables, arrays), source, path)
    n_rows = file.n_points if source == "points" else file.n_cells
    require_rows(file, path, n_rows)
    reason = _unstreamable(file, source)
    if reason:
        fall_back_to_vtk(file, path, reason)
        return VolumeStream(Path(path), dict(variables), source, n_rows, notes, None, arrays)
    return VolumeStream(path, dict(variables), source, n_rows, notes, file, arrays)


def volume_arrays(file: VtkXmlFile, names: list[str], source: str) -> list[tuple[str, str]]:
    """The arrays (section, name) the blocks of ``source`` read: ``names`` and the cells' geometry."""
    fields = [(_SECTION[source], name) for name in names]
    if source == "points":
        return [("Points", "Points"), *fields]
    cells = [("Cells", name) for name in ("connectivity", "offsets", "types")]
    faces = [("Cells", name) for name in PolyhedronFaces.array_names(file)]
    return [("Points", "Points"), *cells, *faces, *fields]


def _unstreamable(file: VtkXmlFile, source: str) -> str:
    """Why ``file`` cannot be read by rows for ``source`` (""); RunError for polyhedra without faces."""
    if not file.streamable:
        return "its data is inline ascii, which cannot be read by rows"
    if source == "cells":
        types = cell_types(file)
        other = sorted(types - CELL_TYPES)
        if other:
            return f"cell types {other} are not read by rows"
        if POLYHEDRON in types and PolyhedronFaces.open(file) is None:
            raise RunError(f"{file.path}: polyhedron cells but no faces arrays (faces and faceoffsets, "
                           "or polyhedron_to_faces and face_connectivity)")
    return ""


def block_centres(file: VtkXmlFile, points: np.ndarray, faces: PolyhedronFaces | None,
                  start: int, stop: int) -> np.ndarray:
    """Centres (float64) of cells ``start:stop``, reading only their geometry, by GEOMETRY_CELLS."""
    return np.concatenate([_centres(file, points, faces, a, min(a + GEOMETRY_CELLS, stop))
                           for a in range(start, stop, GEOMETRY_CELLS)])


def _centres(file: VtkXmlFile, points: np.ndarray, faces: PolyhedronFaces | None,
             start: int, stop: int) -> np.ndarray:
    begins, ends, ids = cell_vertices(file, "Cells", start, stop, len(points))
    types = file.read("Cells", "types", start, stop)[:, 0]
    try:
        block_faces = None if faces is None else faces.read(start, stop)
        if block_faces is not None:
            require_point_ids(block_faces.point_ids(), len(points), file.path, "polyhedron faces")
        return cell_centres(points, CellBlock(types, begins, ends, ids, block_faces))
    except CellGeometryError as err:
        raise RunError(f"{file.path}: {err} among cells {start}..{stop}") from err
