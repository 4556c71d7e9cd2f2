"""``<cache_dir>/manifest.json``: the runs of a cache and the generation of each, the settings
that built it and a checksum of itself.

Readers open the manifest once and read the generations it names, so replacing the manifest
(``write_manifest``: a temporary file, then a rename) switches every new reader to rebuilt runs
at once while open ones keep theirs. Each entry records its run's metadata checksum, and the
manifest records the SHA-256 of its own canonical JSON, so an edit anywhere is caught.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path, PurePosixPath

from domino_pipeline.atomic_store import (
    exclusive_lock,
    read_json,
    write_json_atomic,
)
from domino_pipeline.compute.scaling import load_scaling_factors
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.store.cache_format import (
    FORMAT,
    FORMAT_VERSION,
    CacheError,
    directory_bytes,
    file_count,
    layout_arrays,
    metadata_sha256,
)
from domino_pipeline.store.cache_run import CacheRun

MANIFEST = "manifest.json"


def manifest_lock(cache_dir: str | os.PathLike):
    """The lock every manifest writer holds while it lists the runs and writes the manifest."""
    return exclusive_lock(Path(cache_dir) / ".manifest.lock", f"{Path(cache_dir) / MANIFEST}")


def _digest(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


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
        "arrays": {name: {"dtype": s.dtype, "chunk_rows": s.chunk_rows, "shard_rows": s.shard_rows}
                   for name, s in layout_arrays(settings.neighbor_layout).items()},
        "runs": runs, "config": config or {},
    }
    if scaling_factors is not None:
        manifest["scaling_factors"] = scaling_factors
    manifest["sha256"] = _digest(manifest)
    path = cache_dir / MANIFEST
    try:
        write_json_atomic(path, manifest)
    except OSError as err:
        raise CacheError(f"{path}: cannot write the manifest: {err.strerror or err}") from err
    return path


def read_manifest(cache_dir: str | os.PathLike) -> dict:
    """Read and check ``<cache_dir>/manifest.json``: format, version, its own checksum, and run
    paths that stay inside the cache folder."""
    path = Path(cache_dir) / MANIFEST
    manifest = read_json(path, "no cache manifest; build the cache with cache_data.py", CacheError)
    if not isinstance(manifest, dict):
        raise CacheError(f"{path}: not a {FORMAT} manifest (a JSON {type(manifest).__name__})")
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path}: not a {FORMAT} manifest (format={manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CacheError(f"{path}: format_version {manifest.get('format_version')}, "
                         f"this reader reads {FORMAT_VERSION}")
    if manifest.get("sha256") != _digest(manifest):
        raise CacheError(f"{path}: its checksum does not match its contents: edited or corrupt; "
                         "rewrite it with cache_data.py")
    runs = manifest.get("runs")
    if not isinstance(runs, dict):
        raise CacheError(f"{path}: 'runs' is not a mapping")
    for name, entry in runs.items():
        run_path(cache_dir, name, entry)
    return manifest


def run_path(cache_dir: str | os.PathLike, name: str, entry: dict) -> Path:
    """The generation folder a manifest entry names: a relative path of two parts, the run's
    folder and ``g<N>.zarr``, inside the cache folder; CacheError otherwise."""
    where = f"{Path(cache_dir) / MANIFEST}: run {name!r}"
    raw = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(raw, str):
        raise CacheError(f"{where}: no path")
    parts = PurePosixPath(raw).parts
    if raw.startswith("/") or len(parts) != 2 or ".." in parts or parts[0] != name:
        raise CacheError(f"{where}: path {raw!r} is not '{name}/g<N>.zarr' inside the cache folder")
    return Path(cache_dir).joinpath(*parts)


def manifest_entry(cache_dir: str | os.PathLike, run: CacheRun) -> dict:
    """The manifest's record of one run generation."""
    relative = run.path.relative_to(Path(cache_dir)).as_posix()
    return {"path": relative, "generation": run.attrs.get("generation"),
            "fingerprint": run.attrs["fingerprint"], "source": run.attrs["source"],
            "counts": run.attrs["counts"], "metadata_sha256": metadata_sha256(run.path),
            "bytes": directory_bytes(run.path), "files": file_count(run.path),
            "build_seconds": run.attrs.get("build_seconds")}


def manifest_scaling_factors(cache_dir: str | os.PathLike, manifest: dict | None = None,
                             normalization: str | None = None) -> dict:
    """The scaling factors cache_data.py wrote beside the cache, checked against the SHA-256 the
    manifest records (CacheError when absent or changed); ``normalization`` replaces the stored
    one (scaling.load_scaling_factors)."""
    cache_dir = Path(cache_dir)
    manifest = read_manifest(cache_dir) if manifest is None else manifest
    record = manifest.get("scaling_factors")
    if record is None:
        raise CacheError(f"{cache_dir}: the manifest records no scaling factors; rerun cache_data.py "
                         "(it writes them), or pass scaling_factors (a file, or None for unscaled targets)")
    path = cache_dir / record["path"]
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise CacheError(f"{path}: the scaling factors the manifest records are unreadable ({err})") from err
    if digest != record["sha256"]:
        raise CacheError(f"{path}: changed since cache_data.py wrote it (SHA-256 {digest[:12]}..., "
                         f"manifest {record['sha256'][:12]}...); rerun cache_data.py")
    return load_scaling_factors(path, normalization)
