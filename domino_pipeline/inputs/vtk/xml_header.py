"""The header of a VTK XML file (VTU, VTP), parsed from its tags: the piece's counts, and for
each DataArray its type, components, encoding and the span of the stream its bytes may occupy.

The tags come from vtk_xml_tags.py (any XML style); here they must stand where VTK puts them
(a VTKFile holding one UnstructuredGrid or PolyData, one Piece, DataArrays inside PointData,
CellData, Points, Cells, ...), every attribute this reader uses must be valid (a type, a Name,
NumberOfComponents of at least 1, counts and offsets that are non-negative integers), and a
file with appended data must end with ``</AppendedData></VTKFile>`` (or it is truncated). The
arrays' data is not read here: vtk_xml_stream.py checks it against these counts and spans.

    header = VtkXmlHeader(ConcatBytes([path]), path)
    header.n_points, header.entry("PointData", "p").position
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.sources.concat_bytes import ConcatBytes
from domino_pipeline.inputs.vtk.array_data import COMPRESSORS, ArrayData
from domino_pipeline.inputs.vtk.xml_tags import Tag, TagScanner, VtkXmlError

_TYPES = {"Int8": "i1", "UInt8": "u1", "Int16": "i2", "UInt16": "u2", "Int32": "i4",
          "UInt32": "u4", "Int64": "i8", "UInt64": "u8", "Float32": "f4", "Float64": "f8"}
_SECTIONS = ("PointData", "CellData", "Points", "Cells", "Verts", "Lines", "Strips", "Polys",
             "FieldData")
_SKIPPED_TYPES = ("String", "Bit")
_KINDS = ("UnstructuredGrid", "PolyData")
CELL_SECTIONS = ("Cells", "Verts", "Lines", "Strips", "Polys")
_POLY_COUNTS = ("NumberOfVerts", "NumberOfLines", "NumberOfStrips", "NumberOfPolys")
_TAIL = 1 << 16  # bytes at the end of a file searched for its closing tags
_CLOSING = re.compile(rb"</AppendedData\s*>\s*</VTKFile\s*>\s*\Z")


@dataclass(frozen=True)
class ArrayEntry:
    """Where one DataArray's encoded bytes start and may end, and how they are encoded."""

    section: str
    name: str
    dtype: np.dtype
    components: int
    data_format: str  # "appended", "binary" or "ascii"
    position: int  # absolute byte position of the array's (encoded) header in the stream
    limit: int  # the stream position its encoded bytes may not pass
    tuples: int | None  # FieldData's NumberOfTuples

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (tuple) of decoded data."""
        return self.dtype.itemsize * self.components

    @property
    def label(self) -> str:
        """The array in words, for messages: ``Points data``, ``PointData array p``."""
        return "Points data" if self.section == "Points" else f"{self.section} array {self.name}"


def _integer(attrs: dict[str, str], key: str, where: str, smallest: int = 0,
             default: int | None = None) -> int:
    """Attribute ``key`` as an integer >= ``smallest``; VtkXmlError naming ``where`` otherwise."""
    if key not in attrs:
        if default is None:
            raise VtkXmlError(f"{where} has no {key}")
        return default
    try:
        value = int(attrs[key].strip())
    except ValueError:
        raise VtkXmlError(f"{where}: {key}={attrs[key]!r} is not an integer") from None
    if value < smallest:
        raise VtkXmlError(f"{where}: {key} {value} is {'negative' if smallest == 0 else f'below {smallest}'}")
    return value


class VtkXmlHeader:
    """The parsed header of a VTK XML unstructured grid or polydata file (``path``, read from
    ``source``): its kind, byte order, header integer type, compressor, piece counts and arrays."""

    def __init__(self, source: ConcatBytes, path: Path) -> None:
        self.source, self.path = source, path
        self.arrays: dict[tuple[str, str], ArrayEntry] = {}
        self.kind = ""
        self.n_points = self.n_cells = 0
        self.piece_counts: dict[str, int] = {}
        self.byte_order = "<"
        self.header_dtype = np.dtype("<u4")
        self.compressor = ""
        self.appended_encoding = "raw"
        self.appended_start = 0
        scanner = TagScanner(self.source, stop="AppendedData")
        parser = _HeaderParser(self, scanner)
        for tag in scanner:
            parser.take(tag)
        parser.finish()

    def file_attrs(self, attrs: dict[str, str]) -> None:
        """Take the VTKFile tag's byte order, header type and compressor."""
        order = attrs.get("byte_order", "LittleEndian")
        if order not in ("LittleEndian", "BigEndian"):
            raise VtkXmlError(f"VTKFile byte_order {order!r}, expected LittleEndian or BigEndian")
        self.byte_order = ">" if order == "BigEndian" else "<"
        header = attrs.get("header_type", "UInt32")
        if header not in ("UInt32", "UInt64"):
            raise VtkXmlError(f"VTKFile header_type {header}, expected UInt32 or UInt64")
        self.header_dtype = np.dtype(_TYPES[header]).newbyteorder(self.byte_order)
        self.compressor = attrs.get("compressor", "")
        if self.compressor and self.compressor not in COMPRESSORS:
            raise VtkXmlError(f"VTKFile compressor {self.compressor}, expected one of {list(COMPRESSORS)}")

    def piece(self, attrs: dict[str, str]) -> None:
        """Take a Piece tag's counts (NumberOfPoints, NumberOfCells or NumberOfPolys, ...)."""
        required = ["NumberOfPoints"] + (["NumberOfCells"] if self.kind == "UnstructuredGrid" else [])
        names = required + ([] if self.kind == "UnstructuredGrid" else list(_POLY_COUNTS))
        self.piece_counts = {k: _integer(attrs, k, "Piece", default=None if k in required else 0)
                             for k in names}
        self.n_points = self.piece_counts["NumberOfPoints"]
        self.n_cells = sum(v for k, v in self.piece_counts.items() if k != "NumberOfPoints")

    def data_array(self, attrs: dict[str, str], section: str, position: int) -> ArrayEntry | None:
        """The entry of a DataArray tag in ``section``; an appended array's ``position`` is its
        offset until the appended data's start is known. None for an array this reader skips:
        String and Bit arrays (which hold no rows of numbers), Points arrays after the first."""
        # VTK takes the first Points array, whatever its Name (or none: "Position" is common)
        name = "Points" if section == "Points" else attrs.get("Name")
        where = f"a {section} DataArray" + (f" named {name}" if name else "")
        if name is None:
            raise VtkXmlError(f"{where} has no Name")
        if attrs.get("type") in _SKIPPED_TYPES or (section == "Points" and (section, name) in self.arrays):
            return None
        if attrs.get("type") not in _TYPES:
            found = f"type {attrs['type']!r}" if "type" in attrs else "no type"
            raise VtkXmlError(f"{where} has {found}, expected one of {list(_TYPES)}")
        data_format = attrs.get("format", "ascii")
        if data_format not in ("appended", "binary", "ascii"):
            raise VtkXmlError(f"{where} has format {data_format!r}, expected appended, binary or ascii")
        if data_format == "appended":
            position = _integer(attrs, "offset", where)
        entry = ArrayEntry(section, name, np.dtype(_TYPES[attrs["type"]]).newbyteorder(self.byte_order),
                           _integer(attrs, "NumberOfComponents", where, smallest=1, default=1),
                           data_format, position, position,
                           _integer(attrs, "NumberOfTuples", where) if "NumberOfTuples" in attrs else None)
        if (section, name) in self.arrays:
            raise VtkXmlError(f"two {section} arrays are named {name}")
        self.arrays[(section, name)] = entry
        return entry

    def placed(self, entry: ArrayEntry, position: int, limit: int) -> None:
        """Record where ``entry``'s encoded bytes start and the stream position they may not pass."""
        self.arrays[(entry.section, entry.name)] = ArrayEntry(
            entry.section, entry.name, entry.dtype, entry.components, entry.data_format,
            position, limit, entry.tuples)

    def appended_span(self, tag: Tag) -> tuple[int, int, str]:
        """(start, end, encoding) of the appended data that follows ``tag``: from after its '_'
        marker to the closing ``</AppendedData>`` at the end of the file."""
        encoding = tag.attrs.get("encoding", "raw")
        if encoding not in ("raw", "base64"):
            raise VtkXmlError(f"AppendedData encoding {encoding!r}, expected raw or base64")
        start = self.skip_space(tag.end, self.source.size)
        if self.source.read(start, 1) != b"_":
            raise VtkXmlError(f"AppendedData without its '_' marker at {self.source.where(start)}")
        return start + 1, self._appended_end(start + 1), encoding

    def _appended_end(self, start: int) -> int:
        tail_at = max(start, self.source.size - _TAIL)
        closing = _CLOSING.search(self.source.read(tail_at, self.source.size - tail_at))
        if closing is None:
            piece = f" (or its last piece, {self.source.paths[-1].name})" if self.in_pieces else ""
            raise VtkXmlError(f"the file{piece} is truncated: it does not end with </AppendedData> and </VTKFile>")
        return tail_at + closing.start()

    def skip_space(self, position: int, limit: int) -> int:
        """The first position from ``position`` (up to ``limit``) that is not whitespace."""
        while position < limit:
            head = self.source.read(position, min(4096, limit - position))
            stripped = head.lstrip()
            position += len(head) - len(stripped)
            if stripped or not head:
                break
        return position

    @property
    def in_pieces(self) -> bool:
        """True when the file is read from pieces, not from one file of its own name."""
        return len(self.source.paths) > 1 or self.source.paths[0].name != self.path.name

    def expected_rows(self, entry: ArrayEntry) -> tuple[str, int] | None:
        """(the count that fixes ``entry``'s rows, in words, and its value); None when none does."""
        if entry.section in ("Points", "PointData"):
            return f"NumberOfPoints {self.n_points} needs", self.n_points
        if entry.section == "CellData":
            if self.kind == "UnstructuredGrid":
                return f"NumberOfCells {self.n_cells} needs", self.n_cells
            return f"{self.n_cells} cells (NumberOfVerts + Lines + Strips + Polys) need", self.n_cells
        if entry.section in CELL_SECTIONS and entry.name in ("offsets", "types"):
            key = "NumberOfCells" if entry.section == "Cells" else f"NumberOf{entry.section}"
            return f"{key} {self.piece_counts.get(key, 0)} needs", self.piece_counts.get(key, 0)
        if entry.section == "FieldData" and entry.tuples is not None:
            return f"NumberOfTuples {entry.tuples} needs", entry.tuples
        return None

    @property
    def streamable(self) -> bool:
        """True when every array can be read by rows (no inline ascii data)."""
        return all(entry.data_format != "ascii" for entry in self.arrays.values())

    def entry(self, section: str, name: str) -> ArrayEntry:
        """The header entry of an array; VtkXmlError naming the file when there is none."""
        if (section, name) not in self.arrays:
            names = sorted(n for s, n in self.arrays if s == section)
            raise VtkXmlError(f"{self.path}: no {section} array {name} (has {names})")
        return self.arrays[(section, name)]

    def names(self, section: str) -> list[str]:
        """The array names of a section (PointData, CellData, ...), in file order."""
        return [n for s, n in self.arrays if s == section]


