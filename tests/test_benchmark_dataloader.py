"""benchmark_dataloader.py runs end to end on tiny data and writes its table, JSON and chart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_smoke(tmp_path):
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    result = subprocess.run(
        [sys.executable, "benchmarks/benchmark_dataloader.py", "--preset", "tiny", "--runs", "1", "--model-type", "surface",
         "--work", str(tmp_path / "work"), "--json", str(out), "--png", str(png)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "| `__getitem__` s (median) |" in result.stdout and "epoch s, 2 workers" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["cached"]["getitem_s"] > 0 and figures["uncached"]["getitem_s"] > 0
    assert figures["cached"]["bytes_per_draw"] > 0 and figures["cache"]["bytes_per_run"] > 0
    assert all(figures["epochs"][f"epoch_s_workers_{n}"] > 0 for n in ("0", "1", "2", "2_default_collate"))
    assert figures["epochs"]["cpu_ms_per_item_workers_0"]["workers"] == 0  # no worker processes
    assert figures["epochs"]["cpu_ms_per_item_workers_2"]["workers"] >= 0  # clock ticks: may round to 0
    assert figures["cached"]["peak_rss_mb"] >= figures["cached"]["baseline_rss_mb"] > 0
    assert png.stat().st_size > 1000
