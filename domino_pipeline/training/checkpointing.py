"""Training checkpoints: when and what a run saves, how it resumes, and the files themselves
(``TrainingState`` what a step changes, ``CheckpointFiles`` where it goes). The files are
described in docs/configuration.md ("Checkpoints") and docs/example_keys.md.
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domino_pipeline.training import distributed
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.run_log import EpochResult

CHECKPOINT_NAME = "checkpoint.pt"
LAST_MODEL_NAME = "model_last.mdlus"
BEST_MODEL_NAME = "model_best.mdlus"
# The models a .mdlus may name for this project to rebuild: DoMINO from physicsnemo, nothing else.
MODEL_CLASSES = {("DoMINO", "physicsnemo.models.domino.model")}


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


@dataclass(frozen=True)
class CheckpointFiles:
    """Where a run's checkpoint and models go, and the resolved config they record."""

    checkpoint: Path
    models: dict[str, Path] = field(repr=False)  # last, best (physicsnemo .mdlus) and best_record (JSON)
    config_json: str = field(repr=False)

    @classmethod
    def under(cls, output_dir: Path, config: dict[str, Any]) -> CheckpointFiles:
        """The files of a run writing to ``output_dir`` with the resolved ``config``."""
        return cls(checkpoint_path(output_dir), model_file_paths(output_dir), json.dumps(config))


def save_checkpoint(state: TrainingState, files: CheckpointFiles, info: DistInfo, *, epoch: int, step: int,
                    partial: EpochResult) -> None:
    """Collective: gather every rank's RNG state and partial sums, rank 0 writes the checkpoint
    (``epoch`` to run next, ``step`` batches of it done) and the last model, all wait."""
    rng_states = distributed.gather_objects(capture_rng_state())
    partials = distributed.gather_objects(
        {"loss_sum": partial.loss_sum, "batches": partial.batches, "term_sums": partial.term_sums})
    if info.is_main:
        write_checkpoint(files.checkpoint, {
            "model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(),
            "scheduler": state.scheduler.state_dict(), "scaler": state.scaler.state_dict(),
            "epoch": epoch, "step": step, "epoch_partial": partials, "rng_states": rng_states,
            "config": files.config_json, "best_val_loss": state.best_val_loss,
        })
        save_model_file(state.model, files.models["last"])
        if step == 0 and epoch >= 2:  # an epoch's end: physicsnemo's pair too, for its load_checkpoint
            states = {"optimizer": state.optimizer.state_dict(), "scheduler": state.scheduler.state_dict(),
                      "scaler": state.scaler.state_dict()}
            save_example_checkpoint(files.checkpoint.parent, files.models["last"], states, index=epoch - 2)
    distributed.barrier()


def keep_best(state: TrainingState, files: CheckpointFiles, info: DistInfo, epoch: int, val_loss: float) -> None:
    """Rank 0 saves the model as the best one when the validation loss is the lowest so far."""
    if not val_loss < state.best_val_loss:
        return
    state.best_val_loss = val_loss
    if info.is_main:
        save_model_file(state.model, files.models["best"])
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


def resume(state: TrainingState, files: CheckpointFiles, info: DistInfo, *, init_from: str | None,
           resume_from: str | None = None, say=print) -> ResumePoint:
    """Restore the latest checkpoint if there is one, else continue the physicsnemo checkpoint folder
    ``resume_from``, else start from ``init_from`` (a .mdlus) when given; ``say`` reports which."""
    saved = load_checkpoint(files.checkpoint)
    if saved is None and resume_from:
        return resume_from_example(state, resume_from, info, say)
    if saved is None:
        if init_from:
            init_weights_from(state.model, init_from)
            say(f"initialised the model from {init_from}")
        return ResumePoint()
    if init_from:
        say(f"note: resuming {files.checkpoint}; train.init_from={init_from} is not used")
    check_same_model(config_from_checkpoint(saved), json.loads(files.config_json), files.checkpoint)
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    state.scheduler.load_state_dict(saved["scheduler"])
    state.scaler.load_state_dict(saved["scaler"])
    state.best_val_loss = float(saved.get("best_val_loss", math.inf))
    restore_rng_state(saved["rng_states"][info.rank % len(saved["rng_states"])])
    partial = EpochResult(**saved["epoch_partial"][info.rank % len(saved["epoch_partial"])])
    say(f"resumed from {files.checkpoint}: epoch {saved['epoch']}, step {saved['step']}")
    return ResumePoint(saved["epoch"], saved["step"], partial)


