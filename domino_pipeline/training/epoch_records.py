"""What an epoch reports: each rank's summary, their combination into one epoch record, the
validation metrics, and peak memory (CUDA's allocator on a GPU, the process's RSS on the CPU)."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domino_pipeline.object_store import name_of
from domino_pipeline.training.training_loop import EpochResult


def reset_peak_memory(device: torch.device) -> None:
    """Start a new CUDA peak (the CPU's peak RSS cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """On a GPU torch's peak since the last reset plus Warp's pool peak (gpu_memory.py); the
    process's peak RSS (whole run) on the CPU."""
    if device.type == "cuda":
        from domino_pipeline.training.gpu_memory import cuda_peak_mib

        return cuda_peak_mib(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, "cpu_peak_rss"


def rank_summary(result: EpochResult, indices: list[int], runs: list[Path | str], device: torch.device) -> dict[str, Any]:
    """This rank's part of an epoch record: timings, loss sums, memory, and the runs it trained on."""
    memory, kind = peak_memory_mb(device)
    seen = indices[: result.samples]
    return {
        "loss_sum": result.loss_sum, "term_sums": result.term_sums, "batches": result.batches, "samples": result.samples,
        "data_wait_s": result.data_wait_s, "compute_s": result.compute_s,
        "peak_memory_mb": memory, "memory_kind": kind, "runs": [name_of(runs[i]) for i in seen],
    }


def epoch_record(epoch: int, ranks: list[dict[str, Any]], epoch_s: float, lr: float, resumed_at: int,
                 loss_function: str) -> dict[str, Any]:
    """Combine every rank's summary into one epoch record (mean times over ranks, max memory); the
    loss's terms (unweighted means over batches) beside the loss and the loss function."""
    samples = sum(r["samples"] for r in ranks)
    batches = max(sum(r["batches"] for r in ranks), 1)
    terms = sorted({term for r in ranks for term in r["term_sums"]})
    return {
        "kind": "epoch", "epoch": epoch, "lr": lr, "loss_function": loss_function,
        "train_loss": sum(r["loss_sum"] for r in ranks) / batches,
        **{f"train_loss/{t}": sum(r["term_sums"].get(t, 0.0) for r in ranks) / batches for t in terms},
        "samples": samples, "epoch_s": epoch_s, "samples_per_s": samples / epoch_s if epoch_s > 0 else 0.0,
        "data_wait_s": float(np.mean([r["data_wait_s"] for r in ranks])),
        "compute_s": float(np.mean([r["compute_s"] for r in ranks])),
        "peak_memory_mb": max(r["peak_memory_mb"] for r in ranks), "memory_kind": ranks[0]["memory_kind"],
        "world_size": len(ranks), "resumed_at_step": resumed_at, "runs_by_rank": [r["runs"] for r in ranks],
    }


def validation_metrics(sums: dict[str, torch.Tensor], names: dict[str, list[str]]) -> dict[str, float]:
    """Turn summed validation results (over all ranks) into the mean loss and the mean relative L2
    error of each output variable."""
    samples = max(sums["samples"].item(), 1.0)
    metrics = {"val_loss": sums["loss_sum"].item() / samples}
    metrics |= {f"val_loss/{key.removeprefix('term/')}": value.item() / samples
                for key, value in sums.items() if key.startswith("term/")}
    for key, columns in names.items():
        if key in sums:
            for name, value in zip(columns, (sums[key] / samples).tolist()):
                metrics[f"val_rel_l2/{key.removesuffix('_fields')}/{name}"] = value
    return metrics
