"""Read VTK XML files (VTU, VTP; whole or in pieces) a block of rows at a time, in bounded memory:
the header parsed and checked against the data, then any rows of any array decoded from its
byte offset. Inline ascii data is not ``streamable``. docs/raw_inputs.md, "VTK XML files by rows"."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from domino_pipeline.inputs.raw_files.concat_bytes import ConcatBytes, file_pieces
from domino_pipeline.inputs.vtk.array_data import ArrayData, VtkXmlError
from domino_pipeline.inputs.vtk.xml_header import CELL_SECTIONS, ArrayEntry, VtkXmlHeader

__all__ = ["ArrayEntry", "VtkXmlError", "VtkXmlFile"]


class VtkXmlFile(VtkXmlHeader):
    """A VTK XML unstructured grid or polydata file: its header, checked against its data, and row reads."""

    def __init__(self, source: ConcatBytes, path: Path) -> None:
        self._data: dict[tuple[str, str], ArrayData] = {}
        try:
            super().__init__(source, path)
            self._open_arrays()
            self._check_cells()
        except VtkXmlError as err:
            message = str(err).removeprefix(f"{path}: ")  # in printable ASCII: no byte of the file echoed
            message = "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in message)
            raise VtkXmlError(f"{path}: {message}") from None

    @classmethod
    def open(cls, path: Path) -> "VtkXmlFile":
        """Open ``path`` or its pieces as one stream (remote: ``VtkXmlFile(RemoteBytes(...), file)``)."""
        path = Path(path)
        return cls(ConcatBytes(file_pieces(path)), path)

    def _open_arrays(self) -> None:
        """Check every array's header against the file and the piece's counts, last appended first."""
        self._check_last_appended()
        order = sorted(self.arrays.values(), key=lambda e: e.section != "Points")
        for entry in order:
            if entry.data_format != "ascii":
                self._data[(entry.section, entry.name)] = self._array_data(entry)
                self._check_rows(entry)
        points = self.arrays.get(("Points", "Points"))
        if points is not None and points.components != 3:
            raise VtkXmlError(f"Points data has {points.components} components, expected 3")

    def _array_data(self, entry: ArrayEntry) -> ArrayData:
        """``entry``'s data, header checked; inline text must hold exactly the bytes it describes."""
        inline = entry.data_format == "binary"
        encoded = inline or self.appended_encoding == "base64"
        data = ArrayData(self.source, entry.position, entry.limit, encoded, self.header_dtype,
                         self.compressor, entry.label, "its inline text" if inline else "the appended data")
        if inline and self.skip_space(data.end, entry.limit) != entry.limit:
            raise VtkXmlError(f"{entry.label}: its inline text is {entry.limit - entry.position} bytes "
                              f"long, its header describes {data.end - entry.position}")
        return data

    def _check_last_appended(self) -> None:
        """The appended data's length against its last array: a file cut short shows here."""
        appended = [e for e in self.arrays.values() if e.data_format == "appended"]
        for entry in appended:
            if entry.position > entry.limit:
                raise VtkXmlError(f"{entry.label}: its appended offset {entry.position - self.appended_start} "
                                  f"lies past the end of the {entry.limit - self.appended_start} bytes of "
                                  f"appended data")
        if not appended or self.compressor:
            return
        last = max(appended, key=lambda e: e.position)
        expected = self.expected_rows(last)
        if expected is None:
            return
        count, rows = expected
        raw = self.header_dtype.itemsize + rows * last.row_bytes
        end = last.position + (4 * -(-raw // 3) if self.appended_encoding == "base64" else raw)
        if end > last.limit:
            cut = "a piece of the file" if self.in_pieces else "the file"
            raise VtkXmlError(f"{count} {rows * last.row_bytes} bytes of {last.label}, the last array of "
                              f"the appended data, which would end at {self.source.where(end)}, past the end "
                              f"of the appended data at {self.source.where(last.limit)}: {cut} is truncated, "
                              f"or a count is wrong")

    def _check_rows(self, entry: ArrayEntry) -> None:
        """``entry``'s decoded bytes against the rows the piece's counts give it, and its rows."""
        have = self._data[(entry.section, entry.name)].n_bytes
        expected = self.expected_rows(entry)
        if expected is not None and expected[1] * entry.row_bytes != have:
            count, rows = expected
            raise VtkXmlError(f"{count} {rows * entry.row_bytes} bytes of {entry.label}, the array holds {have}")
        if have % entry.row_bytes:
            raise VtkXmlError(f"{entry.label} holds {have} bytes, not a whole number of its "
                              f"{entry.row_bytes}-byte rows ({entry.components} x {entry.dtype.name})")

    def _check_cells(self) -> None:
        """The first and last cell offsets of each cell section against its connectivity."""
        for section in CELL_SECTIONS:
            keys = [(section, "offsets"), (section, "connectivity")]
            if not all(key in self._data for key in keys):
                continue
            cells, ids = (self.rows(*key) for key in keys)
            if cells == 0:
                continue
            first, last = (int(self.read(section, "offsets", k, k + 1)[0, 0]) for k in (0, cells - 1))
            if first < 0 or last < first:
                raise VtkXmlError(f"{section} offsets run from {first} to {last}: they do not rise from 0")
            if last > ids:
                raise VtkXmlError(f"the last of the {section} offsets is {last}, past the {ids} entries "
                                  f"of {section} connectivity")

    def rows(self, section: str, name: str) -> int:
        """The number of rows (tuples) of an array, from the piece's counts."""
        entry = self.entry(section, name)
        if section in ("Points", "PointData"):
            return self.n_points
        if section == "CellData":
            return self.n_cells
        return self._array(entry).n_bytes // entry.row_bytes

    def read(self, section: str, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of an array as a native-order (rows, components) array."""
        entry = self.entry(section, name)
        data = self._array(entry)
        if not 0 <= start <= stop <= data.n_bytes // entry.row_bytes:
            raise VtkXmlError(f"{self.path}: rows {start}..{stop} of {entry.label}, which has "
                              f"{data.n_bytes // entry.row_bytes}")
        raw = data.read(start * entry.row_bytes, stop * entry.row_bytes)
        values = np.frombuffer(raw, dtype=entry.dtype).reshape(stop - start, entry.components)
        return values.astype(entry.dtype.newbyteorder("="), copy=False)

    def _array(self, entry: ArrayEntry) -> ArrayData:
        key = (entry.section, entry.name)
        if key not in self._data:
            raise VtkXmlError(f"{self.path}: {entry.label} is inline ascii, which cannot be read by rows")
        return self._data[key]

    def array_data(self, section: str, name: str) -> ArrayData:
        """The data of an array (VtkXmlError when it is inline ascii)."""
        return self._array(self.entry(section, name))

    def use_staged(self, section: str, name: str, data) -> None:
        """Read the array from ``data`` (array_staging.StagedArray: the same decoded bytes) from now on."""
        self._data[(section, name)] = data

    def whole_file_bytes(self) -> int:
        """About how many bytes VTK's reader holds to read this file whole (its decoded arrays)."""
        rows = {"Points": self.n_points, "PointData": self.n_points, "CellData": self.n_cells}
        total = sum(entry.row_bytes * rows.get(section, 2 * max(self.n_cells, 1))
                    for (section, _), entry in self.arrays.items())
        return total + self.source.size if not self.streamable else total
