"""benchmarks/benchmark_checkpoints.py on a tiny DoMINO: both saves and both reads timed, the
added cost set against the training run's median epoch, the files of both ways written."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import import_benchmark
from test_train import TINY

pytestmark = pytest.mark.slow


def test_the_checkpoint_benchmark_times_before_and_now_against_an_epoch(tmp_path):
    benchmark = import_benchmark("benchmark_checkpoints")
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    records = [{"kind": "epoch", "epoch": e, "epoch_s": s} for e, s in ((1, 9.0), (2, 2.0), (3, 4.0), (4, 3.0))]
    (train_dir / "epochs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    args = benchmark.arguments().parse_args(["--config-name", "cached", "--train-dir", str(train_dir), "--repeats", "3",
                                             "--work-dir", str(tmp_path), "--set", *TINY])
    result = benchmark.measure(args)
    assert result["epoch_s_median"] == 3.0 and result["epochs_measured"] == 3  # the first epoch left out
    assert all(len(values) == 3 for values in result["times_s"].values())
    median = result["median_s"]
    assert median == {key: statistics.median(values) for key, values in result["times_s"].items()}
    assert result["save_added_s"] == median["save_now"] - median["save_before"]
    assert result["save_added_percent_of_epoch"] == pytest.approx(100 * result["save_added_s"] / 3.0)
    assert result["checkpoint_mb"] > result["model_mb"] > 0
    assert "| epoch-end save" in benchmark.table(result) and "epoch 3.00 s" in benchmark.table(result)
    assert [p.name for p in tmp_path.iterdir()] == ["train"]  # its checkpoints went to a temporary folder, removed
