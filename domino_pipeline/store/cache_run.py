"""Reading one cache run generation, from a local folder or an object-store prefix: its attributes, the arrays every
draw reads (kept with the open run) and checked, batched reads of the others."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from domino_pipeline.storage.byte_reader import LocalReader, Request, shared_reader
from domino_pipeline.storage.object_store import is_url, split_url
from domino_pipeline.store.cache_format import (ARRAYS, FORMAT, FORMAT_VERSION, GENERATION, NEIGHBOR_FEATURE_ARRAYS,
                                                CacheError, StaleCacheError, generations, metadata_digest,
                                                metadata_files, settings_arrays)
from domino_pipeline.store.chunk_reader import (Allocator, ChunkedArray, CorruptChunkError, Staged, fetch_chunks,
                                                read_many, supported_layout)
from domino_pipeline.store.run_checks import RunMetadataError, check_counts, check_grids, check_origin
from domino_pipeline.store.shard_index import CHECKSUM_BYTES, ShardIndexError, check_shards

CACHE_ARRAYS = tuple(ARRAYS) + tuple(NEIGHBOR_FEATURE_ARRAYS)  # every array a run may hold


class CacheRun:
    """One cache run generation (a folder or URL) opened read-only, for one process; ``metadata``: the manifest's
    SHA-256 of its ``zarr.json`` files; ``entry``: (run name, manifest entry) for the checks at open
    (docs/cache_format.md)."""

    def __init__(self, location: str | os.PathLike, *,
                 metadata: str | None = None, entry: tuple[str, dict] | None = None) -> None:
        self.remote = is_url(location)
        self.path = str(location).rstrip("/") if self.remote else Path(location)
        if self.remote:  # the source the run is read through, and the run's key prefix in it
            root, key = split_url(self.path)
            self.source, self.prefix = shared_reader(root), key + "/"
        else:
            self.source, self.prefix = LocalReader(self.path), ""
        self._metadata = self._read_metadata()
        if metadata is not None and metadata_digest(self._metadata) != metadata:
            raise CacheError(f"{self.path}: its metadata (attributes or array descriptions) differ "
                             "from what manifest.json records: edited or corrupt")
        try:
            meta = json.loads(self._metadata["zarr.json"])
        except ValueError as err:
            raise CacheError(f"{self.path}: unreadable cache run metadata ({err})") from err
        if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
            raise CacheError(f"{self.path}: unreadable cache run metadata (not a Zarr v3 group)")
        self.attrs = dict(meta.get("attributes") or {})
        if self.attrs.get("format") != FORMAT:
            raise CacheError(f"{self.path}: not a {FORMAT} run (format={self.attrs.get('format')!r})")
        if self.attrs.get("format_version") != FORMAT_VERSION:
            raise CacheError(f"{self.path}: format_version {self.attrs.get('format_version')}, "
                             f"this reader reads {FORMAT_VERSION}")
        self._group = None
        self._arrays: dict[str, zarr.Array] = {}
        self._readers: dict[str, ChunkedArray | None] = {}
        self._resident: dict[str, np.ndarray] = {}
        self._kept: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()  # keep() calls already done
        try:
            if entry is not None:
                self._check_metadata(*entry)
        except (ShardIndexError, RunMetadataError) as err:
            raise CacheError(f"{self.path}: {err}") from None

    def _check_metadata(self, name: str, entry: dict) -> None:
        """The run's metadata against its shards, counts, grid resolution and the manifest ``entry`` of run ``name``."""
        settings = self.attrs.get("settings")
        names = settings_arrays(settings if isinstance(settings, dict) else {})
        shapes = {}
        for array in names:
            try:
                shapes[array] = self._checked_shape(array)
            except ShardIndexError as err:
                raise ShardIndexError(f"array {array}: {err}") from None
        check_counts(self.attrs.get("counts"), {n: shape[0] for n, shape in shapes.items()})
        check_grids(settings, shapes)
        check_origin(self.attrs, name, entry)

    def _checked_shape(self, array: str) -> tuple[int, ...]:
        if not self.remote:
            return check_array_files(self.path / array)
        if f"{array}/zarr.json" not in self._metadata:
            raise ShardIndexError("missing (no zarr.json)")
        reader = self.reader(array)
        if reader is None:
            raise ShardIndexError("its description is not the layout a cache writes (sharded rows, "
                                  "bytes and CRC32C codecs, inner chunks dividing shards)")
        return reader.shape

    def _read_metadata(self) -> dict[str, bytes]:
        """Every ``zarr.json`` of the run by its path within the run (remotely in one wave)."""
        if not self.remote:
            refuse_links(self.path)
            if not (self.path / "zarr.json").is_file():
                if self.path.is_dir():
                    raise CacheError(f"{self.path}: the run's metadata (zarr.json) is missing: corrupt")
                if _newer_generation(self.path):
                    raise StaleCacheError(f"{self.path}: this generation of the run was replaced by a "
                                          "rebuild; open the dataset again to read the new one")
                raise FileNotFoundError(f"{self.path}: cache run does not exist (no zarr.json)")
            return metadata_files(self.path)
        names = ["zarr.json"] + [f"{n}/zarr.json" for n in CACHE_ARRAYS]
        fetched = self.source.fetch([Request(self.prefix + n) for n in names])
        found = {n: bytes(data) for n, (data, _) in zip(names, fetched) if data is not None}
        if "zarr.json" not in found:
            raise CacheError(f"{self.path}: the run's metadata (zarr.json) is missing: not uploaded, "
                             "removed by rebuilds, or not a cache run")
        return found

    @property
    def metadata_sha256(self) -> str:
        """SHA-256 of the run's ``zarr.json`` files as read at open (what the manifest records)."""
        return metadata_digest(self._metadata)

    @property
    def group(self) -> zarr.Group:
        """The run as a zarr-python group (for layouts the direct reader leaves to it)."""
        if self._group is None:
            if self.remote:
                from obstore.store import from_url
                store = zarr.storage.ObjectStore(from_url(self.path), read_only=True)
            else:
                store = LocalStore(str(self.path), read_only=True)
            try:
                self._group = zarr.open_group(store=store, mode="r", zarr_format=3)
            except Exception as err:  # zarr raises several types for unreadable metadata
                raise CacheError(f"{self.path}: unreadable cache run metadata ({err})") from err
        return self._group

    @property
    def bytes_read(self) -> int:
        """Bytes the direct chunk readers have read so far (not zarr-python's reads)."""
        return sum(r.bytes_read for r in self._readers.values() if r)

    def array(self, name: str) -> zarr.Array:
        """The named array (metadata only), or CacheError naming the run and the array."""
        if name not in self._arrays:
            try:
                self._arrays[name] = self.group[name]
            except KeyError as err:
                raise CacheError(f"{self.path}: array {name!r} is missing") from err
        return self._arrays[name]

    def shape(self, name: str) -> tuple[int, ...]:
        """The named array's shape, from its metadata."""
        reader = self.reader(name)
        return reader.shape if reader is not None else self.array(name).shape

    def reader(self, name: str) -> ChunkedArray | None:
        """The direct chunk reader of the named array, or None where it is left to zarr-python."""
        if name not in self._readers:
            raw = self._metadata.get(f"{name}/zarr.json")
            self._readers[name] = ChunkedArray.from_metadata(self.source, self.prefix + name, raw)
        return self._readers[name]

    def check_present(self) -> None:
        """StaleCacheError if this local generation was removed while open (replaced by rebuilds)."""
        if not self.remote and not os.path.exists(os.path.join(self.path, "zarr.json")):
            raise StaleCacheError(f"{self.path}: removed while open (replaced by rebuilds); open the dataset again")

    def keep(self, resident: list[str], indexed: list[str]) -> None:
        """Read in one wave the ``resident`` arrays whole (kept with the run) and the ``indexed`` arrays' indexes."""
        asked = (tuple(resident), tuple(indexed))
        if asked in self._kept:  # every draw calls it: no per-chunk work after the first
            return
        whole = [(n, self.reader(n)) for n in resident if n not in self._resident and self.reader(n)]
        shards = [(a, s, Request(a.prefix + a.key(s))) for _, a in whole for s in range(a.shard_count)]
        readers = [r for r in map(self.reader, indexed) if r is not None]
        tails = [(a, s, r) for a in readers for s, r in a.index_requests(a.chunks(Ellipsis))]
        with self._naming_errors("a kept array"):
            results = self.source.fetch([r for *_, r in shards + tails])
            for (array, shard, _), result in zip(tails, results[len(shards):]):
                array.set_index(shard, result)
            objects = {}
            for (array, shard, request), (data, size) in zip(shards, results):
                tail = None if data is None else data[len(data) - array.index_nbytes - CHECKSUM_BYTES:]
                array.set_index(shard, (tail, size))
                objects[request.key] = data
            for name, array in whole:
                chunks = array.chunks(Ellipsis)
                views = [objects[r.key][r.start:r.start + r.length] for r in array.chunk_requests(chunks)]
                self._resident[name] = array.assemble_rows(array.plan(Ellipsis)[0], chunks, views)
        self._kept.add(asked)

    def read(self, name: str, selection: Any = slice(None), allocate: Allocator = np.empty) -> np.ndarray:
        """``array[selection]`` from memory, ``ChunkedArray`` or zarr-python; a bad chunk is CacheError naming both."""
        return self.read_many([(name, selection, allocate)])[0]

    def stage(self, spans: dict[str, list[tuple[int, int]]]) -> Staged:
        """Fetch in one wave the inner chunks of rows [a, b) of each array for ``spans``, for ``read_many``."""
        wanted = []
        for name, parts in spans.items():
            reader = self.reader(name)
            if reader is not None and name not in self._resident:
                chunks = [reader.chunks(slice(a, b)) for a, b in parts]
                wanted.append((reader, chunks[0] if len(chunks) == 1 else np.unique(np.concatenate(chunks))))
        with self._naming_errors("an array"):
            return fetch_chunks(wanted)

    def read_many(self, reads: list[tuple[str, Any, Allocator]], staged: Staged | None = None) -> list[np.ndarray]:
        """``read`` of (name, selection, allocate) triples, direct ones fetched together or from ``staged``."""
        out: list[np.ndarray | None] = [None] * len(reads)
        direct = []
        for i, (name, selection, allocate) in enumerate(reads):
            reader = self.reader(name)
            if name in self._resident and reader.supports(selection):
                out[i] = _from_memory(self._resident[name], selection, allocate)
            elif reader is not None and reader.supports(selection):
                direct.append(i)
            else:
                out[i] = self._read_zarr(name, selection, allocate)
        what = f"array {reads[direct[0]][0]!r}" if len(direct) == 1 else "an array"
        with self._naming_errors(what):
            got = read_many([(self.reader(reads[i][0]), reads[i][1], reads[i][2]) for i in direct], staged)
        for i, data in zip(direct, got):
            out[i] = data
        return out

    def _read_zarr(self, name: str, selection: Any, allocate: Allocator) -> np.ndarray:
        array = self.array(name)
        with self._naming_errors(f"array {name!r}"):
            data = array.get_orthogonal_selection(selection) if isinstance(selection, np.ndarray) else array[selection]
        return data if allocate is np.empty else _copied(data, allocate)

    @contextmanager
    def _naming_errors(self, what: str) -> Iterator[None]:
        """A read failure as CacheError naming the run and ``what``; StaleCacheError for a removed generation."""
        try:
            yield
        except CacheError:
            raise
        except Exception as err:
            self.check_present()  # a generation removed while open: StaleCacheError
            what = f"array {err.array!r}" if isinstance(err, CorruptChunkError) else what
            raise CacheError(f"{self.path}: {what} is corrupt or unreadable: {err}") from err

    def close(self) -> None:
        """Release the run's open files (a local run); kept arrays go with the object."""
        if not self.remote:
            self.source.close()


