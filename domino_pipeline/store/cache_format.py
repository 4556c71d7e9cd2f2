"""The DoMINO cache on disk: one Zarr v3 group per run plus ``manifest.json`` (spec:
docs/cache_format.md).

``<cache_dir>/<run>.zarr`` holds what ``preprocessing.preprocess_run`` returns (the arrays of
its settings' neighbour layout, ``layout_arrays``), every chunk
uncompressed and closed by a CRC32C checksum, row arrays chunked along rows so that a draw reads
only the chunks its windows touch. Its attributes hold the settings, their fingerprint, the
fingerprint of the processed run it was built from, row counts and the few per-run scalars, so a
run can be checked (and a build resumed) without the manifest. The manifest lists the runs and
records the format version, the settings, their fingerprint and the config that built the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec
from zarr.storage import LocalStore, WrapperStore

from domino_pipeline.compute.settings import (
    IMPLICIT_DEFAULTS,
    NEIGHBOR_LAYOUTS,
    PreprocessSettings,
)
from domino_pipeline.store.atomic_store import atomic_directory, write_json_atomic
from domino_pipeline.store.chunk_reader import Allocator, ChunkedArray

FORMAT = "domino-cache"
FORMAT_VERSION = 1  # of the layout on disk; part of every run fingerprint
MANIFEST = "manifest.json"
# Array -> (dtype, rows per chunk; None = one chunk): the arrays of every run. Windows are read
# from the row arrays, so chunks are a few hundred KiB: small enough that a window reads little
# beyond itself, large enough that the per-chunk cost stays small. The surface point arrays are
# gathered at neighbour rows all over the surface (in the "indices" layout), so they get large
# chunks.
ARRAYS: dict[str, tuple[str, int | None]] = {
    "geometry_coordinates": ("float32", 32768),
    "surface_grid_sdf": ("float32", None),
    "volume_grid_sdf": ("float32", None),
    "surface_coordinates": ("float32", 65536),
    "surface_normals": ("float32", 65536),
    "surface_areas": ("float32", 65536),
    "surface_fields": ("float32", 16384),
    "surface_neighbors": ("int32", 16384),
    "volume_coordinates": ("float32", 8192),
    "volume_fields": ("float32", 8192),
    "volume_sdf": ("float32", 8192),
    "volume_closest": ("float32", 8192),
}
# Added by the "features" neighbour layout: (Ns, K-1, 3), (Ns, K-1, 3) and (Ns, K-1), in the row
# order of the surface arrays, read in windows like surface_fields (288 and 384 KiB at K = 7).
NEIGHBOR_FEATURE_ARRAYS: dict[str, tuple[str, int | None]] = {
    "surface_neighbor_coordinates": ("float32", 4096),
    "surface_neighbor_normals": ("float32", 4096),
    "surface_neighbor_areas": ("float32", 16384),
}


def layout_arrays(neighbor_layout: str) -> dict[str, tuple[str, int | None]]:
    """The arrays (name -> dtype, rows per chunk) a run of ``neighbor_layout`` holds: ARRAYS,
    plus NEIGHBOR_FEATURE_ARRAYS in the "features" layout."""
    if neighbor_layout not in NEIGHBOR_LAYOUTS:
        raise ValueError(f"neighbor_layout must be one of {list(NEIGHBOR_LAYOUTS)}; got {neighbor_layout!r}")
    if neighbor_layout == "features":
        return ARRAYS | NEIGHBOR_FEATURE_ARRAYS
    return dict(ARRAYS)


class CacheError(ValueError):
    """A cache run or manifest that cannot be used: missing, corrupt, foreign or stale."""


class StaleCacheError(CacheError):
    """A cache built with other settings than the ones asked for."""


def run_fingerprint(settings_fingerprint: str, source: str) -> str:
    """The fingerprint of one cache run: its format version, settings and source together."""
    return hashlib.sha256(f"{FORMAT_VERSION}:{settings_fingerprint}:{source}".encode()).hexdigest()


def write_cache_run(path: str | os.PathLike, contents: dict, *, settings: PreprocessSettings,
                    source_path: str | os.PathLike, source: str, started: float | None = None) -> int:
    """Write one run's ``preprocess_run`` output atomically; return the bytes written.

    Writes the arrays of ``settings.neighbor_layout`` (``layout_arrays``); ``started``:
    ``time.time()`` when the run's preprocessing began, to record its build time.
    """
    path = Path(path)
    arrays = layout_arrays(settings.neighbor_layout)
    missing = [name for name in arrays if name not in contents]
    if missing:
        raise ValueError(f"{path}: the {settings.neighbor_layout!r} neighbour layout needs arrays "
                         f"{missing}, which the contents to write lack")
    counts = {"geometry": len(contents["geometry_coordinates"]),
              "surface": len(contents["surface_coordinates"]),
              "volume": len(contents["volume_coordinates"])}
    attrs = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "settings": settings.fingerprinted(), "settings_fingerprint": settings.fingerprint(),
        "source": {"path": str(Path(source_path).resolve()), "fingerprint": source},
        "fingerprint": run_fingerprint(settings.fingerprint(), source),
        "counts": counts, "scalars": contents["scalars"],
    }
    with atomic_directory(path) as tmp:
        group = zarr.create_group(store=str(tmp), zarr_format=3)
        for name, (dtype, rows) in arrays.items():
            data = np.ascontiguousarray(contents[name], dtype=dtype)
            chunks = data.shape if rows is None else (min(rows, max(len(data), 1)), *data.shape[1:])
            array = group.create_array(name, shape=data.shape, dtype=dtype, chunks=chunks,
                                       serializer=BytesCodec(), compressors=[Crc32cCodec()])
            array[...] = data
        if started is not None:
            attrs["build_seconds"] = round(time.time() - started, 3)
        group.attrs.update(attrs)  # last: a group with attrs has all its arrays
        written = directory_bytes(tmp)
    return written


def directory_bytes(path: str | os.PathLike) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


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
    """One cache run opened read-only: its attributes and checked reads of its arrays.

    Arrays in the layout ``write_cache_run`` writes are read straight from their chunk files
    (``chunk_reader.ChunkedArray``); any other layout or selection goes through zarr-python.
    Open one per process: the chunk readers reuse their buffers.
    """

    def __init__(self, path: str | os.PathLike, *, count_bytes: bool = False) -> None:
        self.path = Path(path)
        if not (self.path / "zarr.json").is_file():
            raise FileNotFoundError(f"{self.path}: cache run does not exist (no zarr.json)")
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
        """Bytes of files read so far, metadata (``zarr.json``) included, chunk checksums
        included; only with ``count_bytes=True``, else 0."""
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

    def read(self, name: str, selection: Any = slice(None),
             empty: Allocator = np.empty) -> np.ndarray:
        """``array[selection]`` (orthogonal indexing for index arrays), from the chunk files
        where ``ChunkedArray`` reads the layout and the selection, else with zarr-python; a
        failed checksum or unreadable chunk raises CacheError naming the run and the array.
        ``empty(shape, dtype)`` allocates the result (batch_transfer.output_array puts it where
        a DataLoader worker's batch travels)."""
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
            raise CacheError(f"{self.path}: array {name!r} is corrupt or unreadable: {err}") from err
        if empty is np.empty:
            return data
        out = empty(data.shape, data.dtype)
        out[...] = data
        return out


def diff_settings(cached: dict, expected: dict, prefix: str = "") -> list[str]:
    """One line per setting that differs: ``key: cached X, expected Y`` (nested keys dotted);
    a top-level setting left out at its ``IMPLICIT_DEFAULTS`` value is shown with that value."""
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


def write_manifest(cache_dir: str | os.PathLike, settings: PreprocessSettings,
                   runs: dict[str, dict], config: dict | None = None,
                   scaling_factors: dict | None = None) -> Path:
    """Write ``<cache_dir>/manifest.json`` atomically (temporary file, then rename);
    ``scaling_factors``: the record of the factors file beside the cache, when there is one."""
    cache_dir = Path(cache_dir)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": settings.fingerprinted(), "fingerprint": settings.fingerprint(),
        "arrays": {name: {"dtype": d, "chunk_rows": r}
                   for name, (d, r) in layout_arrays(settings.neighbor_layout).items()},
        "runs": runs, "config": config or {},
    }
    if scaling_factors is not None:
        manifest["scaling_factors"] = scaling_factors
    path = cache_dir / MANIFEST
    write_json_atomic(path, manifest)
    return path


def read_manifest(cache_dir: str | os.PathLike) -> dict:
    """Read and check ``<cache_dir>/manifest.json`` (format and version)."""
    path = Path(cache_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no cache manifest; build the cache with cache_data.py")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CacheError(f"{path}: not valid JSON ({err})") from err
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path}: not a {FORMAT} manifest (format={manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CacheError(f"{path}: format_version {manifest.get('format_version')}, "
                         f"this reader reads {FORMAT_VERSION}")
    return manifest


def manifest_entry(run: CacheRun) -> dict:
    """The manifest's record of one run."""
    return {"path": run.path.name, "fingerprint": run.attrs["fingerprint"],
            "source": run.attrs["source"], "counts": run.attrs["counts"],
            "bytes": directory_bytes(run.path), "build_seconds": run.attrs.get("build_seconds")}
