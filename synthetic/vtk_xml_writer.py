"""Write a VTK XML unstructured grid (VTU) or polydata (VTP) block by block, in bounded memory,
in any encoding VTK writes: appended raw or base64 data or inline binary (base64), uncompressed or in zlib,
lz4 or lzma blocks, with UInt32 or UInt64 headers.

Each array's encoded bytes are spooled to a temporary file beside the output as its rows come;
``close`` writes the XML header (whose appended offsets are known only then) and moves each spool
in after it, deleting it, so the disk holds about one copy of the data.

    with VtkBlockWriter(path, "UnstructuredGrid", {"NumberOfPoints": n, "NumberOfCells": n},
                        unstructured_grid_arrays(n, n, n, {"UMeanTrim": 3}, {}), Encoding()) as vtu:
        for xyz, u, ids in blocks:
            vtu.append("PointData", "UMeanTrim", u)
            vtu.append("Points", "Points", xyz)
            ...
"""

from __future__ import annotations

import base64
import lzma
import os
import shutil
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

DATA_MODES = ("appended-raw", "appended-base64", "binary")
COMPRESSORS = {"none": "", "zlib": "vtkZLibDataCompressor", "lz4": "vtkLZ4DataCompressor",
               "lzma": "vtkLZMADataCompressor"}
_VTK_TYPES = {"f4": "Float32", "f8": "Float64", "i8": "Int64", "i4": "Int32", "u1": "UInt8"}


@dataclass(frozen=True)
class Encoding:
    """How the arrays are stored: data mode, compressor, header integer size, block size. The
    defaults are those of VTK's XML writers (``vtkXMLWriter``): appended base64 data in zlib
    blocks of 32 KiB at level 5, UInt32 headers."""

    mode: str = "appended-base64"
    compressor: str = "zlib"
    header_bits: int = 32
    block_bytes: int = 1 << 15
    level: int = 5

    def __post_init__(self) -> None:
        if self.mode not in DATA_MODES:
            raise ValueError(f"data mode {self.mode!r}, expected one of {list(DATA_MODES)}")
        if self.compressor not in COMPRESSORS:
            raise ValueError(f"compressor {self.compressor!r}, expected one of {list(COMPRESSORS)}")
        if self.header_bits not in (32, 64):
            raise ValueError(f"header of {self.header_bits} bits, expected 32 or 64")


def _compress(name: str, level: int, data: bytes) -> bytes:
    if name == "zlib":
        return zlib.compress(data, level)
    if name == "lzma":
        return lzma.compress(data)
    import lz4.block  # only needed for lz4 files

    return lz4.block.compress(data, store_size=False)


def _compressed_blocks(name: str, level: int, blocks: list[bytes]) -> list[bytes]:
    """``blocks`` compressed, on all cores when there are many (the compressors release the GIL)."""
    if len(blocks) < _PARALLEL_BLOCKS:
        return [_compress(name, level, block) for block in blocks]
    return list(_pool().map(partial(_compress, name, level), blocks))


_PARALLEL_BLOCKS = 16


@cache
def _pool() -> ThreadPoolExecutor:
    """The compression threads, one per core of this process, made at first use."""
    return ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0)))


class _Base64Stream:
    """Base64 of a byte stream given in pieces, padded only at its end."""

    def __init__(self, out) -> None:
        self.out, self.carry = out, b""

    def write(self, data: bytes) -> None:
        data = self.carry + data
        whole = len(data) - len(data) % 3
        self.out.write(base64.b64encode(data[:whole]))
        self.carry = data[whole:]

    def close(self) -> None:
        self.out.write(base64.b64encode(self.carry))
        self.carry = b""


