"""A tiny trainer for the epoch loop's tests: a linear physicsnemo Module on surface items whose
draw depends on (epoch, index), as the real datasets' do; items may be made non-finite at chosen
(epoch, index) to make a step's loss NaN."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import physicsnemo
import torch
from conftest import DEFAULTS
from torch.utils.data import Dataset, DistributedSampler

from domino_pipeline.training import checkpointing
from domino_pipeline.training.checkpointing import CheckpointFiles, TrainingState
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.domino_model import build_optimizer, build_scheduler, grad_scaler
from domino_pipeline.training.epochs import Objective, TrainData, Trainer, make_loader
from domino_pipeline.training.run_log import RunLog

CPU = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
WEIGHTS = torch.tensor([[1.0, 0.0, 2.0, -1.0], [0.5, 1.0, 0.0, 0.0], [0.0, -2.0, 1.0, 3.0]])


class TinySurfaceModel(physicsnemo.Module):
    """A linear map from the surface coordinates to four fields, returned as DoMINO returns them."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4)

    def forward(self, batch: dict[str, torch.Tensor]):
        return None, self.linear(batch["surface_mesh_centers"])


class TinyItems(Dataset):
    """Surface items whose draw depends on (epoch, index), as the real datasets' do; the targets of
    the (epoch, index) pairs in ``poisoned`` are ``poison`` (NaN by default)."""

    def __init__(self, count: int, poisoned: frozenset[tuple[int, int]] = frozenset(), poison: float = math.nan) -> None:
        self.count, self.epoch, self.poisoned, self.poison = count, 0, poisoned, poison

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        points = torch.rand(16, 3, generator=torch.Generator().manual_seed(1000 * self.epoch + index))
        fields = points @ WEIGHTS
        if (self.epoch, index) in self.poisoned:
            fields = torch.full_like(fields, self.poison)
        return {"surface_mesh_centers": points, "surface_fields": fields}


class StopAfter:
    """A stop flag that turns on after ``steps`` polls (one per training step)."""

    def __init__(self, steps: int | None) -> None:
        self.steps, self.signal_number = steps, None

    @property
    def is_set(self) -> bool:
        if self.steps is None:
            return False
        self.steps -= 1
        if self.steps < 0:
            self.signal_number = 15
        return self.steps < 0


def tiny_trainer(out: Path, *, epochs: int = 3, stop_after: int | None = None, info: DistInfo = CPU,
                 poisoned: frozenset[tuple[int, int]] = frozenset(), poison: float = math.nan,
                 scaler: torch.amp.GradScaler | None = None, **train_changes) -> Trainer:
    """A trainer of a tiny model on 6 training and 2 validation items, writing to ``out``, resuming
    what is there; ``info``: this rank's place (the model DDP-wrapped when distributed); ``scaler``:
    a loss scaler (default: off, as for fp32 and bf16)."""
    torch.manual_seed(0)
    model = TinySurfaceModel()
    config = replace(DEFAULTS.train, **{"epochs": epochs, "lr": 0.05, "batch_size": 2} | train_changes)
    optimizer = build_optimizer(model, config)
    trained = torch.nn.parallel.DistributedDataParallel(model) if info.is_distributed else model
    state = TrainingState(model=model, trained=trained, optimizer=optimizer, scheduler=build_scheduler(optimizer, config),
                          scaler=scaler or grad_scaler(CPU.device, None), amp_dtype=None)
    train_set, val_set = TinyItems(6, poisoned, poison), TinyItems(2)
    data = TrainData(train_runs=[Path(f"run_{i}.zarr") for i in range(6)], val_runs=[Path("run_7.zarr"), Path("run_8.zarr")],
                     train_set=train_set, sampler=DistributedSampler(train_set, num_replicas=info.world_size,
                                                                     rank=info.rank, seed=0),
                     train_loader=make_loader(train_set, config.batch_size, 0, CPU.device),
                     val_loader=make_loader(val_set, config.batch_size, 0, CPU.device))
    objective = Objective(loss=DEFAULTS.loss, description="mse: 1 x surface",
                          variable_names={"surface_fields": ["p", "tx", "ty", "tz"]}, unscale=lambda key, values: values)
    out.mkdir(parents=True, exist_ok=True)
    return Trainer(info=info, config=config, state=state, data=data, objective=objective,
                   files=CheckpointFiles.under(out, DEFAULTS.as_dict(), keep=config.keep_checkpoints),
                   saved=checkpointing.agreed_checkpoint(checkpointing.checkpoint_folder(out)),
                   log=RunLog(out, enabled=info.is_main), stop=StopAfter(stop_after))


def epochs_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]


def poisoned_batch(epoch: int, step: int, rank: int = 0, world_size: int = 1) -> tuple[int, list[str]]:
    """The first training item of ``step`` (1-based, batches of 2) of ``epoch`` on ``rank``, and
    the runs of that batch, from the sampler's own order: what to poison to make that step NaN."""
    sampler = DistributedSampler(TinyItems(6), num_replicas=world_size, rank=rank, seed=0)
    sampler.set_epoch(epoch)
    order = list(sampler)[2 * (step - 1):2 * step]
    return order[0], [f"run_{i}.zarr" for i in order]


def train_rank(rank: int, world_size: int, out: Path, rendezvous: str,
               poisoned: frozenset[tuple[int, int]], results: Path) -> None:
    """One gloo rank of a tiny run with NaN targets at ``poisoned`` (mp.spawn's target): the line
    it stopped with (or ``finished``) into ``results/rank<r>.txt``."""
    import torch.distributed as dist

    from domino_pipeline.runtime.entry_point import one_line
    from domino_pipeline.training.epochs import train_epochs
    from domino_pipeline.training.nonfinite import NonFiniteLossError

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    try:
        info = DistInfo(rank=rank, local_rank=rank, world_size=world_size, device=torch.device("cpu"))
        try:
            train_epochs(tiny_trainer(out, info=info, poisoned=poisoned))
            line = "finished"
        except NonFiniteLossError as error:
            line = one_line(error)
        (results / f"rank{rank}.txt").write_text(line)
    finally:
        dist.destroy_process_group()
