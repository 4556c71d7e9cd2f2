"""When and what a training run saves, and how it resumes.

``TrainingState`` is what a step changes (model, optimizer, schedule, gradient scaler, the best
validation loss so far); ``RunFiles`` where it goes. A checkpoint (checkpointing.py's format) is
written at the end of every ``train.checkpoint_every``-th epoch, at the last one and when a signal
stops the run, with every rank's RNG state and partial loss sums, so that a resumed run draws and
reports as an uninterrupted one; the model of the lowest validation loss is kept as
``model_best.mdlus``, the latest as ``model_last.mdlus``. At an epoch's end physicsnemo's own
pair (``DoMINO.0.<e>.mdlus``, ``checkpoint.0.<e>.pt``) is written beside them, and
``train.resume_from`` continues such a pair written by the DoMINO example.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from domino_pipeline.training import checkpointing, distributed
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.training_loop import EpochResult


@dataclass
class TrainingState:
    """What training changes and a checkpoint holds."""

    model: torch.nn.Module          # the bare model, for validation and checkpoints
    trained: torch.nn.Module        # the same model, DDP-wrapped when distributed
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    amp_dtype: torch.dtype | None
    best_val_loss: float = math.inf


@dataclass(frozen=True)
class RunFiles:
    """Where a run's checkpoint and models go, and the resolved config they record."""

    checkpoint: Path
    models: dict[str, Path] = field(repr=False)  # last, best (physicsnemo .mdlus) and best_record (JSON)
    config_json: str = field(repr=False)

    @classmethod
    def under(cls, output_dir: Path, config: dict[str, Any]) -> RunFiles:
        """The files of a run writing to ``output_dir`` with the resolved ``config``."""
        return cls(checkpointing.checkpoint_path(output_dir), checkpointing.model_file_paths(output_dir),
                   json.dumps(config))


def save_checkpoint(state: TrainingState, files: RunFiles, info: DistInfo, *, epoch: int, step: int,
                    partial: EpochResult) -> None:
    """Collective: gather every rank's RNG state and partial sums, rank 0 writes the checkpoint
    (``epoch`` to run next, ``step`` batches of it done) and the last model, all wait."""
    rng_states = distributed.gather_objects(checkpointing.capture_rng_state())
    partials = distributed.gather_objects(
        {"loss_sum": partial.loss_sum, "batches": partial.batches, "term_sums": partial.term_sums})
    if info.is_main:
        checkpointing.save_checkpoint(files.checkpoint, {
            "model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(),
            "scheduler": state.scheduler.state_dict(), "scaler": state.scaler.state_dict(),
            "epoch": epoch, "step": step, "epoch_partial": partials, "rng_states": rng_states,
            "config": files.config_json, "best_val_loss": state.best_val_loss,
        })
        checkpointing.save_model_file(state.model, files.models["last"])
        if step == 0 and epoch >= 2:  # an epoch's end: physicsnemo's pair too, for its load_checkpoint
            states = {"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict(),
                      "scaler": state.scaler.state_dict()}
            checkpointing.save_example_checkpoint(files.checkpoint.parent, files.models["last"], states, index=epoch - 2)
    distributed.barrier()


def keep_best(state: TrainingState, files: RunFiles, info: DistInfo, epoch: int, val_loss: float) -> None:
    """Rank 0 saves the model as the best one when the validation loss is the lowest so far."""
    if not val_loss < state.best_val_loss:
        return
    state.best_val_loss = val_loss
    if info.is_main:
        checkpointing.save_model_file(state.model, files.models["best"])
        files.models["best_record"].write_text(json.dumps({"epoch": epoch, "val_loss": val_loss}) + "\n")


def check_same_model(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse to resume a checkpoint of another model type or architecture."""
    differing = [key for key in ("model_type", "model") if saved.get(key) != current.get(key)]
    if differing:
        raise ValueError(
            f"{path}: checkpoint was trained with other {differing} settings; "
            "use another output_dir or delete the checkpoint"
        )


@dataclass(frozen=True)
class ResumePoint:
    """Where training goes on: the epoch to run, batches of it done, their partial sums."""

    epoch: int = 1
    step: int = 0
    partial: EpochResult = field(default_factory=EpochResult)


def resume(state: TrainingState, files: RunFiles, info: DistInfo, *, init_from: str | None,
           resume_from: str | None = None, say=print) -> ResumePoint:
    """Restore the latest checkpoint if there is one (this rank's RNG state and partial sums);
    else continue the physicsnemo checkpoint folder ``resume_from`` when given; else start from
    ``init_from`` (a physicsnemo .mdlus) when given. ``say`` reports which."""
    saved = checkpointing.load_checkpoint(files.checkpoint)
    if saved is None and resume_from:
        return resume_from_example(state, resume_from, info, say)
    if saved is None:
        if init_from:
            checkpointing.init_weights_from(state.model, init_from)
            say(f"initialised the model from {init_from}")
        return ResumePoint()
    if init_from:
        say(f"note: resuming {files.checkpoint}; train.init_from={init_from} is not used")
    check_same_model(checkpointing.config_from_checkpoint(saved), json.loads(files.config_json), files.checkpoint)
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    state.scaler.load_state_dict(saved["scaler"])
    state.best_val_loss = float(saved.get("best_val_loss", math.inf))
    checkpointing.restore_rng_state(saved["rng_states"][info.rank % len(saved["rng_states"])])
    partial = EpochResult(**saved["epoch_partial"][info.rank % len(saved["epoch_partial"])])
    say(f"resumed from {files.checkpoint}: epoch {saved['epoch']}, step {saved['step']}")
    return ResumePoint(saved["epoch"], saved["step"], partial)


def resume_from_example(state: TrainingState, folder: str, info: DistInfo, say=print) -> ResumePoint:
    """Continue a physicsnemo checkpoint (the DoMINO example's): its model (constructor arguments
    checked against the config), optimizer, scaler, scheduler and epoch. The RNG states and the
    best validation loss so far are not in that layout: they start afresh."""
    example = checkpointing.load_example_checkpoint(folder, map_location=info.device)
    checkpointing.init_weights_from(state.model, example.model_path)
    for note in checkpointing.restore_example_states(example, state.optimizer, state.scheduler, state.scaler):
        say(f"note: {note}")
    say(f"resumed from {example.model_path.parent} (physicsnemo checkpoint of epoch index {example.index}): "
        f"epoch {example.next_epoch}")
    return ResumePoint(example.next_epoch)
