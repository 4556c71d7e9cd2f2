"""The encoded data of one VTK XML DataArray (raw or base64, plain or compressed blocks): its
header checked against the bytes the array may occupy before anything is allocated, then any
decoded byte range read from it. docs/raw_inputs.md, "VTK XML files by rows"."""

from __future__ import annotations

import base64
import copy
import lzma
import zlib

import numpy as np

from domino_pipeline.inputs.raw_files.concat_bytes import ConcatBytes

# the most a compressed block of n bytes decompresses to: deflate expands at most 1032-fold
# (zlib's own bound), an lz4 block at most 255-fold (one length byte per 255 bytes of match);
# lzma can expand further, and is decompressed incrementally, so it needs no bound here
_EXPANSION = {"vtkZLibDataCompressor": (1032, 64), "vtkLZ4DataCompressor": (255, 64)}
COMPRESSORS = ("vtkZLibDataCompressor", "vtkLZ4DataCompressor", "vtkLZMADataCompressor")


class VtkXmlError(ValueError):
    """A VTK XML file whose header cannot be parsed or whose data this reader cannot address."""


def _encoded(n: int, base64_encoded: bool) -> int:
    """Bytes that ``n`` bytes take in the stream."""
    return 4 * -(-n // 3) if base64_encoded else n


class ArrayData:
    """Decoded byte ranges of one array's data (encoded header at ``position``, the array within
    ``limit``); ``n_bytes``: decoded bytes; ``end``: the position after it; ``where`` names it."""

    def __init__(self, source: ConcatBytes, position: int, limit: int, base64_encoded: bool,
                 header_dtype: np.dtype, compressor: str, where: str, region: str = "the data") -> None:
        self.source, self.base64, self.where = source, base64_encoded, where
        self.position, self.limit = position, limit
        self.region = f"{region} at {source.where(limit)}"
        self.size = header_dtype.itemsize
        self._cache: tuple[int, bytes] | None = None
        if position > limit:
            raise VtkXmlError(f"{where}: its data would start at {source.where(position)}, past the "
                              f"end of {self.region}")
        if compressor:
            self._compressed_header(header_dtype, compressor)
        else:
            self._plain_header(header_dtype)
        if self.end > limit:
            raise VtkXmlError(f"{where}: its header describes {self.n_bytes} bytes of data, which "
                              f"would end at {source.where(self.end)}, past the end of {self.region} "
                              f"(a truncated file or piece?)")

    def _plain_header(self, header_dtype: np.dtype) -> None:
        self.blocks = None
        self.n_bytes = int(self._header(header_dtype, 1)[0])
        # uncompressed base64: header and data are one encoded stream
        self.data_at = self.position if self.base64 else self.position + self.size
        self.end = self.position + _encoded(self.size + self.n_bytes, self.base64)

    def _compressed_header(self, header_dtype: np.dtype, compressor: str) -> None:
        self.decompress = _DECOMPRESSORS[compressor]
        count = int(self._header(header_dtype, 1)[0])
        if self.position + _encoded((3 + count) * self.size, self.base64) > self.limit:
            raise VtkXmlError(f"{self.where}: its header claims {count} compressed blocks, more than "
                              f"the {self.limit - self.position} bytes up to the end of {self.region} can hold")
        header = self._header(header_dtype, 3 + count).astype(np.int64)
        self.block_size, last = int(header[1]), int(header[2])
        if count and (self.block_size <= 0 or last > self.block_size):
            raise VtkXmlError(f"{self.where}: compressed blocks of {self.block_size} bytes with a last "
                              f"block of {last} bytes")
        self.blocks = header[3:]
        self.raw_sizes = np.full(count, self.block_size, dtype=np.int64)
        if count and last:
            self.raw_sizes[-1] = last
        self.n_bytes = int(self.raw_sizes.sum())
        self.block_starts = np.concatenate([[0], np.cumsum(self.blocks)])
        header_bytes = (3 + count) * self.size
        # compressed base64: the header is one encoded stream, the blocks another
        self.data_at = self.position + _encoded(header_bytes, self.base64)
        self.end = self.data_at + _encoded(int(self.block_starts[-1]), self.base64)
        self._check_expansion(compressor)

    def _check_expansion(self, compressor: str) -> None:
        if compressor not in _EXPANSION or not len(self.blocks):
            return
        factor, slack = _EXPANSION[compressor]
        short = np.flatnonzero(self.raw_sizes > self.blocks * factor + slack)
        if short.size:
            k = int(short[0])
            raise VtkXmlError(f"{self.where}: compressed block {k} of {int(self.blocks[k])} bytes cannot "
                              f"decompress to the {int(self.raw_sizes[k])} bytes its header claims")

    def _header(self, dtype: np.dtype, count: int) -> np.ndarray:
        n = count * dtype.itemsize
        if self.position + _encoded(n, self.base64) > self.limit:
            raise VtkXmlError(f"{self.where}: its header at {self.source.where(self.position)} runs past "
                              f"the end of {self.region} (a truncated file?)")
        if self.base64:
            raw = _b64decode(self.source.read(self.position, _encoded(n, True)), self.where)[:n]
        else:
            raw = self.source.read(self.position, n)
        if len(raw) < n:
            raise VtkXmlError(f"{self.where}: its header at {self.source.where(self.position)} is cut "
                              f"off by the end of the file (a truncated file?)")
        return np.frombuffer(raw, dtype=dtype)

    def _stream_bytes(self, offset: int, start: int, stop: int) -> bytes:
        """Decoded bytes ``start:stop`` of the encoded stream at ``offset``."""
        if not self.base64:
            data = self.source.read(offset + start, stop - start)
        else:
            first, last = start // 3, -(-stop // 3)
            text = self.source.read(offset + 4 * first, 4 * (last - first))
            data = _b64decode(text, self.where)[start - 3 * first: stop - 3 * first]
        if len(data) != stop - start:
            raise VtkXmlError(f"{self.where}: its data is cut off by the end of the file (a truncated file?)")
        return data

    def read(self, start: int, stop: int) -> bytes | memoryview:
        """Decoded data bytes ``start:stop`` of the array (0 <= start <= stop <= n_bytes)."""
        if start >= stop:
            return b""
        if self.blocks is None:
            skip = self.size if self.base64 else 0
            return self._stream_bytes(self.data_at, start + skip, stop + skip)
        first, last = start // self.block_size, (stop - 1) // self.block_size
        base = first * self.block_size
        if first == last:
            return self._block(first)[start - base: stop - base]
        return memoryview(self._blocks(first, last))[start - base: stop - base]

    def bound_to(self, source) -> ArrayData:
        """This array read from another stream holding the same bytes at the same positions."""
        other = copy.copy(self)
        other.source, other._cache = source, None
        return other

    def local_file(self):
        """(local file, offset) of the data when it lies raw in one file, for memory mapping; else None."""
        if self.base64 or self.blocks is not None:
            return None
        return self.source.single_file(self.data_at, self.n_bytes)

    def stream_span(self, start: int, stop: int) -> tuple[int, int]:
        """(first, end) stream positions of the encoded bytes that ``read(start, stop)`` reads."""
        if self.blocks is None:
            skip = self.size if self.base64 else 0
            first, end = start + skip, stop + skip
        else:
            first = int(self.block_starts[start // self.block_size])
            end = int(self.block_starts[(stop - 1) // self.block_size + 1])
        if self.base64:
            first, end = 4 * (first // 3), 4 * -(-end // 3)
        return self.data_at + first, self.data_at + end

    def _blocks(self, first: int, last: int) -> bytearray:
        """Blocks ``first..last`` decompressed into one buffer, their encoded bytes read in one go."""
        begin, end = int(self.block_starts[first]), int(self.block_starts[last + 1])
        packed = memoryview(self._stream_bytes(self.data_at, begin, end))
        out = bytearray(int(self.raw_sizes[first:last + 1].sum()))
        at = 0
        for index in range(first, last + 1):
            a, b = int(self.block_starts[index]) - begin, int(self.block_starts[index + 1]) - begin
            data = self._decompressed(index, packed[a:b])
            out[at:at + len(data)] = data
            at += len(data)
        self._cache = (last, data)
        return out

    def _block(self, index: int) -> bytes:
        if self._cache is not None and self._cache[0] == index:
            return self._cache[1]
        begin, end = int(self.block_starts[index]), int(self.block_starts[index + 1])
        data = self._decompressed(index, self._stream_bytes(self.data_at, begin, end))
        self._cache = (index, data)
        return data

    def _decompressed(self, index: int, packed) -> bytes:
        """Block ``index`` decompressed from its bytes ``packed``; VtkXmlError when it is corrupt."""
        size = int(self.raw_sizes[index])
        try:
            data = self.decompress(packed, size)
        except (zlib.error, lzma.LZMAError, ValueError) as err:
            raise VtkXmlError(f"{self.where}: compressed block {index} is corrupt ({err})") from err
        if len(data) != size:
            raise VtkXmlError(f"{self.where}: compressed block {index} holds {len(data)} bytes, "
                              f"expected {size}")
        return data


def _zlib(data: bytes, size: int) -> bytes:
    inflate = zlib.decompressobj()
    out = inflate.decompress(data, size)
    if inflate.unconsumed_tail:
        raise ValueError(f"it decompresses to more than {size} bytes")
    return out


def _lzma(data: bytes, size: int) -> bytes:
    unpack = lzma.LZMADecompressor()
    out = unpack.decompress(data, max_length=size)
    if len(out) == size and not unpack.eof and unpack.decompress(b"", max_length=1):
        raise ValueError(f"it decompresses to more than {size} bytes")
    return out


def _lz4(data: bytes, size: int) -> bytes:
    import lz4.block  # only needed for lz4 files

    try:
        return lz4.block.decompress(data, uncompressed_size=size)
    except lz4.block.LZ4BlockError as err:
        raise ValueError(str(err)) from err


# f(data, size) -> at most size decompressed bytes (ValueError beyond), by COMPRESSORS' names (the header checks them)
_DECOMPRESSORS = {"vtkZLibDataCompressor": _zlib, "vtkLZMADataCompressor": _lzma, "vtkLZ4DataCompressor": _lz4}


def _b64decode(text: bytes, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as err:
        raise VtkXmlError(f"{where}: bad base64 data ({err})") from err
