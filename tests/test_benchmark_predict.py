"""benchmarks/benchmark_predict.py on a tiny run: every step timed, the per-row figures consistent."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import import_benchmark
from test_predict import COMBINED
from test_train import TINY

pytestmark = pytest.mark.slow


def test_the_predict_benchmark_times_every_step_on_a_tiny_run(tiny_processed_dir: Path):
    benchmark = import_benchmark("benchmark_predict")
    args = benchmark.arguments().parse_args(["--run", str(tiny_processed_dir / "run_1.zarr"), "--model-type", "combined",
                                             "--batches", "2", "--volume-batches", "2", "--batch-points", "500",
                                             "--whole-forward-batches", "1",
                                             "--set", *TINY, *COMBINED[1:]])
    result = benchmark.measure(args)
    assert {"load_s", "prepare_s", "geometry_s", "peak_rss_mb"} <= set(result)
    for part in ("surface", "volume"):
        figures = result[part]
        assert figures["batches_run"] == 2
        assert figures["s_per_million_rows"] == figures["batch_s_median"] / 500 * 1e6
    surface = result["surface"]
    once = result["prepare_s"] + result["geometry_s"] + surface["first_batch_s"] - surface["batch_s_median"]
    assert surface["whole_run_s_estimated"] == once + surface["rows"] * surface["s_per_million_rows"] / 1e6
    assert result["surface_whole_forward"]["batches_run"] == 1
    assert "whole surface, estimated" in benchmark.table(result) and "model(batch)" in benchmark.table(result)
