"""The GPU check: a sound plan within its budget (training first, setup outside the budget), a
loud failure where CUDA is absent (here, or hidden with CUDA_VISIBLE_DEVICES=""), and a step past
its limit killed with its whole process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import import_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(tmp_path, *extra):
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path), "--dry-run", *extra],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads((tmp_path / "gpu_check.json").read_text())


def test_the_dry_run_writes_a_sound_plan_within_the_budget(tmp_path):
    plan = _dry_run(tmp_path)
    assert plan["dry_run"] is True and plan["setup"] is None
    names = [s["name"] for s in plan["steps"]]
    assert names[:4] == ["environment", "demo_data", "train_cached", "train_uncached"]  # training first
    assert set(names[4:]) == {"training_report", "cuda_tests", "geometry_benchmark", "cache_benchmark"}
    assert sum(s["timeout"] for s in plan["steps"]) == plan["planned_s"] <= plan["budget_s"] == 600
    scripts = [a for s in plan["steps"] for a in s["argv"] if a.endswith(".py")]
    assert scripts and all((ROOT / s).is_file() for s in scripts)
    train = next(s for s in plan["steps"] if s["name"] == "train_cached")["argv"]
    assert "train.device=cuda" in train and "geometry.device=cuda" in train
    geometry = next(s for s in plan["steps"] if s["name"] == "geometry_benchmark")["argv"]
    assert "--require-cuda" in geometry
    assert all("returncode" not in s for s in plan["steps"])  # nothing ran


def test_setup_is_planned_outside_the_budget(tmp_path):
    plan = _dry_run(tmp_path, "--setup")
    assert plan["setup"]["argv"] == ["make", "setup"] and plan["setup"]["in_budget"] is False
    assert plan["planned_s"] <= plan["budget_s"]


def test_a_budget_too_small_for_the_plan_is_refused(tmp_path):
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path), "--dry-run",
                             "--budget", "100"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "over the budget of 100.0 s" in result.stderr


@pytest.mark.slow
def test_without_cuda_it_fails_loudly_and_runs_nothing_else(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a GPU machine
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gpu_check: FAILED: no CUDA:" in result.stderr
    assert "torch" in result.stderr and "sees no CUDA device" in result.stderr and "Warp" in result.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["ok"] is False and report["cuda_problem"]
    assert [s["name"] for s in report["steps"]] == ["environment"]
    assert report["steps"][0]["device_seen"] == "cpu"


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_a_step_past_its_limit_is_killed_with_its_grandchildren():
    gpu_check = import_benchmark("gpu_check")
    marker = f"time.sleep(60.{os.getpid()})"
    step = {"name": "sleeper", "timeout": 2, "seen": "none",
            "argv": ["bash", "-c", f"{sys.executable} -c 'import time; {marker}'"]}
    started = time.time()
    result = gpu_check.run_step(step, seconds_left=60)
    assert result["returncode"] == 124 and time.time() - started < 10
    deadline = time.time() + 5
    while _processes_with(marker) and time.time() < deadline:  # reaped by init: a moment
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_the_device_of_a_step_is_read_from_what_it_reports():
    gpu_check = import_benchmark("gpu_check")
    train = {"seen": "train_log", "returncode": 0,
             "output_tail": "DoMINO surface: 1,234 parameters on cuda:0 x 1; 5 training"}
    assert gpu_check.judge(train)["device_seen"] == "cuda:0" and gpu_check.judge(train)["ok"]
    on_cpu = train | {"output_tail": "DoMINO surface: 1,234 parameters on cpu x 1; 5 training"}
    assert not gpu_check.judge(on_cpu)["ok"]
    tests = {"seen": "pytest", "returncode": 0, "output_tail": "3 passed, 2 skipped in 4.0s"}
    assert not gpu_check.judge(tests)["ok"]
    assert gpu_check.cuda_problem({"torch_cuda": True, "warp_cuda_devices": 1, "driver": [12, 8]}).startswith(
        "the NVIDIA driver supports CUDA 12.8")
    assert gpu_check.cuda_problem({"torch_cuda": True, "warp_cuda_devices": 1, "driver": [13, 0]}) == ""
