"""Build the DoMINO training cache: every processed run once, all the work except sampling.

For each run of ``data.processed_dir`` (this project's processed Zarr groups or physicsnemo-curator
output as it is: Zarr v2 or v3 groups, .npz files, and .npy dicts with ``data.allow_pickle=true``;
the form is detected per run and named in the summary) it runs ``preprocessing.preprocess_run`` (box filtering,
normalisation, SDF of both grids, SDF and closest point of every kept volume point, kNN of every
kept surface cell and, with ``geometry.neighbor_layout=features``, its neighbours' coordinates,
normals and areas) and writes ``<cache.dir>/<run>.zarr`` atomically, then ``manifest.json``
(format: docs/cache_format.md). A rerun skips runs whose fingerprint matches (an interrupted build
resumes); runs built with other settings are rebuilt only with ``cache.rebuild=true``, otherwise
they are reported as stale, the manifest is left as it was and the command fails. The manifest
lists the runs that are current. Beside the cache it writes ``scaling_factors.json``: the target
scaling factors over the training runs of train.py's split (``train.val_fraction``,
``train.split_seed``), from statistics each run's build records (uniformly drawn volume rows), and
the manifest records the file's SHA-256, so ``CachedDoMINODataset`` finds and checks them by
default. ``cache.validate=true`` checks an existing cache against the config and its checksums
instead of building.

    python cache_data.py --config-name=cached data.processed_dir=/data/processed cache.dir=/data/cache
    torchrun --nproc_per_node=2 cache_data.py --config-name=cached    # ranks split the runs
    python cache_data.py --config-name=demo cache.validate=true
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from domino_pipeline.compute.preprocessing import preprocess_run
from domino_pipeline.compute.scaling import (
    merge_statistics,
    run_statistics,
    save_scaling_factors,
)
from domino_pipeline.compute.settings import PreprocessSettings, settings_from_config
from domino_pipeline.inputs.runs import (
    DEFAULT_OPTIONS,
    ReadOptions,
    list_runs,
    load_run,
    open_run,
    read_options_from_config,
    run_format,
    run_name,
    source_fingerprint,
    split_from_config,
)
from domino_pipeline.store.atomic_store import remove_stale_temporaries
from domino_pipeline.store.cache_format import (
    CacheError,
    CacheRun,
    diff_settings,
    layout_arrays,
    manifest_entry,
    read_manifest,
    run_fingerprint,
    write_cache_run,
    write_manifest,
)

STATUSES = ("built", "skipped", "stale", "failed")
FACTORS_FILE = "scaling_factors.json"


@dataclass
class RunResult:
    """What happened to one run."""

    name: str
    status: str  # one of STATUSES (validate mode: "ok" or "failed")
    message: str = ""
    seconds: float = 0.0
    bytes: int = 0
    format: str = ""  # the run's form (runs.FORMATS), where it could be read


def _cache_path(cache_dir: Path, processed_path: Path) -> Path:
    return cache_dir / f"{run_name(processed_path)}.zarr"


def _form(processed_path: Path) -> str:
    """The run's form for the summary; empty where it cannot be read."""
    try:
        return run_format(processed_path)
    except (OSError, ValueError):
        return ""


def cached_state(cache_path: Path, settings: PreprocessSettings, source: str) -> list[str]:
    """Why the cache run at ``cache_path`` does not match (empty: current; raises
    FileNotFoundError when there is none)."""
    try:
        run = CacheRun(cache_path)
    except CacheError as err:
        return [str(err)]
    if run.attrs.get("fingerprint") == run_fingerprint(settings.fingerprint(), source):
        return []
    reasons = diff_settings(run.attrs.get("settings", {}), settings.fingerprinted())
    if run.attrs.get("source", {}).get("fingerprint") != source:
        reasons.append("source: the processed run has changed since the cache run was built")
    return reasons or ["fingerprint differs"]


def cache_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings, *,
              rebuild: bool, options: ReadOptions = DEFAULT_OPTIONS) -> RunResult:
    """Build one cache run unless it is current; a failure becomes a result, not an exception."""
    name, out = run_name(processed_path), _cache_path(cache_dir, processed_path)
    started = time.time()
    form = _form(processed_path)
    try:
        source = source_fingerprint(processed_path)
        if out.exists():
            reasons = cached_state(out, settings, source)
            if not reasons:
                return RunResult(name, "skipped", "current", format=form)
            if not rebuild:
                return RunResult(name, "stale", "; ".join(reasons), format=form)
        opened = open_run(processed_path, options)
        arrays = load_run(processed_path, options=options, opened=opened)
        contents = preprocess_run(arrays, settings, source=str(processed_path))
        contents["scalars"]["field_statistics"] = run_statistics(arrays, source=str(processed_path))
        written = write_cache_run(out, contents, settings=settings, source_path=processed_path,
                                  source=source, started=started)
    except Exception as err:  # one bad run is reported and the others go on
        return RunResult(name, "failed", f"{processed_path}: {type(err).__name__}: {err}", format=form)
    return RunResult(name, "built", seconds=time.time() - started, bytes=written, format=opened.format)


