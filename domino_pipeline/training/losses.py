"""DoMINO's training losses, as physicsnemo's DoMINO example defines them, chosen by config
(docs/configuration.md, "Losses")."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from domino_pipeline.configuration.config import LossConfig


def volume_loss(prediction: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """(B, N, C): ``mse`` mean squared error; ``rmse`` mean over C of the relative L2 error."""
    squared = (prediction - target) ** 2
    if loss_type == "mse":
        return squared.mean()
    return torch.sqrt(squared.sum(dim=(0, 1)) / (target**2).sum(dim=(0, 1))).mean()


def surface_loss(prediction: torch.Tensor, target: torch.Tensor, loss_type: str) -> torch.Tensor:
    """(B, N, C): the mean over variables of each one's mean squared error, divided by its target's mean square for
    ``rmse`` (the example's ``loss_fn_surface``)."""
    error = ((prediction - target) ** 2).mean(dim=(0, 1))
    return (error if loss_type == "mse" else error / (target**2).mean(dim=(0, 1))).mean()


def area_weighted_surface_loss(prediction: torch.Tensor, target: torch.Tensor, normals: torch.Tensor,
                               areas: torch.Tensor, area_scaling_factor: float, loss_type: str) -> torch.Tensor:
    """The example's ``loss_fn_area``: ``surface_loss`` of fields times area (pressure also times n_x)."""
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
    """The example's ``integral_loss_fn``: squared error of the drag (x) plus lift (z) proxies, batch mean."""
    total = prediction.new_zeros(())
    for axis in (0, 2):
        predicted = _force_proxy(prediction, normals, areas, stream_velocity, axis)
        true = _force_proxy(target, normals, areas, stream_velocity, axis)
        total = total + ((predicted - true) ** 2).mean()
    return total


def loss_terms(predictions: Mapping[str, torch.Tensor], batch: Mapping[str, torch.Tensor],
               config: LossConfig) -> dict[str, torch.Tensor]:
    """The unweighted terms of positive weight, for the (scaled) targets the model predicts."""
    parts = tuple(key.removesuffix("_fields") for key in predictions)
    surface, target = predictions.get("surface_fields"), batch.get("surface_fields")
    normals, areas = batch.get("surface_normals"), batch.get("surface_areas")
    term_of = {
        "volume": lambda: volume_loss(predictions["volume_fields"], batch["volume_fields"], config.type),
        "surface": lambda: surface_loss(surface, target, config.type),
        "surface_area": lambda: area_weighted_surface_loss(surface, target, normals, areas, config.area_scaling_factor,
                                                           config.type),
        "integral": lambda: integral_loss(surface, target, normals, areas, batch["global_params_values"][:, 0, 0]),
    }
    return {term: term_of[term]() for term in config.active_terms(parts)}


def total_loss(terms: Mapping[str, torch.Tensor], config: LossConfig) -> torch.Tensor:
    """``sum(weight * term)``."""
    return sum(config.weight(term) * value for term, value in terms.items())
