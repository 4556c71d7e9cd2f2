"""Reading one cache run generation: its attributes and checked reads of its arrays."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore, WrapperStore

from domino_pipeline.compute.settings import neighbor_layout_of
from domino_pipeline.store.cache_format import (
    FORMAT,
    FORMAT_VERSION,
    GENERATION,
    CacheError,
    StaleCacheError,
    layout_arrays,
    metadata_sha256,
)
from domino_pipeline.store.chunk_reader import Allocator, ChunkedArray, supported_layout
from domino_pipeline.store.run_checks import RunMetadataError, check_counts, check_grids, check_origin
from domino_pipeline.store.shard_index import CHECKSUM_BYTES, ShardIndexError, check_shards


class CountingStore(WrapperStore):
    """A store that counts the bytes it returns (chunks and metadata), for the benchmark."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.bytes_read = 0

    async def get(self, key, prototype, byte_range=None):
        buffer = await self._store.get(key, prototype, byte_range)
        if buffer is not None:
            self.bytes_read += len(buffer)
        return buffer


class CacheRun:
    """One cache run generation opened read-only: its attributes and checked reads of its arrays.

    Arrays in the layout ``RunWriter`` writes are read straight from their shard files
    (``chunk_reader.ChunkedArray``); any other layout or selection goes through zarr-python.
    ``metadata``: the SHA-256 the manifest records of the run's ``zarr.json`` files, checked at
    open. ``entry``: (run name, its manifest entry), given where a run is opened from a
    manifest: the metadata is then checked against itself, the shard files and the entry
    (``_check_metadata``). A symbolic link as the generation or its run folder is refused. A
    generation removed by later rebuilds raises StaleCacheError. Open one per process:
    the chunk readers reuse their buffers.
    """

    def __init__(self, path: str | os.PathLike, *, count_bytes: bool = False,
                 metadata: str | None = None, entry: tuple[str, dict] | None = None) -> None:
        self.path = Path(path)
        refuse_links(self.path)
        if not (self.path / "zarr.json").is_file():
            if self.path.is_dir():
                raise CacheError(f"{self.path}: the run's metadata (zarr.json) is missing: corrupt")
            if _newer_generation(self.path):
                raise StaleCacheError(f"{self.path}: this generation of the run was replaced by a "
                                      "rebuild; open the dataset again to read the new one")
            raise FileNotFoundError(f"{self.path}: cache run does not exist (no zarr.json)")
        if metadata is not None and metadata_sha256(self.path) != metadata:
            raise CacheError(f"{self.path}: its metadata (attributes or array descriptions) differ "
                             "from what manifest.json records: edited or corrupt")
        self.store = CountingStore(LocalStore(str(self.path), read_only=True)) if count_bytes \
            else LocalStore(str(self.path), read_only=True)
        try:
            self.group = zarr.open_group(store=self.store, mode="r", zarr_format=3)
        except Exception as err:  # zarr raises several types for unreadable metadata
            raise CacheError(f"{self.path}: unreadable cache run metadata ({err})") from err
        self.attrs = dict(self.group.attrs)
        if self.attrs.get("format") != FORMAT:
            raise CacheError(f"{self.path}: not a {FORMAT} run (format={self.attrs.get('format')!r})")
        if self.attrs.get("format_version") != FORMAT_VERSION:
            raise CacheError(f"{self.path}: format_version {self.attrs.get('format_version')}, "
                             f"this reader reads {FORMAT_VERSION}")
        self.count_bytes = count_bytes
        self._arrays: dict[str, zarr.Array] = {}
        self._readers: dict[str, ChunkedArray | None] = {}
        try:
            if entry is not None:
                self._check_metadata(*entry)
        except (ShardIndexError, RunMetadataError) as err:
            raise CacheError(f"{self.path}: {err}") from None

    def _check_metadata(self, name: str, entry: dict) -> None:
        """The run's metadata against itself and the bytes on disk (every array in the layout
        the cache writes, its shards as its shape implies, counts equal to array lengths, grids
        of the settings' resolution) and against the manifest ``entry`` of run ``name`` that
        it was opened from."""
        settings = self.attrs.get("settings")
        names = layout_arrays(neighbor_layout_of(settings if isinstance(settings, dict) else {}))
        shapes = {}
        for array in names:
            try:
                shapes[array] = check_array_files(self.path / array)
            except ShardIndexError as err:
                raise ShardIndexError(f"array {array}: {err}") from None
        check_counts(self.attrs.get("counts"), {n: shape[0] for n, shape in shapes.items()})
        check_grids(settings, shapes)
        check_origin(self.attrs, name, entry)

    @property
    def bytes_read(self) -> int:
        """Bytes of files read so far, metadata (``zarr.json``) and shard indexes included,
        chunk checksums included; only with ``count_bytes=True``, else 0."""
        if not self.count_bytes:
            return 0
        return self.store.bytes_read + sum(r.bytes_read for r in self._readers.values() if r)

    def array(self, name: str) -> zarr.Array:
        """The named array (metadata only), or CacheError naming the run and the array."""
        if name not in self._arrays:
            try:
                self._arrays[name] = self.group[name]
            except KeyError as err:
                raise CacheError(f"{self.path}: array {name!r} is missing") from err
        return self._arrays[name]

    def reader(self, name: str) -> ChunkedArray | None:
        """The direct chunk reader of the named array, or None where its layout (or its
        absence) is left to zarr-python."""
        if name not in self._readers:
            self._readers[name] = ChunkedArray.open(self.path / name)
        return self._readers[name]

    def prefetch(self, name: str, selection: Any = Ellipsis) -> None:
        """Start reading, in the background, what ``read(name, selection)`` will read
        (``ChunkedArray.prefetch``); nothing for layouts and selections left to zarr-python."""
        reader = self.reader(name)
        if reader is not None and reader.supports(selection):
            reader.prefetch(selection)

    def read(self, name: str, selection: Any = slice(None),
             empty: Allocator = np.empty) -> np.ndarray:
        """``array[selection]`` (orthogonal indexing for index arrays), from the shard files
        where ``ChunkedArray`` reads the layout and the selection, else with zarr-python; a
        failed checksum, a missing or unreadable chunk raises CacheError naming the run and the
        array. ``empty(shape, dtype)`` allocates the result (batch_transfer.output_array puts it
        where a DataLoader worker's batch travels)."""
        reader = self.reader(name)
        array = self.array(name) if reader is None or not reader.supports(selection) else None
        try:
            if array is None:
                return reader.read(selection, empty)
            if isinstance(selection, np.ndarray):
                data = array.get_orthogonal_selection(selection)
            else:
                data = array[selection]
        except Exception as err:  # codec, store and chunk errors come in several types
            if not (self.path / "zarr.json").exists():
                raise StaleCacheError(f"{self.path}: removed while open (replaced by rebuilds); "
                                      "open the dataset again") from err
            raise CacheError(f"{self.path}: array {name!r} is corrupt or unreadable: {err}") from err
        if empty is np.empty:
            return data
        out = empty(data.shape, data.dtype)
        out[...] = data
        return out


