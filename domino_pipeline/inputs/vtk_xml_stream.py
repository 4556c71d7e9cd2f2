"""Read VTK XML files (VTU, VTP) a block of rows at a time, in bounded memory.

DrivAerML's volume VTU holds ~160M points (40-53 GB, published in ``.part`` pieces); VTK's reader
holds a whole file's selected arrays in memory. This reader parses only the XML header (the tags,
never the data), then decodes any rows of any array from the array's byte offset:

- appended data, raw or base64, and inline binary (base64) data;
- uncompressed arrays or VTK's compressed blocks (zlib, lz4, lzma), UInt32 or UInt64 headers;
- a file given as one path or as ``<name>.part1``, ``<name>.part2``, ... read in sequence as
  one byte stream, without joining them on disk.

Inline ascii data cannot be addressed by row; ``streamable`` is False for such a file and the
caller reads it with VTK (see ``whole_file_bytes`` for the memory that takes).

    source = VtkXmlFile.open(Path("run_1/volume_1.vtu"))
    for start in range(0, source.n_points, 1 << 22):
        xyz = source.read("Points", "Points", start, min(start + (1 << 22), source.n_points))
"""

from __future__ import annotations

import base64
import lzma
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.concat_bytes import ConcatBytes, part_paths

_TYPES = {"Int8": "i1", "UInt8": "u1", "Int16": "i2", "UInt16": "u2", "Int32": "i4",
          "UInt32": "u4", "Int64": "i8", "UInt64": "u8", "Float32": "f4", "Float64": "f8"}
_SECTIONS = ("PointData", "CellData", "Points", "Cells", "Verts", "Lines", "Strips", "Polys",
             "FieldData")
_TAG = re.compile(rb"<(/?)([A-Za-z_]+)((?:[^>\"']|\"[^\"]*\"|'[^']*')*?)(/?)>")
_ATTR = re.compile(rb"([A-Za-z_]+)=(?:\"([^\"]*)\"|'([^']*)')")  # XML allows either quote (foamToVTK writes ')
_SCAN_BYTES = 1 << 24


class VtkXmlError(ValueError):
    """A VTK XML file whose header cannot be parsed or whose data this reader cannot address."""


@dataclass(frozen=True)
class ArrayEntry:
    """Where one DataArray's encoded bytes start, and how they are encoded."""

    section: str
    name: str
    dtype: np.dtype
    components: int
    data_format: str  # "appended", "binary" or "ascii"
    position: int  # absolute byte position of the array's (encoded) header in the stream


def _attrs(text: bytes) -> dict[str, str]:
    return {k.decode(): (double or single).decode() for k, double, single in _ATTR.findall(text)}


def _scan_tags(source: ConcatBytes):
    """Yield (closing, tag name, attributes, end position) for every tag up to the appended
    data, reading the stream in chunks (data between tags is skipped, never kept)."""
    pos, carry = 0, b""
    while pos < source.size:
        chunk = carry + source.read(pos, _SCAN_BYTES)
        base = pos - len(carry)
        pos += _SCAN_BYTES
        last = 0
        for match in _TAG.finditer(chunk):
            yield bool(match.group(1)), match.group(2).decode(), match.group(3), base + match.end()
            if match.group(2) == b"AppendedData":
                return
            last = match.end()
        start = chunk.rfind(b"<", last)
        carry = chunk[start:] if start >= 0 and pos < source.size else b""
        if len(carry) > 1 << 20:
            raise VtkXmlError("an XML tag longer than 1 MiB")


