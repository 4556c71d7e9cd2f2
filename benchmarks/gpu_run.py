"""One prepared run for a short slot on one GPU machine: gpu_check's steps, time to accuracy at the
bench size beside physicsnemo's GPU preprocessing, kNN and SDF at DrivAerML's sizes; one JSON.

From a bare machine whose image has Python with torch, numpy, scipy, matplotlib and pytest, the rest
coming from the offline bundle (tools/gpu_bundle/, docs/gpu.md), within ``--budget`` (540 s):

    python3 benchmarks/gpu_run.py --out outputs/gpu_run --bundle /path/to/bundle   # or: make gpu-run BUNDLE=...
    python3 benchmarks/gpu_run.py --out /tmp/plan --dry-run                         # the plan only
    python3 benchmarks/gpu_run.py --out /tmp/smoke --cpu-smoke                      # every step on the CPU, tiny

Steps, each in its own process group within its limit (gpu_check.run_step; the limits add up to the
budget): ``bundle`` (unpack it into ``<out>/site``, then on ``PYTHONPATH`` for every later step),
gpu_check's eight steps (gpu_check.plan, its limits cut from the H200 figures of docs/gpu.md),
``time_to_accuracy`` (benchmark_time_to_accuracy.py at the bench size: cached with workers,
uncached, physicsnemo's ``DoMINODataPipe`` with its GPU preprocessing; short caps, so the figures
are epoch times and data-wait shares more than times to the target) and ``geometry_drivaerml``
(benchmark_geometry.py at DrivAerML's sizes, ours beside physicsnemo's kernels). What only needs
CPU cores is prepared in the background from the start, while the first steps use the GPU: the
bench runs of the time-to-accuracy step, the bench run of the cache benchmark and the DrivAerML-size
geometry inputs; a step that needs them waits for them within its own limit.

``<out>/gpu_run.json``: per step its command, limit, exit code, seconds, the device it reports and
whether it passed (as gpu_check.json), the background jobs, ``figures`` read from the steps' own
JSON (``tta.json``, ``geometry_drivaerml.json``, ``geometry.json``, ``scale.json`` beside it) and
``acceptance``: every gpu_check step passed; the cached epoch at most 0.8x physicsnemo's
GPU-preprocessing epoch with data wait at most 5% of the step; our kNN and SDF no slower than
physicsnemo's where both ran. Exit 0 only when every step passed on the expected device.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check  # noqa: E402  (standard library only: it runs before the bundle is unpacked)

BUDGET_S = 540.0
GPU_CHECK_STEPS = ("environment", "demo_data", "train_cached", "train_uncached", "training_report",
                   "cuda_tests", "geometry_benchmark", "cache_benchmark")
# Limits (s) per step. gpu profile: about 1.2-1.5x the H200 seconds of docs/gpu.md where a step ran
# whole, less where its data is now prepared in the background (cache_benchmark: its bench run);
# the two new steps from their parts' figures there. They add up to BUDGET_S with the bundle.
LIMITS = {
    "gpu": {"bundle": 20, "environment": 15, "demo_data": 80, "train_cached": 40, "train_uncached": 50,
            "training_report": 10, "cuda_tests": 45, "geometry_benchmark": 65, "cache_benchmark": 70,
            "time_to_accuracy": 90, "geometry_drivaerml": 55},
    "smoke": {"bundle": 60, "environment": 60, "demo_data": 120, "train_cached": 120, "train_uncached": 120,
              "training_report": 60, "cuda_tests": 120, "geometry_benchmark": 180, "cache_benchmark": 300,
              "time_to_accuracy": 600, "geometry_drivaerml": 180},
}
# The time-to-accuracy step: bodies, epochs and the cap of the uncached arms (seconds each)
TTA = {"gpu": {"size": "bench", "runs": 4, "epochs": 4, "max_cap_s": 15, "set": []},
       "smoke": {"size": "tiny", "runs": 4, "epochs": 1, "max_cap_s": 120,
                 "set": gpu_check.PROFILES["smoke"]["train"]}}
GEOMETRY = {"gpu": ["--sizes", "drivaerml", "--devices", "cuda", "--require-cuda", "--repeats", "2",
                    "--sdf-repeats", "2", "--no-host-preparation"],
            "smoke": ["--sizes", "tiny", "--repeats", "1", "--sdf-repeats", "1", "--no-host-preparation"]}


def tta_arguments(out: Path, profile: str) -> list[str]:
    """benchmark_time_to_accuracy.py's arguments for the step (and for its background preparation)."""
    t, device = TTA[profile], gpu_check.PROFILES[profile]["device"]
    return ["--sizes", t["size"], "--runs", str(t["runs"]), "--epochs", str(t["epochs"]), "--device", device,
            "--max-cap-s", str(t["max_cap_s"]), "--processes", str(max(1, min(t["runs"], os.cpu_count() or 1))),
            "--work", str(out / "work" / "tta"), *(["--set", *t["set"]] if t["set"] else [])]


