"""The epoch loop: resume, then per epoch train (every rank), combine the ranks' records, step the
schedule, validate and checkpoint when due (checkpoint_policy.py), log; a signal stops it after
the current step with a checkpoint of the partial epoch."""

from __future__ import annotations

import signal
import time
from typing import Any

from domino_pipeline.training import distributed
from domino_pipeline.training.checkpoint_policy import ResumePoint, keep_best, resume, save_checkpoint
from domino_pipeline.training.epoch_records import epoch_record, rank_summary, reset_peak_memory
from domino_pipeline.training.loaders import epoch_indices, loader_over
from domino_pipeline.training.run_log import log_epoch
from domino_pipeline.training.trainer import Trainer
from domino_pipeline.training.training_loop import EpochResult, train_one_epoch
from domino_pipeline.training.validation import run_validation


def train_epoch(trainer: Trainer, epoch: int, start: ResumePoint) -> tuple[EpochResult, dict[str, Any]]:
    """One epoch (or its remainder after ``start.step`` batches) on every rank, and the combined record."""
    info, config, state, data = trainer.info, trainer.config, trainer.state, trainer.data
    data.train_set.set_epoch(epoch)
    indices = epoch_indices(data.sampler, epoch, start.step * config.batch_size)
    reset_peak_memory(info.device)
    began = time.perf_counter()
    # the loss of a resumed epoch: all its steps
    result = EpochResult(loss_sum=start.partial.loss_sum, batches=start.partial.batches,
                         term_sums=dict(start.partial.term_sums))

    def log_step(loss: float) -> None:
        trainer.log.append("steps.jsonl", {"epoch": epoch, "step": result.batches, "loss": loss})

    result = train_one_epoch(
        state.trained, loader_over(data.train_loader, indices), len(indices), state.optimizer, state.scaler,
        device=info.device, amp_dtype=state.amp_dtype, clip_grad_norm=config.clip_grad_norm,
        loss_config=trainer.objective.loss, should_stop=lambda: distributed.any_rank(trainer.stop.is_set, info.device),
        after_step=log_step, result=result, progress=f"epoch {epoch}" if info.is_main else None,
    )
    ranks = distributed.gather_objects(rank_summary(result, indices, data.train_runs, info.device))
    record = epoch_record(epoch, ranks, time.perf_counter() - began, state.optimizer.param_groups[0]["lr"],
                          start.step, trainer.objective.description)
    return result, record


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


def train_epochs(trainer: Trainer) -> int | None:
    """Run the remaining epochs; the signal number when stopped by one, else None."""
    start = resume(trainer.state, trainer.files, trainer.info, init_from=trainer.config.init_from,
                   resume_from=trainer.config.resume_from, say=trainer.log.print)
    epochs = trainer.config.epochs
    if start.epoch > epochs:
        trainer.log.print(f"all {epochs} epochs are done in this output_dir; raise train.epochs to go on")
    for epoch in range(start.epoch, epochs + 1):
        result, record = train_epoch(trainer, epoch, start)
        if result.interrupted:
            save_checkpoint(trainer.state, trainer.files, trainer.info, epoch=epoch, step=result.batches, partial=result)
            trainer.log.append("epochs.jsonl", {"kind": "interrupted", "epoch": epoch, "step": result.batches})
            trainer.log.print(f"stopped by signal in epoch {epoch}; checkpoint saved to {trainer.files.checkpoint}")
            return trainer.stop.signal_number or signal.SIGINT
        finish_epoch(trainer, epoch, record)
        start = ResumePoint(epoch + 1)
    return None
