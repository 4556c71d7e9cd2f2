"""The header of a VTK XML file (VTU, VTP), read by expat up to the appended data: the piece's
counts, and for each DataArray its type, components, encoding and the span of the stream its
bytes may occupy; xml_stream.py checks the data against them. docs/raw_inputs.md, "VTK XML files by rows"."""

from __future__ import annotations

import re
import xml.parsers.expat
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.raw_files.concat_bytes import ConcatBytes
from domino_pipeline.inputs.vtk.array_data import COMPRESSORS, ArrayData, VtkXmlError

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
_APPENDED = re.compile(rb"<AppendedData[^<>]*>\s*_")  # the tag, up to the appended data's '_' marker
_FIRST_CHUNK, _CHUNK = 1 << 16, 1 << 24  # bytes fed to expat at first (a header), at most (inline data)


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
    """The parsed header of a VTK XML unstructured grid or polydata file: kind, encoding, counts, arrays."""

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
        parser = _HeaderParser(self)
        parser.read()
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

    def data_array(self, attrs: dict[str, str], section: str) -> ArrayEntry | None:
        """The entry of a DataArray tag; None for String, Bit and second Points arrays."""
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
        position = _integer(attrs, "offset", where) if data_format == "appended" else 0
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
        self.arrays[(entry.section, entry.name)] = replace(entry, position=position, limit=limit)

    def appended_attrs(self, attrs: dict[str, str]) -> None:
        """Take the AppendedData tag's encoding, raw or base64."""
        self.appended_encoding = attrs.get("encoding", "raw")
        if self.appended_encoding not in ("raw", "base64"):
            raise VtkXmlError(f"AppendedData encoding {self.appended_encoding!r}, expected raw or base64")

    def appended_end(self, start: int) -> int:
        """Where the appended data from ``start`` ends: at the ``</AppendedData>`` closing the file."""
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
    """The header's elements, as expat reports them, taken into a VtkXmlHeader and checked."""

    def __init__(self, file: VtkXmlHeader) -> None:
        self.file = file
        self.open: list[str] = []
        self.pieces = 0
        self.inline: ArrayEntry | None = None  # an inline array whose text ends at the next markup
        self.text_at: int | None = None  # where its text's first non-space byte lies
        self.skip_to: int | None = None  # where that text ends, by the array's own header
        self.appended_at: int | None = None  # where the AppendedData tag starts
        self.appended: tuple[int, int] | None = None  # where the appended data starts and ends
        self.file_type: str | None = None  # the VTKFile tag's type
        self.shift = 0  # bytes of the stream not fed to expat, before the position it is at
        self.expat = xml.parsers.expat.ParserCreate()
        self.expat.StartElementHandler, self.expat.EndElementHandler = self._start, self._end
        self.expat.CommentHandler = self.expat.ProcessingInstructionHandler = self._markup
        self.expat.StartDoctypeDeclHandler = self._doctype

    @property
    def at(self) -> int:
        """The stream position of the event expat reports."""
        return self.expat.CurrentByteIndex + self.shift

    def read(self) -> None:
        """Feed the header to expat, chunk after chunk, up to the AppendedData tag or the end."""
        source, position, chunk, last_tag = self.file.source, 0, _FIRST_CHUNK, -1
        while position < source.size:
            data = source.read(position, chunk)
            appended = data.find(b"<AppendedData")
            held = 0 if appended >= 0 or position + len(data) >= source.size else len(b"<AppendedData") - 1
            data = data[:appended] if appended >= 0 else data[:len(data) - held]
            if (tag := data.rfind(b"<")) >= 0:
                last_tag = position + tag
            self._parse(data)
            position += len(data)
            if appended >= 0:
                return self._appended_tag(position)
            skipped = self._skipped(position, last_tag)
            chunk = _FIRST_CHUNK if skipped > position else min(4 * chunk, _CHUNK)
            position = skipped
        self._parse(b"", final=True)

    def _parse(self, data: bytes, final: bool = False) -> None:
        try:
            self.expat.Parse(data, final)
        except xml.parsers.expat.ExpatError as err:
            reason = xml.parsers.expat.ErrorString(err.code)
            if final and self.open:
                raise VtkXmlError(f"the file ends inside <{self.open[-1]}>: it is truncated or corrupt "
                                  f"({reason})") from None
            raise VtkXmlError(f"not a VTK XML file, or it is corrupt: {reason} at byte "
                              f"{max(self.expat.ErrorByteIndex, 0) + self.shift}") from None

    def _skipped(self, position: int, last_tag: int) -> int:
        """Where to feed on from ``position``: the end of the inline binary text being fed, by its own
        header, when that lies further on with no markup since and a tag there; else ``position``."""
        skip, self.skip_to = self.skip_to, None
        if (skip is None or self.inline is None or skip <= position or last_tag > self.text_at
                or self.file.source.read(skip, 4096).lstrip()[:1] != b"<"):
            return position
        self.shift += skip - position
        return skip

    def _appended_tag(self, position: int) -> None:
        """Feed the AppendedData tag at ``position`` to expat, up to its '_' marker."""
        source = self.file.source
        tag = _APPENDED.match(source.read(position, 4096))
        if tag is None:
            raise VtkXmlError(f"AppendedData without its '_' marker at {source.where(position)}")
        self._parse(tag.group()[:-1])
        if self.appended_at != position:
            raise VtkXmlError(f"<AppendedData at {source.where(position)} is not a tag of the header")
        start = position + tag.end()
        self.appended = start, self.file.appended_end(start)

    def _doctype(self, *_) -> None:
        raise VtkXmlError("not a VTK XML file: it has a DOCTYPE (VTK writes none)")

    def _markup(self, *_) -> None:
        """Close the text of the inline array being read at the markup that starts here."""
        if self.inline is not None:
            limit = self.at
            self.file.placed(self.inline, limit if self.text_at is None else self.text_at, limit)
            self.inline = self.text_at = self.skip_to = None
            self.expat.CharacterDataHandler = None

    def _text(self, text: str) -> None:
        """Text of the inline array being read: where its first non-space byte lies."""
        data = text.lstrip()
        if data:
            self.text_at = self.at + len(text) - len(data)
            self.expat.CharacterDataHandler = None
            if self.inline.data_format == "binary":  # the feed may skip it, to where its own header says it ends
                source = self.file.source
                with suppress(VtkXmlError):
                    self.skip_to = ArrayData(source, self.text_at, source.size, True, self.file.header_dtype,
                                             self.file.compressor, self.inline.label).end

    def _end(self, name: str) -> None:
        self._markup()
        self.open.pop()

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self._markup()
        parent = self.open[-1] if self.open else None
        if parent is None:
            if name != "VTKFile":
                raise VtkXmlError(f"not a VTK XML file: its first element is <{name}>, not <VTKFile>")
            self.file.file_attrs(attrs)
            self.file_type = attrs.get("type")
        elif parent == "VTKFile" and name != "AppendedData":
            self._dataset(name)
        elif name == "Piece":
            self._inside(name, parent, (self.file.kind,))
            self.pieces += 1
            self.file.piece(attrs)
        elif name in _SECTIONS:
            self._inside(name, parent, ("Piece",) + (self.file.kind,) * (name == "FieldData"))
        elif name == "DataArray":
            self._inside(name, parent, _SECTIONS)
            entry = self.file.data_array(attrs, parent)
            if entry is not None and entry.data_format != "appended":
                self.inline = entry
                self.expat.CharacterDataHandler = self._text
        elif name == "AppendedData":
            self._inside(name, parent, ("VTKFile",))
            self.appended_at = self.at
            self.file.appended_attrs(attrs)
        self.open.append(name)

    def _inside(self, name: str, parent: str, allowed: tuple[str, ...]) -> None:
        if parent not in allowed:
            raise VtkXmlError(f"<{name}> at byte {self.at} inside <{parent}>, expected inside "
                              f"{' or '.join(f'<{a}>' for a in allowed)}")

    def _dataset(self, name: str) -> None:
        if name not in _KINDS or self.file.kind:
            what = "a second dataset" if self.file.kind else "not a VTK XML UnstructuredGrid or PolyData file"
            raise VtkXmlError(f"{what} (it holds <{name}>)")
        if self.file_type is not None and self.file_type != name:
            raise VtkXmlError(f"VTKFile type {self.file_type} holds <{name}>")
        self.file.kind = name

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
            start, end = self.appended
            self.file.placed(entry, start + entry.position, end)
        if self.appended:
            self.file.appended_start = self.appended[0]
