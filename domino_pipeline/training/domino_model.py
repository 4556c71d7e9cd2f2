"""DoMINO from the config: the model type, the model, the check that the data fits it, and its optimisation from
``train:`` (AdamW, the per-epoch schedule, mixed precision, DDP). physicsnemo is imported inside the functions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from domino_pipeline.configuration.config import TrainConfig
from domino_pipeline.loading.items import MODEL_TYPES
from domino_pipeline.training.distributed import DistInfo

INPUT_FEATURES = 3      # x, y, z of every point
GLOBAL_FEATURES = 2     # stream velocity and air density (global_params_values)
DEFAULT_OUTPUTS = {"volume": 5, "surface": 4}  # DrivAerML: U, p, nut | p, wall shear
# Model parameters whose value must equal the data's: (model key, data key, config key of the data)
DATA_BOUND_PARAMETERS = (
    ("interp_res", "interp_res", "geometry.interp_res"),
    ("num_neighbors_surface", "num_neighbors_surface", "geometry.num_neighbors_surface"),
)
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


def resolve_model_type(model_type: str, model_section: Mapping[str, Any]) -> str:
    """The model type, by the top-level ``model_type`` alone; a different ``model.model_type`` is an error."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, not {model_type!r}")
    inner = model_section["model_type"] if "model_type" in model_section else model_type
    if inner != model_type:
        raise ValueError(f"model.model_type={inner!r} conflicts with model_type={model_type!r}: the top-level "
                         f"model_type decides what the data and the model hold; set model_type={inner} instead "
                         "(model.model_type follows it)")
    return model_type


def model_parameters(section: Mapping[str, Any], defaults: Mapping[str, Any], where: str = "model") -> dict[str, Any]:
    """The `model:` section checked key by key against DoMINO's DEFAULT_MODEL_PARAMS (missing: default)."""
    unknown = sorted(set(section) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(defaults)}")
    return dict(defaults) | {key: model_parameters(value, defaults[key], f"{where}.{key}")
                             if isinstance(defaults[key], dict) else value for key, value in section.items()}


def resolved_parameters(section: Mapping[str, Any]) -> dict[str, Any]:
    """DoMINO's DEFAULT_MODEL_PARAMS with the `model:` section applied (plain JSON values)."""
    from physicsnemo.models.domino.config import DEFAULT_MODEL_PARAMS

    return model_parameters(section, json.loads(json.dumps(DEFAULT_MODEL_PARAMS)))


def build_model(model_type: str, section: Mapping[str, Any], device: torch.device,
                outputs: Mapping[str, int] | None = None) -> torch.nn.Module:
    """DoMINO with 3 input features, 2 global parameters and the outputs the model type asks for (``outputs``)."""
    model_type = resolve_model_type(model_type, section)  # before importing physicsnemo's models (slow to import)
    from physicsnemo.models.domino import DoMINO
    from physicsnemo.models.domino.config import Config

    outputs = {**DEFAULT_OUTPUTS, **(outputs or {})}
    model = DoMINO(input_features=INPUT_FEATURES,
                   output_features_vol=outputs["volume"] if model_type in ("volume", "combined") else None,
                   output_features_surf=outputs["surface"] if model_type in ("surface", "combined") else None,
                   global_features=GLOBAL_FEATURES, model_parameters=Config(resolved_parameters(section)))
    return model.to(device)


def check_data_fits_model(data_settings: Mapping[str, Any], parameters: Mapping[str, Any], data_source: str) -> None:
    """Refuse data whose grid resolution or neighbour count differs from the model's; the error names both keys."""
    values = [(config_key, model_key, _plain(data_settings.get(data_key)), _plain(parameters.get(model_key)))
              for model_key, data_key, config_key in DATA_BOUND_PARAMETERS]
    problems = [f"{data_source} has {config_key}={data} but the model has model.{model_key}={model}"
                for config_key, model_key, data, model in values
                if data is not None and model is not None and data != model]
    if problems:
        raise ValueError("the data does not fit the model: " + "; ".join(problems)
                         + ". Set the model's value to the data's, or rebuild the data with the model's")


def _plain(value: Any) -> Any:
    """Lists for tuples and ListConfigs, so that values from a manifest, a config and a model compare."""
    if isinstance(value, (str, Mapping)) or not hasattr(value, "__iter__"):
        return value
    return [_plain(v) for v in value]


# ---- the optimisation

def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters."""
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """Per-epoch learning-rate schedule: cosine to min_lr over all epochs, or step decay."""
    if config.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs, eta_min=config.min_lr)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=config.step_size, gamma=config.gamma)


def amp_dtype(config: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype: ``train.amp`` on CUDA, None (full precision) elsewhere."""
    return AMP_DTYPES[config.amp] if device.type == "cuda" else None


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """A gradient scaler, active for fp16 only."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def wrap_ddp(model: torch.nn.Module, model_type: str, info: DistInfo) -> torch.nn.Module:
    """DDP across ranks, looking for unused parameters: a one-part model leaves a geometry branch without gradients."""
    if not info.is_distributed:
        return model
    device_ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=model_type != "combined")
