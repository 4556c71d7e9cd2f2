"""Whether a cache run is current (its newest generation against the settings, the processed run and the manifest)
and whether the manifest's scaling factors are usable. Neither this module nor its imports load Warp."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.processed.runs import run_name, source_fingerprint, stat_fingerprint
from domino_pipeline.storage.object_store import is_url, name_of
from domino_pipeline.store.cache_format import (CacheError, current_generation, diff_settings, run_fingerprint,
                                                run_folder)
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import manifest_scaling_factors, read_manifest


def current_source(processed_path: Path, recorded: dict | None = None, *, full: bool = False) -> dict:
    """The processed run's source record: path, SHA-256 (rehashed when its stat changed, or ``full``), stat."""
    stat = stat_fingerprint(processed_path)
    if not full and recorded and recorded.get("stat") == stat and recorded.get("fingerprint"):
        fingerprint = recorded["fingerprint"]
    else:
        fingerprint = source_fingerprint(processed_path)
    where = processed_path if is_url(processed_path) else str(Path(processed_path).resolve())
    return {"path": where, "fingerprint": fingerprint, "stat": stat}


def stale_reasons(run: CacheRun, settings: PreprocessSettings, source: str) -> list[str]:
    """Why a cache run generation does not match ``settings`` and its processed run's ``source`` (empty: current)."""
    if run.attrs.get("fingerprint") == run_fingerprint(settings.fingerprint(), source):
        return []
    reasons = diff_settings(run.attrs.get("settings", {}), settings.fingerprinted())
    if run.attrs.get("source", {}).get("fingerprint") != source:
        reasons.append("source: the processed run has changed since the cache run was built")
    return reasons or ["fingerprint differs (another cache format or code version)"]


def manifest_records(cache_dir: Path) -> dict[str, dict]:
    """The manifest's run entries, read once for a batch of runs ({} without a usable manifest)."""
    try:
        return read_manifest(cache_dir)["runs"]
    except (CacheError, FileNotFoundError):
        return {}


@dataclass(frozen=True)
class RunState:
    """A run's newest cache generation against its processed run: ``built``, stale ``reasons``, ``source``, ``run``."""

    built: bool
    reasons: list[str]
    source: dict
    run: CacheRun | None = None

    @property
    def current(self) -> bool:
        """Whether the newest generation exists and matches the settings and the processed run."""
        return self.built and not self.reasons


def run_state(cache_dir: Path, processed_path: Path, settings: PreprocessSettings,
              records: dict[str, dict]) -> RunState:
    """The state of the processed run's newest cache generation (``records``: ``manifest_records``)."""
    name = run_name(processed_path)
    newest = current_generation(run_folder(cache_dir, name))
    if newest is None:
        return RunState(False, [], current_source(processed_path))
    try:
        run = CacheRun(newest)
    except ValueError as err:  # CacheError: unreadable or foreign
        return RunState(True, [str(err)], current_source(processed_path))
    entry = records.get(name, {})  # its source record if it names this generation, else the generation's own
    named = entry.get("path", "").endswith("/" + name_of(run.path)) and "source" in entry
    source = current_source(processed_path, entry["source"] if named else run.attrs.get("source", {}))
    return RunState(True, stale_reasons(run, settings, source["fingerprint"]), source, run)


def check_scaling_factors(cache_dir: Path) -> str:
    """Why the scaling factors the manifest records cannot be used ("" when they can)."""
    try:
        manifest_scaling_factors(cache_dir)
    except (CacheError, FileNotFoundError, ValueError) as err:
        return str(err)
    return ""