class VtkXmlFile:
    """The header of a VTK XML unstructured grid or polydata file, and row reads of its arrays."""

    def __init__(self, source: ConcatBytes, path: Path) -> None:
        self.source, self.path = source, path
        self.arrays: dict[tuple[str, str], ArrayEntry] = {}
        self.kind = ""
        self.n_points = self.n_cells = 0
        self.piece_counts: dict[str, int] = {}
        self.byte_order = "<"
        self.header_dtype = np.dtype("<u4")
        self.compressor = ""
        self._decoders: dict[tuple[str, str], _ArrayDecoder] = {}
        self._parse()

    @classmethod
    def open(cls, path: Path) -> "VtkXmlFile":
        """Open ``path`` or, when it is absent, its ``.part<k>`` pieces in order."""
        path = Path(path)
        parts = [path] if path.is_file() else part_paths(path)
        if not parts:
            raise FileNotFoundError(f"{path}: missing file (and no {path.name}.part* pieces)")
        return cls(ConcatBytes(parts), path)

    # ------------------------------------------------------------------ header

    def _parse(self) -> None:
        sections: list[str] = []
        appended_at = None
        pieces = 0
        for closing, tag, raw, end in _scan_tags(self.source):
            if tag == "VTKFile" and not closing:
                self._file_attrs(_attrs(raw))
            elif tag in ("UnstructuredGrid", "PolyData") and not closing:
                self.kind = tag
            elif tag == "Piece" and not closing:
                pieces += 1
                self._piece(_attrs(raw))
            elif tag in _SECTIONS:
                if closing:
                    sections.pop()
                elif not raw.endswith(b"/"):
                    sections.append(tag)
            elif tag == "DataArray" and not closing:
                self._data_array(_attrs(raw), sections[-1] if sections else "", end)
            elif tag == "AppendedData" and not closing:
                appended_at = self._appended_start(_attrs(raw), end)
        if self.kind not in ("UnstructuredGrid", "PolyData"):
            raise VtkXmlError(f"{self.path}: not a VTK XML UnstructuredGrid or PolyData file")
        if pieces != 1:
            raise VtkXmlError(f"{self.path}: {pieces} pieces; this reader reads single-piece files")
        self._resolve_appended(appended_at)

    def _file_attrs(self, attrs: dict[str, str]) -> None:
        self.byte_order = ">" if attrs.get("byte_order") == "BigEndian" else "<"
        header = attrs.get("header_type", "UInt32")
        if header not in ("UInt32", "UInt64"):
            raise VtkXmlError(f"{self.path}: header_type {header}, expected UInt32 or UInt64")
        self.header_dtype = np.dtype(_TYPES[header]).newbyteorder(self.byte_order)
        self.compressor = attrs.get("compressor", "")

    def _piece(self, attrs: dict[str, str]) -> None:
        self.piece_counts = {k: int(v) for k, v in attrs.items() if k.startswith("NumberOf")}
        self.n_points = self.piece_counts.get("NumberOfPoints", 0)
        self.n_cells = sum(v for k, v in self.piece_counts.items()
                           if k in ("NumberOfCells", "NumberOfVerts", "NumberOfLines",
                                    "NumberOfStrips", "NumberOfPolys"))

    def _data_array(self, attrs: dict[str, str], section: str, end: int) -> None:
        if attrs.get("type") not in _TYPES:
            raise VtkXmlError(f"{self.path}: DataArray {attrs.get('Name')} of type {attrs.get('type')}")
        data_format = attrs.get("format", "ascii")
        # appended: an offset resolved once the appended data's start is known
        position = int(attrs.get("offset", 0)) if data_format == "appended" else end
        entry = ArrayEntry(section, attrs.get("Name", ""),
                           np.dtype(_TYPES[attrs["type"]]).newbyteorder(self.byte_order),
                           int(attrs.get("NumberOfComponents", 1)), data_format, position)
        self.arrays[(section, entry.name)] = entry

    def _appended_start(self, attrs: dict[str, str], end: int) -> tuple[int, str]:
        head = self.source.read(end, 4096)
        underscore = head.find(b"_")
        if underscore < 0:
            raise VtkXmlError(f"{self.path}: AppendedData without its '_' marker")
        return end + underscore + 1, attrs.get("encoding", "raw")

    def _resolve_appended(self, appended: tuple[int, str] | None) -> None:
        self.encodings: dict[tuple[str, str], str] = {}
        for key, entry in list(self.arrays.items()):
            if entry.data_format == "appended":
                if appended is None:
                    raise VtkXmlError(f"{self.path}: array {entry.name} is appended but there is no AppendedData")
                start, encoding = appended
                self.arrays[key] = ArrayEntry(entry.section, entry.name, entry.dtype,
                                              entry.components, "appended", start + entry.position)
                self.encodings[key] = encoding
            elif entry.data_format == "binary":
                self.arrays[key] = ArrayEntry(entry.section, entry.name, entry.dtype, entry.components,
                                              "binary", self._skip_space(entry.position))
                self.encodings[key] = "base64"
            else:
                self.encodings[key] = "ascii"

    def _skip_space(self, position: int) -> int:
        head = self.source.read(position, 4096)
        return position + len(head) - len(head.lstrip())

    # ------------------------------------------------------------------ data

    @property
    def streamable(self) -> bool:
        """True when every array can be read by rows (no inline ascii data)."""
        return all(encoding != "ascii" for encoding in self.encodings.values())

    def rows(self, section: str, name: str) -> int:
        """The number of rows (tuples) of an array, from the piece's counts."""
        entry = self.entry(section, name)
        if section in ("Points", "PointData"):
            return self.n_points
        if section == "CellData":
            return self.n_cells
        return self._decoder(entry).n_bytes // (entry.dtype.itemsize * entry.components)

    def entry(self, section: str, name: str) -> ArrayEntry:
        """The header entry of an array; VtkXmlError naming the file when there is none."""
        if (section, name) not in self.arrays:
            names = sorted(n for s, n in self.arrays if s == section)
            raise VtkXmlError(f"{self.path}: no {section} array {name} (has {names})")
        return self.arrays[(section, name)]

    def names(self, section: str) -> list[str]:
        """The array names of a section (PointData, CellData, ...), in file order."""
        return [n for s, n in self.arrays if s == section]

    def read(self, section: str, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of an array as a native-order (rows, components) array."""
        entry = self.entry(section, name)
        row_bytes = entry.dtype.itemsize * entry.components
        raw = self._decoder(entry).read(start * row_bytes, stop * row_bytes)
        values = np.frombuffer(raw, dtype=entry.dtype).reshape(stop - start, entry.components)
        return values.astype(entry.dtype.newbyteorder("="), copy=False)

    def _decoder(self, entry: ArrayEntry) -> "_ArrayDecoder":
        key = (entry.section, entry.name)
        if key not in self._decoders:
            if self.encodings[key] == "ascii":
                raise VtkXmlError(f"{self.path}: array {entry.name} is inline ascii, which cannot be read by rows")
            self._decoders[key] = _ArrayDecoder(self.source, entry.position,
                                                self.encodings[key] == "base64",
                                                self.header_dtype, self.compressor, self.path)
        return self._decoders[key]

    def raw_span(self, section: str, name: str) -> tuple[int, int] | None:
        """(stream position, bytes) of an uncompressed raw array's data, for memory mapping;
        None when the array is encoded or compressed."""
        decoder = self._decoder(self.entry(section, name))
        if decoder.base64 or decoder.blocks is not None:
            return None
        return decoder.data_at, decoder.n_bytes

    def whole_file_bytes(self) -> int:
        """About how many bytes VTK's reader holds to read this file whole (its decoded arrays)."""
        total = 0
        for (section, name), entry in self.arrays.items():
            per_row = entry.dtype.itemsize * entry.components
            rows = {"Points": self.n_points, "PointData": self.n_points,
                    "CellData": self.n_cells}.get(section, 2 * max(self.n_cells, 1))
            total += per_row * rows
        return total + self.source.size if not self.streamable else total


def _decompressor(name: str):
    """The block decompressor of a VTK compressor name: f(data, uncompressed size) -> bytes."""
    if name == "vtkZLibDataCompressor":
        return lambda data, size: zlib.decompress(data)
    if name == "vtkLZMADataCompressor":
        return lambda data, size: lzma.decompress(data)
    if name == "vtkLZ4DataCompressor":
        import lz4.block  # only needed for lz4 files

        return lambda data, size: lz4.block.decompress(data, uncompressed_size=size)
    raise VtkXmlError(f"unknown compressor {name}")


class _ArrayDecoder:
    """Decoded byte ranges of one array's data, from its encoded header position."""

    def __init__(self, source: ConcatBytes, position: int, base64_encoded: bool,
                 header_dtype: np.dtype, compressor: str, path: Path) -> None:
        self.source, self.base64, self.path = source, base64_encoded, path
        self.size = header_dtype.itemsize
        self._cache: tuple[int, bytes] | None = None
        if not compressor:
            self.blocks = None
            first = self._header(position, header_dtype, 1)
            self.n_bytes = int(first[0])
            # uncompressed base64: header and data are one encoded stream
            self.data_at = position if base64_encoded else position + self.size
            return
        self.decompress = _decompressor(compressor)
        count = int(self._header(position, header_dtype, 1)[0])
        header = self._header(position, header_dtype, 3 + count)
        self.block_size, last = int(header[1]), int(header[2])
        sizes = [self.block_size] * count
        if count and last:
            sizes[-1] = last
        self.blocks = np.asarray(header[3:], dtype=np.int64)
        self.block_starts = np.concatenate([[0], np.cumsum(self.blocks)]).tolist()
        self.raw_sizes = sizes
        self.n_bytes = sum(sizes)
        header_bytes = (3 + count) * self.size
        # compressed base64: the header is one encoded stream, the blocks another
        self.data_at = position + (4 * -(-header_bytes // 3) if base64_encoded else header_bytes)

    def _header(self, position: int, dtype: np.dtype, count: int) -> np.ndarray:
        n = count * dtype.itemsize
        if self.base64:
            raw = _b64decode(self.source.read(position, 4 * -(-n // 3)), self.path)[:n]
        else:
            raw = self.source.read(position, n)
        if len(raw) < n:
            raise VtkXmlError(f"{self.path}: truncated array header")
        return np.frombuffer(raw, dtype=dtype)

    def _stream_bytes(self, offset: int, start: int, stop: int) -> bytes:
        """Decoded bytes ``start:stop`` of the encoded stream at ``offset``."""
        if not self.base64:
            data = self.source.read(offset + start, stop - start)
        else:
            first, last = start // 3, -(-stop // 3)
            text = self.source.read(offset + 4 * first, 4 * (last - first))
            data = _b64decode(text, self.path)[start - 3 * first: stop - 3 * first]
        if len(data) != stop - start:
            raise VtkXmlError(f"{self.path}: truncated array data")
        return data

    def read(self, start: int, stop: int) -> bytes:
        """Decoded data bytes ``start:stop`` of the array."""
        stop = min(stop, self.n_bytes)
        if start >= stop:
            return b""
        if self.blocks is None:
            skip = self.size if self.base64 else 0
            return self._stream_bytes(self.data_at, start + skip, stop + skip)
        first, last = start // self.block_size, (stop - 1) // self.block_size
        parts = [self._block(b) for b in range(first, last + 1)]
        joined = parts[0] if len(parts) == 1 else b"".join(parts)
        base = first * self.block_size
        return joined[start - base: stop - base]

    def _block(self, index: int) -> bytes:
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        packed = self._stream_bytes(self.data_at, self.block_starts[index], self.block_starts[index + 1])
        try:
            data = self.decompress(packed, self.raw_sizes[index])
        except Exception as err:
            raise VtkXmlError(f"{self.path}: compressed block {index} is corrupt ({err})") from err
        if len(data) != self.raw_sizes[index]:
            raise VtkXmlError(f"{self.path}: compressed block {index} holds {len(data)} bytes, "
                              f"expected {self.raw_sizes[index]}")
        self._cache = (index, data)
        return data


def _b64decode(text: bytes, path: Path) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as err:
        raise VtkXmlError(f"{path}: bad base64 data ({err})") from err

