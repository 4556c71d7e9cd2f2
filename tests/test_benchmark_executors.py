"""benchmark_executors.py end to end on tiny data: both executors timed, their runs compared,
the table and the JSON written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_executors_benchmark_runs_on_tiny_data(tmp_path):
    out = tmp_path / "executors.json"
    command = [sys.executable, "benchmarks/benchmark_executors.py", "--preset", "tiny", "--runs", "2",
               "--repeats", "1", "--max-ratio", "1000", "--workdir", str(tmp_path / "work"), "--json", str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["runs_that_differ"] == []
    for kind in ("pool", "dask"):
        (timing,) = figures["timings"][kind]
        assert timing["seconds"] > 0 and timing["summary"] == "2 runs: 2 processed, 0 skipped, 0 failed"
    assert "| dask |" in result.stdout and "runs that differ between pool and Dask: none" in result.stdout
