"""The epoch loop of DoMINO, top to bottom: resume, then per epoch draw this rank's samples, step over them, combine the
ranks' records, step the schedule, validate and checkpoint when due, log. A signal stops it after the current step with
a checkpoint; a loss or gradient not finite stops it on every rank, nothing saved (nonfinite.py). ``data_wait_s``: the
wait for batches; ``compute_s``: from a batch to the optimizer step (reading the loss and norm synchronises the GPU)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from tqdm import tqdm

from domino_pipeline.configuration.config import LossConfig, TrainConfig
from domino_pipeline.loading.collate import collate_items
from domino_pipeline.loading.worker_deaths import checked_batches
from domino_pipeline.storage.object_store import name_of
from domino_pipeline.training import distributed
from domino_pipeline.training.checkpointing import (CheckpointFiles, GoodCheckpoint, ResumePoint, TrainingState,
                                                    keep_best, resume, save_checkpoint)
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.losses import loss_terms, total_loss
from domino_pipeline.training.nonfinite import NonFiniteLossError, nonfinite_line, step_is_finite
from domino_pipeline.training.run_log import (EpochResult, RunLog, epoch_record, log_epoch, rank_summary,
                                              reset_peak_memory, validation_metrics)

TARGET_KEYS = ("volume_fields", "surface_fields")  # the order DoMINO returns its outputs in


# ---- what the loop works with

@dataclass(frozen=True)
class TrainData:
    """The runs, datasets, loaders and shuffle of training; over a mixture, the sources of runs and keys."""

    train_runs: list[Path]
    val_runs: list[Path]
    train_set: Dataset
    sampler: DistributedSampler | Sampler[int]   # set_epoch(epoch), then this rank's keys of the epoch
    train_loader: DataLoader
    val_loader: DataLoader | None   # None: no validation runs
    run_names: list[str] | None = None            # the training runs' names in the log; None: their file names
    val_sources: dict[str, list[int]] = field(default_factory=dict)  # source -> its validation indices
    source_of: Callable[[int], str] | None = None  # a training key's source

    @property
    def train_names(self) -> list[str]:
        """The training runs by name, in index order."""
        return self.run_names if self.run_names is not None else [name_of(r) for r in self.train_runs]


@dataclass(frozen=True)
class Objective:
    """The loss (its config and log line) and the validation figures: variable names, the unscaler."""

    loss: LossConfig
    description: str
    variable_names: dict[str, list[str]]
    unscale: Callable[[str, torch.Tensor], torch.Tensor]


class StopFlag:
    """SIGINT/SIGTERM as a request to stop after the current step with a checkpoint; a second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal_number is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum

    @property
    def is_set(self) -> bool:
        return self.signal_number is not None


@dataclass(frozen=True)
class Trainer:
    """Everything the epoch loop needs, built once by train.py."""

    info: DistInfo
    config: TrainConfig
    state: TrainingState
    data: TrainData
    objective: Objective
    files: CheckpointFiles
    saved: GoodCheckpoint | None    # the checkpoint to resume (checkpointing.agreed_checkpoint); None: none yet
    log: RunLog
    stop: StopFlag


# ---- the loop

def train_epochs(trainer: Trainer) -> int | None:
    """Run the remaining epochs; the signal number when stopped by one, else None."""
    start = resume(trainer.state, trainer.files, trainer.info, saved=trainer.saved, init_from=trainer.config.init_from,
                   resume_from=trainer.config.resume_from, say=trainer.log.print)
    epochs = trainer.config.epochs
    if start.epoch > epochs:
        trainer.log.print(f"all {epochs} epochs are done in this output_dir; raise train.epochs to go on")
    for epoch in range(start.epoch, epochs + 1):
        result, record = train_epoch(trainer, epoch, start)
        if result.interrupted:
            path = save_checkpoint(trainer.state, trainer.files, trainer.info, epoch=epoch, step=result.batches,
                                   partial=result)
            trainer.log.append("epochs.jsonl", {"kind": "interrupted", "epoch": epoch, "step": result.batches})
            trainer.log.print(f"stopped by signal in epoch {epoch}; checkpoint saved to {path}")
            return trainer.stop.signal_number or signal.SIGINT
        finish_epoch(trainer, epoch, record)
        start = ResumePoint(epoch + 1)
    return None


