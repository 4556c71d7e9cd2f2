"""RunLog writes on rank 0 only; an epoch's TensorBoard tags and console lines. Ranks' summaries
combined into one epoch record; summed validation results into metrics."""

from __future__ import annotations

import json

import pytest
import torch

from domino_pipeline.training.run_log import (
    EpochResult,
    RunLog,
    epoch_record,
    epoch_scalars,
    format_epoch,
    log_epoch,
    rank_summary,
    validation_metrics,
)

RECORD = {"kind": "epoch", "epoch": 3, "lr": 0.01, "train_loss": 0.5, "train_loss/surface": 0.4,
          "data_wait_s": 1.0, "compute_s": 2.0, "epoch_s": 3.5, "samples_per_s": 4.0,
          "peak_memory_mb": 100.0, "memory_kind": "cpu_peak_rss", "val_loss": 0.25, "val_rel_l2/surface/p": 0.125}


def test_an_epoch_is_printed_appended_and_tagged(tmp_path, capsys):
    log = RunLog(tmp_path, enabled=True)
    log_epoch(log, dict(RECORD), epochs=10)
    log.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [format_epoch(RECORD, 10), "  validation loss 0.25  rel_l2/surface/p 0.125"]
    assert lines[0].startswith("epoch 3/10  loss 0.5  data wait 1.00 s  compute 2.00 s  total 3.50 s")
    assert json.loads((tmp_path / "epochs.jsonl").read_text()) == RECORD
    assert list((tmp_path / "tensorboard").iterdir())
    assert epoch_scalars(RECORD) == {
        "train/loss": 0.5, "train/lr": 0.01, "time/data_wait_s": 1.0, "time/compute_s": 2.0, "time/epoch_s": 3.5,
        "throughput/samples_per_s": 4.0, "memory/peak_mib": 100.0, "train/loss_surface": 0.4,
        "val/loss": 0.25, "val/rel_l2/surface/p": 0.125}


def test_other_ranks_write_and_print_nothing(tmp_path, capsys):
    log = RunLog(tmp_path, enabled=False)
    log_epoch(log, dict(RECORD), epochs=10)
    log.write_json("split.json", {"train": []})
    log.close()
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []


# ---- the epoch record

def test_ranks_combine_into_means_sums_and_the_largest_memory():
    runs = [f"run_{i}.zarr" for i in range(4)]
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
