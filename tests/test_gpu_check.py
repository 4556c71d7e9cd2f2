"""The GPU check's dry run: its plan is written, every script it names exists, and each
step that uses CUDA asks for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_dry_run_writes_a_sound_plan(tmp_path):
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path), "--dry-run"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    plan = json.loads((tmp_path / "gpu_check.json").read_text())
    assert plan["dry_run"] is True
    names = [s["name"] for s in plan["steps"]]
    assert names == ["environment", "tests", "geometry_benchmark", "cache_benchmark", "demo_data",
                     "train_cached", "train_uncached", "training_report"]
    assert plan["budget_s"] <= 8 * 60  # every step's limit is cut to what is left of it
    scripts = [a for s in plan["steps"] for a in s["argv"] if a.endswith(".py")]
    assert scripts and all((ROOT / s).is_file() for s in scripts)
    train = next(s for s in plan["steps"] if s["name"] == "train_cached")["argv"]
    assert "train.device=cuda" in train and "geometry.device=cuda" in train
    assert all("returncode" not in s for s in plan["steps"])  # nothing ran
