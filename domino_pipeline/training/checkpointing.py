"""Training checkpoints: when and what a run saves, how it resumes, and the files. Each checkpoint
is a new file ``checkpoint-e<epoch>-s<step>.pt`` with its digest; an older one is removed only once a
newer one is on disk and checked; resuming takes the newest that passes its checks (docs/checkpoints.md,
docs/configuration.md "Checkpoints", docs/example_keys.md)."""

from __future__ import annotations

import io
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domino_pipeline.storage.atomic_store import remove_stale_temporaries, write_json_atomic
from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.storage.file_digests import (DIGEST_SUFFIX, DamagedFileError, check_file, read_checked,
                                                  remove_checked, write_checked)
from domino_pipeline.training import distributed
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.example_checkpoints import (load_example_checkpoint, restore_example_states,
                                                          save_example_checkpoint)
from domino_pipeline.training.model_files import (init_weights_from, nonfinite_tensors, require_finite_weights,
                                                  save_model_file)
from domino_pipeline.training.run_log import EpochResult

CHECKPOINT_NAME = "checkpoint-e{epoch:04d}-s{step:06d}.pt"
_CHECKPOINT_PATTERN = re.compile(r"^checkpoint-e(\d+)-s(\d+)\.pt$")
LEGACY_CHECKPOINT = "checkpoint.pt"  # written before checkpoints carried digests: named on resume, never loaded
LAST_MODEL_NAME = "model_last.mdlus"
BEST_MODEL_NAME = "model_best.mdlus"
STATEFUL = ("model", "optimizer", "scheduler", "scaler")  # the TrainingState parts a checkpoint holds the state of
CHECKPOINT_KEYS = {*STATEFUL, "epoch", "step", "rng_states", "config"}


# ---- the policy: what a run saves when, and how it resumes

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
    nonfinite_steps: int = 0        # steps skipped so far for a loss or gradient that was not finite


@dataclass(frozen=True)
class CheckpointFiles:
    """Where a run's checkpoints and models go, how many it keeps, the resolved config they record."""

    folder: Path
    models: dict[str, Path] = field(repr=False)  # last, best (physicsnemo .mdlus) and best_record (JSON)
    config_json: str = field(repr=False)
    keep: int = 2

    @classmethod
    def under(cls, output_dir: Path, config: dict[str, Any], keep: int = 2) -> CheckpointFiles:
        """The files of a run writing to ``output_dir`` with the resolved ``config``."""
        return cls(checkpoint_folder(output_dir), model_file_paths(output_dir), json.dumps(config), keep)


def save_checkpoint(state: TrainingState, files: CheckpointFiles, info: DistInfo, *, epoch: int, step: int,
                    partial: EpochResult) -> Path:
    """Collective: rank 0 writes the checkpoint (``epoch`` to run next, ``step`` batches of it done, every rank's RNG
    state and sums) and the last model, then prunes; all ranks raise its error. Weights not finite are refused first."""
    require_finite_weights(state.model, f"epoch {epoch}, step {step}")
    rng_states = distributed.gather_objects(capture_rng_state())
    partials = distributed.gather_objects({"loss_sum": partial.loss_sum, "batches": partial.batches,
                                           "term_sums": partial.term_sums, "skipped": partial.skipped})
    path = files.folder / CHECKPOINT_NAME.format(epoch=epoch, step=step)
    error = None
    if info.is_main:
        try:
            write_files(state, files, path, {
                **{name: getattr(state, name).state_dict() for name in STATEFUL}, "epoch": epoch, "step": step,
                "epoch_partial": partials, "rng_states": rng_states, "config": files.config_json,
                "best_val_loss": state.best_val_loss, "nonfinite_steps": state.nonfinite_steps,
            })
        except (OSError, ValueError) as failed:
            error = failed
    failure = distributed.gather_objects(None if error is None else one_line(error))[0]
    if error is not None:
        raise error
    if failure is not None:
        raise OSError(failure)
    return path


def write_files(state: TrainingState, files: CheckpointFiles, path: Path, contents: dict[str, Any]) -> None:
    """Rank 0's checkpoint, last model and, at an epoch's end, physicsnemo's pair; then older ones pruned."""
    write_checked(path, lambda tmp: torch.save(contents, tmp))
    save_model_file(state.model, files.models["last"])
    if contents["step"] == 0 and contents["epoch"] >= 2:  # an epoch's end: physicsnemo's pair, for its load_checkpoint
        states = {name: contents[name] for name in STATEFUL[1:]}
        save_example_checkpoint(files.folder, files.models["last"], states, index=contents["epoch"] - 2)
    remove_older_checkpoints(path, files.keep)


def keep_best(state: TrainingState, files: CheckpointFiles, info: DistInfo, epoch: int, val_loss: float) -> None:
    """Rank 0 saves the model as the best when the validation loss is the lowest so far (and finite)."""
    if not val_loss < state.best_val_loss:
        return
    require_finite_weights(state.model, f"the best model of epoch {epoch}")
    state.best_val_loss = val_loss
    if info.is_main:
        save_model_file(state.model, files.models["best"])
        write_json_atomic(files.models["best_record"], {"epoch": epoch, "val_loss": val_loss})


