"""A training step whose loss or gradient is not finite: the test, and the one line naming it (epoch, step, each rank's
loss, gradient norm and batch runs), the same on every rank. Training stops there (``NonFiniteLossError``) unless
``train.max_nonfinite_steps`` allows skipping it (docs/checkpoints.md)."""

from __future__ import annotations

import math
from typing import Any


class NonFiniteLossError(ValueError):
    """Training stopped at a step whose loss or gradient was not finite."""


def step_is_finite(loss: float, grad_norm: float, scaled: bool) -> bool:
    """Whether a step may be taken: loss finite, gradient norm too unless fp16's scaler (``scaled``) skips it."""
    return math.isfinite(loss) and (scaled or math.isfinite(grad_norm))


def nonfinite_line(epoch: int, step: int, ranks: list[dict[str, Any]]) -> str:
    """The line naming a non-finite step from every rank's ``{"loss", "grad_norm", "runs"}``, in rank order."""
    bad = [rank for rank, r in enumerate(ranks) if not math.isfinite(r["loss"])]
    what = "the loss is not finite" if bad else "the gradient is not finite"
    if bad and len(ranks) > 1:
        what += f" on rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}"
    norms = ", ".join(sorted({f"{r['grad_norm']:.6g}" for r in ranks}))  # DDP: one norm, the same on every rank
    if len(ranks) == 1:
        return (f"epoch {epoch}, step {step}: {what} (loss {ranks[0]['loss']:.6g}, gradient norm {norms}); "
                f"its batch: {', '.join(ranks[0]['runs'])}")
    losses = ", ".join(f"{r['loss']:.6g}" for r in ranks)
    batch = "; ".join(f"rank {rank} {', '.join(r['runs'])}" for rank, r in enumerate(ranks))
    return (f"epoch {epoch}, step {step}: {what} (losses by rank {losses}; gradient norm {norms}); "
            f"its batches: {batch}")