def _from_memory(array: np.ndarray, selection: Any, allocate: Allocator) -> np.ndarray:
    """``array[selection]`` (rows) into a new array from ``allocate``."""
    if isinstance(selection, np.ndarray):
        out = allocate((len(selection), *array.shape[1:]), array.dtype)
        np.take(array, selection, axis=0, out=out)
        return out
    return _copied(array[selection], allocate)


def _copied(data: np.ndarray, allocate: Allocator) -> np.ndarray:
    """``data`` copied into a new array from ``allocate``."""
    out = allocate(data.shape, data.dtype)
    out[...] = data
    return out


def refuse_links(path: Path) -> None:
    """CacheError when a run generation or its run folder is a symbolic link (a cache holds none)."""
    for part in (path.parent, path):
        if part.is_symlink():
            raise CacheError(f"{part}: a symbolic link (to {os.readlink(part)}); a cache holds "
                             "none: refused (rerun cache_data.py to build the run in place)")


def _newer_generation(path: Path) -> bool:
    """Whether the folder of the absent generation ``path`` holds a newer one (replaced, not removed)."""
    number = GENERATION.match(path.name)
    return number is not None and any(n > int(number.group(1)) for n, _ in generations(path.parent))


def check_array_files(array_dir: Path) -> tuple[int, ...]:
    """A cache array's shape, its description and shard files checked together (ShardIndexError); no data read."""
    if array_dir.is_symlink():
        raise ShardIndexError("a symbolic link; a cache holds none")
    try:
        meta = json.loads((array_dir / "zarr.json").read_bytes())
    except FileNotFoundError:
        raise ShardIndexError("missing (no zarr.json)") from None
    except (OSError, ValueError) as err:
        raise ShardIndexError(f"unreadable description ({err})") from None
    layout = supported_layout(meta) if isinstance(meta, dict) else None
    if layout is None:
        raise ShardIndexError("its description is not the layout a cache writes (sharded rows, "
                              "bytes and CRC32C codecs, inner chunks dividing shards)")
    shape, dtype, chunk_rows, shard_rows = layout
    chunk_nbytes = chunk_rows * math.prod(shape[1:]) * dtype.itemsize + CHECKSUM_BYTES
    check_shards(shape[0], chunk_rows, shard_rows, chunk_nbytes, shard_sizes(array_dir, len(shape)))
    return shape


def shard_sizes(array_dir: Path, ndim: int) -> dict[int, int]:
    """Shard number -> bytes of an array's shard files (a listing); ShardIndexError for a link or stray name."""
    sizes: dict[int, int] = {}
    root = array_dir / "c"
    if not root.exists():
        return sizes
    with os.scandir(root) as listing:
        entries = list(listing)
    links = [entry for entry in entries if entry.is_symlink()]
    if links:
        raise ShardIndexError(f"{Path(links[0].path).relative_to(array_dir)} is a symbolic link; a cache holds none")
    for entry in entries:
        if not entry.name.isdigit():
            raise ShardIndexError(f"stray entry c/{entry.name}")
        node = Path(entry.path)
        for _ in range(ndim - 1):
            node = node / "0"
        if node.is_symlink() or not node.is_file():
            raise ShardIndexError(f"shard c/{entry.name} is not a file at {node.relative_to(array_dir)}")
        sizes[int(entry.name)] = node.stat().st_size
    return sizes
