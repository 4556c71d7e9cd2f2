"""benchmark_scale.py end to end on tiny data (table, checks, JSON, PNG, resumable steps) and the
capacity model's arithmetic on hand-made figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import import_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_scale_benchmark_runs_on_tiny_data(tmp_path):
    out = tmp_path / "scale.json"
    command = [sys.executable, "benchmarks/benchmark_scale.py", "--presets", "tiny", "--draws", "2",
               "--work", str(tmp_path / "work"), "--json", str(out), "--png", str(tmp_path / "scale.png")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    row = figures["presets"]["tiny"]["layouts"]["features"]
    assert row["files_per_run"] <= 200 and row["warm_mb_per_draw"] > 0 and row["cold_draw_ms"] > 0
    assert set(figures["worker"]) == {"rss_mb_4_runs", "rss_mb_400_runs"}
    assert "check: files per run" in result.stdout and (tmp_path / "scale.png").stat().st_size > 1000
    steps = json.loads((tmp_path / "work" / "steps.json").read_text())
    assert "build tiny features" in steps and "worker rss" in steps  # a rerun resumes from these


def test_the_capacity_model_extrapolates_per_volume_point():
    capacity = import_benchmark("capacity_model")
    row = {"mb_per_run": 1000.0, "build_s": 100.0, "warm_mb_per_draw": 10.0, "cold_draw_ms": 100.0}
    result = {"presets": {"full": {"layouts": {"features": row}}},
              "volume2x": {"mb_per_run": 2000.0, "build_s": 150.0}, "full_volume_points": 20_000_000}
    text = capacity.model(result, runs=10, volume_points=60_000_000, gpus=8, workers=12)
    # 1000 MB + (60M - 20M) x 50 B = 3000 MB a run: 3.0 GB, 0.03 TB for 10 runs;
    # 100 s + 40M x 2.5 us = 200 s a run: 0.6 h for 10 runs
    assert "| `features` | 3.0 | 0.0 | 1 | 10.0 |" in text
    assert "| `features` | 0.16 | 0.50 | 6.2 | 120 |" in text  # 8 x 10 MB / 0.16 s; 12 / 0.1 s
