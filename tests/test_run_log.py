"""RunLog writes on rank 0 only; an epoch's TensorBoard tags and console lines."""

from __future__ import annotations

import json

from domino_pipeline.training.run_log import RunLog, epoch_scalars, format_epoch, log_epoch

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
