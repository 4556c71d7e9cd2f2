"""Checked checkpoints on a tiny model, in-process: a newest checkpoint with flipped bytes or cut in
half is named and skipped, and the older one resumes to the weights of an uninterrupted run; with
none passing, resume refuses and touches nothing; a write that fails half-way (disk full) leaves
the previous checkpoint for the next resume; an older checkpoint is removed only once a newer one
passes; damaged model files are named, never loaded; NaN weights are never saved."""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from tiny_training import TinySurfaceModel, epochs_of, tiny_trainer

from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.storage.file_digests import DamagedFileError, check_file, digest_path, write_checked
from domino_pipeline.training import checkpointing, example_checkpoints, model_files
from domino_pipeline.training.checkpointing import NoGoodCheckpointError, agreed_checkpoint, checkpoint_folder
from domino_pipeline.training.epochs import train_epochs
from domino_pipeline.training.model_files import NonFiniteWeightsError
from domino_pipeline.training.run_log import EpochResult

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict:
    """An uninterrupted three-epoch run: its final weights and epoch records."""
    out = tmp_path_factory.mktemp("whole")
    trainer = tiny_trainer(out)
    assert train_epochs(trainer) is None
    return {"weights": trainer.state.model.state_dict(), "records": epochs_of(out)}


def assert_same_run(trainer, whole: dict) -> None:
    """The trainer ended with the uninterrupted run's weights, to the bit, and its last losses."""
    for name, value in whole["weights"].items():
        assert torch.equal(trainer.state.model.state_dict()[name], value), name
    records = [r for r in epochs_of(trainer.files.folder.parent) if r["kind"] == "epoch"]
    assert records[-1]["train_loss"] == whole["records"][-1]["train_loss"]
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["val_loss"]) for r in records)