class _HeaderParser:
    """The header's tags taken in order into a VtkXmlHeader: where each element may stand, the
    arrays of each section, where inline arrays end and where the appended data lies."""

    def __init__(self, file: VtkXmlHeader, scanner: TagScanner) -> None:
        self.file, self.scanner = file, scanner
        self.open: list[str] = []
        self.pieces = 0
        self.inline: ArrayEntry | None = None  # an inline array whose text ends at the next tag
        self.appended: tuple[int, int, str] | None = None
        self.file_type: str | None = None  # the VTKFile tag's type

    def take(self, tag: Tag) -> None:
        """Take the next tag of the header."""
        if self.inline is not None:
            start = self.file.skip_space(self.inline.position, tag.text_stop)
            self.file.placed(self.inline, start, tag.text_stop)
            self.inline = None
        if tag.closing:
            self.open.pop()
            return
        self._start(tag)
        if not tag.empty:
            self.open.append(tag.name)

    def _start(self, tag: Tag) -> None:
        parent = self.open[-1] if self.open else None
        if parent is None:
            if tag.name != "VTKFile":
                raise VtkXmlError(f"not a VTK XML file: its first element is <{tag.name}>, not <VTKFile>")
            self.file.file_attrs(tag.attrs)
            self.file_type = tag.attrs.get("type")
        elif parent == "VTKFile" and tag.name != "AppendedData":
            self._dataset(tag)
        elif tag.name == "Piece":
            self._inside(tag, parent, (self.file.kind,))
            self.pieces += 1
            self.file.piece(tag.attrs)
        elif tag.name in _SECTIONS:
            self._inside(tag, parent, ("Piece",) + (self.file.kind,) * (tag.name == "FieldData"))
        elif tag.name == "DataArray":
            self._inside(tag, parent, _SECTIONS)
            self._data_array(tag, parent)
        elif tag.name == "AppendedData":
            self._inside(tag, parent, ("VTKFile",))
            self.appended = self.file.appended_span(tag)

    def _inside(self, tag: Tag, parent: str, allowed: tuple[str, ...]) -> None:
        if parent not in allowed:
            raise VtkXmlError(f"<{tag.name}> at byte {tag.start} inside <{parent}>, expected inside "
                              f"{' or '.join(f'<{a}>' for a in allowed)}")

    def _dataset(self, tag: Tag) -> None:
        if tag.name not in _KINDS or self.file.kind:
            what = "a second dataset" if self.file.kind else "not a VTK XML UnstructuredGrid or PolyData file"
            raise VtkXmlError(f"{what} (it holds <{tag.name}>)")
        declared = self.file_type
        if declared is not None and declared != tag.name:
            raise VtkXmlError(f"VTKFile type {declared} holds <{tag.name}>")
        self.file.kind = tag.name

    def _data_array(self, tag: Tag, section: str) -> None:
        entry = self.file.data_array(tag.attrs, section, tag.end)
        if entry is None:
            return
        if entry.data_format != "appended" and not tag.empty:
            self.inline = entry
            if entry.data_format == "binary":
                self._skip_inline(entry, tag)
        elif entry.data_format != "appended":
            self.file.placed(entry, tag.end, tag.end)

    def _skip_inline(self, entry: ArrayEntry, tag: Tag) -> None:
        """Let the scan skip the inline binary text of ``entry`` unread, to where its own header
        says it ends (a DrivAerML volume is gigabytes of it); a header that cannot say leaves
        the text to be scanned, and checked against the header later."""
        source = self.file.source
        start = self.file.skip_space(tag.end, source.size)
        try:
            data = ArrayData(source, start, source.size, True, self.file.header_dtype,
                             self.file.compressor, entry.label)
        except VtkXmlError:
            return
        self.scanner.skip_to(data.end)

    def finish(self) -> None:
        """Check what the whole header holds; place the appended arrays in the appended data."""
        if self.file.kind not in _KINDS:
            raise VtkXmlError("not a VTK XML UnstructuredGrid or PolyData file")
        if self.pieces != 1:
            raise VtkXmlError(f"{self.pieces} pieces; this reader reads single-piece files")
        for entry in list(self.file.arrays.values()):
            if entry.data_format != "appended":
                continue
            if self.appended is None:
                raise VtkXmlError(f"{entry.label} is appended but there is no AppendedData")
            start, end, _ = self.appended
            self.file.placed(entry, start + entry.position, end)
        if self.appended:
            self.file.appended_start, _, self.file.appended_encoding = self.appended
