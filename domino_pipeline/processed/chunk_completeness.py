"""Whether every chunk of a Zarr array (v2 or v3, sharded or not, local or on object storage) was
written: zarr reads an absent chunk as zeros. docs/processed_runs.md, "Missing chunks"."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from domino_pipeline.storage.byte_reader import read_bytes
from domino_pipeline.storage.object_store import as_location, is_url, join, list_objects

ABSENT = 2**64 - 1  # Zarr's shard index entry of an inner chunk that was not written
INDEX_ENTRY_BYTES = 16  # (offset, nbytes), two little-endian uint64
CHECKSUM_BYTES = 4  # a CRC32C: after a shard's index where its codecs say so, and after a cache's every inner chunk


def missing_chunks(array_dir: str | os.PathLike, limit: int = 5) -> list[str]:
    """Up to ``limit`` chunks the array's shape implies and its folder lacks; ValueError for bad metadata."""
    array_dir = as_location(array_dir)
    grid = _grid(array_dir)
    present = _listing(array_dir)
    missing: list[str] = []
    for position in itertools.product(*(range(-(-s // c)) for s, c in zip(grid["shape"], grid["chunks"]))):
        key = grid["key"](position)
        if key not in present:
            missing.append(key)
        elif grid["inner"] is not None:
            missing += [f"{key} inner chunk {i}" for i in _unwritten_inner(join(array_dir, key), position, grid)]
        if len(missing) >= limit:
            return missing[:limit]
    return missing


def _metadata(array_dir: Path | str, name: str) -> dict | None:
    """The array's metadata file ``name`` parsed, or None when it has none."""
    raw = read_bytes(join(array_dir, name))
    return None if raw is None else json.loads(raw)


def _grid(array_dir: Path | str) -> dict[str, Any]:
    """Shape, chunk (or shard) shape, key function and inner sharding of an array's metadata."""
    meta = _metadata(array_dir, ".zarray")
    if meta is not None:
        separator = meta.get("dimension_separator") or "."
        return {"shape": meta["shape"], "chunks": meta["chunks"], "inner": None, "key": _keys(separator, None)}
    meta = _metadata(array_dir, "zarr.json")
    if meta is None:
        raise ValueError(f"{array_dir}: no .zarray or zarr.json")
    encoding = meta.get("chunk_key_encoding") or {"name": "default"}
    config = encoding.get("configuration") or {}
    default = encoding.get("name", "default") == "default"
    separator = config.get("separator", "/" if default else ".")
    codecs = [c for c in meta.get("codecs", []) if isinstance(c, dict)]
    sharding = next((c.get("configuration") or {} for c in codecs if c.get("name") == "sharding_indexed"), None)
    return {"shape": meta["shape"], "chunks": meta["chunk_grid"]["configuration"]["chunk_shape"],
            "inner": sharding, "key": _keys(separator, "c" if default else None)}


def _keys(separator: str, prefix: str | None):
    """The chunk key of a grid position for this encoding (``c/1/0``, ``1.0``; 0-d: ``c``, ``0``)."""
    def key(position: tuple[int, ...]) -> str:
        parts = [str(i) for i in position] or ([] if prefix else ["0"])
        return separator.join(([prefix] if prefix else []) + parts)
    return key


def _listing(array_dir: Path | str) -> set[str]:
    """Relative paths ("/"-joined) of every file under the array folder, in one walk or listing."""
    if is_url(array_dir):
        return set(list_objects(array_dir))
    found = set()
    for folder, _, files in os.walk(array_dir):
        relative = Path(folder).relative_to(array_dir).as_posix()
        found.update(f if relative == "." else f"{relative}/{f}" for f in files)
    return found


def _unwritten_inner(shard: Path | str, position: tuple[int, ...], grid: dict) -> list[int]:
    """A shard's inner chunks inside the array whose index entry says absent; reads only the index."""
    inner = grid["inner"]["chunk_shape"]
    per_axis = [o // i for o, i in zip(grid["chunks"], inner)]
    n = math.prod(per_axis)
    crc = any(c.get("name") == "crc32c" for c in grid["inner"].get("index_codecs", []) if isinstance(c, dict))
    nbytes = n * INDEX_ENTRY_BYTES + (CHECKSUM_BYTES if crc else 0)
    at_start = grid["inner"].get("index_location", "end") == "start"
    raw = (read_bytes(shard, 0 if at_start else None, nbytes) or b"")[:n * INDEX_ENTRY_BYTES]
    if len(raw) < n * INDEX_ENTRY_BYTES:
        return list(range(n))
    index = np.frombuffer(raw, dtype="<u8").reshape(n, 2)
    origin = [p * o for p, o in zip(position, grid["chunks"])]
    missing = []
    for i, local in enumerate(itertools.product(*(range(k) for k in per_axis))):
        inside = all(o + j * c < s for o, j, c, s in zip(origin, local, inner, grid["shape"]))
        if inside and index[i, 0] == ABSENT and index[i, 1] == ABSENT:
            missing.append(i)
    return missing
