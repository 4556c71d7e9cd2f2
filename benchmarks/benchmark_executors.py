"""process_data.py on the local pool and on a local Dask cluster: wall time side by side.

Generates ``--runs`` synthetic runs (``--preset``, default 8 `demo` runs) once, then runs the
entry point ``python process_data.py process.num_processes=<workers> executor.kind=<kind>`` into a
fresh folder per repeat, pool and Dask taking turns so that a shared machine's load falls on
both alike. The wall time is the command's, imports and the Dask cluster's start and stop
included. Every run Dask wrote is checked against the pool's, array by array and attribute by
attribute (the write id aside). Prints a table, writes JSON; exits non-zero when a run differs
or Dask's median is above ``--max-ratio`` times the pool's.

    nice -n 19 python benchmarks/benchmark_executors.py --repeats 3 --json outputs/benchmark_executors.json
    python benchmarks/benchmark_executors.py --preset tiny --runs 2 --repeats 1 --workdir /tmp/bx   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry points and synthetic_data.py, as from the repository
KINDS = ("pool", "dask")


def process(kind: str, raw: Path, out: Path, workers: int, hydra_dir: Path) -> dict:
    """Run process_data.py once on ``kind``; its wall time, the load average before it, and
    its summary line."""
    command = [sys.executable, "process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={out}",
               f"process.num_processes={workers}", f"executor.kind={kind}", f"hydra.run.dir={hydra_dir}"]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"process_data.py on {kind} failed:\n{done.stdout}\n{done.stderr}")
    return {"seconds": seconds, "load_before": load, "summary": next(line for line in done.stdout.splitlines() if " runs: " in line)}


def differences(a: Path, b: Path) -> list[str]:
    """Runs of folder ``a`` whose arrays or attributes (write id aside) differ in ``b``."""
    from domino_pipeline.processed.runs import load_run, open_run

    found = []
    for run in sorted(p.name for p in a.glob("*.zarr")):
        left, right = load_run(a / run), load_run(b / run)
        attrs = [{k: v for k, v in open_run(d / run).attrs.items() if k != "write_id"} for d in (a, b)]
        same = sorted(left) == sorted(right) and all(np.array_equal(left[n], right[n]) for n in left)
        if not same or attrs[0] != attrs[1]:
            found.append(run)
    return found


def run_benchmark(preset: str, runs: int, repeats: int, workers: int, work: Path) -> dict:
    """Generate the runs, then process them ``repeats`` times on each executor in turn."""
    from synthetic_data import generate_runs

    raw = work / "raw"
    if not raw.is_dir():
        generate_runs(raw, runs, preset=preset, seed=0)
    timings: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    differ: list[str] = []
    for repeat in range(repeats):
        for kind in KINDS if repeat % 2 == 0 else KINDS[::-1]:
            out = work / f"{kind}_{repeat}"
            shutil.rmtree(out, ignore_errors=True)
            timings[kind].append(process(kind, raw, out, workers, work / "hydra"))
            print(f"repeat {repeat} {kind}: {timings[kind][-1]['seconds']:.1f} s", flush=True)
        differ += [f"repeat {repeat}: {run}" for run in differences(work / f"pool_{repeat}", work / f"dask_{repeat}")]
        for kind in KINDS:
            shutil.rmtree(work / f"{kind}_{repeat}")
    medians = {kind: statistics.median(t["seconds"] for t in timings[kind]) for kind in KINDS}
    return {"preset": preset, "runs": runs, "workers": workers, "repeats": repeats, "timings": timings,
            "medians_s": medians, "ratio": medians["dask"] / medians["pool"],
            "ratios_per_repeat": [d["seconds"] / p["seconds"] for p, d in zip(timings["pool"], timings["dask"])],
            "runs_that_differ": differ}


def format_table(result: dict) -> str:
    """The medians, each repeat's wall time and the load average before it."""
    lines = [f"process_data.py, {result['runs']} `{result['preset']}` runs, {result['workers']} workers, "
             f"{result['repeats']} repeats (pool and Dask in turn)", "",
             "| executor | median s | each repeat s | load average before |", "|---|---|---|---|"]
    for kind in KINDS:
        each = ", ".join(f"{t['seconds']:.1f}" for t in result["timings"][kind])
        loads = ", ".join(f"{t['load_before']:.1f}" for t in result["timings"][kind])
        lines.append(f"| {kind} | {result['medians_s'][kind]:.1f} | {each} | {loads} |")
    ratios = ", ".join(f"{r:.2f}" for r in result["ratios_per_repeat"])
    lines += ["", f"Dask / pool, medians: {result['ratio']:.2f}x (per repeat: {ratios})",
              f"runs that differ between pool and Dask: {result['runs_that_differ'] or 'none'}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-ratio", type=float, default=1.2)
    parser.add_argument("--json", type=Path, default=Path("outputs/benchmark_executors.json"))
    parser.add_argument("--workdir", type=Path, default=None, help="scratch space (default: tmp); keeps the raw runs")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_executors_"))
    result = run_benchmark(args.preset, args.runs, args.repeats, args.workers, work)
    print(format_table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["runs_that_differ"] or result["ratio"] > args.max_ratio else 0


if __name__ == "__main__":
    sys.exit(main())
