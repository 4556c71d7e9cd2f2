"""What the epoch loop works with, in small typed pieces that train.py builds once:

    Trainer(info, config, state, data, objective, files, log, stop)

``TrainingState`` and ``RunFiles`` (checkpoint_policy.py) hold what training changes and where it
is saved; ``TrainData`` the runs, datasets and loaders; ``Objective`` what is minimised and
measured; ``RunLog`` and ``StopFlag`` what is reported and when to stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from domino_pipeline.config import LossConfig, TrainConfig
from domino_pipeline.training.checkpoint_policy import RunFiles, TrainingState
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.run_log import RunLog
from domino_pipeline.training.stop_flag import StopFlag


@dataclass(frozen=True)
class TrainData:
    """The training and validation runs, their datasets and loaders, and the training shuffle."""

    train_runs: list[Path]
    val_runs: list[Path]
    train_set: Dataset
    sampler: DistributedSampler
    train_loader: DataLoader
    val_loader: DataLoader | None   # None: no validation runs


@dataclass(frozen=True)
class Objective:
    """The loss (its config and the line that describes it in logs) and the validation figures:
    each target's variable names and the function that unscales a target to physical units."""

    loss: LossConfig
    description: str
    variable_names: dict[str, list[str]]
    unscale: Callable[[str, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Trainer:
    """Everything the epoch loop needs (module docstring)."""

    info: DistInfo
    config: TrainConfig
    state: TrainingState
    data: TrainData
    objective: Objective
    files: RunFiles
    log: RunLog
    stop: StopFlag
