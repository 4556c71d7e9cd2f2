"""Building cache runs: one processed run through ``preprocessing.plan_run`` into a new run
generation (run_writer.py), one writer per run at a time, and the manifest of the current runs.

Imports Warp (through the preprocessing); the reading side of the store does not.
"""

from __future__ import annotations

import time
from pathlib import Path

from domino_pipeline.compute.preprocessing import VOLUME_ARRAYS, plan_run
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.inputs.processed_run import (
    ARRAY_NAMES,
    check_values,
    load_processed_run,
    open_processed_run,
)
from domino_pipeline.run_report import RunResult
from domino_pipeline.store.cache_format import (
    current_generation,
    diff_settings,
    directory_bytes,
    run_fingerprint,
    run_folder,
    source_fingerprint,
)
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import manifest_entry
from domino_pipeline.store.run_writer import RunWriter, run_lock


def stale_reasons(run: CacheRun, settings: PreprocessSettings, source: str) -> list[str]:
    """Why a cache run generation does not match ``settings`` and the processed run's
    fingerprint ``source`` (empty: current)."""
    if run.attrs.get("fingerprint") == run_fingerprint(settings.fingerprint(), source):
        return []
    reasons = diff_settings(run.attrs.get("settings", {}), settings.fingerprinted())
    if run.attrs.get("source", {}).get("fingerprint") != source:
        reasons.append("source: the processed run has changed since the cache run was built")
    return reasons or ["fingerprint differs (another cache format or code version)"]


def current_state(cache_dir: Path, name: str, settings: PreprocessSettings,
                  source: str) -> list[str] | None:
    """None when run ``name`` has no generation yet, else ``stale_reasons`` of the newest."""
    newest = current_generation(run_folder(cache_dir, name))
    if newest is None:
        return None
    try:
        return stale_reasons(CacheRun(newest), settings, source)
    except ValueError as err:  # CacheError: unreadable or foreign
        return [str(err)]


def build_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings,
              source: str) -> Path:
    """Write the next generation of the processed run's cache run; return its path. The STL
    and the surface are held in memory, the volume is read and written a block at a time."""
    name = processed_path.stem
    arrays = load_processed_run(processed_path, [n for n in ARRAY_NAMES if n not in VOLUME_ARRAYS])
    group = open_processed_run(processed_path)
    volume = {n: group[n] for n in VOLUME_ARRAYS}
    plan = plan_run(arrays, volume, settings, source=str(processed_path),
                    scratch_dir=run_folder(cache_dir, name),
                    check=lambda array, block: check_values(array, block, processed_path))
    del arrays  # the plan keeps the prepared rows; the raw ones can go
    attrs = {"settings": settings.fingerprinted(), "settings_fingerprint": settings.fingerprint(),
             "source": {"path": str(processed_path.resolve()), "fingerprint": source},
             "fingerprint": run_fingerprint(settings.fingerprint(), source),
             "counts": plan.counts, "scalars": plan.scalars}
    with RunWriter(cache_dir, name, plan.shapes, attrs,
                   neighbor_layout=settings.neighbor_layout) as writer:
        for array, start, rows in plan.pieces:
            writer.write_rows(array, start, rows)
    return writer.path


def cache_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings, *,
              rebuild: bool) -> RunResult:
    """Build one cache run unless it is current, as its only writer; a failure becomes a
    result, not an exception."""
    name = processed_path.stem
    started = time.time()
    try:
        source = source_fingerprint(processed_path)
        if current_state(cache_dir, name, settings, source) == []:  # no lock: a read-only cache
            return RunResult(name, "skipped", "current")
        with run_lock(cache_dir, name):
            reasons = current_state(cache_dir, name, settings, source)  # another writer's?
            if reasons == []:
                return RunResult(name, "skipped", "current")
            if reasons is not None and not rebuild:
                return RunResult(name, "stale", "; ".join(reasons))
            path = build_run(processed_path, cache_dir, settings, source)
    except Exception as err:  # one bad run is reported and the others go on
        return RunResult(name, "failed", f"{processed_path}: {type(err).__name__}: {err}")
    return RunResult(name, "built", seconds=time.time() - started, bytes=directory_bytes(path))


def manifest_runs(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> dict[str, dict]:
    """Manifest entries of the runs whose newest generation is current."""
    entries = {}
    for path in runs:
        name = path.stem
        if current_state(cache_dir, name, settings, source_fingerprint(path)) == []:
            entries[name] = manifest_entry(cache_dir, CacheRun(current_generation(run_folder(cache_dir, name))))
    return entries
