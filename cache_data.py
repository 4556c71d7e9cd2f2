"""Build the DoMINO training cache: every processed run once, all the work except sampling.

For each run of ``data.processed_dir`` (a folder or an object-store URL, as ``cache.dir`` may
be; this project's processed Zarr groups or physicsnemo-curator output as it is: Zarr v2 or v3
groups, .npz files, and .npy dicts with ``data.allow_pickle=true``; the form is detected per
run and named in the summary) it runs the one preprocessing (box filtering,
normalisation, SDF of both grids, SDF and closest point of every kept volume point, kNN of every
kept surface cell and, with ``geometry.neighbor_layout=features``, its neighbours' coordinates,
normals and areas; the volume a block at a time) and writes the next generation of
``<cache.dir>/<run>/``, then ``manifest.json``, which names each run's generation (format:
docs/cache_format.md). A rerun skips runs whose fingerprint matches (an interrupted build
resumes); runs built with other settings are rebuilt only with ``cache.rebuild=true``, otherwise
they are reported as stale, the manifest is left as it was and the command fails. Two builders
on one cache take turns per run. Beside the cache it writes ``scaling_factors.json``: the target
scaling factors over the training runs of train.py's split (``train.val_fraction``,
``train.split_seed``), from statistics each run's build records (uniformly drawn volume rows), and
the manifest records the file's SHA-256, so ``CachedDoMINODataset`` finds and checks them by
default. ``cache.validate=true`` checks an existing cache against the config, the processed runs
and its checksums instead of building. ``process.parts=surface`` builds a cache of the STL and the
surface only (no volume read, no volume work; its factors are the surface's), for a surface model;
``process.parts=volume`` one without the surface rows; the manifest records the parts. Runs the
quality checks reject (``data.quality``, from ``<processed_dir>/statistics.csv``;
domino_pipeline/processed/run_quality.py) are left out and named in the summary, as train.py leaves
them out; ``data.quality.include=[run_37]`` takes one back, ``data.quality.enabled=false`` all.
``cache.num_processes`` runs are built at once, in a local
pool or on a Dask cluster (``executor``); ``data.runs`` and ``data.shard`` choose the runs built,
so that the jobs of an array split them: each writes the manifest of every run built so far, and
the last to finish writes the complete one with the scaling factors.

    python cache_data.py --config-name=cached data.processed_dir=/data/processed cache.dir=/data/cache
    torchrun --nproc_per_node=2 cache_data.py --config-name=cached    # ranks split the runs;
                                     # the last to finish writes the manifest, no rank waits
    srun --ntasks=16 python cache_data.py --config-name=cached        # the same, Slurm's tasks
    python cache_data.py --config-name=demo cache.validate=true
    python cache_data.py --config-name=cached process.parts=surface    # surface-only processed runs
    python cache_data.py --config-name=cached geometry.device=cpu cache.num_processes=8 \
        data.shard=$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT     # a job of an array
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from domino_pipeline.storage.atomic_store import remove_stale_temporaries
from domino_pipeline.compute.settings import PreprocessSettings, settings_from_config
from domino_pipeline.configuration.config import ExecutorConfig, PipelineConfig
from domino_pipeline.runtime.entry_point import entry_point
from domino_pipeline.runtime.executors import LOCAL_POOL, run_tasks
from domino_pipeline.processed.run_quality import quality_selection
from domino_pipeline.processed.runs import (
    DEFAULT_OPTIONS,
    ReadOptions,
    list_runs,
    read_options_from_config,
    run_name,
)
from domino_pipeline.runtime.launch import launch_environment
from domino_pipeline.runtime.run_report import RunResult, summarize
from domino_pipeline.configuration.run_selection import select_items
from domino_pipeline.configuration.source_configs import sources_of
from domino_pipeline.store.build import cache_run, finish_build
from domino_pipeline.storage.object_store import is_url, join
from domino_pipeline.store.staleness import check_scaling_factors, manifest_records
from domino_pipeline.store.object_cache import ABANDONED_AFTER_S
from domino_pipeline.store.rank_records import finish_rank, remove_finished_jobs
from domino_pipeline.store.validate import validate_cache

STATUSES = ("built", "skipped", "stale", "failed")


def build_cache(runs: list[Path], cache_dir: Path, settings: PreprocessSettings, *, rebuild: bool,
                rank: int = 0, world_size: int = 1, options: ReadOptions = DEFAULT_OPTIONS,
                executor: ExecutorConfig = LOCAL_POOL, workers: int = 1) -> list[RunResult]:
    """Build this rank's share of ``runs`` (every ``world_size``-th, from ``rank``), ``workers``
    runs at a time on ``executor``."""
    mine = runs[rank::world_size]
    build = partial(cache_run, cache_dir=cache_dir, settings=settings, rebuild=rebuild, options=options,
                    records=manifest_records(cache_dir))  # the manifest, read once for the batch
    return run_tasks(build, {run_name(p): (p,) for p in mine}, executor, workers=workers,
                     progress=f"cache rank {rank}", position=rank)


def summarize_build(results: list[RunResult]) -> str:
    """Failed and stale runs by name with the reason, then counts, MB written, seconds per run."""
    built = [r for r in results if r.status == "built"]
    mb = sum(r.bytes for r in built) / 1e6
    per_run = np.mean([r.seconds for r in built]) if built else 0.0
    lines = [summarize(results, STATUSES, named=("stale", "failed"))
             + f"; {mb:.1f} MB written, {per_run:.2f} s per built run"]
    if any(r.status == "stale" for r in results):
        lines.append("stale runs (reasons above: other settings, or a changed processed run): "
                     "rerun with cache.rebuild=true")
    forms = sorted({r.format for r in results if r.format})
    if forms:
        lines.append("run formats: " + ", ".join(
            f"{form} {sum(r.format == form for r in results)}" for form in forms))
    return "\n".join(lines)


def _rank_and_job(config: PipelineConfig) -> tuple[int, int, str | None]:
    """(rank, world size, the job's id) under torchrun or srun; (0, 1, None) in one process,
    where torch (heavy in memory) is not loaded."""
    launch = launch_environment()
    if launch.world_size == 1:
        return 0, 1, None
    from domino_pipeline.training.distributed import job_id

    return launch.rank, launch.world_size, job_id(launch, config.distributed.timeout_s)


def _validate(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> int:
    """Check the cache against the config, the processed runs and its checksums; print a line
    per run and for the scaling factors."""
    results = validate_cache(runs, cache_dir, settings)
    for r in results:
        print(f"{'ok' if r.status == 'ok' else 'PROBLEM'} {r.name}{': ' + r.message if r.message else ''}")
    bad = sum(r.status != "ok" for r in results)
    print(f"{len(results)} runs validated, {bad} with problems")
    factors_problem = check_scaling_factors(cache_dir)
    print(f"PROBLEM scaling factors: {factors_problem}" if factors_problem else "ok scaling factors")
    return 1 if bad or factors_problem else 0


@entry_point
def main(config: PipelineConfig) -> int:
    """Build (or validate) cache.dir from data.processed_dir, or each source's cache; the exit code.

    Under torchrun or srun no rank waits for another: each builds its share and leaves a
    record, and the last to finish writes the manifest (rank_records.py) and exits with the code
    of the whole build; the others exit 0 (their failures are printed and counted there), so
    that the launcher does not stop a rank that is still building."""
    rank, world_size, job = _rank_and_job(config)
    sources, codes = sources_of(config), []
    for source, own in sources:  # each with its own profile, runs and cache
        if len(sources) > 1:
            print(f"source {source.name} (dataset {own.dataset.name}): {own.data.processed_dir} -> {own.cache.dir}",
                  flush=True)
        codes.append(build_or_validate(own, rank, world_size, job))
    return max(codes)


def build_or_validate(config: PipelineConfig, rank: int, world_size: int, job: str | None) -> int:
    """Build (or validate) one dataset's cache, this rank's share; the exit code (see ``main``)."""
    settings = settings_from_config(config.geometry, config.variables,  # device: one GPU per rank
                                    parts=config.process.part_names)
    selection = quality_selection(list_runs(config.data.processed_dir), config.data, config.dataset)
    runs, cache_dir = selection.require_some(config.data.processed_dir), join(config.cache.dir)
    if config.cache.validate:
        return _validate(runs, cache_dir, settings) if rank == 0 else 0
    if not is_url(cache_dir):
        cache_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(cache_dir)  # on every rank: those of live writers stay
    else:
        remove_finished_jobs(cache_dir, ABANDONED_AFTER_S)
    chosen = select_items(runs, run_name, config.data.runs, config.data.shard,  # this job's share
                          source=str(config.data.processed_dir))
    results = build_cache(chosen, cache_dir, settings, rebuild=config.cache.rebuild, rank=rank,
                          world_size=world_size, options=read_options_from_config(config.data, config.physics),
                          executor=config.executor, workers=config.cache.num_processes)
    print(summarize_build(results), flush=True)
    if rank == 0:
        print(selection.summary(), flush=True)
    record = {status: sum(r.status == status for r in results) for status in ("stale", "failed")}
    if job is None:
        return finish_build(config, runs, cache_dir, settings, [record])
    code = finish_rank(cache_dir, job, rank, world_size, record,
                       lambda records: finish_build(config, runs, cache_dir, settings, records))
    if code is None:
        print(f"rank {rank} done; the last rank to finish writes the manifest", flush=True)
        return 0
    return code


if __name__ == "__main__":
    main()
