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

import pytest
import torch
from tiny_training import CPU, epochs_of, tiny_trainer
from torch.utils.data import Dataset, DistributedSampler

from domino_pipeline.training import checkpointing
from domino_pipeline.training.checkpointing import check_same_model, resume
from domino_pipeline.training.epochs import StopFlag, epoch_indices, loader_over, make_loader, train_epochs


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_weights_and_losses(tmp_path):
    whole = tiny_trainer(tmp_path / "whole")
    assert train_epochs(whole) is None
    interrupted = tiny_trainer(tmp_path / "parts", stop_after=3)  # epoch 2, after its first of 3 steps
    assert train_epochs(interrupted) == 15
    assert [r["kind"] for r in epochs_of(tmp_path / "parts")] == ["epoch", "interrupted"]
    saved = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(tmp_path / "parts"))
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
    assert checkpointing.load_checkpoint(checkpointing.newest_checkpoint(tmp_path))["epoch"] == 5  # after the last epoch
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
    with pytest.raises(ValueError, match=r"checkpoint-e0002-s000000\.pt: checkpoint was trained with other \['model'\] settings"):
        resume(other.state, other.files, CPU, saved=other.saved, init_from=None)
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
