"""Side by side: a cached draw from a mixture of sources against a single-source draw of the same size.

For a size preset it generates synthetic DrivAerML runs and processes them into a work directory
(reused when present), and builds one cache of them (current runs reused) with its scaling factors
in the manifest. Two datasets read that cache:

- single source: a ``CachedDoMINODataset`` scaled by the manifest's factors, what train.py draws
  from one dataset;
- mixture: a ``MixtureDataset`` of two sources "a" and "b" (weights 1:1), each an unscaled
  ``CachedDoMINODataset`` over the same cache, every run in its non-dimensional form
  (``run_forms``), scaled by the factors merged over both sources (as train.py merges them).

Both sources read the same runs, so a mixture draw reads the same rows as the single-source draw
of the same run and epoch; the ratio of their times is the mixture's own cost (key to source, form
conversion, scaling). After a warm-up that opens every run of both, draws are timed one by one
(``time.perf_counter``) in pairs of the same run and epoch, in one process, the order alternating
from pair to pair (single first, then mixture first) so that neither side always follows the
other. Prints a Markdown table (medians, quartiles, the ratio of medians and the median per-pair
ratio) and whether the ratio is within the 1.1x target; writes the figures as JSON. Exit code 0
either way.

    python benchmarks/benchmark_mixture.py --preset tiny --draws 12 --json /tmp/mixture_tiny.json
    python benchmarks/benchmark_mixture.py --preset demo --json mixture_demo.json
    python benchmarks/benchmark_mixture.py --preset bench --runs 2 --work /tmp/domino_mixture
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark_dataloader import PRESETS, ensure_processed, fewest_stl_points, settings_for

if TYPE_CHECKING:
    from domino_pipeline.compute.settings import PreprocessSettings
    from domino_pipeline.configuration.config import PipelineConfig
    from domino_pipeline.loading.cached import CachedDoMINODataset
    from domino_pipeline.loading.mixture import MixtureDataset

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.1  # the bound on mixture / single-source time per draw
DRAWS = {"tiny": 12, "demo": 60, "bench": 30}  # timed draws per side, by preset
SIZES = ("surface_points", "volume_points", "geometry_points", "interp_res")  # of benchmark_dataloader's presets
WARMUP_PAIRS = 3  # untimed pairs after every run has been opened once by both sides


def ensure_cache(processed: Path, cache: Path, config: PipelineConfig, settings: PreprocessSettings) -> Path:
    """Build the cache of every processed run (current runs reused) with its scaling factors in
    the manifest, as cache_data.py leaves it: the single source reads the factors from there."""
    from cache_data import build_cache
    from domino_pipeline.processed.runs import list_runs
    from domino_pipeline.store.build import manifest_runs, write_scaling_factors
    from domino_pipeline.store.manifest import write_manifest

    runs = list_runs(processed)
    bad = [r for r in build_cache(runs, cache, settings, rebuild=False) if r.status not in ("built", "skipped")]
    if bad:
        raise RuntimeError(f"cache build failed: {bad}")
    factors = write_scaling_factors(runs, cache, settings, normalization=config.sampling.normalization)
    write_manifest(cache, settings, manifest_runs(runs, cache, settings), scaling_factors=factors)
    return cache


def cached_dataset(cache: Path, params: dict, scaling_factors: str | None) -> CachedDoMINODataset:
    """Every run of the cache at the preset's sample sizes, all kept open; ``scaling_factors``
    "manifest" (the single source, as train.py reads one dataset) or None (a mixture's source)."""
    from domino_pipeline.loading.cached import CachedDoMINODataset
    from read_bytes import KEEP_ALL_OPEN

    return CachedDoMINODataset(cache, model_type=params["model_type"], surface_points=params["surface_points"],
                               volume_points=params["volume_points"], geometry_points=params["geometry_points"],
                               scaling_factors=scaling_factors, max_open_runs=KEEP_ALL_OPEN)


def mixture_dataset(cache: Path, params: dict, config: PipelineConfig) -> MixtureDataset:
    """Two sources over the same cache, weights 1:1, in the non-dimensional form, scaled by the
    factors over both sources' runs in that form (what train.py builds for ``data.sources``)."""
    from domino_pipeline.compute.scaling import merge_statistics
    from domino_pipeline.loading.assembly import run_forms, target_variables
    from domino_pipeline.loading.mixture import MixtureDataset, MixturePart

    sources = []
    for name in ("a", "b"):
        dataset = cached_dataset(cache, params, None)
        forms, statistics = run_forms(dataset, config, True)
        sources.append(MixturePart(name=name, dataset=dataset, forms=forms, statistics=statistics, weight=1.0,
                                   variables=target_variables(config, True)))
    factors = merge_statistics([stats for source in sources for stats in source.statistics],
                               [f"{source.name}/{name}" for source in sources for name, _ in source.dataset.run_origins],
                               normalization=config.sampling.normalization, variables=sources[0].variables)
    factors["form"] = "nondimensional"
    return MixtureDataset(sources, scaling_factors=factors)


def _seconds(draw: Callable[[], object]) -> float:
    """Seconds of one draw."""
    start = time.perf_counter()
    draw()
    return time.perf_counter() - start


def _pair(single: CachedDoMINODataset, mixture: MixtureDataset, k: int) -> dict[str, float]:
    """Seconds of pair ``k``: run k mod N at epoch 1 + k // N on both sides, the mixture's from
    source "a" on even epochs and "b" on odd ones; single first in even pairs, mixture first in odd."""
    runs = len(single)
    epoch, run = 1 + k // runs, k % runs
    mixture.set_epoch(epoch)
    key = run + runs * (epoch % 2)
    draws = {"single": partial(single.item, run, epoch), "mixture": partial(mixture.__getitem__, key)}
    order = ("single", "mixture") if k % 2 == 0 else ("mixture", "single")
    return {side: _seconds(draws[side]) for side in order}


def timed_pairs(single: CachedDoMINODataset, mixture: MixtureDataset, draws: int) -> tuple[list[float], list[float]]:
    """Seconds per draw of each side over ``draws`` pairs (``_pair``). Before timing, every run of
    the single source and every key of the mixture is drawn once at epoch 0 (runs opened, resident
    arrays read), then WARMUP_PAIRS pairs untimed; timed pairs start past them."""
    for index in range(len(single)):
        single.item(index, 0)
    mixture.set_epoch(0)
    for key in range(len(mixture)):
        mixture[key]
    for k in range(WARMUP_PAIRS):
        _pair(single, mixture, k)
    pairs = [_pair(single, mixture, WARMUP_PAIRS + k) for k in range(draws)]
    return [p["single"] for p in pairs], [p["mixture"] for p in pairs]


def quartiles(values: list[float]) -> dict[str, float]:
    """25th percentile, median and 75th percentile (statistics.quantiles, inclusive)."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"p25": q1, "median": median, "p75": q3}


def summarize(single: list[float], mixture: list[float]) -> dict:
    """Per side the quartiles in milliseconds; the ratio of the medians and the quartiles of the
    per-pair ratios (mixture over single); whether the ratio of medians is within TARGET."""
    sides = {name: {f"{k}_ms": 1e3 * v for k, v in quartiles(times).items()}
             for name, times in (("single", single), ("mixture", mixture))}
    pair = quartiles([m / s for s, m in zip(single, mixture)])
    ratio = sides["mixture"]["median_ms"] / sides["single"]["median_ms"]
    return {**sides, "ratio_of_medians": ratio, "pair_ratio": pair, "target": TARGET, "within_target": ratio <= TARGET,
            "single_all_ms": [1e3 * t for t in single], "mixture_all_ms": [1e3 * t for t in mixture]}


def provenance() -> dict:
    """The commit (``git rev-parse --short HEAD``) and the local date and time."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    return {"commit": done.stdout.strip() or "unknown",
            "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}


def measure(preset: str, runs: int, work: Path, model_type: str, draws: int) -> dict:
    """Prepare the runs and the cache in ``work``, time ``draws`` pairs; the JSON-able results."""
    params = {key: PRESETS[preset][key] for key in SIZES} | {"model_type": model_type}
    processed = ensure_processed(work, preset, runs)
    params["geometry_points"] = min(params["geometry_points"], fewest_stl_points(processed))
    config, settings = settings_for(params)  # conf/config.yaml (DrivAerML) with the preset's grid
    cache = ensure_cache(processed, work / "cache_mixture", config, settings)
    single, mixture = cached_dataset(cache, params, "manifest"), mixture_dataset(cache, params, config)
    times = timed_pairs(single, mixture, draws)
    return {"preset": preset, "runs": len(single), "draws": draws, "warmup_pairs": WARMUP_PAIRS,
            "order": "pairs of the same run and epoch, the side drawn first alternating",
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
            **provenance(), **summarize(*times)}


def table(r: dict) -> str:
    """The Markdown table of both sides and the ratios, and the verdict against TARGET."""
    single, mixture, pair = r["single"], r["mixture"], r["pair_ratio"]
    lines = ["| draw | median | p25 | p75 |", "|---|---:|---:|---:|",
             f"| single source, ms | {single['median_ms']:.3f} | {single['p25_ms']:.3f} | {single['p75_ms']:.3f} |",
             f"| mixture of 2 sources, ms | {mixture['median_ms']:.3f} | {mixture['p25_ms']:.3f} | "
             f"{mixture['p75_ms']:.3f} |",
             f"| mixture / single, ratio of medians | {r['ratio_of_medians']:.3f} | | |",
             f"| mixture / single, per pair | {pair['median']:.3f} | {pair['p25']:.3f} | {pair['p75']:.3f} |"]
    verdict = "PASS" if r["within_target"] else "over target"
    return "\n".join(lines) + (f"\n\n{verdict}: mixture / single {r['ratio_of_medians']:.3f}x against "
                               f"{r['target']}x ({r['draws']} pairs, preset {r['preset']}, {r['runs']} runs, "
                               f"{r['params']['model_type']}, commit {r['commit']}, {r['date']})")


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table and verdict, write ``--json``; 0 whether or not the target holds
    (a figure to read, not a gate)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="demo")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--draws", type=int, help="timed draws per side (default by preset: %s)" % DRAWS)
    parser.add_argument("--model-type", default="combined", choices=["surface", "volume", "combined"])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "domino_bench_mixture")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    draws = args.draws or DRAWS[args.preset]
    result = measure(args.preset, args.runs, args.work / args.preset, args.model_type, draws)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
