"""Training checkpoints: save atomically, find the latest, load with `weights_only=True`; and the
model alone in physicsnemo's own format (`.mdlus`), the last and the best by validation loss.

A checkpoint is a dict of tensors and plain Python values only, so that `torch.load(...,
weights_only=True)` reads it without executing anything:
    model, optimizer, scheduler, scaler   state dicts
    epoch                                 the epoch in progress (1-based)
    step                                  batches of that epoch already done (0: epoch not started)
    epoch_partial                         {"loss_sum", "batches"} of the unfinished epoch
    rng_states                            one entry per rank (see `capture_rng_state`); restored
                                          whatever the number of ranks and GPUs now
    config                                the resolved Hydra config as a JSON string
    best_val_loss                         the lowest validation loss so far (inf before any)

Beside it, `save_model_file` writes the bare model with physicsnemo's `Module.save`:
`model_last.mdlus` at every checkpoint and `model_best.mdlus` whenever the validation loss
improves (with `model_best.json`: its epoch and loss). Anyone loads them with
`physicsnemo.Module.from_checkpoint(path)`; `train.init_from` starts training from one.
"""

import json
import os
import random
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"
LAST_MODEL_NAME = "model_last.mdlus"
BEST_MODEL_NAME = "model_best.mdlus"
# The models a .mdlus may name for this project to rebuild: DoMINO from physicsnemo, nothing else.
MODEL_CLASSES = {("DoMINO", "physicsnemo.models.domino.model")}


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
    """Restore the saved per-device CUDA generator states on the devices that exist now; return
    how many were restored. A checkpoint saved with more (or fewer) visible GPUs than now still
    resumes: devices beyond the visible ones are skipped, new ones keep their fresh state."""
    if not torch.cuda.is_available():
        return 0
    restored = min(len(states), torch.cuda.device_count())
    for device in range(restored):
        torch.cuda.set_rng_state(states[device], device)
    return restored


def checkpoint_path(output_dir: str | Path) -> Path:
    """Where the latest checkpoint of a run lives."""
    return Path(output_dir) / "checkpoints" / CHECKPOINT_NAME


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
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
    """`Module.save` (physicsnemo's .mdlus: model.pt, args.json, metadata.json in a zip) to a
    temporary name beside `path`, then rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp{os.getpid()}.mdlus")
    model.save(str(temporary))
    os.replace(temporary, path)


def read_model_args(path: str | Path) -> dict[str, Any]:
    """The constructor record (`args.json`: `__name__`, `__module__`, `__args__`) of a .mdlus file,
    read as JSON from the zip without loading anything else."""
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
    """Load the weights of a physicsnemo .mdlus (`Module.save`, this project's or anyone's) into
    `model`, after checking that the file's DoMINO was built with the same constructor arguments
    (the error lists every difference). The weights are read with torch.load's weights_only."""
    path = Path(path)
    args = read_model_args(path)
    _check_model_class(args, path)
    differences = differing_args(model._args["__args__"], args["__args__"])
    if differences:
        raise ValueError(f"{path}: the model in this file differs from the configured one:\n  "
                         + "\n  ".join(differences))
    model.load(str(path), map_location=next(model.parameters()).device)


def load_model_file(path: str | Path, device: torch.device | str = "cpu") -> torch.nn.Module:
    """Rebuild the DoMINO of a .mdlus from its own constructor arguments and weights
    (`DoMINO.from_checkpoint`), on `device`, in eval mode. Only DoMINO files are accepted."""
    from physicsnemo.models.domino import DoMINO

    path = Path(path)
    _check_model_class(read_model_args(path), path)
    return DoMINO.from_checkpoint(str(path)).to(device).eval()