class _ArraySpool:
    """One array's encoded data, spooled to a file; ``prefix`` (its header) is known at the end."""

    def __init__(self, path: Path, n_bytes: int, encoding: Encoding) -> None:
        self.path, self.n_bytes, self.encoding = path, int(n_bytes), encoding
        self.header = np.dtype(f"<u{encoding.header_bits // 8}")
        if encoding.header_bits == 32 and not encoding.compressor == "none" and encoding.block_bytes >= 2**32:
            raise ValueError("compression blocks of 4 GiB or more need a UInt64 header")
        if encoding.header_bits == 32 and encoding.compressor == "none" and n_bytes >= 2**32:
            raise ValueError(f"an array of {n_bytes} bytes needs a UInt64 header")
        self.file = open(path, "wb")
        base64_encoded = encoding.mode != "appended-raw"
        self.sink = _Base64Stream(self.file) if base64_encoded else self.file
        self.pending, self.written, self.block_sizes = b"", 0, []
        if encoding.compressor == "none" and base64_encoded:  # header and data: one stream
            self.sink.write(np.array([self.n_bytes], self.header).tobytes())

    def append(self, data: bytes) -> None:
        self.written += len(data)
        if self.encoding.compressor == "none":
            self.sink.write(data)
            return
        self.pending += data
        size = self.encoding.block_bytes
        full = len(self.pending) - len(self.pending) % size
        self._blocks([self.pending[start:start + size] for start in range(0, full, size)])
        self.pending = self.pending[full:]

    def _blocks(self, blocks: list[bytes]) -> None:
        for packed in _compressed_blocks(self.encoding.compressor, self.encoding.level, blocks):
            self.block_sizes.append(len(packed))
            self.sink.write(packed)

    def finish(self) -> bytes:
        """Close the spool; return the encoded bytes that precede it (the array's header)."""
        if self.written != self.n_bytes:
            raise ValueError(f"{self.path.name}: {self.written} bytes written, expected {self.n_bytes}")
        if self.pending:
            self._blocks([self.pending])
        if self.sink is not self.file:
            self.sink.close()
        self.file.close()
        if self.encoding.compressor == "none":
            base64_encoded = self.encoding.mode != "appended-raw"
            return b"" if base64_encoded else np.array([self.n_bytes], self.header).tobytes()
        last = self.n_bytes % self.encoding.block_bytes
        table = [len(self.block_sizes), self.encoding.block_bytes, last, *self.block_sizes]
        raw = np.array(table, self.header).tobytes()
        return raw if self.encoding.mode == "appended-raw" else base64.b64encode(raw)


@dataclass(frozen=True)
class ArraySpec:
    """One DataArray: its section (PointData, CellData, Points, Cells, Polys), name, dtype,
    number of rows and width."""

    section: str
    name: str
    dtype: str
    rows: int
    components: int = 1
    information: str = ""  # XML elements inside the DataArray after its data (VTK's <InformationKey>s)


_SECTIONS = {"UnstructuredGrid": ("PointData", "CellData", "Points", "Cells"),
             "PolyData": ("PointData", "CellData", "Points", "Verts", "Lines", "Strips", "Polys")}


