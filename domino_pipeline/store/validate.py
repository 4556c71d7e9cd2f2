"""Checking a built cache against its manifest, the config and the processed runs: every run,
whatever goes wrong in one of them."""

from __future__ import annotations

from pathlib import Path

from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.processed.runs import run_name, source_fingerprint
from domino_pipeline.runtime.run_report import RunResult
from domino_pipeline.storage.byte_reader import reader_and_key
from domino_pipeline.storage.object_store import is_url, name_of
from domino_pipeline.store.cache_format import CacheError, diff_settings, generations, layout_arrays, run_folder
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import read_manifest, run_path
from domino_pipeline.store.staleness import stale_reasons


def read_in_blocks(run: CacheRun, name: str, rows: int = 1 << 20) -> None:
    """Read every chunk of an array (checking its checksum), a block of rows at a time."""
    length = run.shape(name)[0]
    for start in range(0, max(length, 1), rows):
        run.read(name, slice(start, start + rows))


def validate_run(name: str, processed_path: Path | None, cache_dir: Path,
                 settings: PreprocessSettings, manifest: dict) -> RunResult:
    """Check one run's manifest entry, generation, metadata, fingerprints and checksums (docs/cache_format.md)."""
    entry = manifest.get("runs", {}).get(name)
    if entry is None:
        return RunResult(name, "failed", f"{run_folder(cache_dir, name)}: not listed in manifest.json")
    path = run_path(cache_dir, name, entry)
    found = [p for _, p in generations(run_folder(cache_dir, name))]
    if path not in found:
        return RunResult(name, "failed", f"{path}: listed in manifest.json but absent")
    newest = found[-1]
    if newest != path:
        return RunResult(name, "failed", f"{path}: manifest.json names it, but {name_of(newest)} is "
                                         "newer; rerun cache_data.py to list it")
    if processed_path is None:
        return RunResult(name, "failed", f"{path}: no processed run {name} to check it against")
    run = CacheRun(path, metadata=entry.get("metadata_sha256"), entry=(name, entry))
    reasons = stale_reasons(run, settings, source_fingerprint(processed_path))
    if reasons:
        return RunResult(name, "failed", f"{path}: stale: " + "; ".join(reasons))
    if entry.get("fingerprint") != run.attrs["fingerprint"]:
        return RunResult(name, "failed", f"{path}: recorded differently in manifest.json")
    for array in layout_arrays(settings.neighbor_layout, settings.parts):
        read_in_blocks(run, array)
    return RunResult(name, "ok")


def _checked(name: str, check, *args) -> RunResult:
    try:
        return check(name, *args)
    except (CacheError, OSError, ValueError) as err:
        return RunResult(name, "failed", str(err))
    except Exception as err:  # anything else still fails only this run
        return RunResult(name, "failed", f"{type(err).__name__}: {err}")


def _folders(cache_dir: Path | str) -> list[str]:
    """The names of the folders (prefixes) directly in the cache."""
    if is_url(cache_dir):
        source, key = reader_and_key(cache_dir)
        return source.list(key)[0]
    return [p.name for p in cache_dir.iterdir() if p.is_dir()]


def validate_cache(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> list[RunResult]:
    """Validate the manifest and every run it lists, processed or in a folder; no manifest fails them all."""
    try:
        manifest = read_manifest(cache_dir)
    except (CacheError, FileNotFoundError) as err:
        return [RunResult("manifest.json", "failed", str(err))] + [
            RunResult(run_name(p), "failed", "no usable manifest") for p in runs]
    results = []
    differences = diff_settings(manifest.get("settings", {}), settings.fingerprinted())
    if differences:
        results.append(RunResult("manifest.json", "failed", "built with other settings than the "
                                 "config: " + "; ".join(differences)))
    processed = {run_name(p): p for p in runs}
    folders = {n for n in _folders(cache_dir) if generations(run_folder(cache_dir, n))}
    names = sorted(set(processed) | set(manifest["runs"]) | folders)
    return results + [_checked(n, validate_run, processed.get(n), cache_dir, settings, manifest) for n in names]
