"""A step whose loss or gradient is not finite, on a tiny model in-process: training stops at that
step with one line naming the epoch, the step and the runs of its batch, every checkpoint and model
file as it was; ``train.max_nonfinite_steps`` skips that many such steps (not taken, not counted in
the loss) instead; a diverging run stops before a NaN is written; two gloo ranks, one of which sees
the NaN, stop on the same step with the same line."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.multiprocessing as mp
from tqdm import tqdm
from tiny_training import epochs_of, poisoned_batch, tiny_trainer, train_rank

from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.storage.file_digests import check_file
from domino_pipeline.training import checkpointing
from domino_pipeline.training.checkpointing import checkpoint_folder
from domino_pipeline.training.epochs import train_epochs
from domino_pipeline.training.model_files import nonfinite_tensors
from domino_pipeline.training.nonfinite import NonFiniteLossError, nonfinite_line, step_is_finite

STOPPED = ": training stopped there, the checkpoints and models as they were (train.max_nonfinite_steps={} skipped " \
          "steps allowed)"


def files_in(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_nonfinite_loss_stops_training_at_its_step_and_every_file_stays(tmp_path):
    assert train_epochs(tiny_trainer(tmp_path, stop_after=3)) == 15  # epoch 1 and one step of epoch 2 saved
    folder = checkpoint_folder(tmp_path)
    before = files_in(folder)
    item, runs = poisoned_batch(epoch=2, step=3)
    with pytest.raises(NonFiniteLossError) as stopped:
        train_epochs(tiny_trainer(tmp_path, poisoned=frozenset({(2, item)})))
    assert one_line(stopped.value) == (f"epoch 2, step 3: the loss is not finite (loss nan, gradient norm nan); "
                                       f"its batch: {', '.join(runs)}" + STOPPED.format(0))
    assert files_in(folder) == before
    assert epochs_of(tmp_path)[-1] == {"kind": "nonfinite", "epoch": 2, "step": 3,
                                       "message": one_line(stopped.value).split(": training stopped")[0]}
    for path in [*folder.glob("*.pt"), *folder.glob("*.mdlus")]:
        check_file(path)
    assert nonfinite_tensors(checkpointing.load_checkpoint(checkpointing.newest_checkpoint(tmp_path))["model"]) == []


def test_allowed_nonfinite_steps_are_skipped_then_the_next_one_stops(tmp_path, capsys):
    first, first_runs = poisoned_batch(epoch=2, step=2)
    second, second_runs = poisoned_batch(epoch=3, step=1)
    trainer = tiny_trainer(tmp_path, poisoned=frozenset({(2, first), (3, second)}), max_nonfinite_steps=1)
    with pytest.raises(NonFiniteLossError) as stopped:
        train_epochs(trainer)
    assert f"epoch 2, step 2: the loss is not finite (loss nan, gradient norm nan); its batch: {', '.join(first_runs)}: " \
           "step skipped (1 of train.max_nonfinite_steps=1)" in capsys.readouterr().out.splitlines()
    assert one_line(stopped.value) == (f"epoch 3, step 1: the loss is not finite (loss nan, gradient norm nan); "
                                       f"its batch: {', '.join(second_runs)}" + STOPPED.format(1))
    records = [r for r in epochs_of(tmp_path) if r["kind"] == "epoch"]
    assert [r["skipped_steps"] for r in records] == [0, 1]
    assert all(math.isfinite(r["train_loss"]) for r in records)
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["loss"] is None] == [2] and steps[4]["skipped"] == "not finite"
    saved = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(tmp_path))
    assert saved["nonfinite_steps"] == 1 and saved["epoch"] == 3
    adam = saved["optimizer"]["state"][0]
    assert adam["step"] == 3 + 2  # epoch 1's three steps and two of epoch 2's three: the skipped one not taken


def test_a_diverging_run_stops_at_its_first_nonfinite_step_with_nothing_written(tmp_path):
    with pytest.raises(NonFiniteLossError, match=r"^epoch 1, step \d: the (loss|gradient) is not finite") as stopped:
        train_epochs(tiny_trainer(tmp_path, lr=1e30, clip_grad_norm=0.0))
    assert not checkpoint_folder(tmp_path).exists()
    # the epoch's progress bar is closed as the error leaves it (its traceback, held here, keeps the
    # bar alive), so the error's line is printed after the bar is cleared, not onto it
    assert stopped.traceback and not list(getattr(tqdm, "_instances", ()))


def test_the_fp16_loss_scaler_skipping_an_overflow_is_not_an_error(tmp_path):
    """One batch whose targets are huge but finite: its loss is finite, its gradient times the
    scale overflows; the scaler skips that step and halves its scale, as under fp16, and training
    goes on."""
    item, _ = poisoned_batch(epoch=2, step=2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1e25, growth_interval=1000)
    trainer = tiny_trainer(tmp_path, poisoned=frozenset({(2, item)}), poison=1e17, scaler=scaler)
    assert train_epochs(trainer) is None
    assert scaler.get_scale() == pytest.approx(0.5e25)  # one overflow: one step skipped, the scale halved
    assert trainer.state.optimizer.state_dict()["state"][0]["step"] == 9 - 1
    records = [r for r in epochs_of(tmp_path) if r["kind"] == "epoch"]
    assert trainer.state.nonfinite_steps == 0 and [r["skipped_steps"] for r in records] == [0, 0, 0]
    assert all(math.isfinite(r["train_loss"]) for r in records) and records[1]["train_loss"] > 1e30


def test_the_line_names_each_rank():
    ranks = [{"loss": 0.25, "grad_norm": math.nan, "runs": ["run_1.zarr", "run_2.zarr"]},
             {"loss": math.inf, "grad_norm": math.nan, "runs": ["run_3.zarr"]}]
    assert nonfinite_line(4, 7, ranks) == ("epoch 4, step 7: the loss is not finite on rank 1 (losses by rank 0.25, "
                                           "inf; gradient norm nan); its batches: rank 0 run_1.zarr, run_2.zarr; "
                                           "rank 1 run_3.zarr")
    assert nonfinite_line(1, 2, [{"loss": 0.5, "grad_norm": math.inf, "runs": ["a"]}]) == (
        "epoch 1, step 2: the gradient is not finite (loss 0.5, gradient norm inf); its batch: a")
    assert step_is_finite(0.5, 3.0, scaled=False) and step_is_finite(0.5, math.inf, scaled=True)
    assert not step_is_finite(0.5, math.nan, scaled=False) and not step_is_finite(math.nan, 1.0, scaled=True)


@pytest.mark.slow
def test_two_gloo_ranks_stop_on_the_same_step_with_the_same_line(tmp_path):
    item, rank1_runs = poisoned_batch(epoch=2, step=2, rank=1, world_size=2)
    _, rank0_runs = poisoned_batch(epoch=2, step=2, rank=0, world_size=2)
    results = tmp_path / "results"
    results.mkdir()
    mp.spawn(train_rank, args=(2, tmp_path / "run", f"file://{tmp_path / 'rendezvous'}", frozenset({(2, item)}),
                               results), nprocs=2, join=True)
    lines = [(results / f"rank{r}.txt").read_text() for r in (0, 1)]
    assert lines[0] == lines[1]
    assert lines[0].startswith("epoch 2, step 2: the loss is not finite on rank 1 (losses by rank ")
    assert lines[0].endswith(f", nan; gradient norm nan); its batches: rank 0 {', '.join(rank0_runs)}; "
                             f"rank 1 {', '.join(rank1_runs)}" + STOPPED.format(0))
    for path in checkpoint_folder(tmp_path / "run").glob("*.pt"):
        assert nonfinite_tensors(torch.load(path, weights_only=True).get("model", {})) == []