class VtkBlockWriter:
    """A VTU or VTP written from blocks of rows; every array receives all its rows, in order."""

    def __init__(self, path: Path, kind: str, counts: Mapping[str, int], arrays: list[ArraySpec],
                 encoding: Encoding) -> None:
        self.path, self.kind, self.encoding, self.arrays = Path(path), kind, encoding, arrays
        self.counts = {k: int(v) for k, v in counts.items()}
        self.spools: dict[str, _ArraySpool] = {}
        for i, spec in enumerate(arrays):
            n_bytes = spec.rows * spec.components * np.dtype(spec.dtype).itemsize
            spool = self.path.with_name(f".{self.path.name}.{i}.spool")
            self.spools[self._key(spec)] = _ArraySpool(spool, n_bytes, encoding)

    @staticmethod
    def _key(spec: ArraySpec) -> str:
        return f"{spec.section}/{spec.name}"

    def append(self, section: str, name: str, values: np.ndarray) -> None:
        """Append rows to one array (cast to its declared little-endian dtype)."""
        spec = next(s for s in self.arrays if s.section == section and s.name == name)
        data = np.ascontiguousarray(values, dtype=np.dtype(spec.dtype).newbyteorder("<"))
        self.spools[self._key(spec)].append(data.tobytes())

    def close(self) -> None:
        """Write the file: its XML header, then each array's data, deleting the spools."""
        prefixes = {key: spool.finish() for key, spool in self.spools.items()}
        appended = self.encoding.mode.startswith("appended")
        offsets, at = {}, 0
        for key, spool in self.spools.items():
            offsets[key] = at
            at += len(prefixes[key]) + spool.path.stat().st_size
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "wb") as out:
            out.write(self._xml_head().encode())
            for section in _SECTIONS[self.kind]:
                out.write(f"      <{section}>\n".encode())
                for spec in (s for s in self.arrays if s.section == section):
                    key = self._key(spec)
                    out.write(self._data_array(spec, offsets[key] if appended else None).encode())
                    if not appended:
                        self._move_data(out, prefixes[key], self.spools[key].path)
                        out.write(f"\n          {spec.information}".encode() if spec.information else b"")
                        out.write(b"\n        </DataArray>\n")
                    elif spec.information:
                        out.write(f"          {spec.information}\n        </DataArray>\n".encode())
                out.write(f"      </{section}>\n".encode())
            out.write(f"    </Piece>\n  </{self.kind}>\n".encode())
            if appended:
                kind = "raw" if self.encoding.mode == "appended-raw" else "base64"
                out.write(f'  <AppendedData encoding="{kind}">\n   _'.encode())
                for key, spool in self.spools.items():
                    self._move_data(out, prefixes[key], spool.path)
                out.write(b"\n  </AppendedData>\n")
            out.write(b"</VTKFile>\n")
        os.replace(tmp, self.path)

    @staticmethod
    def _move_data(out, prefix: bytes, spool: Path) -> None:
        out.write(prefix)
        with open(spool, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 24)
        spool.unlink()

    def _xml_head(self) -> str:
        compressor = COMPRESSORS[self.encoding.compressor]
        attr = f' compressor="{compressor}"' if compressor else ""
        counts = " ".join(f'{k}="{v}"' for k, v in self.counts.items())
        return (f'<?xml version="1.0"?>\n<VTKFile type="{self.kind}" version="0.1" '
                f'byte_order="LittleEndian" header_type="UInt{self.encoding.header_bits}"{attr}>\n'
                f'  <{self.kind}>\n    <Piece {counts}>\n')

    def _data_array(self, spec: ArraySpec, offset: int | None) -> str:
        components = f' NumberOfComponents="{spec.components}"' if spec.components > 1 else ""
        closing = ">" if spec.information else "/>"
        where = f'format="appended" offset="{offset}"{closing}\n' if offset is not None else 'format="binary">\n'
        return (f'        <DataArray type="{_VTK_TYPES[spec.dtype]}" Name="{spec.name}"'
                f'{components} {where}')

    def abort(self) -> None:
        """Remove the spools (after an error)."""
        for spool in self.spools.values():
            if not spool.file.closed:
                spool.file.close()
            spool.path.unlink(missing_ok=True)
        self.path.with_name(f".{self.path.name}.tmp").unlink(missing_ok=True)

    def __enter__(self) -> "VtkBlockWriter":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()
            return
        try:
            self.close()
        except BaseException:
            self.abort()
            raise


def unstructured_grid_arrays(n_points: int, n_cells: int, n_connectivity: int,
                             point_fields: Mapping[str, int], cell_fields: Mapping[str, int]) -> list[ArraySpec]:
    """The DataArrays of a VTU with float32 points and fields of the given widths, in VTK's order."""
    return ([ArraySpec("PointData", n, "f4", n_points, w) for n, w in point_fields.items()]
            + [ArraySpec("CellData", n, "f4", n_cells, w) for n, w in cell_fields.items()]
            + [ArraySpec("Points", "Points", "f4", n_points, 3),
               ArraySpec("Cells", "connectivity", "i8", n_connectivity),
               ArraySpec("Cells", "offsets", "i8", n_cells), ArraySpec("Cells", "types", "u1", n_cells)])


def polydata_arrays(n_points: int, n_polys: int, n_connectivity: int,
                    cell_fields: Mapping[str, int]) -> list[ArraySpec]:
    """The DataArrays of a VTP of polygons with float32 points and cell fields, in VTK's order."""
    return ([ArraySpec("CellData", n, "f4", n_polys, w) for n, w in cell_fields.items()]
            + [ArraySpec("Points", "Points", "f4", n_points, 3),
               ArraySpec("Polys", "connectivity", "i8", n_connectivity),
               ArraySpec("Polys", "offsets", "i8", n_polys)])
