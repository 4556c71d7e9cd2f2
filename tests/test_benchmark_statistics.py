"""benchmarks/benchmark_statistics.py on a tiny run: both settings timed, the statistics' own time
measured inside the runs with them on, only there."""

from __future__ import annotations

import json

import pytest
from conftest import import_benchmark

pytestmark = pytest.mark.slow


def test_the_statistics_benchmark_times_both_settings(tiny_raw_dir, tmp_path, capsys):
    benchmark = import_benchmark("benchmark_statistics")
    assert benchmark.main(["--raw", str(tiny_raw_dir), "--out", str(tmp_path), "--repeats", "2"]) == 0
    result = json.loads((tmp_path / "statistics_benchmark.json").read_text())
    assert len(result["seconds"]["off"]) == len(result["seconds"]["on"]) == len(result["seconds"]["hooks"]) == 2
    assert all(0 < hooks < on for hooks, on in zip(result["seconds"]["hooks"], result["seconds"]["on"]))
    assert result["wall_ratio"] == result["median_on_s"] / result["median_off_s"]
    assert "on / off:" in capsys.readouterr().out
    from domino_pipeline.processed.runs import open_run
    assert "statistics" in open_run(tmp_path / "processed" / "on.zarr").attrs
    assert "statistics" not in open_run(tmp_path / "processed" / "off.zarr").attrs