def background_jobs(out: Path, profile: str) -> list[dict]:
    """What only needs CPU cores, started at once: the time-to-accuracy runs, the cache benchmark's
    bench run (gpu profile; the smoke run's tiny one is quick), the DrivAerML-size geometry inputs."""
    py = sys.executable
    jobs = [{"name": "prepare_tta", "argv": [py, "benchmarks/benchmark_time_to_accuracy.py",
                                             *tta_arguments(out, profile), "--prepare-only"]},
            {"name": "prepare_geometry", "argv": [py, "benchmarks/benchmark_geometry.py", *GEOMETRY[profile][:2],
                                                  "--inputs", str(out / "work" / "geometry_inputs"), "--inputs-only"]}]
    if profile == "gpu":
        jobs.append({"name": "prepare_scale", "argv": [py, "-c", "import sys; sys.path.insert(0, 'benchmarks'); "
                     f"import benchmark_scale as b; from pathlib import Path; b.ensure_processed(Path({str(out / 'work' / 'scale')!r}), 'bench')"]})
    return jobs


def plan(out: Path, profile: str, bundle: Path | None) -> list[dict]:
    """Every step in order with its limit; ``waits``: the background jobs a step needs first."""
    py, limits = sys.executable, LIMITS[profile]
    steps = []
    if bundle is not None:
        steps.append({"name": "bundle", "seen": "none",
                      "argv": [py, str(bundle / "unpack_bundle.py"), str(bundle), str(out / "site")]})
    waits = {"cache_benchmark": ["prepare_scale"] if profile == "gpu" else []}
    steps += [s | {"waits": waits.get(s["name"], [])} for s in gpu_check.plan(out, profile)]
    steps.append({"name": "time_to_accuracy", "seen": "tta_json", "waits": ["prepare_tta"],
                  "argv": [py, "benchmarks/benchmark_time_to_accuracy.py", *tta_arguments(out, profile),
                           "--json", str(out / "tta.json"), "--png", str(out / "tta.png")]})
    steps.append({"name": "geometry_drivaerml", "seen": "geometry_json", "waits": ["prepare_geometry"],
                  "argv": [py, "benchmarks/benchmark_geometry.py", *GEOMETRY[profile],
                           "--inputs", str(out / "work" / "geometry_inputs"),
                           "--json", str(out / "geometry_drivaerml.json")]})
    return [s | {"timeout": limits[s["name"]], "waits": s.get("waits", [])} for s in steps]


# ---- running