def train_epoch(trainer: Trainer, epoch: int, start: ResumePoint) -> tuple[EpochResult, dict[str, Any]]:
    """One epoch (or its remainder after ``start.step`` batches) on every rank, and the combined record."""
    info, config, state, data = trainer.info, trainer.config, trainer.state, trainer.data
    data.train_set.set_epoch(epoch)
    indices = epoch_indices(data.sampler, epoch, start.step * config.batch_size)
    reset_peak_memory(info.device)
    began = time.perf_counter()
    result = EpochResult(loss_sum=start.partial.loss_sum, batches=start.partial.batches,  # a resumed epoch's: all steps
                         term_sums=dict(start.partial.term_sums), skipped=start.partial.skipped)
    by_source = SourceLosses(data.source_of, indices, config.batch_size, first_batch=result.batches)

    def log_step(loss: float | None) -> None:
        step = {"epoch": epoch, "step": result.batches, "loss": loss}
        skipped = {"skipped": "not finite"} if loss is None else {}
        trainer.log.append("steps.jsonl", step | skipped | by_source.add(result.batches, loss))

    def on_nonfinite(step: int, loss: float, grad_norm: float) -> None:
        at = (step - 1 - start.step) * config.batch_size
        runs = [data.train_names[key % len(data.train_names)] for key in indices[at:at + config.batch_size]]
        nonfinite_step(trainer, epoch, step, {"loss": loss, "grad_norm": grad_norm, "runs": runs})

    result = train_one_epoch(trainer, indices, on_nonfinite=on_nonfinite, after_step=log_step, result=result,
                             progress=f"epoch {epoch}" if info.is_main else None)
    ranks = distributed.gather_objects(rank_summary(result, indices, data.train_names, info.device))
    record = epoch_record(epoch, ranks, time.perf_counter() - began, state.optimizer.param_groups[0]["lr"],
                          start.step, trainer.objective.description)
    return result, record | by_source.means(distributed.gather_objects(by_source.sums))


def nonfinite_step(trainer: Trainer, epoch: int, step: int, mine: dict[str, Any]) -> None:
    """Collective, at a step not finite on some rank (``mine``: this rank's loss, norm and runs): the same
    NonFiniteLossError on every rank, unless ``train.max_nonfinite_steps`` allows skipping it."""
    line = nonfinite_line(epoch, step, distributed.gather_objects(mine))
    state, allowed = trainer.state, trainer.config.max_nonfinite_steps
    if state.nonfinite_steps < allowed:
        state.nonfinite_steps += 1
        trainer.log.print(f"{line}: step skipped ({state.nonfinite_steps} of train.max_nonfinite_steps={allowed})")
        return
    trainer.log.append("epochs.jsonl", {"kind": "nonfinite", "epoch": epoch, "step": step, "message": line})
    trainer.log.close()
    raise NonFiniteLossError(f"{line}: training stopped there, the checkpoints and models as they were "
                             f"(train.max_nonfinite_steps={allowed} skipped steps allowed)")


class SourceLosses:
    """The training loss per source of a mixture: each step's loss shared among its batch's sources."""

    def __init__(self, source_of: Callable[[int], str] | None, indices: list[int], batch_size: int,
                 first_batch: int) -> None:
        self.source_of, self.indices, self.batch_size, self.first_batch = source_of, indices, batch_size, first_batch
        self.sums: dict[str, list[float]] = {}

    def add(self, batches: int, loss: float | None) -> dict[str, Any]:
        """Count the ``batches``-th batch's loss (None: skipped, not counted); its sources, for steps.jsonl."""
        if self.source_of is None:
            return {}
        at = (batches - 1 - self.first_batch) * self.batch_size
        names = [self.source_of(key) for key in self.indices[at:at + self.batch_size]]
        for name in names if loss is not None else ():
            total = self.sums.setdefault(name, [0.0, 0.0])
            total[0] += loss / len(names)
            total[1] += 1.0 / len(names)
        return {"sources": names}

    @staticmethod
    def means(ranks: list[dict[str, list[float]]]) -> dict[str, float]:
        """``train_loss/source/<name>``: the mean loss of each source's batches over every rank."""
        names = sorted({name for sums in ranks for name in sums})
        return {f"train_loss/source/{name}": sum(r.get(name, [0.0, 0.0])[0] for r in ranks)
                / max(sum(r.get(name, [0.0, 0.0])[1] for r in ranks), 1e-12) for name in names}


