"""One command for a GPU machine: CUDA tests, the geometry benchmark on CUDA, the cache benchmark
on `bench`, and a short cached-vs-uncached training run; about 6 minutes on one H200.

Each step runs in a child process with its own time limit, cut to what is left of ``--budget``
(7.5 minutes by default), so the whole check ends in time; a failed step is recorded and the
others still run. Everything lands under ``--out``: ``gpu_check.json`` (per step: command, exit
code, seconds, the tail of its output) and each step's own JSON. ``--dry-run`` writes the plan
(the commands and limits) without running anything: the CPU test suite checks that it is sound.

    python benchmarks/gpu_check.py --out outputs/gpu_check            # or: make gpu-check
    python benchmarks/gpu_check.py --out /tmp/plan --dry-run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def plan(out: Path) -> list[dict]:
    """The steps: name, argv (run from the repository root), time limit in seconds."""
    py = sys.executable
    work = out / "work"
    demo = [f"data.raw_dir={work}/demo/raw", f"data.processed_dir={work}/demo/processed",
            f"cache.dir={work}/demo/cache", "geometry.device=cuda"]
    train = ["--config-name=demo", *demo, "train.device=cuda", "train.epochs=2"]
    return [
        {"name": "environment", "timeout": 60, "argv": [py, "-c", (
            "import json, torch, warp as wp; wp.init(); "
            "print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(), "
            "'device': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "
            "'warp': wp.config.version, 'warp_cuda_devices': wp.get_cuda_device_count()}))")]},
        {"name": "tests", "timeout": 150, "argv": [py, "-m", "pytest", "-q", "-m", "not slow", "tests"]},
        {"name": "geometry_benchmark", "timeout": 120,
         "argv": [py, "benchmarks/benchmark_geometry.py", "--quick", "--json", str(out / "geometry.json")]},
        {"name": "cache_benchmark", "timeout": 180,
         "argv": [py, "benchmarks/benchmark_scale.py", "--presets", "bench", "--draws", "5",
                  "--work", str(work / "scale"), "--json", str(out / "scale.json"),
                  "--png", str(out / "scale.png")]},
        {"name": "demo_data", "timeout": 90, "argv": ["bash", "-c", " && ".join([
            f"{py} synthetic_data.py --preset demo --runs 6 --seed 0 --out {work}/demo/raw "
            "--surface-cells 400000 --stl-triangles 200000",
            f"{py} process_data.py --config-name=demo {' '.join(demo[:2])}",
            f"{py} cache_data.py --config-name=demo {' '.join(demo)}"])]},
        {"name": "train_cached", "timeout": 120,
         "argv": [py, "train.py", *train, f"output_dir={out}/train_cached"]},
        {"name": "train_uncached", "timeout": 120,
         "argv": [py, "train.py", *train, f"output_dir={out}/train_uncached", "cache.enabled=false",
                  "train.epochs=1", "train.num_workers=0", "train.val_num_workers=0"]},
        {"name": "training_report", "timeout": 30,
         "argv": [py, "benchmarks/demo_report.py", "--cached", f"{out}/train_cached",
                  "--uncached", f"{out}/train_uncached", "--out", f"{out}/training_report"]},
    ]


def run_step(step: dict, seconds_left: float) -> dict:
    """Run one step within its limit and ``seconds_left``; its exit code (124 when past the
    limit), seconds and output tail."""
    started = time.time()
    try:
        proc = subprocess.run(step["argv"], cwd=ROOT, capture_output=True, text=True,
                              timeout=max(1.0, min(step["timeout"], seconds_left)))
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        code = 124
        output = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(errors="replace")
    return {**step, "returncode": code, "seconds": round(time.time() - started, 1),
            "output_tail": output[-4000:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for every result")
    parser.add_argument("--dry-run", action="store_true", help="write the plan, run nothing")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all the steps")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    steps = plan(args.out.resolve())
    missing = [a for s in steps for a in s["argv"] if a.endswith(".py") and not (ROOT / a).is_file()]
    if missing:
        raise SystemExit(f"gpu_check: scripts not found: {missing}")
    results = steps if args.dry_run else []
    deadline = time.time() + args.budget
    for step in [] if args.dry_run else steps:
        results.append(run_step(step, deadline - time.time()))
        print(f"{step['name']}: exit {results[-1]['returncode']} in {results[-1]['seconds']} s", flush=True)
        (args.out / "gpu_check.json").write_text(json.dumps({"steps": results}, indent=2) + "\n")
    (args.out / "gpu_check.json").write_text(json.dumps(
        {"dry_run": args.dry_run, "budget_s": args.budget, "steps": results}, indent=2) + "\n")
    failed = [r["name"] for r in results if r.get("returncode", 0) != 0]
    print(f"gpu_check: {len(results)} steps, failed: {failed or 'none'}; {args.out / 'gpu_check.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
