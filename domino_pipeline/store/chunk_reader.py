"""Checked reads of cache arrays from their shard objects without zarr-python, for the layout the cache writes
(docs/cache_format.md, "Reading chunks directly"): a read is planned (inner chunks, ranges from the kept shard indexes),
``read_many`` fetches several arrays' ranges in one wave of a ``ByteReader``, checks every checksum and assembles them.
``ChunkedArray.open`` returns None for other layouts (zarr-python's). Not thread-safe."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import numpy as np

from domino_pipeline.storage.byte_reader import ByteReader, LocalReader, Request
from domino_pipeline.store.shard_index import (CHECKSUM_BYTES, INDEX_ENTRY_BYTES, ShardIndexError, check_index,
                                               chunks_in_shard, shard_nbytes)

# Zarr v3 data types whose names numpy reads directly.
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "float32", "float64"})
METADATA_KEYS = frozenset({"zarr_format", "node_type", "shape", "data_type", "chunk_grid",
                           "chunk_key_encoding", "fill_value", "codecs", "attributes",
                           "storage_transformers", "dimension_names"})
Allocator = Callable[[tuple[int, ...], np.dtype], np.ndarray]  # np.empty's (shape, dtype)


class CorruptChunkError(ValueError):
    """A shard or inner chunk missing, failing its CRC32C check or of the wrong size; ``array`` names it."""

    def __init__(self, array: str, message: str) -> None:
        super().__init__(f"{array}: {message}")
        self.array = array


class ChunkedArray:
    """One array of a supported layout read through a ByteReader, checksums checked, every byte counted."""

    def __init__(self, source: ByteReader, key: str, shape: tuple[int, ...], dtype: np.dtype,
                 chunk_rows: int, shard_rows: int, metadata_bytes: int = 0) -> None:
        self.source, self.prefix = source, (key.strip("/") + "/" if key.strip("/") else "")
        self.name = key.strip("/").rsplit("/", 1)[-1] or Path(source.location).name
        self.shape, self.dtype, self.chunk_rows = shape, dtype, chunk_rows
        self.chunks_per_shard = shard_rows // chunk_rows
        self.row_shape = shape[1:]
        self._chunk_shape = (chunk_rows, *self.row_shape)
        self.chunk_nbytes = chunk_rows * math.prod(self.row_shape) * dtype.itemsize
        self.index_nbytes = self.chunks_per_shard * INDEX_ENTRY_BYTES
        self.bytes_read = metadata_bytes
        self._indexes: dict[int, np.ndarray] = {}  # shard -> (chunks_per_shard, 2) uint64

    @classmethod
    def open(cls, path: str | os.PathLike) -> ChunkedArray | None:
        """The local array at ``path`` if its ``zarr.json`` is the supported layout; None otherwise."""
        path = Path(path)
        try:
            raw = (path / "zarr.json").read_bytes()
        except OSError:
            return None
        return cls.from_metadata(LocalReader(path.parent), path.name, raw)

    @classmethod
    def from_metadata(cls, source: ByteReader, key: str, raw: bytes | None) -> ChunkedArray | None:
        """The array at ``key`` of ``source`` whose ``zarr.json`` is ``raw``, if its layout is supported; else None."""
        try:
            meta = json.loads(bytes(raw)) if raw is not None else None
        except ValueError:
            return None
        layout = supported_layout(meta) if isinstance(meta, dict) else None
        if layout is None:
            return None
        shape, dtype, chunk_rows, shard_rows = layout
        return cls(source, key, shape, dtype, chunk_rows, shard_rows, metadata_bytes=len(raw))

    def __len__(self) -> int:
        return self.shape[0]

    @staticmethod
    def supports(selection: Any) -> bool:
        """Whether ``read`` takes ``selection``: a step-1 slice, Ellipsis or a 1-D integer index array."""
        if selection is Ellipsis:
            return True
        if isinstance(selection, slice):
            return selection.step in (None, 1)
        return isinstance(selection, np.ndarray) and selection.ndim == 1 and selection.dtype.kind in "iu"

    def read(self, selection: Any, allocate: Allocator = np.empty) -> np.ndarray:
        """``array[selection]`` (slices clip as numpy's; index arrays gather rows), into ``allocate(shape, dtype)``."""
        return read_many([(self, selection, allocate)])[0]

    @property
    def _chunk_count(self) -> int:
        return -(-len(self) // self.chunk_rows)

    @property
    def shard_count(self) -> int:
        """Shard objects of the array (one for an empty array)."""
        return max(1, -(-self._chunk_count // self.chunks_per_shard))

    def chunks(self, selection: Any) -> np.ndarray:
        """The inner chunks (global numbers, ascending, once each) ``selection`` touches."""
        return self.plan(selection)[1]

    def plan(self, selection: Any) -> tuple[slice | np.ndarray, np.ndarray]:
        """(the selection as rows: a bounded slice or checked indices; the inner chunks it touches)."""
        if selection is Ellipsis or isinstance(selection, slice):
            start, stop, _ = (slice(None) if selection is Ellipsis else selection).indices(len(self))
            chunks = np.arange(start // self.chunk_rows, -(-stop // self.chunk_rows)) if stop > start else np.arange(0)
            return slice(start, max(start, stop)), chunks
        rows = self._checked(selection)
        chunks = rows // self.chunk_rows
        steps = np.diff(chunks)
        if steps.size and steps.min() >= 0:  # sorted rows: their chunks without a sort
            return rows, chunks[np.flatnonzero(np.concatenate(([1], steps)))]
        return rows, np.unique(chunks)

    def index_requests(self, chunks: np.ndarray) -> list[tuple[int, Request]]:
        """(shard, request for its index and checksum: the object's last bytes) of the unkept indexes of ``chunks``."""
        shards = np.unique(np.asarray(chunks, dtype=np.int64) // self.chunks_per_shard)
        return [(int(s), Request(self.prefix + self.key(int(s)), None, self.index_nbytes + CHECKSUM_BYTES))
                for s in shards if int(s) not in self._indexes]

    def set_index(self, shard: int, result: tuple[memoryview | None, int | None]) -> None:
        """Check (CRC32C, chunks inside the data part) and keep shard ``shard``'s index from its fetched tail."""
        key = self.key(shard)
        data, size = result
        if data is None:
            raise CorruptChunkError(self.name, f"shard {key} is missing")
        shard_rows = self.chunks_per_shard * self.chunk_rows
        expected = shard_nbytes(len(self), shard, shard_rows, self.chunk_rows, self.chunk_nbytes + CHECKSUM_BYTES)
        if size != expected:
            raise CorruptChunkError(self.name, f"shard {key} has {size} bytes; its shape and chunking "
                                    f"make it {expected}")
        self.bytes_read += len(data)
        raw = data[:self.index_nbytes]
        _verify(self.name, f"the index of shard {key}", raw, data[self.index_nbytes:])
        index = np.frombuffer(bytes(raw), dtype="<u8").reshape(self.chunks_per_shard, 2)  # a copy
        inside = chunks_in_shard(len(self), shard, self.chunks_per_shard * self.chunk_rows, self.chunk_rows)
        try:
            check_index(index, size - self.index_nbytes - CHECKSUM_BYTES, self.chunk_nbytes + CHECKSUM_BYTES, inside)
        except ShardIndexError as err:
            raise CorruptChunkError(self.name, f"the index of shard {key}: {err}") from None
        self._indexes[shard] = index

    def chunk_requests(self, chunks: np.ndarray) -> list[Request]:
        """The byte range (data and checksum) of each of ``chunks``, from the kept indexes."""
        chunks = np.asarray(chunks, dtype=np.int64)
        shards, inner = np.divmod(chunks, self.chunks_per_shard)
        requests: list[Request] = []
        one = shards.size and shards.min() == shards.max()  # the chunks of one shard: the usual
        for shard in [int(shards[0])] if one else np.unique(shards).tolist():
            picked = inner if one else inner[shards == shard]
            offsets = self._indexes[shard][picked, 0]  # set_index checked each entry's size
            key = self.prefix + self.key(shard)
            nbytes = self.chunk_nbytes + CHECKSUM_BYTES
            requests += [Request(key, offset, nbytes) for offset in offsets.tolist()]
        return requests

    def chunk_array(self, chunk: int, data: memoryview | None) -> np.ndarray:
        """Inner chunk ``chunk`` as (chunk_rows, *row_shape), a view of ``data`` after checking size and CRC32C."""
        nbytes = self.chunk_nbytes
        if data is None or len(data) != nbytes + CHECKSUM_BYTES:
            self._refuse_chunk(chunk, data)
        self.bytes_read += nbytes + CHECKSUM_BYTES
        if crc32c.crc32c(data[:nbytes]) != int.from_bytes(data[nbytes:], "little"):
            shard, inner = divmod(int(chunk), self.chunks_per_shard)
            _verify(self.name, f"inner chunk {inner} of shard {self.key(shard)}", data[:nbytes], data[nbytes:])
        return np.frombuffer(data, self.dtype, nbytes // self.dtype.itemsize).reshape(self._chunk_shape)

    def _refuse_chunk(self, chunk: int, data: memoryview | None) -> None:
        """CorruptChunkError for a chunk whose fetched bytes are absent or short."""
        shard, inner = divmod(int(chunk), self.chunks_per_shard)
        if data is None:
            raise CorruptChunkError(self.name, f"shard {self.key(shard)} is missing")
        self.bytes_read += len(data)
        raise CorruptChunkError(self.name, f"inner chunk {inner} of shard {self.key(shard)} ended after "
                                f"{len(data)} of {self.chunk_nbytes + CHECKSUM_BYTES} bytes")

    def assemble_rows(self, rows: slice | np.ndarray, chunks: np.ndarray, data: list[memoryview | None],
                      allocate: Allocator = np.empty) -> np.ndarray:
        """``array[selection]`` from the fetched ``data`` of ``chunks``, the selection planned (``plan``)."""
        arrays = {c: self.chunk_array(c, d) for c, d in zip(chunks.tolist(), data)}
        if isinstance(rows, slice):
            return self._rows(rows.start, rows.stop, arrays, allocate)
        return self._take(rows, arrays, allocate)

    def _rows(self, start: int, stop: int, arrays: dict[int, np.ndarray], allocate: Allocator) -> np.ndarray:
        out = allocate((stop - start, *self.row_shape), self.dtype)
        for chunk, rows in arrays.items():
            first = chunk * self.chunk_rows
            lo, hi = max(start, first), min(stop, first + self.chunk_rows)
            out[lo - start:hi - start] = rows[lo - first:hi - first]
        return out

    def _take(self, indices: np.ndarray, arrays: dict[int, np.ndarray], allocate: Allocator) -> np.ndarray:
        chunks = indices // self.chunk_rows
        order = None
        if np.any(chunks[1:] < chunks[:-1]):  # group by chunk; a radix sort for small chunk ids
            order = np.argsort(chunks.astype(np.uint16 if self._chunk_count <= 1 << 16 else np.int64), kind="stable")
            indices, chunks = indices[order], chunks[order]
        shape = (len(indices), *self.row_shape)
        out = allocate(shape, self.dtype) if order is None else np.empty(shape, self.dtype)
        touched = np.fromiter(arrays, dtype=np.int64, count=len(arrays))  # ascending, as planned
        starts = np.searchsorted(chunks, touched).tolist()
        ends = np.searchsorted(chunks, touched, side="right").tolist()
        if sum(ends) - sum(starts) != len(indices):
            raise ValueError(f"{self.name}: the chunks given do not hold every row asked for")
        for chunk, a, b in zip(touched.tolist(), starts, ends):
            local = indices[a:b] - chunk * self.chunk_rows
            np.take(arrays[chunk], local, axis=0, out=out[a:b], mode="clip")  # clip: unbuffered
        if order is None:
            return out
        result = allocate(shape, self.dtype)
        result[order] = out
        return result

    def _checked(self, indices: np.ndarray) -> np.ndarray:
        """``indices`` as int64 with negatives wrapped; IndexError naming the array if any is out of range."""
        indices = np.asarray(indices)
        if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
            raise IndexError(f"{self.name}: row indices must be a 1-D integer array, "
                             f"got shape {indices.shape} dtype {indices.dtype}")
        if indices.size and (indices.min() < -len(self) or indices.max() >= len(self)):
            bad = indices[(indices < -len(self)) | (indices >= len(self))][0]
            raise IndexError(f"{self.name}: row {bad} out of range for {len(self)} rows")
        indices = indices.astype(np.int64)  # a copy: the caller's array is never changed
        if indices.size and indices.min() < 0:
            indices[indices < 0] += len(self)
        return indices

    def key(self, shard: int) -> str:
        """The object of shard ``shard``, relative to the array: ``c/<shard>/0/...``."""
        return "/".join(["c", str(shard)] + ["0"] * (len(self.shape) - 1))


Staged = dict["ChunkedArray", dict[int, memoryview | None]]  # array -> inner chunk -> its bytes


def read_many(reads: list[tuple[ChunkedArray, Any, Allocator]], staged: Staged | None = None) -> list[np.ndarray]:
    """``array[selection]`` of (array, selection, allocate) triples of one source, from ``staged`` or in two waves."""
    staged = staged or {}
    plans = _plans(reads)
    out: list[np.ndarray | None] = [None] * len(reads)
    rest = []
    for i, ((array, _, allocate), (rows, chunks)) in enumerate(zip(reads, plans)):
        have = staged.get(array, {})
        numbers = chunks.tolist()
        if all(c in have for c in numbers):
            out[i] = array.assemble_rows(rows, chunks, [have[c] for c in numbers], allocate)
        else:
            rest.append(i)
    fetched = fetch_chunks([(reads[i][0], plans[i][1]) for i in rest])  # staged bytes are used up
    for i in rest:
        array, _, allocate = reads[i]
        rows, chunks = plans[i]
        out[i] = array.assemble_rows(rows, chunks, [fetched[array][c] for c in chunks.tolist()], allocate)
    return out  # type: ignore[return-value]


def fetch_chunks(wanted: list[tuple[ChunkedArray, np.ndarray]]) -> Staged:
    """The bytes of every (array, chunks) pair of one source: missing indexes in one wave, chunks in another."""
    if not wanted:
        return {}
    source = wanted[0][0].source
    indexes = [(array, shard, request) for array, chunks in wanted for shard, request in array.index_requests(chunks)]
    for (array, shard, _), result in zip(indexes, source.fetch([r for _, _, r in indexes])):
        array.set_index(shard, result)
    requests = [array.chunk_requests(chunks) for array, chunks in wanted]
    results = iter(source.fetch([r for group in requests for r in group]))
    staged: Staged = {}
    for (array, chunks), group in zip(wanted, requests):
        have = staged.setdefault(array, {})
        for chunk, _ in zip(chunks.tolist(), group):
            have[chunk] = next(results)[0]
    return staged


def _plans(reads: list[tuple[ChunkedArray, Any, Allocator]]) -> list[tuple[slice | np.ndarray, np.ndarray]]:
    """``array.plan(selection)`` of every read, made once for reads sharing selection, length and chunking."""
    made: dict[tuple[int, int, int], tuple[slice | np.ndarray, np.ndarray]] = {}
    plans = []
    for array, selection, _ in reads:
        key = (id(selection), len(array), array.chunk_rows)
        if key not in made:
            made[key] = array.plan(selection)
        plans.append(made[key])
    return plans


def _verify(name: str, where: str, data: memoryview, checksum: memoryview) -> None:
    """CorruptChunkError naming the array and ``where`` unless ``data`` matches its little-endian ``checksum``."""
    stored, computed = int.from_bytes(checksum, "little"), crc32c.crc32c(data)
    if stored != computed:
        raise CorruptChunkError(name, f"{where} failed its CRC32C check "
                                f"(stored 0x{stored:08x}, computed 0x{computed:08x})")


def supported_layout(meta: dict) -> tuple[tuple[int, ...], np.dtype, int, int] | None:
    """(shape, dtype, chunk_rows, shard_rows) of an array's ``zarr.json`` if its layout is supported; else None."""
    if (set(meta) - METADATA_KEYS or meta.get("zarr_format") != 3
            or meta.get("node_type") != "array" or meta.get("storage_transformers", []) != []):
        return None
    name, shape = meta.get("data_type"), meta.get("shape")
    if name not in DTYPES or not _is_shape(shape) or not shape:
        return None
    dtype = np.dtype(name).newbyteorder("<")
    shard_rows = _rows_of(meta.get("chunk_grid"), shape)
    sharding = _sharding(meta.get("codecs"))
    if shard_rows is None or sharding is None or not _default_keys(meta.get("chunk_key_encoding")):
        return None
    chunk_shape, codecs, index_codecs = sharding
    chunk_rows = _rows_of({"name": "regular", "configuration": {"chunk_shape": chunk_shape}}, shape)
    if (chunk_rows is None or shard_rows % chunk_rows or not _bytes_then_crc32c(codecs, dtype)
            or not _bytes_then_crc32c(index_codecs, np.dtype("<u8"))):
        return None
    return tuple(shape), dtype, chunk_rows, shard_rows


def _sharding(codecs: Any) -> tuple[Any, Any, Any] | None:
    """(inner chunk shape, inner codecs, index codecs) of a lone ``sharding_indexed`` codec indexed at the end."""
    if not isinstance(codecs, list) or len(codecs) != 1 or not isinstance(codecs[0], dict):
        return None
    codec = codecs[0]
    config = codec.get("configuration") or {}
    if codec.get("name") != "sharding_indexed" or config.get("index_location", "end") != "end":
        return None
    return config.get("chunk_shape"), config.get("codecs"), config.get("index_codecs")


def _is_shape(value: Any) -> bool:
    """Whether ``value`` is a JSON list of non-negative integers."""
    return isinstance(value, list) and all(type(n) is int and n >= 0 for n in value)


def _rows_of(grid: Any, shape: list[int]) -> int | None:
    """Rows per chunk of a regular grid chunked along axis 0 only, the other dimensions whole."""
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        return None
    chunks = (grid.get("configuration") or {}).get("chunk_shape")
    if not _is_shape(chunks) or len(chunks) != len(shape) or chunks[1:] != shape[1:] or chunks[0] < 1:
        return None
    return chunks[0]


def _default_keys(encoding: Any) -> bool:
    """Whether chunk keys are the default encoding with the "/" separator (``c/3/0``)."""
    if not isinstance(encoding, dict) or encoding.get("name") != "default":
        return False
    return (encoding.get("configuration") or {}).get("separator", "/") == "/"


def _bytes_then_crc32c(codecs: Any, dtype: np.dtype) -> bool:
    """Whether the codecs are exactly ``bytes`` (little endian; any for 1-byte types) then ``crc32c``."""
    if not isinstance(codecs, list) or len(codecs) != 2 or not all(isinstance(c, dict) for c in codecs):
        return False
    serializer, checksum = codecs
    endian = (serializer.get("configuration") or {}).get("endian")
    endian_ok = endian == "little" or (dtype.itemsize == 1 and endian in (None, "big"))
    return (serializer.get("name") == "bytes" and endian_ok and checksum.get("name") == "crc32c"
            and not checksum.get("configuration"))
