"""Reading one cache run generation: its attributes and checked reads of its arrays."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore, WrapperStore

from domino_pipeline.store.cache_format import (
    FORMAT,
    FORMAT_VERSION,
    CacheError,
    StaleCacheError,
    metadata_sha256,
)
from domino_pipeline.store.chunk_reader import Allocator, ChunkedArray


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
    open. A generation removed by later rebuilds raises StaleCacheError. Open one per process:
    the chunk readers reuse their buffers.
    """

    def __init__(self, path: str | os.PathLike, *, count_bytes: bool = False,
                 metadata: str | None = None) -> None:
        self.path = Path(path)
        if not (self.path / "zarr.json").is_file():
            if self.path.is_dir():
                raise CacheError(f"{self.path}: the run's metadata (zarr.json) is missing: corrupt")
            if self.path.parent.is_dir() and self.path.name.startswith("g"):
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
