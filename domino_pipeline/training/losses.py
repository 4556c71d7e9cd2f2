"""DoMINO's training losses, as physicsnemo's DoMINO example defines them, chosen by config.

The example (``examples/cfd/external_aerodynamics/domino/src/loss.py``; none of it ships in the
physicsnemo 2.2.2 package) trains with the sum of up to four terms, each computed on the *scaled*
targets (the model's output units) of the sampled points:

- ``volume``: ``mse`` the mean squared error over every point and variable; ``rmse`` the mean over
  variables of the relative L2 error ``sqrt(sum (pred - true)^2 / sum true^2)`` (sums over the
  batch and the points).
- ``surface``: the mean over variables of each variable's mean squared error; with ``rmse``,
  each divided by the mean square of its target (a relative *squared* error: the example's
  "rmse" takes no square root here). With the 4 DrivAerML columns this is exactly the example's
  ``(loss_p + sum(loss_tau)) / 4``.
- ``surface_area``: the same on fields multiplied by ``area * area_scaling_factor`` (the example's
  ``area_weighing_factor``, 10000 there), the pressure column further multiplied by the normal's
  x component, as the example does (its ``loss_fn_area``).
- ``integral``: the example's drag and lift proxies: per sample, the mean over the sampled points
  of ``(p n_x + tau_x) * area * U^2`` (lift: ``p n_z + tau_z``), predicted against true, squared
  and averaged over the batch. A proxy on scaled fields, not a physical force (no density, no
  reference area; a mean, not a sum; ``+tau`` where the force has ``-tau``): kept as the example
  has it, so that runs compare. ``U`` is the stream velocity, ``global_params_values[:, 0]``.

The total is ``sum(weight * term)`` over the terms whose weight is positive (only those are
computed and logged). The defaults (``mse``, surface 1, volume 1, the others 0) are the plain
mean squared error. The example's choice: ``loss.type=mse loss.surface_weight=5 loss.area_weight=5
loss.integral_weight=100`` (its ``surf_loss_scaling`` multiplies both surface terms in ``mse``
mode only, its ``integral_loss_scaling_factor`` the integral; its ``vol_loss_scaling`` is unused),
or ``loss.type=rmse loss.area_weight=1 loss.integral_weight=100``. This pipeline never pads
points, so the example's padding mask (value -10) is not needed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from domino_pipeline.config import LossConfig


def volume_loss(prediction: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """(B, N, C): ``mse`` mean squared error; ``rmse`` mean over C of the relative L2 error."""
    squared = (prediction - target) ** 2
    if loss_type == "mse":
        return squared.mean()
    return torch.sqrt(squared.sum(dim=(0, 1)) / (target**2).sum(dim=(0, 1))).mean()


def _per_variable(prediction: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """(C,): each variable's mean squared error, divided by its target's mean square for ``rmse``."""
    error = ((prediction - target) ** 2).mean(dim=(0, 1))
    return error if loss_type == "mse" else error / (target**2).mean(dim=(0, 1))


def surface_loss(prediction: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """(B, N, C): the mean over variables of ``_per_variable`` (the example's ``loss_fn_surface``)."""
    return _per_variable(prediction, target, loss_type).mean()


def area_weighted_surface_loss(prediction: torch.Tensor, target: torch.Tensor, normals: torch.Tensor,
                               areas: torch.Tensor, area_scaling_factor: float, loss_type: str) -> torch.Tensor:
    """The example's ``loss_fn_area``: fields (B, N, C) times area (B, N) times the scaling factor,
    column 0 (pressure) further times n_x (normals (B, N, 3)), then ``surface_loss``'s mean over
    variables of the per-variable errors."""
    weight = (areas * area_scaling_factor).unsqueeze(-1)
    scale = torch.ones_like(prediction[..., :1]).expand_as(prediction).clone()
    scale[..., 0] = normals[..., 0]
    return surface_loss(prediction * weight * scale, target * weight * scale, loss_type)


def _force_proxy(fields: torch.Tensor, normals: torch.Tensor, areas: torch.Tensor,
                 stream_velocity: torch.Tensor, axis: int) -> torch.Tensor:
    """Per sample (B,): mean over points of (p n_axis + tau_axis) * area * U^2."""
    weighted = fields * areas.unsqueeze(-1) * stream_velocity.reshape(-1, 1, 1) ** 2
    return (weighted[..., 0] * normals[..., axis] + weighted[..., 1 + axis]).mean(dim=1)


def integral_loss(prediction: torch.Tensor, target: torch.Tensor, normals: torch.Tensor, areas: torch.Tensor,
                  stream_velocity: torch.Tensor) -> torch.Tensor:
    """The example's ``integral_loss_fn``: squared error of the drag (x) plus the lift (z) proxy,
    averaged over the batch. ``stream_velocity``: (B,) or (B, 1)."""
    total = prediction.new_zeros(())
    for axis in (0, 2):
        predicted = _force_proxy(prediction, normals, areas, stream_velocity, axis)
        true = _force_proxy(target, normals, areas, stream_velocity, axis)
        total = total + ((predicted - true) ** 2).mean()
    return total


def loss_terms(predictions: Mapping[str, torch.Tensor], batch: Mapping[str, torch.Tensor],
               config: LossConfig) -> dict[str, torch.Tensor]:
    """The unweighted terms with a positive weight, for the targets the model predicts
    (``predictions``: "surface_fields" and/or "volume_fields", scaled, like the batch's)."""
    parts = tuple(key.removesuffix("_fields") for key in predictions)
    terms = {}
    for term in config.active_terms(parts):
        if term == "volume":
            terms[term] = volume_loss(predictions["volume_fields"], batch["volume_fields"], config.type)
            continue
        prediction, target = predictions["surface_fields"], batch["surface_fields"]
        if term == "surface":
            terms[term] = surface_loss(prediction, target, config.type)
        elif term == "surface_area":
            terms[term] = area_weighted_surface_loss(prediction, target, batch["surface_normals"],
                                                     batch["surface_areas"], config.area_scaling_factor, config.type)
        else:
            terms[term] = integral_loss(prediction, target, batch["surface_normals"], batch["surface_areas"],
                                        batch["global_params_values"][:, 0, 0])
    return terms


def total_loss(terms: Mapping[str, torch.Tensor], config: LossConfig) -> torch.Tensor:
    """``sum(weight * term)``."""
    return sum(config.weight(term) * value for term, value in terms.items())
