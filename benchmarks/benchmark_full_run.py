"""One DrivAerML-size run through every stage: wall time, peak RSS and disk bytes per stage.

A synthetic run of DrivAerML's sizes (8.8M surface cells, 600k STL triangles, ``--volume-points``
volume points, 150M by default) and one at ``--small-volume-points`` (20M) are generated,
processed and cached (``features`` layout), so that each stage's peak memory at both sizes is
compared side by side; the ``--model-run`` one (default: the small one; their inputs do not
grow with the volume) is drawn from warm and cold, trained on for one step and predicted on
(surface). Each stage runs in a child process (``wait4``, or psutil sampling, gives its peak
RSS). ``--cache-budget-s`` / ``--predict-budget-s`` stop the large cache build after two
volume shards / the prediction after a few batches once that time has passed, a documented part
of the stage. Each stage's figures are kept in ``<work>/steps/`` as soon as it finishes, so an
interrupted benchmark resumes. Prints a Markdown table and the acceptance checks; writes JSON
(docs/scaling.md: the measured run).

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


def _watched(args: list[str], output, tick) -> tuple[float, int, int]:
    """Run ``args`` in a child (output to ``output``), sampling its RSS every 0.5 s (psutil)
    and calling ``tick(seconds so far)``, which returns True to stop (kill) it; (wall s, peak
    RSS bytes, return code: -9 when stopped)."""
    import psutil

    started = time.time()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    child, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, child.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        if tick(time.time() - started):
            proc.kill()
            break
        time.sleep(0.5)
    proc.wait()
    return time.time() - started, peak, proc.returncode


def cache(work: Path, budget_s: float | None = None) -> dict:
    """cache_data.py (``features`` layout, DoMINO's default 128 x 64 x 64 grid) on the run.

    With ``budget_s``, the build is stopped once that time has passed and at least two volume
    shards are written: the figures then cover the passes over the whole volume (counting and
    dealing its rows) and that many of its shards (SDF, closest point, write), and the total
    time is extrapolated from the time per shard. Peak RSS is sampled every 0.5 s
    (psutil)."""
    target = work / "cache"
    shutil.rmtree(target, ignore_errors=True)
    args = [sys.executable, "cache_data.py", "--config-name=cached", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={target}", "geometry.neighbor_layout=features"]
    shard_times: list[float] = []

    def tick(elapsed: float) -> bool:
        written = len(list(target.glob("run_1/.g*.tmp*/volume_sdf/c/*")))
        shard_times.extend([elapsed] * (written - len(shard_times)))
        return budget_s is not None and elapsed > budget_s and len(shard_times) >= 2

    wall, peak, returncode = _watched(args, subprocess.DEVNULL, tick)
    if returncode not in (0, -9):
        raise RuntimeError(f"cache_data.py failed ({returncode})")
    figures = _figures(wall, peak / 2**20, target)
    if returncode == -9:
        n_points = int(json.loads((work / "processed" / "run_1.zarr" / "zarr.json").read_text())
                       ["attributes"]["counts"]["volume_points"])
        shards = -(-n_points // (1 << 22))
        figures |= {"stopped_after_shards": len(shard_times), "volume_shards": shards,
                    "first_volume_shard_s": shard_times[0]}
        if len(shard_times) >= 2:
            per_shard = (shard_times[-1] - shard_times[0]) / (len(shard_times) - 1)
            figures |= {"s_per_volume_shard": per_shard,
                        "extrapolated_wall_s": shard_times[-1] + (shards - len(shard_times)) * per_shard}
        shutil.rmtree(target, ignore_errors=True)
    return figures


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


def predict(work: Path, budget_s: float | None = None) -> dict:
    """predict.py on the run's surface (every cell, in batches) with the one-step model.

    Its progress bar (cells done) is read from its output every 2 s: the bar's first reading
    (0 cells) ends the preparation, grid SDFs and kNN of the whole run (``prepare_s``); the
    next one ends the first batch, which also computes the run's geometry encoding
    (``first_batch_s``); the model's cells per second are the cells done from the second
    reading to the last over the time between them (three readings or more). With ``budget_s``
    it is stopped after that long and three readings (a fraction of the cells: ``cells_done``),
    its peak RSS covering the whole run's preparation and kNN and the batches done. Peak RSS is
    sampled every 0.5 s (psutil)."""
    out = work / "predictions"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = out / "predict.log"
    args = [sys.executable, "predict.py", "--config-name=cached", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", f"output_dir={work / 'train'}",
            f"predict.checkpoint={work / 'train' / 'checkpoints' / 'model_last.mdlus'}",
            f"predict.runs=[{work / 'processed' / 'run_1.zarr'}]", f"predict.out_dir={out}",
            "predict.plot=false", "predict.device=cpu"]
    readings: list[tuple[float, int, int]] = []
    last_read = [0.0]

    def tick(elapsed: float) -> bool:
        if elapsed - last_read[0] > 2:
            last_read[0] = elapsed
            done = _cells_done(log.read_bytes())
            if done is not None and (not readings or done[0] > readings[-1][1]):
                readings.append((elapsed, *done))
        return budget_s is not None and elapsed > budget_s and len(readings) >= 3

    with open(log, "wb") as sink:
        wall, peak, returncode = _watched(args, sink, tick)
    if returncode not in (0, -9):
        raise RuntimeError(f"predict.py failed ({returncode}): {log.read_text()[-2000:]}")
    figures = _figures(wall, peak / 2**20, out)
    if len(readings) >= 2:
        figures |= {"cells": readings[0][2], "cells_done": readings[-1][1] if returncode else readings[0][2],
                    "prepare_s": readings[0][0], "first_batch_s": readings[1][0] - readings[0][0]}
    if len(readings) >= 3:
        (t1, c1, total), (t2, c2, _) = readings[1], readings[-1]
        rate = (c2 - c1) / (t2 - t1)
        figures |= {"model_cells_per_s": rate, "model_s_per_million_cells": 1e6 / rate,
                    "s_per_million_cells_estimated": (t1 + (total - c1) / rate) / total * 1e6}
    return figures


def _cells_done(output: bytes) -> tuple[int, int] | None:
    """(cells done, cells in all) from the last update of predict.py's surface progress bar."""
    import re

    found = re.findall(rb"surface:\s+\d+%\|[^|]*\|\s*([\d.]+)([kM]?)/([\d.]+)([kM]?)", output)
    if not found:
        return None
    scale = {b"": 1, b"k": 1e3, b"M": 1e6}
    done, unit, total, total_unit = found[-1]
    return int(float(done) * scale[unit]), int(float(total) * scale[total_unit])


def _step(work: Path, key: str, compute) -> dict:
    """The figures of one stage, measured once per ``work`` folder: kept in ``steps/<stage>.json``
    (one file per stage, so that invocations on different stages never overwrite each other)."""
    path = work / "steps" / f"{key.replace(' ', '_')}.json"
    if not path.is_file():
        figures = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(figures, indent=2) + "\n")
        os.replace(tmp, path)
    return json.loads(path.read_text())


