"""Rank 0's record of a training run: console lines, TensorBoard scalars and JSON-lines files
(``epochs.jsonl``, ``steps.jsonl``, ``split.json``) in the output directory. On the other ranks
every call does nothing, so the loop calls it unconditionally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

# epoch record key -> TensorBoard tag, for the scalars every epoch has
EPOCH_SCALARS = {
    "train_loss": "train/loss", "lr": "train/lr", "data_wait_s": "time/data_wait_s",
    "compute_s": "time/compute_s", "epoch_s": "time/epoch_s",
    "samples_per_s": "throughput/samples_per_s", "peak_memory_mb": "memory/peak_mib",
}


class RunLog:
    """Console lines, TensorBoard scalars and JSON files of one run; silent when not ``enabled``."""

    def __init__(self, output_dir: Path, enabled: bool) -> None:
        self.enabled = enabled
        self.output_dir = output_dir
        self.writer = SummaryWriter(str(output_dir / "tensorboard")) if enabled else None

    def print(self, line: str) -> None:
        if self.enabled:
            print(line, flush=True)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON record to `output_dir/name` (e.g. epochs.jsonl)."""
        if self.enabled:
            with open(self.output_dir / name, "a") as file:
                file.write(json.dumps(record) + "\n")

    def write_json(self, name: str, record: dict[str, Any]) -> None:
        """Write one JSON document to `output_dir/name`."""
        if self.enabled:
            (self.output_dir / name).write_text(json.dumps(record, indent=1) + "\n")

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def format_epoch(record: dict[str, Any], epochs: int) -> str:
    """The console line of an epoch record."""
    return (
        f"epoch {record['epoch']}/{epochs}  loss {record['train_loss']:.5g}  "
        f"data wait {record['data_wait_s']:.2f} s  compute {record['compute_s']:.2f} s  "
        f"total {record['epoch_s']:.2f} s  {record['samples_per_s']:.2f} samples/s  "
        f"peak {record['peak_memory_mb']:.0f} MiB ({record['memory_kind']})"
    )


def epoch_scalars(record: dict[str, Any]) -> dict[str, float]:
    """TensorBoard tags and values of an epoch record: EPOCH_SCALARS, each loss term
    (``train/loss_<term>``) and every validation figure (``val/...``)."""
    scalars = {tag: record[key] for key, tag in EPOCH_SCALARS.items()}
    scalars |= {k.replace("train_loss/", "train/loss_", 1): v for k, v in record.items() if k.startswith("train_loss/")}
    scalars |= {k.replace("val_", "val/", 1): v for k, v in record.items() if k.startswith("val_")}
    return scalars


def log_epoch(log: RunLog, record: dict[str, Any], epochs: int) -> None:
    """An epoch's console lines (its validation figures on a second line), its epochs.jsonl
    record and its TensorBoard scalars."""
    log.print(format_epoch(record, epochs))
    if "val_loss" in record:
        log.print("  validation " + "  ".join(f"{k.removeprefix('val_')} {v:.4g}"
                                              for k, v in record.items() if k.startswith("val_")))
    log.append("epochs.jsonl", record)
    log.scalars(epoch_scalars(record), record["epoch"])
