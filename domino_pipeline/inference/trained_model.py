"""A trained DoMINO for prediction, from a physicsnemo ``.mdlus`` (rebuilt from its own arguments) or a checkpoint (from
its resolved config), with its resolved parameters; the file is checked first, a damaged one never loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from domino_pipeline.training import checkpointing, model_files
from domino_pipeline.training.domino_model import build_model, resolved_parameters
from domino_pipeline.configuration.variables import column_names


def load_trained_model(path: str | Path, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    """(model in eval mode on ``device``, its resolved DoMINO parameters)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file (train.py writes checkpoints/model_best.mdlus when it "
                                "validates, checkpoints/model_last.mdlus and checkpoint-e<epoch>-s<step>.pt always)")
    if path.suffix == ".mdlus":
        model = model_files.load_model_file(path, device)  # checked first
        return model, dict(model_files.read_model_args(path)["__args__"]["model_parameters"])
    state = checkpointing.load_checkpoint(path)
    config = checkpointing.config_from_checkpoint(state)
    widths = {part: len(column_names(config["variables"][part])) for part in ("surface", "volume")}
    model = build_model(config["model_type"], config["model"], device, widths)
    model.load_state_dict(state["model"])
    return model.eval(), resolved_parameters(config["model"])
