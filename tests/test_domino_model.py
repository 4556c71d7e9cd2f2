"""The model's optimisation: the learning-rate schedules, mixed precision and the gradient scaler
from the train: section."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import DEFAULTS

from domino_pipeline.training.domino_model import amp_dtype, build_optimizer, build_scheduler, grad_scaler


def _rates(config, epochs: int) -> list[float]:
    optimizer = build_optimizer(torch.nn.Linear(2, 2), config)
    scheduler = build_scheduler(optimizer, config)
    rates = []
    for _ in range(epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates + [optimizer.param_groups[0]["lr"]]


def test_cosine_ends_at_min_lr_and_step_decays_by_gamma():
    cosine = replace(DEFAULTS.train, epochs=4, lr=1.0, min_lr=0.1, scheduler="cosine")
    rates = _rates(cosine, 4)
    assert rates[0] == 1.0 and rates[-1] == pytest.approx(0.1)
    assert rates[2] == pytest.approx(0.1 + 0.9 * 0.5)  # half way: the cosine's mean
    step = replace(DEFAULTS.train, epochs=5, lr=1.0, scheduler="step", step_size=2, gamma=0.5)
    assert _rates(step, 5) == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25, 0.25])
    optimizer = build_optimizer(torch.nn.Linear(2, 2), replace(DEFAULTS.train, weight_decay=0.25))
    assert optimizer.param_groups[0]["weight_decay"] == 0.25 and isinstance(optimizer, torch.optim.AdamW)


def test_mixed_precision_on_cuda_only_and_a_scaler_for_fp16_only():
    assert amp_dtype(DEFAULTS.train, torch.device("cpu")) is None
    assert amp_dtype(DEFAULTS.train, torch.device("cuda")) == torch.bfloat16
    assert amp_dtype(replace(DEFAULTS.train, amp="none"), torch.device("cuda")) is None
    assert not grad_scaler(torch.device("cpu"), torch.bfloat16).is_enabled()
    assert not grad_scaler(torch.device("cpu"), None).is_enabled()