class Background:
    """Jobs running in their own sessions beside the steps, each writing a log under ``<out>/background``."""

    def __init__(self, out: Path) -> None:
        self.folder = out / "background"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.jobs: dict[str, dict] = {}

    def start(self, job: dict) -> None:
        log = open(self.folder / f"{job['name']}.log", "w")
        proc = subprocess.Popen(job["argv"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.jobs[job["name"]] = {**job, "proc": proc, "log": log, "started": time.time()}

    def wait(self, names: list[str], seconds: float) -> list[str]:
        """Wait up to ``seconds`` for ``names``; those that failed or are still running."""
        deadline = time.time() + seconds
        for name in names:
            job = self.jobs.get(name)
            if job is None:
                continue
            try:
                job["proc"].wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        return [n for n in names if n in self.jobs and self.jobs[n]["proc"].returncode != 0]

    def records(self) -> list[dict]:
        """Each job's command, exit code (None: still running when the run ended), seconds and log tail."""
        out = []
        for name, job in self.jobs.items():
            code = job["proc"].poll()
            tail = (self.folder / f"{name}.log").read_text(errors="replace")[-2000:]
            out.append({"name": name, "argv": job["argv"], "returncode": code,
                        "seconds": round(time.time() - job["started"], 1) if code is None else None,
                        "output_tail": tail})
        return out

    def stop(self) -> None:
        """End every job still running, with its process group."""
        for job in self.jobs.values():
            if job["proc"].poll() is None:
                gpu_check.kill_group(job["proc"])
            job["log"].close()


def tta_device(out: Path, device: str) -> str:
    """The time-to-accuracy step's device: the report's, and physicsnemo's preprocessing device as
    its arm's log names it ("" when either is missing or not ``device``)."""
    path = out / "tta.json"
    if not path.is_file():
        return ""
    report = json.loads(path.read_text())
    size = next(iter(report["sizes"]), None)
    log = out / "work" / "tta" / str(size) / "train" / "physicsnemo" / "train.log"
    wanted = "GPU preprocessing" if device == "cuda" else "CPU preprocessing"
    if report.get("device") != device or not log.is_file() or wanted not in log.read_text(errors="replace"):
        return ""
    return f"{device} (physicsnemo: {wanted})"


def judged(result: dict, out: Path, device: str) -> dict:
    """gpu_check.judge, with the time-to-accuracy step's device read from its report."""
    if result["seen"] != "tta_json":
        return gpu_check.judge(result, device)
    seen = tta_device(out, device) if result["returncode"] == 0 else ""
    return result | {"device_seen": seen, "ok": result["returncode"] == 0 and seen.startswith(device)}


def run_steps(steps: list[dict], out: Path, profile: str, budget: float, jobs: list[dict]) -> tuple[list, list]:
    """Run the steps within ``budget``, background jobs started after the bundle; their results."""
    device = gpu_check.PROFILES[profile]["device"]
    background, results, deadline = Background(out), [], time.time() + budget
    try:
        for step in steps:
            if step["name"] != "bundle" and not background.jobs:
                for job in jobs:
                    background.start(job)
            waited = time.time()
            missing = background.wait(step["waits"], min(step["timeout"], deadline - time.time()))
            left = min(step["timeout"] - (time.time() - waited), deadline - time.time())
            if missing:
                result = {**step, "limit_s": step["timeout"], "returncode": 125, "seconds": round(time.time() - waited, 1),
                          "output_tail": f"background job(s) {missing} failed or did not finish in time"}
            else:
                result = gpu_check.run_step(step, max(1.0, left))
            result = judged(result, out, device)
            results.append(result)
            if step["name"] == "bundle" and result["returncode"] == 0:
                os.environ["PYTHONPATH"] = os.pathsep.join([str(out / "site"), str(ROOT)])
            print(f"{step['name']}: exit {result['returncode']} in {result['seconds']} s on "
                  f"{result['device_seen'] or '?'}{'' if result['ok'] else '  FAILED'}", flush=True)
            write(out, {"profile": profile, "budget_s": budget, "steps": results})
            if step["name"] == "environment" and profile == "gpu":
                problem = gpu_check.cuda_problem(gpu_check._json_after(result["output_tail"]))
                if problem:
                    return results, background.records() + [{"name": "cuda_problem", "text": problem}]
    finally:
        records = background.records()
        background.stop()
    return results, records


# ---- figures

def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def geometry_figures(path: Path) -> dict:
    """Seconds per case of a benchmark_geometry JSON, by kind, device and size, with our kernels
    against physicsnemo's where both ran at one size."""
    results = [r for r in _load(path).get("results", []) if "error" not in r]
    seconds = {f"{r['kind']}_{r['device']}_{r['queries']}": r["seconds"] for r in results}
    pairs = {}
    for r in results:
        if r["kind"] in ("knn_warp", "sdf_warp") and r.get("threads") != 1:
            theirs = seconds.get(f"{r['kind'].replace('warp', 'physicsnemo')}_{r['device']}_{r['queries']}")
            if theirs is not None:
                pairs[f"{r['kind'].split('_')[0]}_{r['device']}_{r['queries']}"] = {
                    "ours_s": r["seconds"], "physicsnemo_s": theirs, "ours_over_physicsnemo": r["seconds"] / theirs}
    return {"seconds": seconds, "ours_against_physicsnemo": pairs,
            "notes": _load(path).get("agreement", {})}


def figures(out: Path) -> dict:
    """What the steps measured, from their own JSON files."""
    tta = _load(out / "tta.json")
    record = next(iter(tta.get("sizes", {}).values()), {})
    arms = {arm: {k: s.get(k) for k in ("surface_cells", "time_to_target_s", "cap_s", "epoch_s", "data_wait_share",
                                        "peak_device_mb", "peak_host_mb", "ended")}
            for arm, s in record.get("arms", {}).items()}
    return {"time_to_accuracy": {"arms": arms, "ratios": record.get("ratios", {}),
                                 "cache_build_s": record.get("cache_build_s")},
            "geometry_drivaerml": geometry_figures(out / "geometry_drivaerml.json"),
            "geometry_quick": geometry_figures(out / "geometry.json")}


def acceptance(results: list[dict], found: dict) -> dict:
    """The issue's GPU criteria, each True, False or None (not measured)."""
    by_name = {r["name"]: r for r in results}
    arms = found["time_to_accuracy"]["arms"]
    ratio = found["time_to_accuracy"]["ratios"].get("cached_epoch_over_physicsnemo_epoch")
    wait = arms.get("cached", {}).get("data_wait_share")
    pairs = {**found["geometry_quick"]["ours_against_physicsnemo"],
             **found["geometry_drivaerml"]["ours_against_physicsnemo"]}
    return {
        "gpu_check_all_passed": all(by_name.get(n, {}).get("ok", False) for n in GPU_CHECK_STEPS),
        "cached_epoch_at_most_0.8x_physicsnemo": None if ratio is None else ratio <= 0.8,
        "cached_data_wait_at_most_5pct": None if wait is None else wait <= 0.05,
        "knn_and_sdf_no_slower_than_physicsnemo": (None if not pairs else
                                                    all(p["ours_over_physicsnemo"] <= 1.0 for p in pairs.values())),
    }


def write(out: Path, payload: dict) -> Path:
    path = out / "gpu_run.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for every result")
    parser.add_argument("--bundle", type=Path, help="the offline bundle (tools/gpu_bundle): unpacked first")
    parser.add_argument("--budget", type=float, default=None, help=f"seconds for all steps ({BUDGET_S:.0f} on a GPU)")
    parser.add_argument("--cpu-smoke", action="store_true", help="every step on the CPU at tiny sizes")
    parser.add_argument("--dry-run", action="store_true", help="write the plan, run nothing")
    args = parser.parse_args(argv)
    profile = "smoke" if args.cpu_smoke else "gpu"
    budget = args.budget if args.budget is not None else (BUDGET_S if profile == "gpu" else 2400.0)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    steps = plan(out, profile, args.bundle.resolve() if args.bundle else None)
    planned = sum(s["timeout"] for s in steps)
    if planned > budget:
        raise SystemExit(f"gpu_run: the steps' limits add up to {planned} s, over the budget of {budget} s")
    jobs = background_jobs(out, profile)
    if args.dry_run:
        write(out, {"dry_run": True, "profile": profile, "budget_s": budget, "planned_s": planned,
                    "steps": steps, "background": jobs})
        return 0
    started = time.time()
    results, background = run_steps(steps, out, profile, budget, jobs)
    found = figures(out)
    failed = [r["name"] for r in results if not r["ok"]] + [s["name"] for s in steps[len(results):]]
    payload = {"dry_run": False, "profile": profile, "budget_s": budget, "planned_s": planned,
               "wall_s": round(time.time() - started, 1), "ok": not failed, "failed": failed,
               "steps": results, "background": background, "figures": found,
               "acceptance": acceptance(results, found)}
    path = write(out, payload)
    print(f"gpu_run: {len(results)} of {len(steps)} steps in {payload['wall_s']} s, failed: {failed or 'none'}; "
          f"acceptance {payload['acceptance']}; {path}")
    return 0 if not failed else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # background jobs are stopped on the way out
    sys.exit(main())
