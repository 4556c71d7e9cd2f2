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
from benchmark_scale import _python  # noqa: E402 (a sibling script)

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


def train_step(work: Path) -> dict:
    """train.py for one step (one epoch of the one run, batch 1) from the cache, on the CPU."""
    out = work / "train"
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, _ = _python("train.py", "--config-name=cached", f"data.processed_dir={work / 'processed'}",
                            f"cache.dir={work / 'cache'}", f"output_dir={out}", "train.epochs=1",
                            "train.num_workers=0", "train.val_num_workers=0", "train.device=cpu")
    return _figures(wall, peak, out)


def predict(work: Path) -> dict:
    """predict.py on the run's surface (every cell, in batches) with the one-step model; its own
    seconds per step (prepare, geometry, surface) are parsed from its output."""
    out = work / "predictions"
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, output = _python(
        "predict.py", "--config-name=cached", f"data.processed_dir={work / 'processed'}",
        f"cache.dir={work / 'cache'}", f"output_dir={work / 'train'}",
        f"predict.checkpoint={work / 'train' / 'checkpoints' / 'model_last.mdlus'}",
        f"predict.runs=[{work / 'processed' / 'run_1.zarr'}]", f"predict.out_dir={out}",
        "predict.plot=false", "predict.device=cpu")
    line = next(x for x in output.splitlines() if x.startswith("run_1") and " cells in " in x)
    cells = int(line.split(": ", 1)[1].split(" cells")[0].replace(",", ""))
    steps = dict(part.rsplit(" ", 2)[:2] for part in line.split("(", 1)[1].split(")", 1)[0].split(", "))
    steps = {k: float(v) for k, v in steps.items()}
    return _figures(wall, peak, out, cells=cells, **{f"{k}_s": v for k, v in steps.items()},
                    s_per_million_cells=wall / cells * 1e6,
                    model_s_per_million_cells=steps.get("surface", 0.0) / cells * 1e6)


def _step(work: Path, key: str, compute) -> dict:
    """The figures of one stage, measured once per ``work`` folder and kept in ``steps.json``
    (merged on write, so two invocations on different stages keep both)."""
    path = work / "steps.json"
    done = json.loads(path.read_text()) if path.is_file() else {}
    if key not in done:
        figures = compute()
        done = json.loads(path.read_text()) if path.is_file() else {}
        done[key] = figures
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(done, indent=2) + "\n")
        os.replace(tmp, path)
    return done[key]


STAGES = ("generate", "process", "cache", "draws", "train_step", "predict")


def measure(args: argparse.Namespace) -> dict:
    """Every stage at both sizes (the small one: generate, process, cache; the training step
    and the prediction on ``--model-run``), resumable."""
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
        if label == args.model_run:  # their inputs do not grow with the volume
            stages |= {"train_step": lambda: train_step(work), "predict": lambda: predict(work)}
        if label == "large":
            stages["draws"] = lambda: draws(work, args.draws)
        result[label] = {"volume_points": points, "stages": {}}
        for name, run in stages.items():
            if name in args.stages:
                result[label]["stages"][name] = _step(args.work, f"{label} {name} {points}", run)
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
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--model-run", default="large", choices=("small", "large"),
                        help="the run the training step and the surface prediction use")
    parser.add_argument("--draws", type=int, default=5)
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
