"""The checkpoint pair of physicsnemo's ``save_checkpoint`` (``DoMINO.0.<e>.mdlus``, ``checkpoint.0.<e>.pt``;
docs/example_keys.md), written at every epoch end and continued by ``train.resume_from``. Ours carry digests; the
example's own are checked by their zip CRC-32s."""

from __future__ import annotations

import collections
import io
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from domino_pipeline.storage.file_digests import check_zip, has_digest, read_checked, remove_checked, write_checked
from domino_pipeline.training.model_files import check_model_file

# physicsnemo's names: "<class name>.<model parallel rank>.<index>.mdlus", "checkpoint.<rank>.<index>.pt"; rank 0 here
EXAMPLE_STATE = "checkpoint.0.{index}.pt"
EXAMPLE_MODEL = "DoMINO.0.{index}.mdlus"
_EXAMPLE_STATE_PATTERN = re.compile(r"^checkpoint\.0\.(\d+)\.pt$")
EXAMPLE_STATE_KEYS = ("optimizer_state_dict", "scheduler_state_dict", "scaler_state_dict")


def save_example_checkpoint(folder: Path, model_file: Path, states: dict[str, Any], index: int) -> None:
    """Write physicsnemo's pair for finished epoch ``index``, each file with its digest; then remove older pairs."""
    write_checked(folder / EXAMPLE_MODEL.format(index=index), lambda tmp: _link_or_copy(model_file, tmp))
    state = {f"{name}_state_dict": states[name] for name in ("optimizer", "scheduler", "scaler")} | {"epoch": index}
    write_checked(folder / EXAMPLE_STATE.format(index=index), lambda tmp: torch.save(state, tmp))
    for older in example_indices(folder):
        if older != index:
            remove_checked(folder / EXAMPLE_STATE.format(index=older))
            remove_checked(folder / EXAMPLE_MODEL.format(index=older))


def _link_or_copy(source: Path, target: Path) -> None:
    """Make ``target`` (an empty temporary) a hard link to ``source``, or a copy where links fail."""
    target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def example_indices(folder: Path) -> list[int]:
    """The indices of the ``checkpoint.0.<index>.pt`` files in ``folder``, ascending."""
    found = (_EXAMPLE_STATE_PATTERN.match(path.name) for path in Path(folder).glob("checkpoint.0.*.pt"))
    return sorted(int(match.group(1)) for match in found if match)


@dataclass(frozen=True)
class ExampleCheckpoint:
    """The latest pair of a physicsnemo checkpoint folder."""

    index: int                     # the 0-based epoch it finished
    model_path: Path
    states: dict[str, Any]         # the state dicts: optimizer, scheduler, scaler (absent ones missing)

    @property
    def next_epoch(self) -> int:
        """The epoch to run next, 1-based as this project counts: index + 2."""
        return self.index + 2


def load_example_checkpoint(folder: str | Path, map_location: torch.device | str = "cpu") -> ExampleCheckpoint:
    """The latest physicsnemo pair of ``folder``, both files checked, read with ``weights_only``."""
    folder = Path(folder)
    indices = example_indices(folder)
    if not indices:
        raise FileNotFoundError(f"{folder}: no physicsnemo checkpoint (checkpoint.0.<epoch>.pt and "
                                "DoMINO.0.<epoch>.mdlus, as save_checkpoint writes them)")
    index = indices[-1]
    model_path = folder / EXAMPLE_MODEL.format(index=index)
    if not model_path.is_file():
        raise FileNotFoundError(f"{model_path}: missing; {EXAMPLE_STATE.format(index=index)} has no model beside it")
    check_model_file(model_path)
    path = folder / EXAMPLE_STATE.format(index=index)
    state = _read_example_state(path, map_location)
    if "optimizer_state_dict" not in state:
        raise ValueError(f"{path}: no optimizer_state_dict; keys {sorted(state)}")
    if "epoch" in state and int(state["epoch"]) != index:
        raise ValueError(f"{path}: its epoch {state['epoch']} is not the {index} of its name")
    states = {key.removesuffix("_state_dict"): state[key] for key in EXAMPLE_STATE_KEYS if key in state}
    return ExampleCheckpoint(index=index, model_path=model_path, states=states)


def _read_example_state(path: Path, map_location: torch.device | str) -> dict[str, Any]:
    """The dict of a pair's ``checkpoint.0.<e>.pt``: checked by its digest, or its zip's CRC-32s."""
    if has_digest(path):
        data = read_checked(path)
    else:
        data = path.read_bytes()
        check_zip(path, data)
    try:
        with torch.serialization.safe_globals([collections.Counter]):
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or foreign files
        raise ValueError(f"{path}: not a readable physicsnemo training checkpoint ({error})") from error


def restore_example_states(checkpoint: ExampleCheckpoint, optimizer: torch.optim.Optimizer,
                           scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler) -> list[str]:
    """Load a physicsnemo checkpoint's optimizer, scaler and scheduler states; the notes to print."""
    states, notes = checkpoint.states, []
    optimizer.load_state_dict(states["optimizer"])
    if states.get("scaler"):
        scaler.load_state_dict(states["scaler"])
    elif scaler.is_enabled():
        notes.append("the checkpoint has no grad scaler state; the scaler starts afresh")
    saved = states.get("scheduler") or {}
    if set(saved) == set(scheduler.state_dict()):
        scheduler.load_state_dict(saved)
        return notes
    epochs_done = checkpoint.index + 1
    scheduler.last_epoch = epochs_done
    for group, lr in zip(optimizer.param_groups, scheduler._get_closed_form_lr()):
        group["lr"] = lr
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    notes.append(f"the checkpoint's scheduler (state keys {sorted(saved)}) is not the configured "
                 f"{type(scheduler).__name__}: the learning rate follows train.scheduler from epoch {epochs_done + 1}")
    return notes