def files_in(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def checkpoint_names(folder) -> list[str]:
    return [p.name for p in checkpointing.checkpoints_newest_first(folder)]


def flip_middle(path, count: int = 64) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


def cut_in_half(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


FLIPPED = "its SHA-256 does not match {name}.sha256: its bytes changed after it was written"
CUT = "{half:,} bytes where {name}.sha256 says {size:,}: truncated"


@pytest.mark.parametrize(("damage", "fault"), [(flip_middle, FLIPPED), (cut_in_half, CUT)], ids=["flipped", "cut"])
def test_a_damaged_newest_checkpoint_is_named_and_the_older_one_resumed(tmp_path, capsys, whole, damage, fault):
    folder = checkpoint_folder(tmp_path)
    assert train_epochs(tiny_trainer(tmp_path, stop_after=3)) == 15  # epoch 1, then one step of epoch 2
    assert checkpoint_names(folder) == ["checkpoint-e0002-s000001.pt", "checkpoint-e0002-s000000.pt"]
    newest = folder / "checkpoint-e0002-s000001.pt"
    size = newest.stat().st_size
    damage(newest)
    capsys.readouterr()
    resumed = tiny_trainer(tmp_path)
    assert train_epochs(resumed) is None
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("skipped ")] == [
        f"skipped {newest}: " + fault.format(name=newest.name, size=size, half=size // 2)]
    assert f"resumed from {folder / 'checkpoint-e0002-s000000.pt'}: epoch 2, step 0" in lines
    assert_same_run(resumed, whole)
    # the damaged one is older than the new ones now: rotation removed it
    assert checkpoint_names(folder) == ["checkpoint-e0004-s000000.pt", "checkpoint-e0003-s000000.pt"]


def test_with_no_checkpoint_passing_resume_refuses_and_touches_nothing(tmp_path):
    folder = checkpoint_folder(tmp_path)
    train_epochs(tiny_trainer(tmp_path, stop_after=3))
    flip_middle(folder / "checkpoint-e0002-s000001.pt")
    digest_path(folder / "checkpoint-e0002-s000000.pt").unlink()
    before = files_in(folder)
    with pytest.raises(NoGoodCheckpointError) as refused:
        agreed_checkpoint(folder)
    assert one_line(refused.value) == (
        f"{folder}: no checkpoint passes its checks (checkpoint-e0002-s000001.pt: its SHA-256 does not match "
        "checkpoint-e0002-s000001.pt.sha256: its bytes changed after it was written; checkpoint-e0002-s000000.pt: "
        "no checkpoint-e0002-s000000.pt.sha256 beside it: its write did not finish, or this project did not write "
        "it); nothing was written or removed: move the folder away to train afresh")
    assert files_in(folder) == before


class FullDiskAt:
    """Writes as asked, except the ``nth`` write to a file whose name holds ``marker``: that one
    stops half-way with ENOSPC, as when the disk fills up."""

    def __init__(self, marker: str, nth: int = 1) -> None:
        self.marker, self.left = marker, nth

    def write(self, write, target) -> None:
        write()
        if self.marker in str(target):
            self.left -= 1
            if self.left == 0:
                with open(target, "r+b") as file:
                    file.truncate(file.seek(0, 2) // 2)
                raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(("marker", "nth", "failing", "survivors"), [
    (".checkpoint-e0003", 1, "checkpoint-e0003-s000000.pt", ["checkpoint-e0002-s000000.pt"]),
    (".model_last", 2, "model_last.mdlus", ["checkpoint-e0003-s000000.pt", "checkpoint-e0002-s000000.pt"]),
], ids=["checkpoint", "model_last"])
def test_a_write_that_fails_half_way_leaves_the_previous_checkpoint(tmp_path, monkeypatch, whole, marker, nth,
                                                                     failing, survivors):
    """The disk fills up while epoch 2's checkpoint (or the last model after it) is written."""
    folder, disk = checkpoint_folder(tmp_path), FullDiskAt(marker, nth)
    real_save, real_model_save = torch.save, TinySurfaceModel.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: disk.write(lambda: real_save(obj, f, *a, **k), f))
    monkeypatch.setattr(TinySurfaceModel, "save",
                        lambda self, f, *a, **k: disk.write(lambda: real_model_save(self, f, *a, **k), f))
    with pytest.raises(OSError) as failed:
        train_epochs(tiny_trainer(tmp_path))
    assert one_line(failed.value) == f"{folder / failing}: not written (No space left on device)"
    monkeypatch.undo()
    assert checkpoint_names(folder) == survivors
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temporaries left
    for path in [*folder.glob("*.pt"), *folder.glob("*.mdlus")]:  # every file there passes
        check_file(path)
    resumed = tiny_trainer(tmp_path)
    assert resumed.saved.path.name == survivors[0]
    train_epochs(resumed)
    assert_same_run(resumed, whole)


def test_an_older_checkpoint_goes_only_once_a_newer_one_passes(tmp_path, monkeypatch):
    folder = checkpoint_folder(tmp_path)
    real_remove = checkpointing.remove_checked
    removals = []

    def checked_remove(path):
        others = [p for p in checkpointing.checkpoints_newest_first(folder) if p != path]
        passing = [p for p in others if _passes(p)]
        assert passing and checkpointing.checkpoint_position(passing[0]) > checkpointing.checkpoint_position(path)
        removals.append(path.name)
        real_remove(path)

    monkeypatch.setattr(checkpointing, "remove_checked", checked_remove)
    train_epochs(tiny_trainer(tmp_path, epochs=4))
    assert removals == ["checkpoint-e0002-s000000.pt", "checkpoint-e0003-s000000.pt"]
    assert checkpoint_names(folder) == ["checkpoint-e0005-s000000.pt", "checkpoint-e0004-s000000.pt"]
    flip_middle(folder / "checkpoint-e0004-s000000.pt")  # damaged: it will not count as the one kept
    write_checked(folder / "checkpoint-e0009-s000000.pt", lambda tmp: tmp.write_bytes(b"newer, not a checkpoint"))
    trainer = tiny_trainer(tmp_path, epochs=5, keep_checkpoints=2)
    assert trainer.saved.path.name == "checkpoint-e0005-s000000.pt"  # e0009 named and skipped
    checkpointing.remove_older_checkpoints(folder / "checkpoint-e0005-s000000.pt", keep=2)
    assert checkpoint_names(folder) == ["checkpoint-e0009-s000000.pt", "checkpoint-e0005-s000000.pt"]
    assert sorted(p.name for p in folder.glob("*.sha256")) == sorted(
        f"{name}.sha256" for name in ["DoMINO.0.3.mdlus", "checkpoint.0.3.pt", "model_best.mdlus", "model_last.mdlus",
                                      "checkpoint-e0009-s000000.pt", "checkpoint-e0005-s000000.pt"])


def _passes(path) -> bool:
    try:
        check_file(path)
        return True
    except DamagedFileError:
        return False


def test_damaged_model_files_are_named_and_never_loaded(tmp_path):
    ours, foreign = tmp_path / "ours.mdlus", tmp_path / "foreign.mdlus"
    model = TinySurfaceModel()
    model_files.save_model_file(model, ours)
    model.save(str(foreign))  # physicsnemo's own: no digest
    for path in (ours, foreign):
        model_files.check_model_file(path)
        flip_middle(path)
    target = TinySurfaceModel()
    before = {name: value.clone() for name, value in target.state_dict().items()}
    for path, fault in ((ours, "its SHA-256 does not match ours.mdlus.sha256"),
                        (foreign, "its member model.pt fails its CRC-32")):
        with pytest.raises(DamagedFileError, match=rf"^{path}: {fault}"):
            model_files.init_weights_from(target, path)
        with pytest.raises(DamagedFileError, match=rf"^{path}: {fault}"):
            model_files.load_model_file(path)
    assert all(torch.equal(value, before[name]) for name, value in target.state_dict().items())  # nothing loaded
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'none.mdlus'}: no such model file"):
        model_files.check_model_file(tmp_path / "none.mdlus")


def test_a_damaged_example_pair_is_named(tmp_path):
    train_epochs(tiny_trainer(tmp_path, epochs=2))
    folder = checkpoint_folder(tmp_path)
    assert example_checkpoints.load_example_checkpoint(folder).index == 1
    flip_middle(folder / "checkpoint.0.1.pt")
    with pytest.raises(DamagedFileError, match=rf"^{folder / 'checkpoint.0.1.pt'}: its SHA-256 does not match"):
        example_checkpoints.load_example_checkpoint(folder)


def test_nan_weights_are_never_saved(tmp_path):
    trainer = tiny_trainer(tmp_path, epochs=1)
    with torch.no_grad():
        trainer.state.model.linear.bias[1] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"^epoch 2, step 0: the model's weights are not finite "
                                                    r"\(linear.bias hold NaN or inf\); nothing was saved$"):
        checkpointing.save_checkpoint(trainer.state, trainer.files, trainer.info, epoch=2, step=0,
                                      partial=EpochResult())
    with pytest.raises(NonFiniteWeightsError, match=r"model_best.mdlus: the model's weights are not finite"):
        model_files.save_model_file(trainer.state.model, trainer.files.models["best"])
    assert not checkpoint_folder(tmp_path).exists()


# ---- kill -9 while a checkpoint is written: the process dies at each moment of the write

KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import torch
from tiny_training import TinySurfaceModel, tiny_trainer
from domino_pipeline.storage import file_digests
from domino_pipeline.training import checkpointing
from domino_pipeline.training.epochs import train_epochs

point, out, keep = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
seen = {"model_last": 0}

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def half_then_die(target):
    with open(target, "r+b") as file:
        file.truncate(file.seek(0, 2) // 2)
    die()

real_save, real_model_save, real_digest = torch.save, TinySurfaceModel.save, file_digests.write_digest
real_remove = checkpointing.remove_checked

def save(obj, f, *args, **kwargs):
    real_save(obj, f, *args, **kwargs)
    if point == "checkpoint data" and ".checkpoint-e0003" in str(f):
        half_then_die(f)

def model_save(self, f, *args, **kwargs):
    real_model_save(self, f, *args, **kwargs)
    if point == "model data" and ".model_last" in str(f):
        seen["model_last"] += 1
        if seen["model_last"] == 2:
            half_then_die(f)

def write_digest(path, versions):
    if point == "checkpoint digest" and path.name == "checkpoint-e0003-s000000.pt":
        die()
    if point == "model digest" and path.name == "model_last.mdlus" and len(versions) == 1:
        seen["model_last"] += 1
        if seen["model_last"] == 2:
            die()
    real_digest(path, versions)

def remove(path):
    path.unlink()
    if point == "rotation":
        die()
    real_remove(path)

torch.save, TinySurfaceModel.save, file_digests.write_digest = save, model_save, write_digest
checkpointing.remove_checked = remove
train_epochs(tiny_trainer(out, keep_checkpoints=keep))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("point", "keep", "resumed_from", "skipped"), [
    ("checkpoint data", 2, "checkpoint-e0002-s000000.pt", None),   # half of epoch 2's checkpoint, not yet renamed
    ("checkpoint digest", 2, "checkpoint-e0002-s000000.pt", "checkpoint-e0003-s000000.pt"),  # renamed, no digest
    ("model data", 2, "checkpoint-e0003-s000000.pt", None),        # the checkpoint done, the last model half-written
    ("model digest", 2, "checkpoint-e0003-s000000.pt", None),      # the new model renamed in place, its digest not final
    ("rotation", 1, "checkpoint-e0003-s000000.pt", None),          # epoch 1's checkpoint removed, its digest left
])
def test_a_kill_during_a_checkpoint_write_resumes_from_the_last_whole_one(tmp_path, capsys, whole, point, keep,
                                                                          resumed_from, skipped):
    folder = checkpoint_folder(tmp_path)
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, point, str(tmp_path), str(keep)], cwd=TESTS,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}:{TESTS}"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    models = [p for p in folder.glob("*.mdlus") if not p.name.startswith(".")]
    for path in [*models, *checkpointing.checkpoints_newest_first(folder)[1 if skipped else 0:]]:
        check_file(path)  # whatever the moment, every file but the unfinished one passes
    capsys.readouterr()
    resumed = tiny_trainer(tmp_path, keep_checkpoints=keep)
    assert resumed.saved.path.name == resumed_from
    train_epochs(resumed)
    lines = capsys.readouterr().out.splitlines()
    named = [f"skipped {folder / skipped}: no {skipped}.sha256 beside it: its write did not finish, or this project "
             "did not write it"] if skipped else []
    assert [line for line in lines if line.startswith("skipped ")] == named
    assert_same_run(resumed, whole)
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(".")
                 or (p.suffix == ".sha256" and not p.with_suffix("").exists())]
    assert leftovers == []  # temporaries and digests without their file are cleared by the next checkpoint
