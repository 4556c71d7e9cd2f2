"""Training checkpoints: save atomically, find the latest, load with `weights_only=True`.

A checkpoint is a dict of tensors and plain Python values only, so that `torch.load(...,
weights_only=True)` reads it without executing anything:
    model, optimizer, scheduler, scaler   state dicts
    epoch                                 the epoch in progress (1-based)
    step                                  batches of that epoch already done (0: epoch not started)
    epoch_partial                         {"loss_sum", "batches"} of the unfinished epoch
    rng_states                            one entry per rank (see `capture_rng_state`)
    config                                the resolved Hydra config as a JSON string
"""

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"


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
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