def finish_epoch(trainer: Trainer, epoch: int, record: dict[str, Any]) -> None:
    """Step the schedule, validate and checkpoint when due, and log the epoch."""
    config = trainer.config
    trainer.state.scheduler.step()
    last = epoch == config.epochs
    if trainer.data.val_runs and (epoch % config.val_every == 0 or last):
        record.update(run_validation(trainer))
        keep_best(trainer.state, trainer.files, trainer.info, epoch, record["val_loss"])
    if epoch % config.checkpoint_every == 0 or last:
        save_checkpoint(trainer.state, trainer.files, trainer.info, epoch=epoch + 1, step=0, partial=EpochResult())
    log_epoch(trainer.log, record, config.epochs)


# ---- the draw: one DataLoader each for training and validation, its persistent workers serving every pass; a pass's
# indices are set before it (this rank's share of a seeded shuffle, less what a resumed epoch trained on)

class PassIndices(Sampler[int]):
    """The sample indices of the current pass, replaced before each, so one loader serves every epoch."""

    def __init__(self) -> None:
        self.indices: list[int] = []

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self) -> int:
        return len(self.indices)


def make_loader(dataset: Dataset, batch_size: int, num_workers: int, device: torch.device) -> DataLoader:
    """A loader over the indices set in its `PassIndices` sampler; workers persist across passes."""
    context = getattr(dataset, "worker_context", None) if num_workers > 0 else None
    return DataLoader(dataset, batch_size=batch_size, sampler=PassIndices(), num_workers=num_workers,
                      persistent_workers=num_workers > 0, multiprocessing_context=context,
                      pin_memory=device.type == "cuda", collate_fn=collate_items)


def loader_over(loader: DataLoader, indices: list[int]) -> DataLoader:
    """`loader`, pointed at exactly `indices` for its next pass."""
    loader.sampler.indices = list(indices)
    return loader


def epoch_indices(sampler: DistributedSampler, epoch: int, skip: int) -> list[int]:
    """This rank's sample order for `epoch` (same on every call), without the first `skip` samples."""
    sampler.set_epoch(epoch)
    return list(sampler)[skip:]


def timed_batches(loader: Iterable, result: EpochResult) -> Iterator:
    """The loader's batches, the wait for each added to `result.data_wait_s`; a dead worker is named."""
    start = time.perf_counter()
    for batch in checked_batches(loader):
        result.data_wait_s += time.perf_counter() - start
        yield batch
        start = time.perf_counter()


# ---- the step

def train_one_epoch(trainer: Trainer, indices: list[int], *, on_nonfinite: Callable[[int, float, float], None],
                    after_step: Callable[[float | None], None], result: EpochResult,
                    progress: str | None) -> EpochResult:
    """Train over the samples `indices` into `result`, `after_step(loss)` after each step (None: skipped), stopping
    when the stop flag is set on any rank; a step not finite on any rank is not taken: `on_nonfinite(step, loss,
    gradient norm)` raises or returns to skip it. `progress`: the tqdm description, or None for no bar."""
    state, device = trainer.state, trainer.info.device
    model, optimizer, scaler = state.trained, state.optimizer, state.scaler
    model.train()
    with tqdm(total=len(indices), desc=progress, disable=progress is None, leave=False, dynamic_ncols=True) as bar:
        # closed before an error's line is printed, so the line stands alone
        for batch in timed_batches(loader_over(trainer.data.train_loader, indices), result):
            start = time.perf_counter()
            batch = to_device(batch, device)
            loss, terms, predictions = model_loss(model, batch, device, state.amp_dtype, trainer.objective.loss)
            grad_norm = backward(model, loss, optimizer, scaler, trainer.config.clip_grad_norm)
            loss_value, norm_value = torch.stack([loss.detach().float(), grad_norm.to(loss.device).float()]).tolist()
            finite = step_is_finite(loss_value, norm_value, scaler.is_enabled())
            nonfinite, stop = distributed.any_ranks([not finite, trainer.stop.is_set], device)
            if nonfinite:
                on_nonfinite(result.batches + 1, loss_value, norm_value)
                drop_step(optimizer, scaler)
                result.skipped += 1
            else:  # the scaler is a no-op unless fp16; then it skips a step whose gradient overflowed
                scaler.step(optimizer)
                scaler.update()
                result.loss_sum += loss_value
                result.add_terms(terms)
            result.compute_s += time.perf_counter() - start
            size = next(iter(predictions.values())).shape[0]
            result.batches += 1
            result.samples += size
            bar.update(size)
            bar.set_postfix(loss=f"{loss_value:.4g}")
            after_step(None if nonfinite else loss_value)
            if stop:
                result.interrupted = True
                break
    return result


