"""The optimisation of a run from the ``train:`` section: AdamW, the per-epoch learning-rate
schedule, mixed precision and its gradient scaler, and DDP around the model."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from domino_pipeline.config import TrainConfig
from domino_pipeline.training.distributed import DistInfo

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


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
    """DDP across ranks. DoMINO builds both geometry branches whatever the model type, so a
    surface- or volume-only model leaves one branch without gradients: DDP must look for them."""
    if not info.is_distributed:
        return model
    device_ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=model_type != "combined")