def check_same_model(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse to resume a checkpoint of another model type or architecture."""
    differing = [key for key in ("model_type", "model") if saved.get(key) != current.get(key)]
    if differing:
        raise ValueError(f"{path}: checkpoint was trained with other {differing} settings; "
                         "use another output_dir or delete the checkpoint")


@dataclass(frozen=True)
class ResumePoint:
    """Where training goes on: the epoch to run, batches of it done, their partial sums."""

    epoch: int = 1
    step: int = 0
    partial: EpochResult = field(default_factory=EpochResult)


def resume(state: TrainingState, files: CheckpointFiles, info: DistInfo, *, saved: GoodCheckpoint | None,
           init_from: str | None, resume_from: str | None = None, say=print) -> ResumePoint:
    """Restore ``saved``; else continue the physicsnemo folder ``resume_from``; else start from ``init_from``."""
    if saved is None and resume_from:
        return resume_from_example(state, resume_from, info, say)
    if saved is None:
        if init_from:
            init_weights_from(state.model, init_from)
            say(f"initialised the model from {init_from}")
        return ResumePoint()
    for line in saved.skipped:
        say(f"skipped {line}")
    if init_from:
        say(f"note: resuming {saved.path}; train.init_from={init_from} is not used")
    contents = saved.hand_over()
    check_same_model(config_from_checkpoint(contents), json.loads(files.config_json), saved.path)
    for name in STATEFUL:
        getattr(state, name).load_state_dict(contents[name])
    state.best_val_loss = float(contents.get("best_val_loss", math.inf))
    state.nonfinite_steps = int(contents.get("nonfinite_steps", 0))
    restore_rng_state(contents["rng_states"][info.rank % len(contents["rng_states"])])
    partial = EpochResult(**contents["epoch_partial"][info.rank % len(contents["epoch_partial"])])
    say(f"resumed from {saved.path}: epoch {contents['epoch']}, step {contents['step']}")
    return ResumePoint(contents["epoch"], contents["step"], partial)


def resume_from_example(state: TrainingState, folder: str, info: DistInfo, say=print) -> ResumePoint:
    """Continue a physicsnemo checkpoint (model, optimizer, scaler, scheduler, epoch); RNG states start afresh."""
    example = load_example_checkpoint(folder, map_location=info.device)
    init_weights_from(state.model, example.model_path)
    for note in restore_example_states(example, state.optimizer, state.scheduler, state.scaler):
        say(f"note: {note}")
    say(f"resumed from {example.model_path.parent} (physicsnemo checkpoint of epoch index {example.index}): "
        f"epoch {example.next_epoch}")
    return ResumePoint(example.next_epoch)


# ---- the checkpoint files: named by position, each with its digest; the newest good one wins

def checkpoint_folder(output_dir: str | Path) -> Path:
    """Where a run's checkpoints and models live."""
    return Path(output_dir) / "checkpoints"


def model_file_paths(output_dir: str | Path) -> dict[str, Path]:
    """Where a run's last and best models (physicsnemo .mdlus) and the best model's record live."""
    folder = checkpoint_folder(output_dir)
    return {"last": folder / LAST_MODEL_NAME, "best": folder / BEST_MODEL_NAME,
            "best_record": folder / "model_best.json"}


def checkpoint_position(path: Path) -> tuple[int, int]:
    """(epoch, step) of a checkpoint by its name; (0, -1), before any, for the legacy ``checkpoint.pt``."""
    match = _CHECKPOINT_PATTERN.match(path.name)
    return (int(match.group(1)), int(match.group(2))) if match else (0, -1)


def checkpoints_newest_first(folder: str | Path) -> list[Path]:
    """The checkpoint files of ``folder`` (by name), newest first; a legacy ``checkpoint.pt`` last."""
    folder = Path(folder)
    named = [p for p in folder.glob("checkpoint-e*-s*.pt") if _CHECKPOINT_PATTERN.match(p.name)]
    legacy = [folder / LEGACY_CHECKPOINT] if (folder / LEGACY_CHECKPOINT).is_file() else []
    return sorted(named, key=checkpoint_position, reverse=True) + legacy


def newest_checkpoint(output_dir: str | Path) -> Path:
    """The newest checkpoint of the run writing to ``output_dir`` (by name, unchecked)."""
    found = checkpoints_newest_first(checkpoint_folder(output_dir))
    if not found:
        raise FileNotFoundError(f"{checkpoint_folder(output_dir)}: no checkpoint")
    return found[0]


def load_checkpoint(path: str | Path, map_location: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint at ``path``, its digest, format, keys, position and finite weights checked."""
    path = Path(path)
    data = read_checked(path)
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or foreign files
        raise DamagedFileError(f"{path}: not a readable training checkpoint ({error})") from error
    if not isinstance(state, dict) or CHECKPOINT_KEYS - set(state):
        raise DamagedFileError(f"{path}: checkpoint lacks {sorted(CHECKPOINT_KEYS - set(state or {}))}")
    if _CHECKPOINT_PATTERN.match(path.name) and (state["epoch"], state["step"]) != checkpoint_position(path):
        raise DamagedFileError(f"{path}: holds epoch {state['epoch']}, step {state['step']}, not its name's")
    bad = nonfinite_tensors(state["model"])
    if bad:
        raise DamagedFileError(f"{path}: its model weights are not finite ({', '.join(bad[:3])})")
    return state


def config_from_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """The resolved config stored in a checkpoint, as a plain dict."""
    return json.loads(state["config"])


@dataclass
class GoodCheckpoint:
    """The newest checkpoint of a folder that passed its checks, its contents, and a line per newer one skipped."""

    path: Path
    state: dict[str, Any] | None = field(repr=False)
    skipped: tuple[str, ...] = ()

    def hand_over(self) -> dict[str, Any]:
        """The contents, once: this object keeps no copy of the model and optimizer for the whole run."""
        if self.state is None:
            raise ValueError(f"{self.path}: its contents were handed over already")
        state, self.state = self.state, None
        return state


class NoGoodCheckpointError(ValueError):
    """A folder with checkpoints of which none passes its checks: training refuses to start."""


def last_good_checkpoint(folder: str | Path, map_location: torch.device | str = "cpu") -> GoodCheckpoint | None:
    """The newest checkpoint ``load_checkpoint`` accepts, None without any; NoGoodCheckpointError when none passes."""
    folder, skipped = Path(folder), []
    for path in checkpoints_newest_first(folder):
        try:
            return GoodCheckpoint(path, load_checkpoint(path, map_location), tuple(skipped))
        except (ValueError, OSError) as error:
            skipped.append(one_line(error))
    if skipped:
        reasons = "; ".join(line.replace(f"{folder}/", "") for line in skipped)
        raise NoGoodCheckpointError(f"{folder}: no checkpoint passes its checks ({reasons}); nothing was "
                                    "written or removed: move the folder away to train afresh")
    return None


def agreed_checkpoint(folder: str | Path) -> GoodCheckpoint | None:
    """Collective ``last_good_checkpoint``: every rank raises the same error if one failed or the ranks disagree."""
    found, error = None, None
    try:
        found = last_good_checkpoint(folder)
    except (ValueError, OSError) as failed:
        error = failed
    outcomes = distributed.gather_objects({"error": None if error is None else one_line(error),
                                           "name": None if found is None else found.path.name})
    if error is not None:
        raise error
    errors = [o["error"] for o in outcomes if o["error"] is not None]
    if errors:
        raise NoGoodCheckpointError(errors[0])
    names = [o["name"] for o in outcomes]
    if len(set(names)) > 1:
        raise NoGoodCheckpointError(f"{folder}: the ranks found different checkpoints to resume ({names}): "
                                    "every rank must see the same folder")
    return found


def remove_older_checkpoints(newest: Path, keep: int) -> list[Path]:
    """After ``newest`` is checked: keep the ``keep - 1`` newest older checkpoints that pass their digest check, remove
    the rest, stale temporaries and orphan digests; newer-named (damaged) ones stay. What was removed."""
    folder, position, kept, removed = newest.parent, checkpoint_position(newest), 0, []
    for path in checkpoints_newest_first(folder):
        if path == newest or checkpoint_position(path) > position:
            continue
        if kept < keep - 1 and _passes(path):
            kept += 1
            continue
        remove_checked(path)
        removed.append(path)
    remove_stale_temporaries(folder)
    for digest in folder.glob(f"*{DIGEST_SUFFIX}"):
        if not digest.with_name(digest.name.removesuffix(DIGEST_SUFFIX)).exists():
            digest.unlink(missing_ok=True)
    return removed


def _passes(path: Path) -> bool:
    try:
        check_file(path)
    except (ValueError, OSError):
        return False
    return True


# ---- RNG states

def capture_rng_state() -> dict[str, Any]:
    """This process's torch, CUDA, numpy and Python RNG states as tensors and plain values."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": str(np_kind), "keys": torch.from_numpy(np_keys.astype(np.int64)), "pos": int(np_pos),
                  "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "python": {"version": int(py_version), "internal": torch.tensor(py_internal, dtype=torch.int64),
                   "gauss_next": py_gauss}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    torch.set_rng_state(state["torch"])
    numpy_state, python_state = state["numpy"], state["python"]
    np.random.set_state((numpy_state["kind"], numpy_state["keys"].numpy().astype(np.uint32), numpy_state["pos"],
                         numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    random.setstate((python_state["version"], tuple(python_state["internal"].tolist()), python_state["gauss_next"]))
    if torch.cuda.is_available():  # on the devices there are now
        for device, cuda_state in enumerate(state.get("cuda", [])[:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, device)
