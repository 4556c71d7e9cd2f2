"""One DrivAerML-size run through every stage: wall time, peak RSS and disk bytes per stage.

A synthetic run of DrivAerML's sizes (8.8M surface cells, 600k STL triangles, ``--volume-points``
volume points, 150M by default) is generated, processed, cached (``features`` layout), drawn
from warm and cold, trained on for one step and predicted on (surface). The generate, process and
cache stages also run at ``--small-volume-points`` (20M), so that their peak memory at both sizes
is compared side by side. Each stage runs in a child process (``wait4`` gives its peak RSS); its
figures are kept in ``<work>/steps.json`` as soon as it finishes, so an interrupted benchmark
resumes after its last finished stage. Prints a Markdown table and the acceptance checks; writes
JSON.

    nice -n 10 python benchmarks/benchmark_full_run.py --work outputs/full_run \
        --json docs/benchmark_full_run.json
    python benchmarks/benchmark_full_run.py --work /tmp/fr --volume-points 200000 \
        --small-volume-points 100000 --surface-cells 50000 --stl-triangles 16000   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_scale import SAMPLES, _python, _step  # noqa: E402 (a sibling script)

ROOT = Path(__file__).resolve().parents[1]


def disk_bytes(path: Path) -> int:
    """Bytes the files under ``path`` hold."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _figures(wall: float, peak: float, out: Path, **extra) -> dict:
    return {"wall_s": round(wall, 1), "peak_rss_mb": round(peak), "disk_bytes": disk_bytes(out), **extra}


def generate(work: Path, sizes: dict) -> dict:
    """Write the synthetic run (block by block) under ``work/raw``."""
    raw = work / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    wall, peak, _ = _python("synthetic_data.py", "--preset", "full", "--runs", "1", "--seed", "0",
                            "--out", str(raw), *(f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()))
    return _figures(wall, peak, raw)


def process(work: Path) -> dict:
    """process_data.py on the run, volume streamed block by block."""
    processed = work / "processed"
    shutil.rmtree(processed, ignore_errors=True)
    wall, peak, _ = _python("process_data.py", f"data.raw_dir={work / 'raw'}",
                            f"data.processed_dir={processed}", "process.num_processes=1")
    return _figures(wall, peak, processed)


def cache(work: Path) -> dict:
    """cache_data.py (``features`` layout, DoMINO's default 128 x 64 x 64 grid) on the run."""
    target = work / "cache"
    shutil.rmtree(target, ignore_errors=True)
    wall, peak, _ = _python("cache_data.py", "--config-name=cached", f"data.processed_dir={work / 'processed'}",
                            f"cache.dir={target}", "geometry.neighbor_layout=features")
    return _figures(wall, peak, target)


def draws(work: Path, n: int) -> dict:
    """Warm and cold draws (8192 / 8192 / 300,000 points) in a fresh process, medians."""
    started = time.time()
    _, peak, output = _python(str(ROOT / "benchmarks" / "benchmark_scale.py"), "--child-draws",
                              str(work / "cache"), "full", str(n))
    return {"wall_s": round(time.time() - started, 1), "peak_rss_mb": round(peak), "disk_bytes": 0,
            **json.loads(output.strip().splitlines()[-1])}


STAGES = ("generate", "process", "cache")


def measure(args: argparse.Namespace) -> dict:
    """Every stage at both sizes (the small one: the first three stages), resumable."""
    result = {}
    fixed = {"surface_cells": args.surface_cells, "stl_triangles": args.stl_triangles}
    for label, points in (("small", args.small_volume_points), ("large", args.volume_points)):
        work = args.work / label
        work.mkdir(parents=True, exist_ok=True)
        sizes = {**fixed, "volume_points": points}
        stages = {
            "generate": lambda: generate(work, sizes),
            "process": lambda: process(work),
            "cache": lambda: cache(work),
        }
        if label == "large":
            stages["draws"] = lambda: draws(work, args.draws)
        result[label] = {"volume_points": points, "stages": {}}
        for name, run in stages.items():
            if name in args.stages:
                result[label]["stages"][name] = _step(args.work, f"{label} {name} {points}", run)
        if label == "small" and not args.keep:
            shutil.rmtree(work / "raw", ignore_errors=True)
    return result


def checks(result: dict) -> list[str]:
    """The acceptance checks, with the figures they compare."""
    small, large = result["small"]["stages"], result["large"]["stages"]
    lines = []
    for stage, limit_gb, ratio in (("generate", 3.0, None), ("process", 3.0, 1.2), ("cache", None, 1.3)):
        if stage not in large:
            continue
        peak = large[stage]["peak_rss_mb"]
        if limit_gb is not None:
            lines.append(f"{stage} peak RSS at {result['large']['volume_points']:,} points: "
                         f"{peak / 1024:.2f} GB (<= {limit_gb} GB)")
        if ratio is not None and stage in small:
            lines.append(f"{stage} peak RSS large/small: {peak / small[stage]['peak_rss_mb']:.2f}x (<= {ratio})")
    return lines


def table(result: dict) -> str:
    lines = ["| volume points | stage | wall s | peak RSS MB | disk GB | notes |", "|---|---|---|---|---|---|"]
    for figures in (result[label] for label in ("small", "large")):
        for stage, r in figures["stages"].items():
            notes = ", ".join(f"{k} {v:.1f}" for k, v in r.items()
                              if k not in ("wall_s", "peak_rss_mb", "disk_bytes") and isinstance(v, (int, float)))
            lines.append(f"| {figures['volume_points']:,} | {stage} | {r['wall_s']:.0f} | {r['peak_rss_mb']} | "
                         f"{r['disk_bytes'] / 1e9:.2f} | {notes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "outputs" / "full_run")
    parser.add_argument("--volume-points", type=int, default=150_000_000)
    parser.add_argument("--small-volume-points", type=int, default=20_000_000)
    parser.add_argument("--surface-cells", type=int, default=8_800_000)
    parser.add_argument("--stl-triangles", type=int, default=600_400)
    parser.add_argument("--stages", nargs="+", default=list(STAGES) + ["draws"])
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the small run's raw files")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = measure(args)
    result["checks"] = checks(result)
    print(table(result))
    print("\n".join(f"check: {line}" for line in result["checks"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
