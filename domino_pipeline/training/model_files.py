"""Models in physicsnemo's ``.mdlus`` format (a zip of ``model.pt``, ``args.json``, ``metadata.json``): written with a
digest, checked before loading (the digest, or a foreign file's zip CRC-32s), rebuilt only as a DoMINO."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import torch

from domino_pipeline.storage.file_digests import check_file, check_zip, has_digest, write_checked

# The models a .mdlus may name for this project to rebuild: DoMINO from physicsnemo, nothing else.
MODEL_CLASSES = {("DoMINO", "physicsnemo.models.domino.model")}


class NonFiniteWeightsError(ValueError):
    """A model whose weights hold NaN or infinity: never saved."""


def nonfinite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """The floating-point tensors of a state dict holding NaN or infinity (one device synchronisation)."""
    tensors = {name: value for name, value in state.items() if torch.is_tensor(value) and value.is_floating_point()}
    if not tensors:
        return []
    device = next(iter(tensors.values())).device
    finite = torch.stack([torch.isfinite(value).all().to(device) for value in tensors.values()]).tolist()
    return [name for name, ok in zip(tensors, finite) if not ok]


def require_finite_weights(model: torch.nn.Module, what: str) -> None:
    """NonFiniteWeightsError naming ``what`` and the first tensors unless every weight is finite."""
    bad = nonfinite_tensors(model.state_dict())
    if bad:
        raise NonFiniteWeightsError(f"{what}: the model's weights are not finite ({', '.join(bad[:3])}"
                                    f"{' ...' if len(bad) > 3 else ''} hold NaN or inf); nothing was saved")


def save_model_file(model: torch.nn.Module, path: Path) -> None:
    """`Module.save` (.mdlus) to ``path`` with its digest; a model with weights not finite is refused."""
    require_finite_weights(model, str(path))
    write_checked(path, lambda tmp: model.save(str(tmp)))


def check_model_file(path: str | Path) -> None:
    """Refuse a missing or damaged .mdlus: its digest where this project wrote it, else the zip's CRC-32s."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file")
    if has_digest(path):
        check_file(path)
    else:
        check_zip(path)


def read_model_args(path: str | Path) -> dict[str, Any]:
    """The constructor record (`args.json`) of a checked .mdlus file, read from the zip without loading anything."""
    path = Path(path)
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
    """Load a checked .mdlus's weights into ``model``, refusing one built with other constructor arguments."""
    path = Path(path)
    check_model_file(path)
    args = read_model_args(path)
    _check_model_class(args, path)
    differences = differing_args(model._args["__args__"], args["__args__"])
    if differences:
        raise ValueError(f"{path}: the model in this file differs from the configured one:\n  "
                         + "\n  ".join(differences))
    model.load(str(path), map_location=next(model.parameters()).device)


def load_model_file(path: str | Path, device: torch.device | str = "cpu") -> torch.nn.Module:
    """The DoMINO of a checked .mdlus rebuilt from its own arguments and weights, on `device`, in eval mode."""
    path = Path(path)
    check_model_file(path)
    _check_model_class(read_model_args(path), path)
    from physicsnemo.models.domino import DoMINO  # imported once the file is known good: it loads Warp

    return DoMINO.from_checkpoint(str(path)).to(device).eval()
