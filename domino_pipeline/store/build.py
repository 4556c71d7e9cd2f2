"""Building cache runs: a processed run through ``preprocessing.plan_run`` into a new generation (run_writer.py), one
writer per run; the scaling factors beside the cache; the manifest, the build's commit (``finish_build``), under a lock
locally, by a retried conditional put on object storage. Imports Warp; the store's reading side does not."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from domino_pipeline.storage.atomic_store import remove_stale_temporaries, temporary_directory
from domino_pipeline.compute.box_coverage import box_notes
from domino_pipeline.compute.preprocessing import VOLUME_ARRAYS, plan_run
from domino_pipeline.compute.scaling import (checked_scaling_factors, merge_statistics, run_statistics,
                                             save_scaling_factors)
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.configuration.config import PipelineConfig, parts_setting
from domino_pipeline.processed.run_layout import arrays_for, check_values
from domino_pipeline.processed.runs import (DEFAULT_OPTIONS, NamedArray, ReadOptions, load_run, open_run,
                                            require_parts, run_format, run_name, run_split_from_config)
from domino_pipeline.runtime.run_report import RunResult
from domino_pipeline.storage.byte_reader import ConflictError, reader_and_key
from domino_pipeline.storage.object_store import is_url, join
from domino_pipeline.store.cache_format import (CacheError, current_generation, file_sizes, run_fingerprint,
                                                run_folder)
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import (MANIFEST, manifest_entry, manifest_lock, read_manifest,
                                            read_manifest_version, write_manifest)
from domino_pipeline.store.object_cache import publish_generation
from domino_pipeline.store.run_writer import RunWriter, run_lock
from domino_pipeline.store.staleness import manifest_records, run_state

FACTORS_FILE = "scaling_factors.json"


def build_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings, source: dict,
              options: ReadOptions = DEFAULT_OPTIONS) -> tuple[Path, str, list[str]]:
    """Write the processed run's next cache generation of ``settings.parts``; its path, form and ``box_notes``."""
    name = run_name(processed_path)
    opened = open_run(processed_path, options)
    require_parts(opened, settings.parts, f"a cache of process.parts={parts_setting(settings.parts)}")
    wanted = [n for n in arrays_for(settings.parts) if n not in VOLUME_ARRAYS]
    arrays = load_run(processed_path, wanted, options=options, opened=opened)
    missing = [n for n in VOLUME_ARRAYS if "volume" in settings.parts and n not in opened.arrays]
    if missing:
        raise ValueError(f"{processed_path}: missing arrays {missing} ({opened.format})")
    volume = {n: NamedArray(opened, n) for n in VOLUME_ARRAYS if "volume" in settings.parts}
    statistics = run_statistics({**arrays, **volume}, parts=settings.parts, source=str(processed_path))
    notes = box_notes(arrays, settings)
    plan = plan_run(arrays, volume, settings, source=str(processed_path), scratch_dir=run_folder(cache_dir, name),
                    check=lambda array, block: check_values(array, block, processed_path, None))
    del arrays  # the plan keeps the prepared rows; the raw ones can go
    published = opened.attrs.get("published") if isinstance(opened.attrs.get("published"), dict) else {}
    attrs = {"settings": settings.fingerprinted(), "settings_fingerprint": settings.fingerprint(),
             "source": source, "fingerprint": run_fingerprint(settings.fingerprint(), source["fingerprint"]),
             "counts": plan.counts, "scalars": plan.scalars | {"field_statistics": statistics,
                                                     "published_velocity": published.get("velocity")}}
    with RunWriter(cache_dir, name, plan.shapes, attrs, neighbor_layout=settings.neighbor_layout,
                   parts=settings.parts) as writer:
        for array, start, rows in plan.pieces:
            writer.write_rows(array, start, rows)
    return writer.path, opened.format, notes


def cache_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings, *,
              rebuild: bool, options: ReadOptions = DEFAULT_OPTIONS,
              records: dict[str, dict] | None = None) -> RunResult:
    """Build one cache run unless it is current, as its only writer; a failure becomes a result."""
    name = run_name(processed_path)
    started = time.time()
    try:
        form = run_format(processed_path)  # for the summary
    except (OSError, ValueError):
        form = ""
    try:
        records = manifest_records(cache_dir) if records is None else records
        if run_state(cache_dir, processed_path, settings, records).current:  # no lock: read-only reruns
            return RunResult(name, "skipped", "current", format=form)
        with nullcontext() if is_url(cache_dir) else run_lock(cache_dir, name):
            state = run_state(cache_dir, processed_path, settings, records)  # another writer's?
            if state.current:
                return RunResult(name, "skipped", "current", format=form)
            if state.built and not rebuild:
                return RunResult(name, "stale", "; ".join(state.reasons), format=form)
            written, form, notes = _build(processed_path, cache_dir, settings, state.source, options)
    except Exception as err:  # one bad run is reported and the others go on
        return RunResult(name, "failed", f"{processed_path}: {type(err).__name__}: {err}", format=form)
    return RunResult(name, "built", seconds=time.time() - started, bytes=written, format=form, notes=notes)


def _build(processed_path: Path, cache_dir: Path | str, settings: PreprocessSettings, source: dict,
           options: ReadOptions) -> tuple[int, str, list[str]]:
    """``build_run`` into a local cache, or into a staging folder whose generation is then uploaded."""
    if not is_url(cache_dir):
        path, form, notes = build_run(processed_path, cache_dir, settings, source, options)
        return sum(file_sizes(path)), form, notes
    root = staging_root()
    remove_stale_temporaries(root)  # the staging folders of builds killed before they removed theirs
    with temporary_directory(root, run_name(processed_path)) as staging:
        path, form, notes = build_run(processed_path, staging, settings, source, options)
        publish_generation(path, cache_dir, run_name(processed_path))
        return sum(file_sizes(path)), form, notes


