"""What a training run reports (docs/gpu.md, "What the figures mean"): each rank's sums and timings (``EpochResult``)
combined into one epoch record, validation metrics and peak memory; rank 0's console lines, TensorBoard scalars and JSON
files. On other ranks ``RunLog`` does nothing, so the loop calls it unconditionally. Never imports Warp."""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass
class EpochResult:
    """What one (possibly interrupted or resumed) pass over the training loader did."""

    loss_sum: float = 0.0
    batches: int = 0                # the batches of the epoch done, skipped ones among them
    term_sums: dict[str, float] = field(default_factory=dict)  # each loss term (unweighted), summed over batches
    skipped: int = 0                # batches whose step was skipped (a loss or gradient not finite): in no sum
    samples: int = 0
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    interrupted: bool = False

    def add_terms(self, terms: dict[str, torch.Tensor]) -> None:
        for term, value in terms.items():
            self.term_sums[term] = self.term_sums.get(term, 0.0) + float(value.detach())


# ---- an epoch's record

def reset_peak_memory(device: torch.device) -> None:
    """Start a new CUDA peak (the CPU's peak RSS cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """Peak memory: on a GPU ``cuda_peak_mib``, on the CPU the process's peak RSS (whole run)."""
    return cuda_peak_mib(device) if device.type == "cuda" else (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, "cpu_peak_rss")


def rank_summary(result: EpochResult, indices: list[int], names: list[str], device: torch.device) -> dict[str, Any]:
    """This rank's part of an epoch record: timings, loss sums, memory, the runs it trained on (by ``names``)."""
    memory, kind = peak_memory_mb(device)
    return {"loss_sum": result.loss_sum, "term_sums": result.term_sums, "batches": result.batches,
            "skipped": result.skipped, "samples": result.samples, "data_wait_s": result.data_wait_s,
            "compute_s": result.compute_s, "peak_memory_mb": memory, "memory_kind": kind,
            "runs": [names[i % len(names)] for i in indices[:result.samples]]}


def epoch_record(epoch: int, ranks: list[dict[str, Any]], epoch_s: float, lr: float, resumed_at: int,
                 loss_function: str) -> dict[str, Any]:
    """Every rank's summary as one epoch record (mean times, max memory, loss terms of the steps taken)."""
    samples = sum(r["samples"] for r in ranks)
    skipped = sum(r["skipped"] for r in ranks)
    batches = max(sum(r["batches"] for r in ranks) - skipped, 1)
    terms = sorted({term for r in ranks for term in r["term_sums"]})
    return {"kind": "epoch", "epoch": epoch, "lr": lr, "loss_function": loss_function,
            "train_loss": sum(r["loss_sum"] for r in ranks) / batches,
            **{f"train_loss/{t}": sum(r["term_sums"].get(t, 0.0) for r in ranks) / batches for t in terms},
            "samples": samples, "epoch_s": epoch_s, "samples_per_s": samples / epoch_s if epoch_s > 0 else 0.0,
            "data_wait_s": float(np.mean([r["data_wait_s"] for r in ranks])),
            "compute_s": float(np.mean([r["compute_s"] for r in ranks])),
            "peak_memory_mb": max(r["peak_memory_mb"] for r in ranks), "memory_kind": ranks[0]["memory_kind"],
            "world_size": len(ranks), "resumed_at_step": resumed_at, "runs_by_rank": [r["runs"] for r in ranks],
            "skipped_steps": skipped}


def validation_metrics(sums: dict[str, torch.Tensor], names: dict[str, list[str]]) -> dict[str, float]:
    """The mean loss and each output variable's mean relative L2 error from validation sums over ranks."""
    samples = max(sums["samples"].item(), 1.0)
    metrics = {"val_loss": sums["loss_sum"].item() / samples}
    metrics |= {f"val_loss/{key.removeprefix('term/')}": value.item() / samples
                for key, value in sums.items() if key.startswith("term/")}
    for key, columns in names.items():
        if key in sums:
            for name, value in zip(columns, (sums[key] / samples).tolist()):
                metrics[f"val_rel_l2/{key.removesuffix('_fields')}/{name}"] = value
    return metrics


def cuda_peak_mib(device: torch.device) -> tuple[float, str]:
    """(peak MiB, what it counts): torch's peak plus Warp's pool peak (none without Warp), or the device's used memory
    where Warp allocates outside a pool."""
    wp, name = sys.modules.get("warp"), f"cuda:{device.index or 0}"
    if wp is not None and not wp.is_mempool_enabled(name):
        free, total = torch.cuda.mem_get_info(device)
        return (total - free) / 2**20, "cuda_device_used"
    warp_peak = 0 if wp is None else int(wp.get_mempool_used_mem_high(name))
    return (torch.cuda.max_memory_allocated(device) + warp_peak) / 2**20, "cuda_torch_peak+warp_pool_peak"


# ---- the run's log

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
        self.writer = None
        if enabled:  # imported here: prediction loads this module (checkpointing's EpochResult), not TensorBoard
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(output_dir / "tensorboard"))

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
    skipped = record.get("skipped_steps", 0)
    return (f"epoch {record['epoch']}/{epochs}  loss {record['train_loss']:.5g}  "
            f"data wait {record['data_wait_s']:.2f} s  compute {record['compute_s']:.2f} s  "
            f"total {record['epoch_s']:.2f} s  {record['samples_per_s']:.2f} samples/s  "
            f"peak {record['peak_memory_mb']:.0f} MiB ({record['memory_kind']})"
            + (f"  {skipped} steps skipped (not finite)" if skipped else ""))


def epoch_scalars(record: dict[str, Any]) -> dict[str, float]:
    """TensorBoard tags and values of an epoch record: EPOCH_SCALARS, each loss term, every validation figure."""
    scalars = {tag: record[key] for key, tag in EPOCH_SCALARS.items()}
    scalars |= {k.replace("train_loss/", "train/loss_", 1): v for k, v in record.items() if k.startswith("train_loss/")}
    scalars |= {k.replace("val_", "val/", 1): v for k, v in record.items() if k.startswith("val_")}
    return scalars


def log_epoch(log: RunLog, record: dict[str, Any], epochs: int) -> None:
    """An epoch's console lines, its epochs.jsonl record and its TensorBoard scalars."""
    log.print(format_epoch(record, epochs))
    if "val_loss" in record:
        log.print("  validation " + "  ".join(f"{k.removeprefix('val_')} {v:.4g}" for k, v in record.items()
                                              if k.startswith("val_") and not k.startswith("val_source/")))
    for source in sorted({k.split("/")[1] for k in record if k.startswith("val_source/")}):
        prefix = f"val_source/{source}/"
        log.print(f"  validation of {source}: train loss {record.get(f'train_loss/source/{source}', float('nan')):.4g}  "
                  + "  ".join(f"{k.removeprefix(prefix)} {v:.4g}" for k, v in record.items() if k.startswith(prefix)))
    log.append("epochs.jsonl", record)
    log.scalars(epoch_scalars(record), record["epoch"])
