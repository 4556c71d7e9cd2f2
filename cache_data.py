"""Build the DoMINO training cache: every processed run once, all the work except sampling.

For each ``<processed_dir>/<run>.zarr`` it runs ``preprocessing.preprocess_run`` (box filtering,
normalisation, SDF of both grids, SDF and closest point of every kept volume point, kNN of every
kept surface cell and, with ``geometry.neighbor_layout=features``, its neighbours' coordinates,
normals and areas) and writes ``<cache.dir>/<run>.zarr`` atomically, then ``manifest.json``
(format: docs/cache_format.md). A rerun skips runs whose fingerprint matches (an interrupted build
resumes); runs built with other settings are rebuilt only with ``cache.rebuild=true``, otherwise
they are reported as stale, the manifest is left as it was and the command fails. The manifest
lists the runs that are current. ``cache.validate=true`` checks an existing cache
against the config and its checksums instead of building.

    python cache_data.py --config-name=cached data.processed_dir=/data/processed cache.dir=/data/cache
    torchrun --nproc_per_node=2 cache_data.py --config-name=cached    # ranks split the runs
    python cache_data.py --config-name=demo cache.validate=true
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from domino_pipeline.compute.preprocessing import preprocess_run
from domino_pipeline.compute.settings import PreprocessSettings, settings_from_config
from domino_pipeline.run_report import RunResult, summarize
from domino_pipeline.store.atomic_store import remove_stale_temporaries
from domino_pipeline.store.cache_format import (
    CacheError,
    CacheRun,
    diff_settings,
    layout_arrays,
    manifest_entry,
    read_manifest,
    run_fingerprint,
    source_fingerprint,
    write_cache_run,
    write_manifest,
)

STATUSES = ("built", "skipped", "stale", "failed")


def _cache_path(cache_dir: Path, processed_path: Path) -> Path:
    return cache_dir / processed_path.name


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
              rebuild: bool) -> RunResult:
    """Build one cache run unless it is current; a failure becomes a result, not an exception."""
    from domino_pipeline.inputs.processed_run import load_processed_run

    name, out = processed_path.stem, _cache_path(cache_dir, processed_path)
    started = time.time()
    try:
        source = source_fingerprint(processed_path)
        if out.exists():
            reasons = cached_state(out, settings, source)
            if not reasons:
                return RunResult(name, "skipped", "current")
            if not rebuild:
                return RunResult(name, "stale", "; ".join(reasons))
        contents = preprocess_run(load_processed_run(processed_path), settings, source=str(processed_path))
        written = write_cache_run(out, contents, settings=settings, source_path=processed_path,
                                  source=source, started=started)
    except Exception as err:  # one bad run is reported and the others go on
        return RunResult(name, "failed", f"{processed_path}: {type(err).__name__}: {err}")
    return RunResult(name, "built", seconds=time.time() - started, bytes=written)


def build_cache(runs: list[Path], cache_dir: Path, settings: PreprocessSettings, *, rebuild: bool,
                rank: int = 0, world_size: int = 1) -> list[RunResult]:
    """Build this rank's share of ``runs`` (every ``world_size``-th, from ``rank``)."""
    mine = runs[rank::world_size]
    results = []
    bar = tqdm(mine, desc=f"cache rank {rank}", unit="run", position=rank, disable=not mine)
    for path in bar:
        results.append(cache_run(path, cache_dir, settings, rebuild=rebuild))
        bar.set_postfix(last=f"{results[-1].name}:{results[-1].status}")
    return results


def manifest_runs(runs: list[Path], cache_dir: Path, settings: PreprocessSettings) -> dict[str, dict]:
    """Manifest entries of the runs whose cache is current."""
    entries = {}
    for path in runs:
        out = _cache_path(cache_dir, path)
        if out.exists() and not cached_state(out, settings, source_fingerprint(path)):
            entries[path.stem] = manifest_entry(CacheRun(out))
    return entries


def summarize_build(results: list[RunResult]) -> str:
    """Failed and stale runs by name with the reason, then counts, MB written, seconds per run."""
    built = [r for r in results if r.status == "built"]
    mb = sum(r.bytes for r in built) / 1e6
    per_run = np.mean([r.seconds for r in built]) if built else 0.0
    lines = [summarize(results, STATUSES, named=("stale", "failed"))
             + f"; {mb:.1f} MB written, {per_run:.2f} s per built run"]
    if any(r.status == "stale" for r in results):
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
    name, out = processed_path.stem, _cache_path(cache_dir, processed_path)
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
    from domino_pipeline.inputs.processed_run import list_runs
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
            return 1 if bad else 0
        if dist.is_main:
            cache_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(cache_dir)
        barrier()
        results = build_cache(runs, cache_dir, settings, rebuild=bool(cfg.cache.rebuild),
                              rank=dist.rank, world_size=dist.world_size)
        print(summarize_build(results), flush=True)
        stale, failed = (int(v) for v in all_reduce_sum(torch.tensor(
            [sum(r.status == "stale" for r in results), sum(r.status == "failed" for r in results)])))
        barrier()
        if dist.is_main and stale:
            print("manifest left as it was: the cache holds runs built with other settings")
        elif dist.is_main:
            config = OmegaConf.to_container(cfg, resolve=True)
            path = write_manifest(cache_dir, settings, manifest_runs(runs, cache_dir, settings), config)
            print(f"manifest: {path}")
        return 1 if stale or failed else 0
    finally:
        shutdown_distributed()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry: build (or validate) cache.dir from data.processed_dir."""
    try:
        code = _main(cfg)
    except FileNotFoundError as err:  # no processed runs where the config points
        print(f"error: {err}", file=sys.stderr)
        code = 1
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