def model_loss(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device, amp_dtype: torch.dtype | None,
               loss_config: LossConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The configured loss on the scaled targets (losses.py), its unweighted terms, and the outputs; mixed precision
    with ``amp_dtype`` on CUDA, full precision elsewhere or when None."""
    with torch.autocast("cuda", dtype=amp_dtype) if amp_dtype is not None and device.type == "cuda" else nullcontext():
        outputs = model(batch)
    predictions = predictions_by_target(outputs)
    terms = loss_terms(predictions, batch, loss_config)
    return total_loss(terms, loss_config), terms, predictions


def backward(model: nn.Module, loss: torch.Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
             clip_grad_norm: float) -> torch.Tensor:
    """Backward, then the gradient norm (unscaled and clipped when ``clip_grad_norm`` > 0): what the check reads."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    if clip_grad_norm > 0:
        scaler.unscale_(optimizer)
        return nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    return nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


def drop_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
    """Forget a step's gradients without stepping; fp16's scaler keeps its scale."""
    optimizer.zero_grad(set_to_none=True)
    if scaler.is_enabled():
        scaler.update(scaler.get_scale())


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Move every tensor of a collated batch to the training device."""
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def predictions_by_target(outputs: tuple[torch.Tensor | None, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Name DoMINO's (volume, surface) outputs by their target keys, dropping the absent one."""
    return {key: out.float() for key, out in zip(TARGET_KEYS, outputs) if out is not None}


# ---- validation: this rank's share of the validation runs (the same draw every time, so epochs
# compare), summed over all ranks into the loss and per-variable errors

def run_validation(trainer: Trainer) -> dict[str, float]:
    """The validation metrics (``val_loss``, ``val_loss/<term>``, ``val_rel_l2/<part>/<name>``), also per source."""
    groups = trainer.data.val_sources or {"": list(range(len(trainer.data.val_runs)))}
    per_group = {name: validation_sums(trainer, indices) for name, indices in groups.items()}
    total = {key: sum(sums[key] for sums in per_group.values()) for key in next(iter(per_group.values()))}
    metrics = validation_metrics(total, trainer.objective.variable_names)
    for name, sums in per_group.items():
        if name:
            metrics |= {f"val_source/{name}/{key.removeprefix('val_')}": value
                        for key, value in validation_metrics(sums, trainer.objective.variable_names).items()}
    return metrics


@torch.no_grad()
def validation_sums(trainer: Trainer, indices: list[int]) -> dict[str, torch.Tensor]:
    """The validation sums (loss, terms, count, per-variable relative L2 in physical units) over ``indices`` of the
    validation set, each rank a share, summed over ranks."""
    info, model, objective = trainer.info, trainer.state.model, trainer.objective
    device, unscale, loss_config = info.device, objective.unscale, objective.loss
    model.eval()
    parts = tuple(key.removesuffix("_fields") for key in objective.variable_names)
    sums = {key: torch.zeros(len(names), device=device) for key, names in objective.variable_names.items()}
    scalars = [f"term/{term}" for term in loss_config.active_terms(parts)] + ["loss_sum", "samples"]
    sums |= {key: torch.zeros((), device=device) for key in scalars}
    for batch in checked_batches(loader_over(trainer.data.val_loader, indices[info.rank::info.world_size])):
        batch = to_device(batch, device)
        loss, terms, predictions = model_loss(model, batch, device, trainer.state.amp_dtype, loss_config)
        batch_size = next(iter(predictions.values())).shape[0]
        sums["loss_sum"] += loss * batch_size
        for term, value in terms.items():
            sums[f"term/{term}"] += value * batch_size
        sums["samples"] += batch_size
        for key, prediction in predictions.items():
            sums[key] += relative_l2_per_variable(unscale(key, prediction), unscale(key, batch[key].float()))
    return {key: distributed.all_reduce_sum(value) for key, value in sorted(sums.items())}


def relative_l2_per_variable(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """||pred - true|| / ||true|| over the points of each sample, per variable: (B, V) -> summed (V,)."""
    error = torch.linalg.vector_norm(prediction - target, dim=1)
    reference = torch.linalg.vector_norm(target, dim=1).clamp_min(torch.finfo(target.dtype).tiny)
    return (error / reference).sum(dim=0)
