"""One command for a GPU machine: is CUDA really used? A short training run first (cached and
uncached, on the GPU), then the CUDA tests, the geometry benchmark and the cache benchmark on CUDA.

It fails loudly (exit 2, before anything else runs) unless torch and Warp both see CUDA, and it
fails (exit 1) unless every step ran on CUDA: a step's device is read from what the step itself
reports (train.py's log line, the benchmarks' JSON, pytest's skip count), not assumed. The step
limits add up to at most ``--budget`` (10 minutes by default); each step also stops at what is
left of the budget. A step runs in its own session (process group): when it runs past its limit
the whole group is killed, grandchildren included, so nothing keeps running under the next
step. ``--setup`` first installs the environment (``make setup``: the 7 GB venv) outside the
budget. Everything lands under ``--out``: ``gpu_check.json`` (per step: command, limit, exit
code, seconds, the device it asked for and the device it ran on, the tail of its output) and
each step's own JSON; docs/gpu.md says how to read it. ``--dry-run`` writes the plan only.

    python benchmarks/gpu_check.py --out outputs/gpu_check            # or: make gpu-check
    python benchmarks/gpu_check.py --out outputs/gpu_check --setup    # a fresh machine
    python benchmarks/gpu_check.py --out /tmp/plan --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 600.0
SETUP_LIMIT_S = 1800.0
KILL_GRACE_S = 5.0
MIN_DRIVER_BRANCH = 580  # CUDA 13.x: torch 2.14.1+cu130 and Warp 1.19 (built with CUDA 13.4)
MIN_DRIVER_CUDA = (13, 0)  # the CUDA version such a driver reports
CUDA_TESTS = "cuda"  # pytest -k: the tests that run Warp or torch on CUDA
ENVIRONMENT = (
    "import json, torch, warp as wp, warp._src.context as ctx; "
    "wp.config.quiet = True; wp.init(); "
    "cuda = torch.cuda.is_available(); "
    "print(json.dumps({'torch': torch.__version__, 'torch_cuda_build': torch.version.cuda, "
    "'torch_cuda': cuda, 'torch_devices': torch.cuda.device_count() if cuda else 0, "
    "'device_name': torch.cuda.get_device_name(0) if cuda else None, "
    "'driver': ctx.runtime.driver_version, 'warp_toolkit': ctx.runtime.toolkit_version, "
    "'warp': wp.config.version, 'warp_cuda_devices': wp.get_cuda_device_count()}))")


# What each step runs at: ``gpu`` is the check itself; ``smoke`` the same steps on the CPU at tiny
# sizes (benchmarks/gpu_run.py --cpu-smoke), which proves the plumbing where no GPU is at hand.
PROFILES = {
    "gpu": {"device": "cuda", "demo": {"runs": 6, "surface_cells": 400_000, "stl_triangles": 200_000},
            "train": [], "tests": ["-k", CUDA_TESTS, "tests"],
            "geometry": ["--quick", "--devices", "cuda", "--require-cuda"],
            "scale": ["--presets", "bench", "--draws", "5"]},
    "smoke": {"device": "cpu", "demo": {"runs": 5, "surface_cells": 3_000, "stl_triangles": 1_500},
              "train": ["geometry.interp_res=[16,8,8]", "sampling.surface_points=128", "sampling.geometry_points=400",
                        "model.geometry_rep.geo_conv.base_neurons=8", "model.geometry_local.base_layer=16",
                        "model.nn_basis_functions.base_layer=16", "model.aggregation_model.base_layer=16",
                        "model.position_encoder.base_neurons=16", "model.parameter_model.base_layer=16",
                        "train.num_workers=1", "train.val_num_workers=1"],
              "tests": ["-k", "lattice and not cuda", "tests/test_knn_ties.py"],
              "geometry": ["--sizes", "tiny", "--repeats", "1", "--sdf-repeats", "1"],
              "scale": ["--presets", "tiny", "--draws", "2"]},
}


def plan(out: Path, profile: str = "gpu") -> list[dict]:
    """The steps in order: name, argv (run from the repository root), limit in seconds, the
    device each asks for, and how its device is read back (``seen``); at ``profile``'s sizes."""
    py, work, p = sys.executable, out / "work", PROFILES[profile]
    device = p["device"]
    demo = [f"data.raw_dir={work}/demo/raw", f"data.processed_dir={work}/demo/processed",
            f"cache.dir={work}/demo/cache", f"geometry.device={device}"]
    train = ["--config-name=demo", *demo, f"train.device={device}", "train.epochs=2", *p["train"]]
    sizes = p["demo"]
    return [
        {"name": "environment", "timeout": 20, "seen": "environment", "argv": [py, "-c", ENVIRONMENT]},
        {"name": "demo_data", "timeout": 100, "seen": "requested", "argv": ["bash", "-c", " && ".join([
            f"{py} synthetic_data.py --preset demo --runs {sizes['runs']} --seed 0 --out {work}/demo/raw "
            f"--surface-cells {sizes['surface_cells']} --stl-triangles {sizes['stl_triangles']}",
            f"{py} process_data.py --config-name=demo {' '.join(demo[:2])}",
            f"{py} cache_data.py --config-name=demo {' '.join(demo)} {' '.join(p['train'][:1])}"])]},
        {"name": "train_cached", "timeout": 60, "seen": "train_log",
         "argv": [py, "train.py", *train, f"output_dir={out}/train_cached"]},
        {"name": "train_uncached", "timeout": 80, "seen": "train_log",
         "argv": [py, "train.py", *train, f"output_dir={out}/train_uncached", "cache.enabled=false",
                  "train.epochs=1", "train.num_workers=0", "train.val_num_workers=0"]},
        {"name": "training_report", "timeout": 15, "seen": "none",
         "argv": [py, "benchmarks/demo_report.py", "--cached", f"{out}/train_cached",
                  "--uncached", f"{out}/train_uncached", "--out", f"{out}/training_report"]},
        {"name": "cuda_tests", "timeout": 60, "seen": "pytest",
         "argv": [py, "-m", "pytest", "-q", "-rs", *p["tests"]]},
        {"name": "geometry_benchmark", "timeout": 80, "seen": "geometry_json",
         "argv": [py, "benchmarks/benchmark_geometry.py", *p["geometry"], "--json", str(out / "geometry.json")]},
        {"name": "cache_benchmark", "timeout": 160, "seen": "scale_json",
         "argv": [py, "benchmarks/benchmark_scale.py", *p["scale"], "--geometry-device", device,
                  "--work", str(work / "scale"), "--json", str(out / "scale.json"), "--png", str(out / "scale.png")]},
    ]


