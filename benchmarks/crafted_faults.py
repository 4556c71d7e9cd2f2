"""Faults a buggy tool could write with every checksum recomputed, and faults from other writers
and dead processes: each made on a copy of a built cache (or of processed runs), for
fault_injection.py and the tests.

Each ``craft_*`` function changes a cache in place and returns (run name, a phrase the error
must hold). ``rehash`` recomputes what a careful but wrong tool would: the run's metadata
SHA-256 in the manifest and the manifest's own checksum.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import crc32c
import numpy as np

from domino_pipeline.store.cache_format import metadata_sha256
from domino_pipeline.store.manifest import MANIFEST, manifest_digest, run_path


def _manifest(cache: Path) -> dict:
    return json.loads((cache / MANIFEST).read_text())


def generation(cache: Path, name: str) -> Path:
    """The generation the manifest names for run ``name``."""
    return run_path(cache, name, _manifest(cache)["runs"][name])


def rehash(cache: Path, name: str, *, target: Path | None = None) -> None:
    """Record run ``name``'s metadata SHA-256 (of ``target``, default its generation) in the
    manifest and recompute the manifest's checksum."""
    manifest = _manifest(cache)
    entry = manifest["runs"][name]
    entry["metadata_sha256"] = metadata_sha256(target or run_path(cache, name, entry))
    manifest["sha256"] = manifest_digest(manifest)
    (cache / MANIFEST).write_text(json.dumps(manifest, indent=2))


def rewrite_index(shard: Path, entries: int, change) -> None:
    """Apply ``change`` to the (entries, 2) uint64 index at the end of ``shard`` and recompute
    its CRC32C."""
    raw = bytearray(shard.read_bytes())
    start = len(raw) - entries * 16 - 4
    index = np.frombuffer(bytes(raw[start:start + entries * 16]), dtype="<u8").reshape(entries, 2).copy()
    change(index)
    body = index.astype("<u8").tobytes()
    raw[start:] = body + crc32c.crc32c(body).to_bytes(4, "little")
    shard.write_bytes(bytes(raw))


def _inner_chunks(array_dir: Path) -> int:
    meta = json.loads((array_dir / "zarr.json").read_text())
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    return shard // meta["codecs"][0]["configuration"]["chunk_shape"][0]


def _edit_json(path: Path, change) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def craft_index_wrap(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An index offset near 2**64 (wraps past a uint64 bound check)."""
    array = generation(cache, name) / "volume_fields"
    rewrite_index(array / "c" / "0" / "0", _inner_chunks(array),
                  lambda index: index.__setitem__((0, 0), 2**64 - 17))
    return name, "volume_fields: the index of shard c/0/0: inner chunk 0 starts at byte"


def craft_index_overlap(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An index entry pointing at another chunk's bytes (both entries then valid alone)."""
    array = generation(cache, name) / "volume_fields"
    n = _inner_chunks(array)
    if n < 2:
        raise ValueError(f"{array}: one inner chunk per shard; build the cache with more volume rows")
    rewrite_index(array / "c" / "0" / "0", n, lambda index: index.__setitem__(1, index[0]))
    return name, "volume_fields: the index of shard c/0/0: inner chunk 1 overlaps inner chunk 0"


def craft_counts(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """``counts.volume = 10**12`` in the run's attributes."""
    _edit_json(generation(cache, name) / "zarr.json",
               lambda meta: meta["attributes"]["counts"].__setitem__("volume", 10**12))
    rehash(cache, name)
    return name, "counts.volume is 1000000000000, but array volume_"


def craft_huge_shape(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """``geometry_coordinates`` described with 2**40 rows."""
    _edit_json(generation(cache, name) / "geometry_coordinates" / "zarr.json",
               lambda meta: meta["shape"].__setitem__(0, 2**40))
    rehash(cache, name)
    return name, "array geometry_coordinates: 1099511627776 rows need"


def craft_inner_chunk(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An inner chunk shape of 10**9 rows for ``volume_fields``."""
    _edit_json(generation(cache, name) / "volume_fields" / "zarr.json",
               lambda meta: meta["codecs"][0]["configuration"]["chunk_shape"].__setitem__(0, 10**9))
    rehash(cache, name)
    return name, "array volume_fields: its description is not the layout a cache writes"


def craft_linked_generation(cache: Path, name: str = "run_2", other: str = "run_1") -> tuple[str, str]:
    """Run ``name``'s generation replaced by a symbolic link to run ``other``'s."""
    path = generation(cache, name)
    shutil.rmtree(path)
    os.symlink(os.path.relpath(generation(cache, other), path.parent), path)
    rehash(cache, name)
    return name, "a symbolic link"


def craft_copied_generation(cache: Path, name: str = "run_2", other: str = "run_1") -> tuple[str, str]:
    """Run ``name``'s generation replaced by a copy of run ``other``'s."""
    path = generation(cache, name)
    shutil.rmtree(path)
    shutil.copytree(generation(cache, other), path)
    rehash(cache, name)
    return name, f"records the processed run '{other}', but sits under '{name}'"


def craft_linked_run_folder(cache: Path, name: str = "run_2") -> tuple[str, str]:
    """Run ``name``'s folder moved outside the cache and replaced by a symbolic link to it."""
    outside = cache.parent / f"{cache.name}-outside-{name}"
    shutil.rmtree(outside, ignore_errors=True)
    shutil.move(str(cache / name), outside)
    os.symlink(outside, cache / name)
    return name, "a symbolic link"


CRAFTS = {
    "index offset near 2**64": craft_index_wrap,
    "index entry at another chunk": craft_index_overlap,
    "counts.volume = 10**12": craft_counts,
    "shape of 2**40 rows": craft_huge_shape,
    "inner chunk of 10**9 rows": craft_inner_chunk,
    "generation linked to another run's": craft_linked_generation,
    "generation copied from another run": craft_copied_generation,
    "run folder linked outside the cache": craft_linked_run_folder,
}
