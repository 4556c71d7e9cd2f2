"""``<cache_dir>/manifest.json``: the runs of a cache and the generation of each, the settings
that built it and a checksum of itself (docs/cache_format.md, "manifest.json")."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path, PurePosixPath

from domino_pipeline.storage.atomic_store import exclusive_lock, read_json, write_json_atomic
from domino_pipeline.compute.scaling import checked_scaling_factors
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.storage.byte_reader import read_bytes, read_versioned, reader_and_key
from domino_pipeline.storage.object_store import is_url, join, name_of
from domino_pipeline.store.cache_format import FORMAT, FORMAT_VERSION, CacheError, file_sizes, layout_arrays
from domino_pipeline.store.cache_run import CacheRun

MANIFEST = "manifest.json"


def manifest_lock(cache_dir: str | os.PathLike):
    """The lock every manifest writer holds while it lists the runs and writes the manifest."""
    return exclusive_lock(Path(cache_dir) / ".manifest.lock", f"{Path(cache_dir) / MANIFEST}")


def manifest_digest(manifest: dict) -> str:
    """The SHA-256 of a manifest's canonical JSON, its own ``sha256`` left out."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_manifest(cache_dir: str | os.PathLike, settings: PreprocessSettings,
                   runs: dict[str, dict], config: dict | None = None,
                   scaling_factors: dict | None = None, *, if_version: str | None = None) -> Path | str:
    """Write ``<cache_dir>/manifest.json`` atomically; remotely only at version ``if_version``, else ConflictError."""
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": settings.fingerprinted(), "fingerprint": settings.fingerprint(),
        "parts": list(settings.parts),  # what the settings say too, stated for readers of the file
        "arrays": {name: {"dtype": s.dtype, "chunk_rows": s.chunk_rows, "shard_rows": s.shard_rows}
                   for name, s in layout_arrays(settings.neighbor_layout, settings.parts).items()},
        "runs": runs, "config": config or {},
    }
    if scaling_factors is not None:
        manifest["scaling_factors"] = scaling_factors
    manifest["sha256"] = manifest_digest(manifest)
    path = join(cache_dir, MANIFEST)
    if is_url(cache_dir):
        source, key = reader_and_key(path)
        source.put(key, (json.dumps(manifest, indent=2) + "\n").encode(),
                   mode={"e_tag": if_version} if if_version else "create")
        return path
    try:
        write_json_atomic(path, manifest)
    except OSError as err:
        raise CacheError(f"{path}: cannot write the manifest: {err.strerror or err}") from err
    return path


def read_manifest(cache_dir: str | os.PathLike) -> dict:
    """Read and check ``<cache_dir>/manifest.json``: format, version, checksum, run paths inside the cache."""
    return read_manifest_version(cache_dir)[0]


def read_manifest_version(cache_dir: str | os.PathLike) -> tuple[dict, str | None]:
    """``read_manifest`` and the object version (e-tag) it was read at (None locally)."""
    path = join(cache_dir, MANIFEST)
    missing = "no cache manifest; build the cache with cache_data.py"
    if is_url(cache_dir):
        raw, e_tag = read_versioned(path)
        if raw is None:
            raise FileNotFoundError(f"{path}: {missing}")
        manifest = _parse(raw, path)
    else:
        manifest, e_tag = read_json(path, missing, CacheError), None
    _check_manifest(manifest, cache_dir)
    return manifest, e_tag


def _parse(raw: bytes, path: str) -> object:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CacheError(f"{path}: not valid JSON ({err})") from err


def _check_manifest(manifest: object, cache_dir: str | os.PathLike) -> None:
    path = join(cache_dir, MANIFEST)
    if not isinstance(manifest, dict):
        raise CacheError(f"{path}: not a {FORMAT} manifest (a JSON {type(manifest).__name__})")
    if manifest.get("format") != FORMAT:
        raise CacheError(f"{path}: not a {FORMAT} manifest (format={manifest.get('format')!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CacheError(f"{path}: format_version {manifest.get('format_version')}, this reader reads {FORMAT_VERSION}")
    if manifest.get("sha256") != manifest_digest(manifest):
        raise CacheError(f"{path}: its checksum does not match its contents: edited or corrupt; "
                         "rewrite it with cache_data.py")
    runs = manifest.get("runs")
    if not isinstance(runs, dict):
        raise CacheError(f"{path}: 'runs' is not a mapping")
    for name, entry in runs.items():
        run_path(cache_dir, name, entry)


def run_path(cache_dir: str | os.PathLike, name: str, entry: dict) -> Path | str:
    """The generation folder ``<run>/g<N>.zarr`` a manifest entry names, inside the cache; else CacheError."""
    where = f"{join(cache_dir, MANIFEST)}: run {name!r}"
    raw = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(raw, str):
        raise CacheError(f"{where}: no path")
    parts = PurePosixPath(raw).parts
    if raw.startswith("/") or len(parts) != 2 or ".." in parts or parts[0] != name:
        raise CacheError(f"{where}: path {raw!r} is not '{name}/g<N>.zarr' inside the cache folder")
    return join(cache_dir, *parts)


def manifest_entry(cache_dir: str | os.PathLike, run: CacheRun) -> dict:
    """The manifest's record of one run generation."""
    folder = run.path.rsplit("/", 1)[0] if isinstance(run.path, str) else run.path.parent  # the run's folder or prefix
    relative, sizes = f"{name_of(folder)}/{name_of(run.path)}", file_sizes(run.path)
    return {"path": relative, "generation": run.attrs.get("generation"),
            "fingerprint": run.attrs["fingerprint"], "source": run.attrs["source"],
            "counts": run.attrs["counts"], "metadata_sha256": run.metadata_sha256,
            "bytes": sum(sizes), "files": len(sizes),
            "build_seconds": run.attrs.get("build_seconds")}


def manifest_scaling_factors(cache_dir: str | os.PathLike, manifest: dict | None = None,
                             normalization: str | None = None) -> dict:
    """The scaling factors beside the cache, checked against the manifest's SHA-256 (CacheError)."""
    manifest = read_manifest(cache_dir) if manifest is None else manifest
    record = manifest.get("scaling_factors")
    if record is None:
        raise CacheError(f"{cache_dir}: the manifest records no scaling factors; rerun cache_data.py "
                         "(it writes them), or pass scaling_factors (a file, or None for unscaled targets)")
    path = join(cache_dir, record["path"])
    try:
        raw = read_bytes(path)
    except OSError as err:
        raise CacheError(f"{path}: the scaling factors the manifest records are unreadable ({err})") from err
    if raw is None:
        raise CacheError(f"{path}: the scaling factors the manifest records are unreadable (absent)")
    digest = hashlib.sha256(raw).hexdigest()
    if digest != record["sha256"]:
        raise CacheError(f"{path}: changed since cache_data.py wrote it (SHA-256 {digest[:12]}..., "
                         f"manifest {record['sha256'][:12]}...); rerun cache_data.py")
    return checked_scaling_factors(_parse(raw, str(path)), str(path), normalization)
