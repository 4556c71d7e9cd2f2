"""Target scaling factors: statistics against numpy over whole runs, JSON round trip, scale and
unscale."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from domino_pipeline.compute.scaling import (
    compute_scaling_factors,
    load_scaling_factors,
    save_scaling_factors,
    scale_fields,
    unscale_fields,
)
from domino_pipeline.inputs.processed_run import list_runs, load_processed_run


@pytest.fixture(scope="module")
def runs(tiny_processed_dir):
    return list_runs(tiny_processed_dir)


def _stacked(runs, name, rows=None):
    return np.concatenate([load_processed_run(r, [name])[name][:rows].astype(np.float64) for r in runs])


def test_factors_match_numpy_over_all_runs(runs):
    factors = compute_scaling_factors(runs, normalization="mean_std")
    for kind in ("surface", "volume"):
        ref = _stacked(runs, f"{kind}_fields")
        np.testing.assert_allclose(factors[kind]["min"], ref.min(axis=0), rtol=0, atol=0)
        np.testing.assert_allclose(factors[kind]["max"], ref.max(axis=0), rtol=0, atol=0)
        np.testing.assert_allclose(factors[kind]["mean"], ref.mean(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(factors[kind]["std"], ref.std(axis=0), rtol=1e-6, atol=1e-9)
    assert factors["normalization"] == "mean_std"
    assert factors["runs"] == [r.name for r in runs]


def test_volume_rows_are_limited_to_a_prefix(runs):
    factors = compute_scaling_factors(runs, max_volume_rows_per_run=100)
    ref = _stacked(runs, "volume_fields", rows=100)
    np.testing.assert_allclose(factors["volume"]["max"], ref.max(axis=0))
    np.testing.assert_allclose(factors["volume"]["mean"], ref.mean(axis=0), rtol=1e-9)


def test_save_load_round_trip(runs, tmp_path):
    factors = compute_scaling_factors(runs)
    path = save_scaling_factors(tmp_path / "sub" / "factors.json", factors)
    assert load_scaling_factors(path) == json.loads(json.dumps(factors))


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_scaling_factors(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_scaling_factors(bad)
    bad.write_text(json.dumps({"normalization": "min_max", "surface": {"min": [0.0]}}))
    with pytest.raises(ValueError, match="scaling factors need 'surface'"):
        load_scaling_factors(bad)
    with pytest.raises(ValueError, match="unknown normalization 'log'"):
        compute_scaling_factors([tmp_path], normalization="log")


FACTORS = {
    "normalization": "min_max",
    "surface": {"min": [-2.0, 0.0], "max": [2.0, 10.0], "mean": [0.0, 5.0], "std": [1.0, 2.0]},
    "volume": {"min": [0.0], "max": [1.0], "mean": [0.5], "std": [0.0]},
}


def test_min_max_maps_the_range_to_minus_one_one():
    fields = np.array([[-2.0, 0.0], [2.0, 10.0], [0.0, 5.0]], dtype=np.float32)
    np.testing.assert_allclose(scale_fields(fields, FACTORS, "surface"), [[-1, -1], [1, 1], [0, 0]])


def test_mean_std_and_constant_variables():
    factors = dict(FACTORS, normalization="mean_std")
    fields = np.array([[2.0, 9.0]], dtype=np.float32)
    np.testing.assert_allclose(scale_fields(fields, factors, "surface"), [[2.0, 2.0]])
    # std 0: the variable is only shifted, never divided by zero
    np.testing.assert_allclose(scale_fields(np.array([[0.5]]), factors, "volume"), [[0.0]])


@pytest.mark.parametrize("normalization", ["min_max", "mean_std"])
def test_unscale_inverts_scale_for_numpy_and_torch(normalization):
    factors = dict(FACTORS, normalization=normalization)
    fields = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
    back = unscale_fields(scale_fields(fields, factors, "surface"), factors, "surface")
    np.testing.assert_allclose(back, fields, atol=1e-5)
    tensor = torch.from_numpy(fields)
    scaled = scale_fields(tensor, factors, "surface")
    assert isinstance(scaled, torch.Tensor) and scaled.dtype == torch.float32
    np.testing.assert_allclose(scaled.numpy(), scale_fields(fields, factors, "surface"), atol=1e-6)
    np.testing.assert_allclose(unscale_fields(scaled, factors, "surface").numpy(), fields, atol=1e-5)
    with pytest.raises(ValueError, match="unknown field kind"):
        scale_fields(fields, factors, "wall")


def test_the_configured_normalization_overrides_the_stored_one(runs, tmp_path):
    path = save_scaling_factors(tmp_path / "f.json", compute_scaling_factors(runs, normalization="min_max"))
    assert load_scaling_factors(path)["normalization"] == "min_max"
    factors = load_scaling_factors(path, "mean_std")
    assert factors["normalization"] == "mean_std"
    fields = load_processed_run(runs[0], ["surface_fields"])["surface_fields"]
    mean, std = np.asarray(factors["surface"]["mean"]), np.asarray(factors["surface"]["std"])
    np.testing.assert_allclose(scale_fields(fields, factors, "surface"), (fields - mean) / std, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="normalization"):
        load_scaling_factors(path, "unit_cube")