def build_cache(runs: list[Path], cache_dir: Path, settings: PreprocessSettings, *, rebuild: bool,
                rank: int = 0, world_size: int = 1, options: ReadOptions = DEFAULT_OPTIONS) -> list[RunResult]:
    """Build this rank's share of ``runs`` (every ``world_size``-th, from ``rank``)."""
    mine = runs[rank::world_size]
    results = []
    bar = tqdm(mine, desc=f"cache rank {rank}", unit="run", position=rank, disable=not mine)
    for path in bar:
        results.append(cache_run(path, cache_dir, settings, rebuild=rebuild, options=options))
        bar.set_postfix(last=f"{results[-1].name}:{results[-1].status}")
    return results


def manifest_runs(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> dict[str, dict]:
    """Manifest entries of the runs whose cache is current."""
    entries = {}
    for path in runs:
        out = _cache_path(cache_dir, path)
        if out.exists() and not cached_state(out, settings, source_fingerprint(path)):
            entries[run_name(path)] = manifest_entry(CacheRun(out))
    return entries


def recorded_statistics(processed_path: Path, cache_dir: Path, options: ReadOptions) -> dict:
    """The target statistics the cache build recorded for a run (computed from the run when
    its cache run predates them)."""
    stats = CacheRun(_cache_path(cache_dir, processed_path)).attrs["scalars"].get("field_statistics")
    if stats is None:
        stats = run_statistics(open_run(processed_path, options).arrays, source=str(processed_path))
    return stats


def write_scaling_factors(train_runs: list[Path], cache_dir: Path, settings: PreprocessSettings, *,
                          normalization: str, options: ReadOptions = DEFAULT_OPTIONS) -> dict:
    """Write ``<cache_dir>/scaling_factors.json`` from the training runs' recorded statistics;
    return its manifest record (file, SHA-256, runs, variables)."""
    variables = {"surface": settings.surface_variables, "volume": settings.volume_variables}
    factors = merge_statistics([recorded_statistics(p, cache_dir, options) for p in train_runs],
                               [run_name(p) for p in train_runs], normalization=normalization,
                               variables=variables)
    path = save_scaling_factors(cache_dir / FACTORS_FILE, factors)
    return {"path": FACTORS_FILE, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "runs": factors["runs"], "normalization": normalization, "variables": factors["variables"]}


def factors_record(cfg: DictConfig, runs: list[Path], entries: dict[str, dict], cache_dir: Path,
                   settings: PreprocessSettings) -> dict | None:
    """Write the scaling factors when every training run is in the cache; their manifest record."""
    train_runs, _ = split_from_config(runs, cfg)
    absent = [run_name(p) for p in train_runs if run_name(p) not in entries]
    if absent:
        print(f"scaling factors not written: training runs {absent} are not in the cache")
        return None
    record = write_scaling_factors(train_runs, cache_dir, settings, options=read_options_from_config(cfg),
                                   normalization=str(cfg.sampling.normalization))
    print(f"scaling factors: {cache_dir / record['path']} ({len(train_runs)} training runs)")
    return record


def check_scaling_factors(cache_dir: Path) -> str:
    """Why the scaling factors the manifest records cannot be used ("" when they can)."""
    from domino_pipeline.loading.cached import manifest_scaling_factors

    try:
        manifest_scaling_factors(cache_dir)
    except (CacheError, FileNotFoundError, ValueError) as err:
        return str(err)
    return ""


def summarize(results: list[RunResult]) -> str:
    """Failed and stale runs by name with the reason, then counts, MB written, seconds per run."""
    lines = [f"{r.status.upper()} {r.name}: {r.message}" for r in results if r.status in ("stale", "failed")]
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    built = [r for r in results if r.status == "built"]
    mb = sum(r.bytes for r in built) / 1e6
    per_run = np.mean([r.seconds for r in built]) if built else 0.0
    lines.append(f"{len(results)} runs: {counts['built']} built, {counts['skipped']} skipped, "
                 f"{counts['stale']} stale, {counts['failed']} failed; {mb:.1f} MB written, "
                 f"{per_run:.2f} s per built run")
    forms = sorted({r.format for r in results if r.format})
    if forms:
        lines.append("run formats: " + ", ".join(
            f"{form} {sum(r.format == form for r in results)}" for form in forms))
    if counts["stale"]:
        lines.append("stale runs were built with other settings: rerun with cache.rebuild=true")
    return "\n".join(lines)


def read_in_blocks(run: CacheRun, name: str, rows: int = 1 << 20) -> None:
    """Read every chunk of an array (checking its checksum), a block of rows at a time."""
    length = run.array(name).shape[0]
    for start in range(0, max(length, 1), rows):
        run.read(name, slice(start, start + rows))


def validate_run(processed_path: Path, cache_dir: Path, settings: PreprocessSettings,
                 manifest: dict | None) -> RunResult:
    """Check one cache run: present, fingerprints match the config and the source, every chunk
    of every array passes its checksum, and the manifest lists it."""
    name, out = run_name(processed_path), _cache_path(cache_dir, processed_path)
    if not out.exists():
        return RunResult(name, "failed", f"{out}: missing from the cache")
    try:
        reasons = cached_state(out, settings, source_fingerprint(processed_path))
        if reasons:
            return RunResult(name, "failed", f"{out}: stale: " + "; ".join(reasons))
        run = CacheRun(out)
        for array in layout_arrays(settings.neighbor_layout):
            read_in_blocks(run, array)
    except (CacheError, OSError) as err:
        return RunResult(name, "failed", str(err))
    entry = (manifest or {}).get("runs", {}).get(name)
    if entry is None or entry.get("fingerprint") != run.attrs["fingerprint"]:
        return RunResult(name, "failed", f"{out}: not recorded (or recorded differently) in manifest.json")
    return RunResult(name, "ok")


def validate_cache(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> list[RunResult]:
    """Validate every run; a missing or foreign manifest fails every run."""
    try:
        manifest = read_manifest(cache_dir)
    except (CacheError, FileNotFoundError) as err:
        print(f"PROBLEM manifest: {err}")
        manifest = None
    return [validate_run(path, cache_dir, settings, manifest) for path in tqdm(runs, desc="validate", unit="run")]


def _main(cfg: DictConfig) -> int:
    """Wire the config into build_cache / validate_cache; return the exit code."""
    from domino_pipeline.training.distributed import (
        all_reduce_sum,
        barrier,
        init_distributed,
        shutdown_distributed,
    )

    dist = init_distributed("cpu")  # gloo: the ranks only split runs and meet at barriers
    settings = settings_from_config(cfg.geometry, cfg.variables)  # device: one GPU per rank
    runs, cache_dir = list_runs(cfg.data.processed_dir), Path(cfg.cache.dir)
    try:
        if cfg.cache.validate:
            if not dist.is_main:
                return 0
            results = validate_cache(runs, cache_dir, settings)
            for r in results:
                print(f"{'ok' if r.status == 'ok' else 'PROBLEM'} {r.name}{': ' + r.message if r.message else ''}")
            bad = sum(r.status != "ok" for r in results)
            print(f"{len(results)} runs validated, {bad} with problems")
            factors_problem = check_scaling_factors(cache_dir)
            print(f"PROBLEM scaling factors: {factors_problem}" if factors_problem else "ok scaling factors")
            return 1 if bad or factors_problem else 0
        if dist.is_main:
            cache_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(cache_dir)
        barrier()
        results = build_cache(runs, cache_dir, settings, rebuild=bool(cfg.cache.rebuild),
                              rank=dist.rank, world_size=dist.world_size,
                              options=read_options_from_config(cfg))
        print(summarize(results), flush=True)
        stale, failed = (int(v) for v in all_reduce_sum(torch.tensor(
            [sum(r.status == "stale" for r in results), sum(r.status == "failed" for r in results)])))
        barrier()
        if dist.is_main and stale:
            print("manifest left as it was: the cache holds runs built with other settings")
        elif dist.is_main:
            config = OmegaConf.to_container(cfg, resolve=True)
            entries = manifest_runs(runs, cache_dir, settings)
            path = write_manifest(cache_dir, settings, entries, config,
                                  scaling_factors=factors_record(cfg, runs, entries, cache_dir, settings))
            print(f"manifest: {path}")
        return 1 if stale or failed else 0
    finally:
        shutdown_distributed()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry: build (or validate) cache.dir from data.processed_dir."""
    try:
        code = _main(cfg)
    except (FileNotFoundError, ValueError) as err:  # no runs (or two forms of one) where the config points
        print(f"error: {err}", file=sys.stderr)
        code = 1
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
