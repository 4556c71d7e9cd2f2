"""The epoch loop, its checkpoint policy and validation, in-process on a tiny model: an interrupted
and resumed run ends where the uninterrupted one does, to the bit; checkpoints, the best model and
the logs appear when due. The stop flag: SIGTERM or a first Ctrl-C asks training to stop after the
current step; a second Ctrl-C aborts. The draw: one loader per run, pointed at each pass's
indices; a rank's epoch order, less a resume's skip."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import physicsnemo
import pytest
import torch
from conftest import DEFAULTS
from torch.utils.data import Dataset, DistributedSampler

from domino_pipeline.training import checkpointing
from domino_pipeline.training.checkpointing import CheckpointFiles, TrainingState, check_same_model, resume
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.domino_model import build_optimizer, build_scheduler, grad_scaler
from domino_pipeline.training.epochs import (
    Objective,
    StopFlag,
    TrainData,
    Trainer,
    epoch_indices,
    loader_over,
    make_loader,
    train_epochs,
)
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
    """Surface items whose draw depends on (epoch, index), as the real datasets' do."""

    def __init__(self, count: int) -> None:
        self.count, self.epoch = count, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        points = torch.rand(16, 3, generator=torch.Generator().manual_seed(1000 * self.epoch + index))
        return {"surface_mesh_centers": points, "surface_fields": points @ WEIGHTS}


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


def tiny_trainer(out: Path, *, epochs: int = 3, stop_after: int | None = None, **train_changes) -> Trainer:
    torch.manual_seed(0)
    model = TinySurfaceModel()
    config = replace(DEFAULTS.train, epochs=epochs, lr=0.05, batch_size=2, **train_changes)
    optimizer = build_optimizer(model, config)
    state = TrainingState(model=model, trained=model, optimizer=optimizer, scheduler=build_scheduler(optimizer, config),
                          scaler=grad_scaler(CPU.device, None), amp_dtype=None)
    train_set, val_set = TinyItems(6), TinyItems(2)
    data = TrainData(train_runs=[Path(f"run_{i}.zarr") for i in range(6)], val_runs=[Path("run_7.zarr"), Path("run_8.zarr")],
                     train_set=train_set, sampler=DistributedSampler(train_set, num_replicas=1, rank=0, seed=0),
                     train_loader=make_loader(train_set, config.batch_size, 0, CPU.device),
                     val_loader=make_loader(val_set, config.batch_size, 0, CPU.device))
    objective = Objective(loss=DEFAULTS.loss, description="mse: 1 x surface",
                          variable_names={"surface_fields": ["p", "tx", "ty", "tz"]}, unscale=lambda key, values: values)
    out.mkdir(parents=True, exist_ok=True)
    return Trainer(info=CPU, config=config, state=state, data=data, objective=objective,
                   files=CheckpointFiles.under(out, DEFAULTS.as_dict()), log=RunLog(out, enabled=True), stop=StopAfter(stop_after))


def epochs_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_weights_and_losses(tmp_path):
    whole = tiny_trainer(tmp_path / "whole")
    assert train_epochs(whole) is None
    interrupted = tiny_trainer(tmp_path / "parts", stop_after=3)  # epoch 2, after its first of 3 steps
    assert train_epochs(interrupted) == 15
    assert [r["kind"] for r in epochs_of(tmp_path / "parts")] == ["epoch", "interrupted"]
    saved = checkpointing.load_checkpoint(interrupted.files.checkpoint)
    assert (saved["epoch"], saved["step"]) == (2, 1)
    resumed = tiny_trainer(tmp_path / "parts")  # a fresh process would build the same, then resume
    assert train_epochs(resumed) is None
    for name, value in whole.state.model.state_dict().items():
        torch.testing.assert_close(resumed.state.model.state_dict()[name], value, rtol=0, atol=0)
    full, parts = epochs_of(tmp_path / "whole"), [r for r in epochs_of(tmp_path / "parts") if r["kind"] == "epoch"]
    assert [r["train_loss"] for r in parts] == [r["train_loss"] for r in full]
    assert [r["val_loss"] for r in parts] == [r["val_loss"] for r in full]
    assert [r["resumed_at_step"] for r in parts] == [0, 1, 0]
    assert resumed.state.scheduler.last_epoch == whole.state.scheduler.last_epoch == 3


def test_checkpoints_validation_and_the_best_model_when_due(tmp_path):
    trainer = tiny_trainer(tmp_path, epochs=4, val_every=2, checkpoint_every=3)
    train_epochs(trainer)
    records = epochs_of(tmp_path)
    assert ["val_loss" in r for r in records] == [False, True, False, True]
    assert set(records[1]) >= {"val_loss/surface", "val_rel_l2/surface/p", "val_rel_l2/surface/tz"}
    best = json.loads(trainer.files.models["best_record"].read_text())
    assert best["val_loss"] == min(r["val_loss"] for r in records if "val_loss" in r)
    assert trainer.state.best_val_loss == best["val_loss"]
    assert checkpointing.load_checkpoint(trainer.files.checkpoint)["epoch"] == 5  # after the last epoch
    assert trainer.files.models["last"].is_file()
    steps = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert len(steps) == 4 * 3  # 6 samples, batches of 2
    again = tiny_trainer(tmp_path, epochs=4)
    assert train_epochs(again) is None  # all epochs done: nothing trained
    assert len(epochs_of(tmp_path)) == 4


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    train_epochs(tiny_trainer(tmp_path, epochs=1))
    other = tiny_trainer(tmp_path, epochs=2)
    config = json.loads(other.files.config_json)
    config["model"]["activation"] = "relu"
    other = replace(other, files=replace(other.files, config_json=json.dumps(config)))
    with pytest.raises(ValueError, match=r"checkpoint\.pt: checkpoint was trained with other \['model'\] settings"):
        resume(other.state, other.files, CPU, init_from=None)
    check_same_model({"model_type": "surface", "model": {}}, {"model_type": "surface", "model": {}}, tmp_path)


# ---- the stop flag

@pytest.fixture
def restored_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_sets_the_flag_and_a_second_ctrl_c_aborts(restored_handlers):
    flag = StopFlag()
    assert not flag.is_set
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.is_set and flag.signal_number == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    fresh = StopFlag()
    os.kill(os.getpid(), signal.SIGINT)
    assert fresh.signal_number == signal.SIGINT


# ---- the draw's loaders

class _Indices(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(index)}


def test_a_pass_reads_exactly_the_indices_set_for_it():
    loader = make_loader(_Indices(), batch_size=2, num_workers=0, device=torch.device("cpu"))
    for indices in ([3, 1, 4], [], [9, 0]):
        seen = [i for batch in loader_over(loader, indices) for i in batch["index"].tolist()]
        assert seen == indices


def test_an_epochs_order_is_fixed_per_epoch_and_rank_and_a_resume_skips_its_head():
    ranks = [DistributedSampler(_Indices(), num_replicas=2, rank=r, shuffle=True, seed=5) for r in (0, 1)]
    first = [epoch_indices(s, 1, 0) for s in ranks]
    assert sorted(first[0] + first[1]) == list(range(10))
    assert epoch_indices(ranks[0], 1, 0) == first[0] and epoch_indices(ranks[0], 2, 0) != first[0]
    assert epoch_indices(ranks[0], 1, 3) == first[0][3:]