def setup_step() -> dict:
    """The environment install of a fresh machine, outside the budget."""
    return {"name": "setup", "timeout": SETUP_LIMIT_S, "seen": "none", "in_budget": False,
            "argv": ["make", "setup"]}


def kill_group(proc: subprocess.Popen) -> None:
    """Stop every process of ``proc``'s session: SIGTERM, then SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if wait is not None:
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass


def run_step(step: dict, seconds_left: float) -> dict:
    """Run one step in its own session within its limit and ``seconds_left``; its exit code
    (124 when past the limit: the whole process group is killed), seconds and output tail."""
    limit = max(1.0, min(step["timeout"], seconds_left))
    started = time.time()
    proc = subprocess.Popen(step["argv"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc)
        output, _ = proc.communicate()
        code = 124
    kill_group(proc)  # whatever the step left running in the background
    return {**step, "limit_s": round(limit, 1), "returncode": code,
            "seconds": round(time.time() - started, 1), "output_tail": (output or "")[-4000:]}


def cuda_problem(environment: dict) -> str:
    """Why this machine cannot pass ("" when torch and Warp both see CUDA)."""
    problems = []
    driver = environment.get("driver")
    if not driver:
        problems.append("no NVIDIA CUDA driver was found (the pinned torch cu130 and Warp 1.19 "
                        f"wheels need an R{MIN_DRIVER_BRANCH} or newer driver)")
    elif tuple(driver) < MIN_DRIVER_CUDA:
        problems.append(f"the NVIDIA driver supports CUDA {'.'.join(map(str, driver))}; the pinned "
                        f"builds need CUDA {'.'.join(map(str, MIN_DRIVER_CUDA))} (an R{MIN_DRIVER_BRANCH} "
                        "or newer driver)")
    if not environment.get("torch_cuda"):
        problems.append(f"torch {environment.get('torch', '?')} (CUDA build "
                        f"{environment.get('torch_cuda_build')}) sees no CUDA device")
    if not environment.get("warp_cuda_devices"):
        problems.append(f"Warp {environment.get('warp', '?')} sees no CUDA device")
    return "; ".join(problems)


def _json_after(output: str) -> dict:
    """The last line of ``output`` that is a JSON object ({} if none)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