def resume_from_example(state: TrainingState, folder: str, info: DistInfo, say=print) -> ResumePoint:
    """Continue a physicsnemo checkpoint (the DoMINO example's): model, optimizer, scaler, scheduler
    and epoch; RNG states and the best validation loss start afresh (not in that layout)."""
    example = load_example_checkpoint(folder, map_location=info.device)
    init_weights_from(state.model, example.model_path)
    for note in restore_example_states(example, state.optimizer, state.scheduler, state.scaler):
        say(f"note: {note}")
    say(f"resumed from {example.model_path.parent} (physicsnemo checkpoint of epoch index {example.index}): "
        f"epoch {example.next_epoch}")
    return ResumePoint(example.next_epoch)


# ---- the files: checkpoints, RNG states, models (.mdlus), physicsnemo's checkpoint pairs


def capture_rng_state() -> dict[str, Any]:
    """This process's torch, CUDA, numpy and Python RNG states as tensors and plain values."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": str(np_kind),
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = state["python"]
    random.setstate(
        (python_state["version"], tuple(python_state["internal"].tolist()), python_state["gauss_next"])
    )
    restore_cuda_rng_states(state.get("cuda", []))


def restore_cuda_rng_states(states: list[torch.Tensor]) -> int:
    """Restore the saved per-device CUDA generator states on the devices that exist now (others
    skipped, new ones fresh), so a checkpoint resumes with another number of GPUs; return how many."""
    if not torch.cuda.is_available():
        return 0
    restored = min(len(states), torch.cuda.device_count())
    for device in range(restored):
        torch.cuda.set_rng_state(states[device], device)
    return restored


def checkpoint_path(output_dir: str | Path) -> Path:
    """Where the latest checkpoint of a run lives."""
    return Path(output_dir) / "checkpoints" / CHECKPOINT_NAME


def write_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(state, temporary)
    os.replace(temporary, path)


def load_checkpoint(path: Path, map_location: torch.device | str = "cpu") -> dict[str, Any] | None:
    """The checkpoint at `path`, or None when there is none yet; refuses a file that is not one."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or foreign files
        raise ValueError(f"{path}: not a readable training checkpoint ({error})") from error
    missing = {"model", "optimizer", "scheduler", "scaler", "epoch", "step", "rng_states", "config"} - set(state)
    if missing:
        raise ValueError(f"{path}: checkpoint lacks {sorted(missing)}")
    return state


def config_from_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """The resolved config stored in a checkpoint, as a plain dict."""
    return json.loads(state["config"])


def model_file_paths(output_dir: str | Path) -> dict[str, Path]:
    """Where a run's last and best models (physicsnemo .mdlus) and the best model's record live."""
    folder = Path(output_dir) / "checkpoints"
    return {"last": folder / LAST_MODEL_NAME, "best": folder / BEST_MODEL_NAME,
            "best_record": folder / "model_best.json"}


def save_model_file(model: torch.nn.Module, path: Path) -> None:
    """`Module.save` (physicsnemo's .mdlus) to a temporary name beside `path`, then rename it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp{os.getpid()}.mdlus")
    model.save(str(temporary))
    os.replace(temporary, path)


def read_model_args(path: str | Path) -> dict[str, Any]:
    """The constructor record (`args.json`) of a .mdlus file, read from the zip without loading anything."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    try:
        with zipfile.ZipFile(path) as archive:
            args = json.loads(archive.read("args.json"))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a physicsnemo .mdlus model file (zip with args.json): {error}") from error
    if not {"__name__", "__module__", "__args__"} <= set(args):
        raise ValueError(f"{path}: args.json lacks __name__, __module__ or __args__")
    return args


def _check_model_class(args: dict[str, Any], path: Path) -> None:
    if (args["__name__"], args["__module__"]) not in MODEL_CLASSES:
        raise ValueError(f"{path}: holds a {args['__module__']}.{args['__name__']}; this project loads "
                         f"only {sorted(MODEL_CLASSES)}")


def differing_args(expected: dict[str, Any], found: dict[str, Any], prefix: str = "") -> list[str]:
    """`key: expected X, file Y` for each constructor argument (nested keys dotted) that differs."""
    differences = []
    for key in sorted(set(expected) | set(found)):
        mine, theirs = expected.get(key), found.get(key)
        if isinstance(mine, dict) and isinstance(theirs, dict):
            differences += differing_args(mine, theirs, f"{prefix}{key}.")
        elif json.loads(json.dumps(mine)) != json.loads(json.dumps(theirs)):
            differences.append(f"{prefix}{key}: this config {mine!r}, the file {theirs!r}")
    return differences


