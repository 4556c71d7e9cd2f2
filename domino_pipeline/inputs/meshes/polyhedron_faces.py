"""The faces of a VTU's polyhedron cells, read a block of cells at a time, from either layout VTK
writes (docs/raw_inputs.md, "The meshes by rows")."""

from __future__ import annotations

import numpy as np

from domino_pipeline.inputs.meshes.cell_geometry import CellGeometryError, Faces
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile

LEGACY = ("faces", "faceoffsets")
CURRENT = ("face_connectivity", "face_offsets", "polyhedron_to_faces", "polyhedron_offsets")
_SCAN_ROWS = 1 << 20  # faceoffsets rows read at a time when looking back for a record's start


class PolyhedronFaces:
    """Range reads of a VTU's polyhedron faces, in whichever layout it has."""

    def __init__(self, file: VtkXmlFile, layout: tuple[str, ...]) -> None:
        self.file, self.layout = file, layout
        self._known_end = (0, 0)  # (cell, where the record of the first polyhedron from it starts)

    @classmethod
    def open(cls, file: VtkXmlFile) -> PolyhedronFaces | None:
        """The faces of ``file``'s polyhedra, None when it has no face arrays."""
        layout = cls.array_names(file)
        return cls(file, layout) if layout else None

    @staticmethod
    def array_names(file: VtkXmlFile) -> tuple[str, ...]:
        """The Cells arrays of the face layout ``file`` has (CURRENT, else LEGACY, else none)."""
        names = set(file.names("Cells"))
        return next((layout for layout in (CURRENT, LEGACY) if names.issuperset(layout)), ())

    def _read(self, name: str, start: int, stop: int) -> np.ndarray:
        return self.file.read("Cells", name, start, stop)[:, 0].astype(np.int64)

    def read(self, start: int, stop: int) -> Faces | None:
        """The faces of cells ``start:stop`` (None: no faces); CellGeometryError for a malformed record."""
        return self._legacy(start, stop) if self.layout == LEGACY else self._current(start, stop)

    def _current(self, start: int, stop: int) -> Faces | None:
        ends = self._read("polyhedron_offsets", start, stop)
        first = int(self._read("polyhedron_offsets", start - 1, start)[0]) if start else 0
        if int(ends[-1]) == first:
            return None
        face_ids = self._read("polyhedron_to_faces", first, int(ends[-1]))
        cell = np.repeat(np.arange(stop - start), np.diff(ends, prepend=first))
        low, high = int(face_ids.min()), int(face_ids.max()) + 1
        face_ends = self._read("face_offsets", low, high)
        begin = int(self._read("face_offsets", low - 1, low)[0]) if low else 0
        face_begins = np.concatenate([[begin], face_ends[:-1]])
        ids = self._read("face_connectivity", begin, int(face_ends[-1]))
        return Faces(cell, face_begins[face_ids - low] - begin, face_ends[face_ids - low] - begin, ids)

    def _legacy(self, start: int, stop: int) -> Faces | None:
        ends = self._read("faceoffsets", start, stop)
        first = self._record_start(start)
        polyhedra = np.flatnonzero(ends >= 0)
        if polyhedra.size:
            self._known_end = (stop, int(ends[polyhedra[-1]]))
        else:
            self._known_end = (stop, first)
            return None
        record_ends = ends[polyhedra] - first
        stream = self._read("faces", first, int(ends[polyhedra[-1]]))
        record_starts = np.concatenate([[0], record_ends[:-1]])
        if np.any(record_ends <= record_starts):
            raise CellGeometryError("faceoffsets that do not increase")
        return _parse_records(stream, polyhedra, record_starts, record_ends)

    def _record_start(self, start: int) -> int:
        """Where in ``faces`` the record of the first polyhedron from cell ``start`` begins."""
        if self._known_end[0] == start:
            return self._known_end[1]
        stop = start
        while stop > 0:
            low = max(0, stop - _SCAN_ROWS)
            before = np.flatnonzero(self._read("faceoffsets", low, stop) >= 0)
            if before.size:
                return int(self._read("faceoffsets", low + before[-1], low + before[-1] + 1)[0])
            stop = low
        return 0


def _parse_records(stream: np.ndarray, cells: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Faces:
    """The faces of records ``stream[starts[i]:ends[i]]`` of ``cells``, every k-th face at a time."""
    n_faces = stream[starts]
    position = starts + 1
    found = []  # (cell, face number, begin, end) per face
    for k in range(int(n_faces.max()) if n_faces.size else 0):
        live = np.flatnonzero(n_faces > k)
        if np.any(position[live] >= ends[live]):
            raise CellGeometryError("a polyhedron record in faces shorter than its face counts")
        begins = position[live] + 1
        face_ends = begins + stream[position[live]]
        if np.any((face_ends <= begins) | (face_ends > ends[live])):
            raise CellGeometryError("a polyhedron face in faces with no points or past its record")
        found.append((cells[live], np.full(live.size, k), begins, face_ends))
        position[live] = face_ends
    if np.any(n_faces < 1) or np.any(position != ends):
        raise CellGeometryError("a polyhedron record in faces whose face counts do not fill it")
    cell, number, begins, face_ends = (np.concatenate(part) for part in zip(*found))
    order = np.lexsort((number, cell))
    return Faces(cell[order], begins[order], face_ends[order], stream)
