"""Ranks' summaries combined into one epoch record; summed validation results into metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from domino_pipeline.training.epoch_records import epoch_record, rank_summary, validation_metrics
from domino_pipeline.training.training_loop import EpochResult


def test_ranks_combine_into_means_sums_and_the_largest_memory():
    runs = [Path(f"run_{i}.zarr") for i in range(4)]
    first = rank_summary(EpochResult(loss_sum=3.0, batches=2, term_sums={"surface": 2.0}, samples=2,
                                     data_wait_s=1.0, compute_s=4.0), [3, 1], runs, torch.device("cpu"))
    second = dict(first, loss_sum=1.0, batches=1, term_sums={"surface": 1.0, "volume": 0.5}, samples=1,
                  data_wait_s=3.0, compute_s=2.0, peak_memory_mb=first["peak_memory_mb"] + 10, runs=["run_0.zarr"])
    assert first["runs"] == ["run_3.zarr", "run_1.zarr"] and first["memory_kind"] == "cpu_peak_rss"
    record = epoch_record(2, [first, second], epoch_s=2.0, lr=0.1, resumed_at=0, loss_function="mse")
    assert record["train_loss"] == pytest.approx(4.0 / 3)
    assert record["train_loss/surface"] == pytest.approx(1.0) and record["train_loss/volume"] == pytest.approx(0.5 / 3)
    assert (record["samples"], record["samples_per_s"], record["world_size"]) == (3, 1.5, 2)
    assert (record["data_wait_s"], record["compute_s"]) == (2.0, 3.0)
    assert record["peak_memory_mb"] == second["peak_memory_mb"]
    assert record["runs_by_rank"] == [["run_3.zarr", "run_1.zarr"], ["run_0.zarr"]]


def test_validation_sums_become_means_per_variable():
    sums = {"samples": torch.tensor(4.0), "loss_sum": torch.tensor(2.0), "term/surface": torch.tensor(1.0),
            "surface_fields": torch.tensor([0.4, 0.8])}
    metrics = validation_metrics(sums, {"surface_fields": ["p", "tau_x"], "volume_fields": ["u"]})
    assert metrics == pytest.approx({"val_loss": 0.5, "val_loss/surface": 0.25,
                                     "val_rel_l2/surface/p": 0.1, "val_rel_l2/surface/tau_x": 0.2})