def refuse_links(path: Path) -> None:
    """CacheError when a run generation or its run folder is a symbolic link: a cache holds
    none, and one that points elsewhere would serve another run's data under this run's name."""
    for part in (path.parent, path):
        if part.is_symlink():
            raise CacheError(f"{part}: a symbolic link (to {os.readlink(part)}); a cache holds "
                             "none: refused (rerun cache_data.py to build the run in place)")


def _newer_generation(path: Path) -> bool:
    """Whether the run folder of the absent generation ``path`` holds a newer one (a rebuild
    replaced it) rather than none at all (removed)."""
    number = GENERATION.match(path.name)
    if number is None or not path.parent.is_dir():
        return False
    return any((m := GENERATION.match(p.name)) and int(m.group(1)) > int(number.group(1))
               for p in path.parent.iterdir())


def check_array_files(array_dir: Path) -> tuple[int, ...]:
    """The shape of a cache array after checking its description and its shard files against
    each other (ShardIndexError naming the problem): the layout the cache writes, chunking
    within the format's limits, every shard file present with the exact size its shape implies,
    no symbolic link. Reads the description and lists the shard files; reads no data."""
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
    """Shard number -> bytes of the shard files ``c/<s>/0/...`` of an array of ``ndim``
    dimensions (a listing, no data read); ShardIndexError for a symbolic link or a stray name."""
    sizes: dict[int, int] = {}
    root = array_dir / "c"
    if not root.exists():
        return sizes
    for entry in _entries(root):
        if not entry.name.isdigit():
            raise ShardIndexError(f"stray entry c/{entry.name}")
        node = Path(entry.path)
        for _ in range(ndim - 1):
            node = node / "0"
        if node.is_symlink() or not node.is_file():
            raise ShardIndexError(f"shard c/{entry.name} is not a file at {node.relative_to(array_dir)}")
        sizes[int(entry.name)] = node.stat().st_size
    return sizes


def _entries(folder: Path) -> list[os.DirEntry]:
    """The entries of ``folder``; ShardIndexError naming a symbolic link among them."""
    with os.scandir(folder) as listing:
        entries = list(listing)
    for entry in entries:
        if entry.is_symlink():
            raise ShardIndexError(f"{Path(entry.path).relative_to(folder.parent)} is a symbolic link; "
                                  "a cache holds none")
    return entries
