"""benchmarks/gpu_run.py: a plan that fits the slot (gpu_check's eight steps, the time to accuracy
at bench size on CUDA, DrivAerML-size geometry), background preparation that a step waits for
(and fails with), the acceptance read off the figures, and the whole run end to end on the CPU at
tiny sizes (--cpu-smoke), which is what proves it where no GPU is at hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import import_benchmark

ROOT = Path(__file__).resolve().parents[1]
gpu_run = import_benchmark("gpu_run")


def dry_run(tmp_path: Path, *extra: str) -> dict:
    done = subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--out", str(tmp_path), "--dry-run", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "gpu_run.json").read_text())


def test_the_plan_fits_the_slot_with_every_gpu_check_step_and_the_two_new_ones(tmp_path):
    plan = dry_run(tmp_path, "--bundle", str(tmp_path / "bundle"))
    names = [s["name"] for s in plan["steps"]]
    assert names[0] == "bundle" and names[1:9] == list(gpu_run.GPU_CHECK_STEPS)
    assert names[9:] == ["time_to_accuracy", "geometry_drivaerml"]
    assert sum(s["timeout"] for s in plan["steps"]) == plan["planned_s"] <= plan["budget_s"] == 540
    scripts = [a for s in plan["steps"] for a in s["argv"] if a.endswith(".py") and "bundle" not in a]
    assert scripts and all((ROOT / s).is_file() for s in scripts)
    step = {s["name"]: s for s in plan["steps"]}
    tta = step["time_to_accuracy"]["argv"]
    assert tta[tta.index("--sizes") + 1] == "bench" and tta[tta.index("--device") + 1] == "cuda"
    geometry = step["geometry_drivaerml"]["argv"]
    assert geometry[geometry.index("--sizes") + 1] == "drivaerml" and "--require-cuda" in geometry
    assert "train.device=cuda" in step["train_cached"]["argv"]
    jobs = {j["name"] for j in plan["background"]}
    assert {w for s in plan["steps"] for w in s["waits"]} == jobs == {"prepare_tta", "prepare_geometry", "prepare_scale"}
    assert all("returncode" not in s for s in plan["steps"])


def test_a_budget_too_small_for_the_plan_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--out", str(tmp_path), "--dry-run",
                           "--budget", "300"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "over the budget of 300.0 s" in done.stderr


def test_a_step_fails_when_the_background_job_it_waits_for_fails(tmp_path):
    py = sys.executable
    steps = [{"name": "needs_data", "seen": "none", "timeout": 20, "waits": ["data"],
              "argv": [py, "-c", "print('ran')"]},
             {"name": "alone", "seen": "none", "timeout": 20, "waits": [], "argv": [py, "-c", "print('ran')"]}]
    jobs = [{"name": "data", "argv": [py, "-c", "import sys; print('broken'); sys.exit(3)"]}]
    results, background = gpu_run.run_steps(steps, tmp_path, "smoke", 60.0, jobs)
    assert results[0]["returncode"] == 125 and not results[0]["ok"]
    assert "['data'] failed or did not finish" in results[0]["output_tail"]
    assert results[1]["ok"] and results[1]["returncode"] == 0
    assert background[0]["returncode"] == 3 and "broken" in background[0]["output_tail"]


def test_the_acceptance_is_read_off_the_steps_and_figures():
    results = [{"name": n, "ok": True} for n in gpu_run.GPU_CHECK_STEPS]
    found = {"time_to_accuracy": {"arms": {"cached": {"data_wait_share": 0.04}},
                                  "ratios": {"cached_epoch_over_physicsnemo_epoch": 0.5}},
             "geometry_quick": {"ours_against_physicsnemo": {"knn_cuda:0_5000": {"ours_over_physicsnemo": 0.9}}},
             "geometry_drivaerml": {"ours_against_physicsnemo": {"sdf_cuda:0_1524288": {"ours_over_physicsnemo": 1.2}}}}
    verdict = gpu_run.acceptance(results, found)
    assert verdict == {"gpu_check_all_passed": True, "cached_epoch_at_most_0.8x_physicsnemo": True,
                       "cached_data_wait_at_most_5pct": True, "knn_and_sdf_no_slower_than_physicsnemo": False}
    results[3]["ok"] = False
    found["time_to_accuracy"] = {"arms": {}, "ratios": {}}
    verdict = gpu_run.acceptance(results, found)
    assert verdict["gpu_check_all_passed"] is False and verdict["cached_epoch_at_most_0.8x_physicsnemo"] is None


def test_geometry_figures_pair_our_kernels_with_physicsnemos_at_one_size(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"results": [
        {"kind": "knn_warp", "device": "cuda:0", "queries": 8_800_000, "threads": "all", "seconds": 2.0},
        {"kind": "knn_warp", "device": "cuda:0", "queries": 20_000, "threads": "all", "seconds": 0.004},
        {"kind": "knn_physicsnemo", "device": "cuda:0", "queries": 20_000, "threads": "all", "seconds": 0.008},
        {"kind": "sdf_physicsnemo", "device": "cuda:0", "queries": 100, "threads": "all", "error": "OOM"}]}))
    figures = gpu_run.geometry_figures(path)
    assert figures["ours_against_physicsnemo"] == {
        "knn_cuda:0_20000": {"ours_s": 0.004, "physicsnemo_s": 0.008, "ours_over_physicsnemo": 0.5}}
    assert figures["seconds"]["knn_warp_cuda:0_8800000"] == 2.0


@pytest.mark.slow
def test_the_whole_run_passes_on_the_cpu_at_tiny_sizes(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--out", str(tmp_path), "--cpu-smoke"],
                          cwd=ROOT, capture_output=True, text=True, timeout=2400)
    report = json.loads((tmp_path / "gpu_run.json").read_text())
    failed = {s["name"]: s["output_tail"][-1500:] for s in report["steps"] if not s["ok"]}
    assert done.returncode == 0 and report["ok"], (failed, done.stdout[-2000:], report.get("background"))
    assert [s["name"] for s in report["steps"]] == [*gpu_run.GPU_CHECK_STEPS, "time_to_accuracy", "geometry_drivaerml"]
    assert all(s["device_seen"].startswith("cpu") or s["seen"] == "none" for s in report["steps"])
    arms = report["figures"]["time_to_accuracy"]["arms"]
    assert set(arms) == {"cached", "uncached", "physicsnemo"}
    assert all(a["epoch_s"] > 0 and a["surface_cells"] > 2000 for a in arms.values())
    assert "physicsnemo DoMINODataPipe (CPU preprocessing)" in (
        tmp_path / "work" / "tta" / "tiny" / "train" / "physicsnemo" / "train.log").read_text()
    pairs = report["figures"]["geometry_drivaerml"]["ours_against_physicsnemo"]
    assert any(name.startswith("sdf_cpu") for name in pairs)
    assert set(report["acceptance"]) == {"gpu_check_all_passed", "cached_epoch_at_most_0.8x_physicsnemo",
                                         "cached_data_wait_at_most_5pct", "knn_and_sdf_no_slower_than_physicsnemo"}
    assert report["acceptance"]["gpu_check_all_passed"] is True
    assert all(job["returncode"] == 0 for job in report["background"])
