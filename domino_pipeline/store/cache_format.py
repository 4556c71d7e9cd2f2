"""The DoMINO cache on disk: its layout, version, fingerprints and errors (spec:
docs/cache_format.md, "Layout" and "The settings and the fingerprint")."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from domino_pipeline.compute.settings import IMPLICIT_DEFAULTS, NEIGHBOR_LAYOUTS, PARTS, held_parts, neighbor_layout_of
from domino_pipeline.compute.volume_order import VOLUME_BLOCK_ROWS
from domino_pipeline.storage.byte_reader import reader_and_key
from domino_pipeline.storage.object_store import is_url, join

FORMAT = "domino-cache"
FORMAT_VERSION = 2  # of the layout on disk; part of every run fingerprint
GENERATION = re.compile(r"^g(\d+)\.zarr$")


@dataclass(frozen=True)
class ArraySpec:
    """How one array is stored: dtype, rows per inner chunk and per shard (None: the whole array)."""

    dtype: str
    chunk_rows: int | None
    shard_rows: int | None


SURFACE_SHARD_ROWS = 1 << 21
# Inner chunks of a few hundred KiB; volume shards are the build's blocks (VOLUME_BLOCK_ROWS).
ARRAYS: dict[str, ArraySpec] = {
    "geometry_coordinates": ArraySpec("float32", 32768, None),
    "surface_grid_sdf": ArraySpec("float32", None, None),
    "volume_grid_sdf": ArraySpec("float32", None, None),
    "surface_coordinates": ArraySpec("float32", 16384, SURFACE_SHARD_ROWS),
    "surface_normals": ArraySpec("float32", 16384, SURFACE_SHARD_ROWS),
    "surface_areas": ArraySpec("float32", 65536, SURFACE_SHARD_ROWS),
    "surface_fields": ArraySpec("float32", 16384, SURFACE_SHARD_ROWS),
    "surface_neighbors": ArraySpec("int32", 16384, SURFACE_SHARD_ROWS),
    "volume_coordinates": ArraySpec("float32", 8192, VOLUME_BLOCK_ROWS),
    "volume_fields": ArraySpec("float32", 8192, VOLUME_BLOCK_ROWS),
    "volume_sdf": ArraySpec("float32", 8192, VOLUME_BLOCK_ROWS),
    "volume_closest": ArraySpec("float32", 8192, VOLUME_BLOCK_ROWS),
}
# Added by the "features" neighbour layout, in the row order of the surface arrays
NEIGHBOR_FEATURE_ARRAYS: dict[str, ArraySpec] = {
    "surface_neighbor_coordinates": ArraySpec("float32", 4096, SURFACE_SHARD_ROWS),
    "surface_neighbor_normals": ArraySpec("float32", 4096, SURFACE_SHARD_ROWS),
    "surface_neighbor_areas": ArraySpec("float32", 16384, SURFACE_SHARD_ROWS),
}


def layout_arrays(neighbor_layout: str, parts: tuple[str, ...] | list[str] = PARTS) -> dict[str, ArraySpec]:
    """The arrays (name -> spec) of a run of ``neighbor_layout`` and ``parts``."""
    if neighbor_layout not in NEIGHBOR_LAYOUTS:
        raise ValueError(f"neighbor_layout must be one of {list(NEIGHBOR_LAYOUTS)}; got {neighbor_layout!r}")
    arrays = ARRAYS | NEIGHBOR_FEATURE_ARRAYS if neighbor_layout == "features" else dict(ARRAYS)
    every_run = ("geometry_coordinates", "surface_grid_sdf")  # the others belong to the part their name starts with
    return {name: spec for name, spec in arrays.items() if name in every_run or name.split("_", 1)[0] in parts}


def settings_arrays(fingerprinted: dict) -> dict[str, ArraySpec]:
    """``layout_arrays`` of a cache's settings (their ``PreprocessSettings.fingerprinted()`` form)."""
    return layout_arrays(neighbor_layout_of(fingerprinted), held_parts(fingerprinted))


class CacheError(ValueError):
    """A cache run or manifest that cannot be used: missing, corrupt, foreign or stale."""


class StaleCacheError(CacheError):
    """A cache built with other settings or sources than asked for, or a generation replaced by a rebuild."""


def run_fingerprint(settings_fingerprint: str, source: str) -> str:
    """The fingerprint of one cache run: its format version, settings and source together."""
    return hashlib.sha256(f"{FORMAT_VERSION}:{settings_fingerprint}:{source}".encode()).hexdigest()


def metadata_files(run_path: str | os.PathLike) -> dict[str, bytes]:
    """Every ``zarr.json`` of a local cache run by its path within the run (group and arrays)."""
    root = Path(run_path)
    found = [root / "zarr.json", *root.glob("*/zarr.json")]
    return {m.relative_to(root).as_posix(): m.read_bytes() for m in found if m.is_file()}


def metadata_digest(files: dict[str, bytes]) -> str:
    """SHA-256 of a run's ``zarr.json`` files in path order: what the manifest records."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + bytes(files[name]) + b"\0")
    return digest.hexdigest()


def metadata_sha256(run_path: str | os.PathLike) -> str:
    """``metadata_digest`` of the local cache run at ``run_path``."""
    return metadata_digest(metadata_files(run_path))


def diff_settings(cached: dict, expected: dict, prefix: str = "") -> list[str]:
    """One line ``key: cached X, expected Y`` per differing setting (absent ones at ``IMPLICIT_DEFAULTS``)."""
    if not prefix:
        cached, expected = IMPLICIT_DEFAULTS | cached, IMPLICIT_DEFAULTS | expected
    lines = []
    for key in sorted(set(cached) | set(expected)):
        a, b = cached.get(key, "<absent>"), expected.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            lines += diff_settings(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key}: cached {a}, expected {b}")
    return lines


def run_folder(cache_dir: str | os.PathLike, name: str) -> Path | str:
    """The folder (or object-store prefix) of run ``name``'s generations."""
    return join(cache_dir, name)


def generations(folder: str | os.PathLike) -> list[tuple[int, Path | str]]:
    """(number, path) of a run folder's complete generations (remotely: group ``zarr.json`` present), oldest first."""
    if is_url(folder):
        source, key = reader_and_key(folder)
        names = [n for n in source.list(key)[0] if GENERATION.match(n)]
        found = [(int(GENERATION.match(n).group(1)), join(folder, n)) for n in names
                 if source.head(f"{key}/{n}/zarr.json") is not None]
    elif Path(folder).is_dir():
        found = [(int(m.group(1)), p) for p in Path(folder).iterdir() if (m := GENERATION.match(p.name))]
    else:
        found = []
    return sorted(found)


def current_generation(folder: str | os.PathLike) -> Path | str | None:
    """The newest complete generation of a run, or None."""
    found = generations(folder)
    return found[-1][1] if found else None


def file_sizes(path: str | os.PathLike) -> list[int]:
    """The size of each file (object) under ``path``: their sum is a run's bytes, their count its files."""
    if is_url(path):
        source, key = reader_and_key(path)
        return [o["size"] for o in source.list_all(key)]
    return [f.stat().st_size for f in Path(path).rglob("*") if f.is_file()]
