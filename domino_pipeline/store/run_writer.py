"""Writing one cache run: a new generation, array by array or block by block, built under a hidden
temporary name and renamed into place whole; placed generations are never modified."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec

from domino_pipeline.storage.atomic_store import exclusive_lock, hold_temporary, remove_stale_temporaries
from domino_pipeline.compute.settings import PARTS
from domino_pipeline.store.cache_format import FORMAT, FORMAT_VERSION, ArraySpec, generations, layout_arrays, run_folder

KEEP_GENERATIONS = 2  # the new one and the one datasets opened before it may still read


@contextmanager
def run_lock(cache_dir: str | os.PathLike, name: str) -> Iterator[None]:
    """Be the only writer of run ``name`` for the block (a second waits), clearing dead writers' temporaries."""
    folder = run_folder(cache_dir, name)
    with exclusive_lock(folder / ".lock", f"cache run {folder}"):
        remove_stale_temporaries(folder)
        yield


def _grid(spec: ArraySpec, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inner chunk shape, shard shape) of an array of ``shape`` stored as ``spec`` says."""
    rows = max(shape[0], 1) if shape else 1
    chunk = rows if spec.chunk_rows is None else min(spec.chunk_rows, rows)
    shard = rows if spec.shard_rows is None else min(spec.shard_rows, rows)
    shard = -(-shard // chunk) * chunk  # whole inner chunks per shard
    return (chunk, *shape[1:]), (shard, *shape[1:])


class RunWriter:
    """Writes generation N+1 of a run under ``run_lock``: every array and inner chunk, ``attrs`` last."""

    def __init__(self, cache_dir: str | os.PathLike, name: str, shapes: dict[str, tuple[int, ...]],
                 attrs: dict[str, Any], *, neighbor_layout: str, parts: tuple[str, ...] = PARTS) -> None:
        self.specs = layout_arrays(neighbor_layout, parts)
        missing = sorted(set(self.specs) - set(shapes))
        if missing:
            raise ValueError(f"run {name}: the {neighbor_layout!r} neighbour layout of parts {list(parts)} "
                             f"needs arrays {missing}, which the contents to write lack")
        self.folder = run_folder(cache_dir, name)
        found = generations(self.folder)
        self.number = (found[-1][0] if found else 0) + 1
        self.path = self.folder / f"g{self.number}.zarr"
        self.tmp = self.folder / f".{self.path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.shapes, self.attrs = shapes, dict(attrs)
        self.written = {name: 0 for name in self.specs}
        self.started = time.time()

    def __enter__(self) -> RunWriter:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        self._held = hold_temporary(self.tmp)  # released on exit: then a dead writer's is stale
        self.group = zarr.create_group(store=str(self.tmp), zarr_format=3)
        self.arrays = {}
        for name, spec in self.specs.items():
            shape = tuple(int(n) for n in self.shapes[name])
            chunks, shards = _grid(spec, shape)
            self.arrays[name] = self.group.create_array(
                name, shape=shape, dtype=spec.dtype, chunks=chunks, shards=shards,
                serializer=BytesCodec(), compressors=[Crc32cCodec()], fill_value=0, config={"write_empty_chunks": True})
        return self

    def write_rows(self, name: str, start: int, data: np.ndarray) -> None:
        """Write rows ``start : start + len(data)`` of array ``name`` (whole shards where aligned to them)."""
        array = self.arrays[name]
        data = np.ascontiguousarray(data, dtype=self.specs[name].dtype)
        if data.shape[1:] != array.shape[1:] or start + len(data) > array.shape[0]:
            raise ValueError(f"{self.tmp}: array {name!r} {array.shape}: cannot write rows "
                             f"{start}:{start + len(data)} of shape {data.shape}")
        if len(data) == array.shape[0]:
            array[...] = data
        else:
            array[start:start + len(data)] = data
        self.written[name] += len(data)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._finish(exc_type)
        finally:
            os.close(self._held)

    def _finish(self, exc_type) -> None:
        """Rename the finished generation into place (or remove it after an exception); remove old ones."""
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        try:
            short = {n: (done, self.shapes[n][0]) for n, done in self.written.items() if done < self.shapes[n][0]}
            if short:
                raise ValueError(f"{self.tmp}: arrays written only in part (rows written, rows): {short}")
            self.attrs |= {"format": FORMAT, "format_version": FORMAT_VERSION, "generation": self.number,
                           "build_seconds": round(time.time() - self.started, 3)}
            self.group.attrs.update(self.attrs)  # last: a group with attrs has all its arrays
            os.rename(self.tmp, self.path)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        for _, old in generations(self.folder)[:-KEEP_GENERATIONS]:
            shutil.rmtree(old, ignore_errors=True)
