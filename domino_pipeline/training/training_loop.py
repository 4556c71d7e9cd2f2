"""One training epoch and one validation pass of DoMINO, timed as data wait against compute.

`train_one_epoch` is the number that shows the cache at work: `data_wait_s` is the time the loop
sits blocked on the DataLoader, `compute_s` the time from a batch in hand to the optimizer step
done (forward, backward, clipping, step; `loss.item()` synchronises the GPU).
"""

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from domino_pipeline.loading.worker_deaths import checked_batches
from domino_pipeline.training.losses import LossConfig, loss_terms, total_loss

TARGET_KEYS = ("volume_fields", "surface_fields")  # the order DoMINO returns its outputs in


@dataclass
class EpochResult:
    """What one (possibly interrupted or resumed) pass over the training loader did."""

    loss_sum: float = 0.0
    batches: int = 0
    term_sums: dict[str, float] = field(default_factory=dict)  # each loss term (unweighted), summed over batches
    samples: int = 0
    data_wait_s: float = 0.0
    compute_s: float = 0.0
    interrupted: bool = False

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.batches, 1)

    def add_terms(self, terms: dict[str, torch.Tensor]) -> None:
        for term, value in terms.items():
            self.term_sums[term] = self.term_sums.get(term, 0.0) + float(value.detach())


def autocast_context(device: torch.device, amp_dtype: torch.dtype | None):
    """Mixed precision on CUDA with the given dtype; full precision elsewhere or when None."""
    if amp_dtype is None or device.type != "cuda":
        return nullcontext()
    return torch.autocast(device_type="cuda", dtype=amp_dtype)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Move every tensor of a collated batch to the training device."""
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def predictions_by_target(outputs: tuple[torch.Tensor | None, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Name DoMINO's (volume, surface) outputs by their target keys, dropping the absent one."""
    return {key: out.float() for key, out in zip(TARGET_KEYS, outputs) if out is not None}


def model_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device, amp_dtype: torch.dtype | None,
    loss_config: LossConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The configured loss on the scaled targets (losses.py), its unweighted terms, and the outputs."""
    with autocast_context(device, amp_dtype):
        outputs = model(batch)
    predictions = predictions_by_target(outputs)
    terms = loss_terms(predictions, batch, loss_config)
    return total_loss(terms, loss_config), terms, predictions


def timed_batches(loader: Iterable, result: EpochResult) -> Iterator:
    """Yield the loader's batches, adding the time spent waiting for each to `result.data_wait_s`;
    a worker's death is named (worker_deaths.WorkerDiedError)."""
    iterator = checked_batches(loader)
    while True:
        start = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        result.data_wait_s += time.perf_counter() - start
        yield batch


def optimizer_step(
    model: nn.Module,
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    clip_grad_norm: float,
) -> None:
    """Backward, unscale, clip the gradient norm (when > 0) and step; the scaler is a no-op unless fp16."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if clip_grad_norm > 0:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    scaler.step(optimizer)
    scaler.update()


def train_one_epoch(
    model: nn.Module,
    loader: Iterable[dict[str, torch.Tensor]],
    num_samples: int,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    *,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    clip_grad_norm: float,
    loss_config: LossConfig,
    should_stop: Callable[[], bool],
    after_step: Callable[[float], None],
    result: EpochResult,
    progress: str | None,
) -> EpochResult:
    """Train over `loader` (`num_samples` samples, for the bar), accumulating into `result`.

    Calls `after_step(loss)` after each step. Stops after the current step when `should_stop()`
    turns true (Ctrl-C), marking `result`.
    `progress` is the tqdm description, or None for no bar (ranks other than 0).
    """
    model.train()
    bar = tqdm(total=num_samples, desc=progress, disable=progress is None, leave=False, dynamic_ncols=True)
    for batch in timed_batches(loader, result):
        start = time.perf_counter()
        batch = to_device(batch, device)
        loss, terms, predictions = model_loss(model, batch, device, amp_dtype, loss_config)
        optimizer_step(model, loss, optimizer, scaler, clip_grad_norm)
        loss_value = loss.item()
        result.compute_s += time.perf_counter() - start
        size = next(iter(predictions.values())).shape[0]
        result.loss_sum += loss_value
        result.add_terms(terms)
        result.batches += 1
        result.samples += size
        bar.update(size)
        bar.set_postfix(loss=f"{loss_value:.4g}")
        after_step(loss_value)
        if should_stop():
            result.interrupted = True
            break
    bar.close()
    return result


def relative_l2_per_variable(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """||pred - true|| / ||true|| over the points of each sample, per variable: (B, V) -> summed (V,)."""
    error = torch.linalg.vector_norm(prediction - target, dim=1)
    reference = torch.linalg.vector_norm(target, dim=1).clamp_min(torch.finfo(target.dtype).tiny)
    return (error / reference).sum(dim=0)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable[dict[str, torch.Tensor]],
    *,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    unscale: Callable[[str, torch.Tensor], torch.Tensor],
    target_widths: dict[str, int],
    loss_config: LossConfig,
) -> dict[str, torch.Tensor]:
    """Sums over this rank's validation samples: loss, each loss term ("term/<name>"), sample
    count, and per target key (with its number of variables in `target_widths`) the relative L2
    error of each variable in physical (unscaled) units. The same keys on every rank, even one
    without samples: sum over ranks, divide."""
    model.eval()
    parts = tuple(key.removesuffix("_fields") for key in target_widths)
    sums = {key: torch.zeros(width, device=device) for key, width in target_widths.items()}
    sums |= {f"term/{term}": torch.zeros((), device=device) for term in loss_config.active_terms(parts)}
    sums["loss_sum"] = torch.zeros((), device=device)
    sums["samples"] = torch.zeros((), device=device)
    for batch in checked_batches(loader):
        batch = to_device(batch, device)
        loss, terms, predictions = model_loss(model, batch, device, amp_dtype, loss_config)
        batch_size = next(iter(predictions.values())).shape[0]
        sums["loss_sum"] += loss * batch_size
        for term, value in terms.items():
            sums[f"term/{term}"] += value * batch_size
        sums["samples"] += batch_size
        for key, prediction in predictions.items():
            error = relative_l2_per_variable(unscale(key, prediction), unscale(key, batch[key].float()))
            sums[key] += error
    return sums
