"""The DoMINO example's losses: against a hand computation, and against the example's own code
(physicsnemo examples/cfd/external_aerodynamics/domino/src/loss.py, transcribed below)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from conftest import DEFAULTS, typed_config

from domino_pipeline.training.losses import (
    area_weighted_surface_loss,
    integral_loss,
    loss_terms,
    surface_loss,
    total_loss,
    volume_loss,
)

# ---- the example's functions, as published (padding mask kept; nothing here is padded) ----


def example_loss_fn(output, target, loss_type, padded_value=-10):
    mask = abs(target - padded_value) > 1e-3
    dims = (0, 1) if loss_type == "rmse" else None
    num = torch.sum(mask * (output - target) ** 2.0, dims)
    if loss_type == "rmse":
        return torch.mean(torch.sqrt(num / torch.sum(mask * target**2.0, dims)))
    return torch.mean(num / torch.sum(mask))


def example_loss_fn_surface(output, target, loss_type):
    output_scalar, output_vector = torch.split(output, [1, 3], dim=2)
    target_scalar, target_vector = torch.split(target, [1, 3], dim=2)
    numerator = torch.mean((output_scalar - target_scalar) ** 2.0)
    vector_diff_sq = torch.mean((target_vector - output_vector) ** 2.0, (0, 1))
    if loss_type == "mse":
        masked_loss_pres, masked_loss_ws = numerator, torch.sum(vector_diff_sq)
    else:
        masked_loss_pres = numerator / torch.mean(target_scalar**2.0)
        masked_loss_ws = torch.sum(vector_diff_sq / torch.mean(target_vector**2.0, (0, 1)))
    return (masked_loss_pres + masked_loss_ws) / 4.0


def example_loss_fn_area(output, target, normals, area, area_scaling_factor, loss_type):
    area = area * area_scaling_factor
    target_scalar, target_vector = torch.split(target * area, [1, 3], dim=2)
    output_scalar, output_vector = torch.split(output * area, [1, 3], dim=2)
    normals, _ = torch.split(normals, [1, normals.shape[-1] - 1], dim=2)
    target_scalar, output_scalar = target_scalar * normals, output_scalar * normals
    loss_p = torch.mean((output_scalar - target_scalar) ** 2.0, dim=(0, 1))
    if loss_type == "rmse":
        loss_p = loss_p / torch.mean(target_scalar**2.0, dim=(0, 1))
    loss_ws = torch.mean((target_vector - output_vector) ** 2.0, (0, 1))
    if loss_type == "rmse":
        loss_ws = loss_ws / torch.mean(target_vector**2.0, (0, 1))
    return 0.25 * (loss_p + torch.sum(loss_ws))


def example_axis_loss(output, target, area, normals, stream_velocity, normal_axis, shear_column, padded_value=-10):
    mask = abs(target - padded_value) > 1e-3
    output_true = target * mask * area * stream_velocity**2.0
    output_pred = output * mask * area * stream_velocity**2.0
    pres_true = output_true[:, :, 0] * normals[:, :, normal_axis]
    pres_pred = output_pred[:, :, 0] * normals[:, :, normal_axis]
    wall_true, wall_pred = output_true[:, :, shear_column], output_pred[:, :, shear_column]
    masked_pred = torch.mean(pres_pred + wall_pred, (1))
    masked_truth = torch.mean(pres_true + wall_true, (1))
    return torch.mean((masked_pred - masked_truth) ** 2.0)


def example_integral_loss_fn(output, target, area, normals, stream_velocity):
    return (example_axis_loss(output, target, area, normals, stream_velocity, 2, -1)
            + example_axis_loss(output, target, area, normals, stream_velocity, 0, 1))


def random_surface(seed: int = 0, points: int = 50):
    """One sample (the example's broadcasting of the stream velocity holds for batch size 1)."""
    g = torch.Generator().manual_seed(seed)
    normals = torch.nn.functional.normalize(torch.randn(1, points, 3, generator=g), dim=-1)
    return (torch.randn(1, points, 4, generator=g, dtype=torch.float64),
            torch.randn(1, points, 4, generator=g, dtype=torch.float64),
            normals.double(), torch.rand(1, points, generator=g, dtype=torch.float64) * 1e-3 + 1e-5)


@pytest.mark.parametrize("loss_type", ["mse", "rmse"])
def test_every_term_equals_the_examples(loss_type):
    prediction, target, normals, areas = random_surface()
    torch.testing.assert_close(surface_loss(prediction, target, loss_type),
                               example_loss_fn_surface(prediction, target, loss_type))
    torch.testing.assert_close(area_weighted_surface_loss(prediction, target, normals, areas, 1e4, loss_type),
                               example_loss_fn_area(prediction, target, normals, areas.unsqueeze(-1), 1e4, loss_type)[0])
    volume_prediction, volume_target = prediction[..., :3] + 0.5, target[..., :3]
    torch.testing.assert_close(volume_loss(volume_prediction, volume_target, loss_type),
                               example_loss_fn(volume_prediction, volume_target, loss_type))
    velocity = torch.tensor([[38.89]], dtype=torch.float64)
    torch.testing.assert_close(integral_loss(prediction, target, normals, areas, velocity[:, 0]),
                               example_integral_loss_fn(prediction, target, areas.unsqueeze(-1), normals, velocity))


def test_terms_against_a_hand_computation():
    # two points, columns [p, tau_x, tau_y, tau_z]; the prediction is off by 1 in p and 2 in tau_x at point 0
    target = torch.tensor([[[1.0, 2.0, 0.0, 1.0], [3.0, 0.0, 1.0, 1.0]]])
    prediction = target + torch.tensor([[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    normals = torch.tensor([[[-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    areas = torch.tensor([[0.5, 2.0]])
    # per column mean squared error: p (1 + 0) / 2, tau_x (4 + 0) / 2, others 0 -> mean over 4 columns
    assert surface_loss(prediction, target, "mse").item() == pytest.approx((0.5 + 2.0) / 4)
    # relative: divided by each column's mean square of the target: p (1+9)/2 = 5, tau_x 2, tau_y 0.5, tau_z 1
    assert surface_loss(prediction, target, "rmse").item() == pytest.approx((0.5 / 5 + 2.0 / 2) / 4)
    # area weighting (factor 2): point 0 weight 1; p also times n_x = -1 -> errors p 1, tau_x 4, at one point of two
    assert area_weighted_surface_loss(prediction, target, normals, areas, 2.0, "mse").item() == pytest.approx((0.5 + 2.0) / 4)
    # volume relative L2 over three columns of the first two rows: sqrt(1/10), sqrt(4/4), 0
    assert volume_loss(prediction[..., :3], target[..., :3], "rmse").item() == pytest.approx(
        (math.sqrt(1 / 10) + 1.0 + 0.0) / 3)
    # integral, U = 2: drag proxy of point 0 differs by (1 * -1 + 2) * 0.5 * 4 = 2, mean over 2 points -> 1;
    # lift: point 0 has n_z = 0 and no tau_z error -> 0. Squared: 1.
    assert integral_loss(prediction, target, normals, areas, torch.tensor([2.0])).item() == pytest.approx(1.0)


def test_the_default_is_the_plain_mean_squared_error_and_weights_multiply():
    prediction, target, normals, areas = random_surface(1)
    batch = {"surface_fields": target, "surface_normals": normals, "surface_areas": areas,
             "volume_fields": target[..., :3], "global_params_values": torch.tensor([[[30.0], [1.2]]])}
    predictions = {"surface_fields": prediction, "volume_fields": prediction[..., :3]}
    default = DEFAULTS.loss
    terms = loss_terms(predictions, batch, default)
    assert sorted(terms) == ["surface", "volume"]
    expected = ((prediction - target) ** 2).mean() + ((prediction[..., :3] - target[..., :3]) ** 2).mean()
    torch.testing.assert_close(total_loss(terms, default), expected)

    example = replace(DEFAULTS.loss, type="mse", surface_weight=5, area_weight=5, integral_weight=100, volume_weight=0)
    terms = loss_terms(predictions, batch, example)
    assert sorted(terms) == ["integral", "surface", "surface_area"]
    torch.testing.assert_close(total_loss(terms, example),
                               5 * terms["surface"] + 5 * terms["surface_area"] + 100 * terms["integral"])
    assert example.describe() == "mse: 5 x surface + 5 x surface_area + 100 x integral (area scaling 10000)"
    # a surface-only model: the volume term is left out, not an error
    assert sorted(loss_terms({"surface_fields": prediction}, batch, default)) == ["surface"]


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="loss.type must be one of"):
        replace(DEFAULTS.loss, type="l1")
    with pytest.raises(ValueError, match="loss.area_weight must be at least 0"):
        replace(DEFAULTS.loss, area_weight=-1)
    with pytest.raises(ValueError, match=r"unknown keys \['surf_loss_scaling'\]"):
        typed_config("+loss.surf_loss_scaling=5")
    with pytest.raises(ValueError, match=r"loss terms \['surface_area'\] need 4 surface variables"):
        replace(DEFAULTS.loss, area_weight=1).check(("surface",), surface_width=1)
    with pytest.raises(ValueError, match="no term with a positive weight"):
        replace(DEFAULTS.loss, surface_weight=0).check(("surface",), surface_width=4)