def staging_root() -> Path:
    """Where builds into object storage stage their runs: one folder per user under ``TMPDIR``."""
    return Path(tempfile.gettempdir()) / f"domino-cache-staging-{os.getuid()}"


def manifest_runs(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> dict[str, dict]:
    """Manifest entries of the runs whose newest generation is current, with their sources' records."""
    entries, records = {}, manifest_records(cache_dir)
    for path in runs:
        state = run_state(cache_dir, path, settings, records)
        if state.current:
            entries[run_name(path)] = manifest_entry(cache_dir, state.run) | {"source": state.source}
    return entries


def write_scaling_factors(train_runs: list[Path], cache_dir: Path, settings: PreprocessSettings, *,
                          normalization: str) -> dict:
    """Write ``<cache_dir>/scaling_factors.json`` from the training runs' recorded statistics; its record."""
    variables = {"surface": settings.surface_variables, "volume": settings.volume_variables}
    variables = {part: variables[part] for part in settings.parts}
    statistics = [CacheRun(current_generation(run_folder(cache_dir, run_name(p)))).attrs["scalars"]
                  ["field_statistics"] for p in train_runs]
    factors = merge_statistics(statistics, [run_name(p) for p in train_runs],
                               normalization=normalization, variables=variables)
    if is_url(cache_dir):
        data = (json.dumps(checked_scaling_factors(factors, FACTORS_FILE), indent=2) + "\n").encode()
        source, key = reader_and_key(join(cache_dir, FACTORS_FILE))
        source.put(key, data)
    else:
        data = save_scaling_factors(cache_dir / FACTORS_FILE, factors).read_bytes()
    return {"path": FACTORS_FILE, "sha256": hashlib.sha256(data).hexdigest(),
            "runs": factors["runs"], "normalization": normalization, "variables": factors["variables"]}


def finish_build(config: PipelineConfig, runs: list[Path], cache_dir: Path | str, settings: PreprocessSettings,
                 records: list[dict]) -> int:
    """Write the manifest unless a rank met stale runs; the build's exit code over all ranks' ``records``."""
    stale, failed = (sum(r[key] for r in records) for key in ("stale", "failed"))
    if stale:
        print("manifest left as it was: the cache holds runs built with other settings")
    else:
        print(f"manifest: {commit_manifest(config, runs, cache_dir, settings)}")
    return 1 if stale or failed else 0


def commit_manifest(config: PipelineConfig, runs: list[Path], cache_dir: Path | str,
                    settings: PreprocessSettings) -> Path | str:
    """Write the manifest as its only writer; a rerun that would write the same runs takes no lock, writes nothing."""
    if is_url(cache_dir):
        return _commit_remote_manifest(config, runs, cache_dir, settings)
    try:
        old = read_manifest(cache_dir)
    except (CacheError, FileNotFoundError):
        old = None
    if (old is not None and old["runs"] == manifest_runs(runs, cache_dir, settings)
            and old["settings"] == settings.fingerprinted() and old.get("scaling_factors") is not None):
        return cache_dir / MANIFEST
    with manifest_lock(cache_dir):
        entries = manifest_runs(runs, cache_dir, settings)  # again: another builder may have written
        return write_manifest(cache_dir, settings, entries, config.as_dict(),
                              scaling_factors=_factors_record(config, runs, entries, cache_dir, settings))


def _commit_remote_manifest(config: PipelineConfig, runs: list[Path], cache_dir: str,
                            settings: PreprocessSettings, attempts: int = 20) -> str:
    """Commit the manifest remotely: put it only at the version read, else read, list and try again."""
    for _ in range(attempts):
        try:
            old, version = read_manifest_version(cache_dir)
        except FileNotFoundError:
            old, version = None, None
        entries = manifest_runs(runs, cache_dir, settings)
        if old is not None and old["settings"] == settings.fingerprinted():
            mine = {run_name(p) for p in runs}
            entries = {n: e for n, e in old["runs"].items() if n not in mine} | entries
        if old is not None and old["runs"] == entries and old.get("scaling_factors") is not None:
            return join(cache_dir, MANIFEST)
        try:
            return write_manifest(cache_dir, settings, entries, config.as_dict(),
                                  scaling_factors=_factors_record(config, runs, entries, cache_dir, settings),
                                  if_version=version)
        except ConflictError:
            continue
    raise CacheError(f"{join(cache_dir, MANIFEST)}: changed by other builders {attempts} times "
                     "in a row; run cache_data.py again")


def _factors_record(config: PipelineConfig, runs: list[Path], entries: dict[str, dict], cache_dir: Path | str,
                    settings: PreprocessSettings) -> dict | None:
    """Write the scaling factors when every training run is in the cache; their manifest record."""
    train_runs = run_split_from_config(runs, config.train, config.seed).train
    absent = [run_name(p) for p in train_runs if run_name(p) not in entries]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        print(f"scaling factors not written: training runs {shown} are not in the cache (yet)")
        return None
    record = write_scaling_factors(train_runs, cache_dir, settings, normalization=config.sampling.normalization)
    print(f"scaling factors: {join(cache_dir, record['path'])} ({len(train_runs)} training runs)")
    return record