STAGES = ("generate", "process", "cache", "draws", "train_step", "predict")


def measure(args: argparse.Namespace) -> dict:
    """The stages asked for, in the order given, at both sizes (``--labels``): generate, process
    and cache at both; draws, the training step and the prediction on ``--model-run``; resumable.
    Figures of stages measured earlier are reported too."""
    sizes = {"small": args.small_volume_points, "large": args.volume_points}
    fixed = {"surface_cells": args.surface_cells, "stl_triangles": args.stl_triangles}
    result = {label: {"volume_points": points, "stages": {}} for label, points in sizes.items()}
    for stage in STAGES:
        for label, points in sizes.items():
            work = args.work / str(points)
            if stage in ("draws", "train_step", "predict") and label != args.model_run:
                continue
            budget = args.cache_budget_s if label == "large" else None
            run = {"generate": lambda: generate(work, {**fixed, "volume_points": points}),
                   "process": lambda: process(work), "cache": lambda: cache(work, budget),
                   "draws": lambda: draws(work, args.draws), "train_step": lambda: train_step(work),
                   "predict": lambda: predict(work, args.predict_budget_s)}[stage]
            key = f"{label} {stage} {points}"
            if stage in args.stages and label in args.labels:
                work.mkdir(parents=True, exist_ok=True)
                result[label]["stages"][stage] = _step(args.work, key, run)
            elif (args.work / "steps" / f"{key.replace(' ', '_')}.json").is_file():
                result[label]["stages"][stage] = _step(args.work, key, None)
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
    parser.add_argument("--labels", nargs="+", default=["small", "large"], choices=("small", "large"))
    parser.add_argument("--cache-budget-s", type=float, default=None,
                        help="stop the large run's cache build after this long (and 2+ volume shards)")
    parser.add_argument("--predict-budget-s", type=float, default=None,
                        help="stop the prediction after this long (and two progress readings)")
    parser.add_argument("--model-run", default="small", choices=("small", "large"),
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