def device_seen(result: dict, device: str = "cuda") -> str:
    """The device a finished step reports having used ("" where it reports none); ``device``: the
    one a step asked for explicitly (``requested``)."""
    kind, output = result["seen"], result["output_tail"]
    if kind == "environment":
        env = _json_after(output)
        return f"cuda ({env.get('device_name')})" if not cuda_problem(env) and env else "cpu"
    if kind == "train_log":
        found = re.search(r"parameters on (\S+) x \d+", output)
        return found.group(1) if found else ""
    if kind == "pytest":
        return device if re.search(r"\d+ passed", output) and "skipped" not in output else "not all: tests skipped"
    if kind in ("geometry_json", "scale_json"):
        path = Path(result["argv"][result["argv"].index("--json") + 1])
        data = json.loads(path.read_text()) if path.is_file() else {}
        if kind == "scale_json":
            return str(data.get("geometry_device", ""))
        return ",".join(sorted({r["device"] for r in data.get("results", []) if "error" not in r}))
    if kind == "requested":
        return f"{device} (requested explicitly: a {device} failure fails the step)"
    return "not applicable"


def judge(result: dict, device: str = "cuda") -> dict:
    """The step's result with its device and whether it passed (exit 0 and ``device`` where it
    reports a device)."""
    seen = device_seen(result, device) if result["returncode"] == 0 else ""
    on_device = result["seen"] == "none" or seen.startswith(device)
    return result | {"device_seen": seen, "ok": result["returncode"] == 0 and on_device}


def write_report(out: Path, payload: dict) -> Path:
    path = out / "gpu_check.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def run_all(steps: list[dict], budget: float, out: Path, before: list[dict]) -> tuple[list[dict], str]:
    """Run ``steps`` within ``budget``; stop at once when the environment lacks CUDA. The
    results, and the CUDA problem ("" when none)."""
    results, deadline = list(before), time.time() + budget
    for step in steps:
        result = judge(run_step(step, deadline - time.time()))
        results.append(result)
        print(f"{step['name']}: exit {result['returncode']} in {result['seconds']} s on "
              f"{result['device_seen'] or '?'}{'' if result['ok'] else '  FAILED'}", flush=True)
        write_report(out, {"budget_s": budget, "steps": results})
        if step["name"] == "environment":
            problem = cuda_problem(_json_after(result["output_tail"])) or ("" if result["ok"] else "the probe failed")
            if problem:
                return results, problem
    return results, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for every result")
    parser.add_argument("--dry-run", action="store_true", help="write the plan, run nothing")
    parser.add_argument("--setup", action="store_true", help="first `make setup`, outside the budget")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all the steps")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    steps = plan(args.out.resolve())
    planned = sum(s["timeout"] for s in steps)
    if planned > args.budget:
        raise SystemExit(f"gpu_check: the steps' limits add up to {planned} s, over the budget of {args.budget} s")
    if args.dry_run:
        write_report(args.out, {"dry_run": True, "budget_s": args.budget, "planned_s": planned,
                                "setup": setup_step() if args.setup else None, "steps": steps})
        return 0
    before = [judge(run_step(setup_step(), SETUP_LIMIT_S))] if args.setup else []
    results, problem = run_all(steps, args.budget, args.out, before)
    failed = [r["name"] for r in results if not r["ok"]]
    path = write_report(args.out, {"dry_run": False, "budget_s": args.budget, "planned_s": planned,
                                   "cuda_problem": problem, "ok": not failed and not problem,
                                   "failed": failed, "steps": results})
    if problem:
        print(f"gpu_check: FAILED: no CUDA: {problem}; nothing else was run. See docs/gpu.md; {path}",
              file=sys.stderr)
        return 2
    print(f"gpu_check: {len(results)} steps, failed: {failed or 'none'}; {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