def init_weights_from(model: torch.nn.Module, path: str | Path) -> None:
    """Load the weights of a physicsnemo .mdlus into ``model`` (weights_only), after checking that its
    DoMINO was built with the same constructor arguments (the error lists every difference)."""
    path = Path(path)
    args = read_model_args(path)
    _check_model_class(args, path)
    differences = differing_args(model._args["__args__"], args["__args__"])
    if differences:
        raise ValueError(f"{path}: the model in this file differs from the configured one:\n  "
                         + "\n  ".join(differences))
    model.load(str(path), map_location=next(model.parameters()).device)


def load_model_file(path: str | Path, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The DoMINO of a .mdlus rebuilt from its own arguments and weights, on `device`, in eval mode."""
    from physicsnemo.models.domino import DoMINO

    path = Path(path)
    _check_model_class(read_model_args(path), path)
    return DoMINO.from_checkpoint(str(path)).to(device).eval()


# physicsnemo's save_checkpoint names: "<class name>.<model parallel rank>.<index>.mdlus" and
# "checkpoint.<rank>.<index>.pt"; one process writes rank 0.
EXAMPLE_STATE = "checkpoint.0.{index}.pt"
EXAMPLE_MODEL = "DoMINO.0.{index}.mdlus"
_EXAMPLE_STATE_PATTERN = re.compile(r"^checkpoint\.0\.(\d+)\.pt$")
EXAMPLE_STATE_KEYS = ("optimizer_state_dict", "scheduler_state_dict", "scaler_state_dict")


def save_example_checkpoint(folder: Path, model_file: Path, states: dict[str, Any], index: int) -> None:
    """Write physicsnemo's pair for finished epoch ``index`` into ``folder`` (``DoMINO.0.<index>.mdlus``
    linked to ``model_file``, ``checkpoint.0.<index>.pt`` of ``states``); remove the older pairs."""
    model_path = folder / EXAMPLE_MODEL.format(index=index)
    temporary = model_path.with_name(f".{model_path.stem}.tmp{os.getpid()}.mdlus")
    try:
        os.link(model_file, temporary)
    except OSError:
        shutil.copyfile(model_file, temporary)
    os.replace(temporary, model_path)
    state = {f"{name}_state_dict": states[name] for name in ("optimizer", "scheduler", "scaler")} | {"epoch": index}
    write_checkpoint(folder / EXAMPLE_STATE.format(index=index), state)
    for older in example_indices(folder):
        if older != index:
            (folder / EXAMPLE_STATE.format(index=older)).unlink(missing_ok=True)
            (folder / EXAMPLE_MODEL.format(index=older)).unlink(missing_ok=True)


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
    """The latest ``checkpoint.0.<e>.pt`` / ``DoMINO.0.<e>.mdlus`` pair of ``folder``, read with
    ``weights_only`` (MultiStepLR's milestone Counter allowed); errors name the folder and the file."""
    folder = Path(folder)
    indices = example_indices(folder)
    if not indices:
        raise FileNotFoundError(f"{folder}: no physicsnemo checkpoint (checkpoint.0.<epoch>.pt and "
                                "DoMINO.0.<epoch>.mdlus, as save_checkpoint writes them)")
    index = indices[-1]
    model_path = folder / EXAMPLE_MODEL.format(index=index)
    if not model_path.is_file():
        raise FileNotFoundError(f"{model_path}: missing; {EXAMPLE_STATE.format(index=index)} has no model beside it")
    path = folder / EXAMPLE_STATE.format(index=index)
    try:
        with torch.serialization.safe_globals([collections.Counter]):
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or foreign files
        raise ValueError(f"{path}: not a readable physicsnemo training checkpoint ({error})") from error
    if "optimizer_state_dict" not in state:
        raise ValueError(f"{path}: no optimizer_state_dict; keys {sorted(state)}")
    if "epoch" in state and int(state["epoch"]) != index:
        raise ValueError(f"{path}: its epoch {state['epoch']} is not the {index} of its name")
    states = {key.removesuffix("_state_dict"): state[key] for key in EXAMPLE_STATE_KEYS if key in state}
    return ExampleCheckpoint(index=index, model_path=model_path, states=states)


def restore_example_states(checkpoint: ExampleCheckpoint, optimizer: torch.optim.Optimizer,
                           scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler) -> list[str]:
    """Load a physicsnemo checkpoint's optimizer, scaler and scheduler states; the notes to print (a
    scheduler of another kind is set to the resumed epoch instead)."""
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
