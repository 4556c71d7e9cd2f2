"""Target scaling factors: statistics against numpy over whole runs, JSON round trip, scale and
unscale."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from domino_pipeline.compute.scaling import (
    check_factors_match,
    compute_scaling_factors,
    load_scaling_factors,
    merge_statistics,
    run_statistics,
    save_scaling_factors,
    scale_fields,
    uniform_rows,
    unscale_fields,
)
from domino_pipeline.processed.runs import list_runs, load_run


@pytest.fixture(scope="module")
def runs(tiny_processed_dir):
    return list_runs(tiny_processed_dir)


def _stacked(runs, name, rows=None):
    return np.concatenate([load_run(r, [name])[name][:rows].astype(np.float64) for r in runs])


def test_factors_match_numpy_over_all_runs(runs):
    factors = compute_scaling_factors(runs, normalization="mean_std")
    for kind in ("surface", "volume"):
        ref = _stacked(runs, f"{kind}_fields")
        np.testing.assert_allclose(factors[kind]["min"], ref.min(axis=0), rtol=0, atol=0)
        np.testing.assert_allclose(factors[kind]["max"], ref.max(axis=0), rtol=0, atol=0)
        np.testing.assert_allclose(factors[kind]["mean"], ref.mean(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(factors[kind]["std"], ref.std(axis=0), rtol=1e-6, atol=1e-9)
    assert factors["normalization"] == "mean_std"
    assert factors["runs"] == ["run_1", "run_2"]


def test_volume_rows_are_drawn_uniformly_not_taken_from_the_front(tmp_path):
    """Curator output keeps the mesh's row order: rows sorted by a field here. A limited
    sample must still represent the whole run (a prefix would hold only the smallest values)."""
    rng = np.random.default_rng(0)
    volume = np.sort(rng.normal(size=(20_000, 5)).astype(np.float32), axis=0)
    surface = rng.normal(size=(50, 4)).astype(np.float32)
    np.savez(tmp_path / "run_1.npz", volume_fields=volume, surface_fields=surface,
             stl_coordinates=np.zeros((3, 3), np.float32))
    limited = compute_scaling_factors([tmp_path / "run_1.npz"], max_volume_rows_per_run=2000)
    everything = volume.astype(np.float64)
    sd_of_mean = everything.std(axis=0) / np.sqrt(2000)
    assert np.all(np.abs(np.asarray(limited["volume"]["mean"]) - everything.mean(axis=0)) < 4.5 * sd_of_mean)
    prefix = everything[:2000].mean(axis=0)
    assert np.all(np.abs(prefix - everything.mean(axis=0)) > 20 * sd_of_mean)  # the old law fails
    assert np.all(np.asarray(limited["volume"]["max"]) > np.quantile(everything, 0.99, axis=0))
    rows = uniform_rows(20_000, 2000)
    np.testing.assert_array_equal(limited["volume"]["min"], everything[rows].min(axis=0))


def test_statistics_are_the_same_in_memory_and_on_disk(runs):
    """The cache build sums the arrays it holds in memory, train.py reads them from the run:
    the same blocks, the same sums, so both give the same factors bit for bit."""
    lazy = compute_scaling_factors(runs, max_volume_rows_per_run=500)
    loaded = [load_run(r, ["surface_fields", "volume_fields"]) for r in runs]
    stats = [run_statistics(arrays, max_volume_rows=500) for arrays in loaded]
    assert merge_statistics(stats, ["run_1", "run_2"]) == lazy


def test_factors_for_other_variables_are_refused():
    variables = {"surface": [("pMeanTrim", "scalar"), ("wallShearStressMeanTrim", "vector")],
                 "volume": [("UMeanTrim", "vector"), ("pMeanTrim", "scalar"), ("nutMeanTrim", "scalar")]}
    stats = {"n": 1, "lo": [0.0] * 4, "hi": [1.0] * 4, "s1": [0.0] * 4, "s2": [0.0] * 4}
    volume = {"n": 1, "lo": [0.0] * 5, "hi": [1.0] * 5, "s1": [0.0] * 5, "s2": [0.0] * 5}
    factors = merge_statistics([{"surface": stats, "volume": volume}], ["run_1"], variables=variables)
    check_factors_match(factors, variables["surface"], variables["volume"], "here")
    with pytest.raises(ValueError, match="here: scaling factors were computed for variables"):
        check_factors_match(factors, [("CpMeanTrim", "scalar")] + variables["surface"][1:],
                            variables["volume"], "here")
    del factors["variables"]  # an older file: the column counts still have to agree
    with pytest.raises(ValueError, match="here: surface scaling factors have 4 columns; the configured"):
        check_factors_match(factors, variables["surface"][:1], variables["volume"], "here")


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
    fields = load_run(runs[0], ["surface_fields"])["surface_fields"]
    mean, std = np.asarray(factors["surface"]["mean"]), np.asarray(factors["surface"]["std"])
    np.testing.assert_allclose(scale_fields(fields, factors, "surface"), (fields - mean) / std, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="normalization"):
        load_scaling_factors(path, "unit_cube")


# ---- the DoMINO example's scaling_factors.pkl

def example_pickle(path, monkeypatch, surface=4, volume=5):
    """A file as the example's compute_statistics.py writes it: its own ``utils.ScalingFactors``
    dataclass, pickled (the class lives in a module named ``utils``, as when the example runs)."""
    import dataclasses
    import pickle
    import types

    module = types.ModuleType("utils")

    @dataclasses.dataclass
    class ScalingFactors:
        mean: dict
        std: dict
        min_val: dict
        max_val: dict
        field_keys: list

    ScalingFactors.__module__, ScalingFactors.__qualname__ = "utils", "ScalingFactors"
    module.ScalingFactors = ScalingFactors
    monkeypatch.setitem(sys.modules, "utils", module)
    rng = np.random.default_rng(0)
    stats = {name: {f"{kind}_fields": rng.normal(size=width).astype(np.float32)
                    for kind, width in (("surface", surface), ("volume", volume))}
             for name in ("mean", "std", "min_val", "max_val")}
    path.write_bytes(pickle.dumps(ScalingFactors(**stats, field_keys=["surface_fields", "volume_fields"])))
    monkeypatch.delitem(sys.modules, "utils")  # the reader must not need the example's code
    return stats


def test_the_examples_pickled_factors_need_allow_pickle_and_read_as_ours(tmp_path, monkeypatch):
    from domino_pipeline.compute.example_factors import convert

    path = tmp_path / "scaling_factors.pkl"
    stats = example_pickle(path, monkeypatch)
    with pytest.raises(ValueError, match=r"scaling_factors.pkl: a pickled scaling factors file .*data.allow_pickle=true"
                                         r".*convert\('.*scaling_factors.pkl', '.*scaling_factors.json'\)"):
        load_scaling_factors(path)
    factors = load_scaling_factors(path, "mean_std", allow_pickle=True)
    assert factors["normalization"] == "mean_std"
    for kind in ("surface", "volume"):
        for ours, theirs in (("min", "min_val"), ("max", "max_val"), ("mean", "mean"), ("std", "std")):
            np.testing.assert_allclose(factors[kind][ours], stats[theirs][f"{kind}_fields"], rtol=1e-7)
    converted = convert(path, tmp_path / "scaling_factors.json")
    assert load_scaling_factors(converted, "mean_std") == factors


def test_a_pickle_that_runs_code_is_refused_even_when_allowed(tmp_path):
    import os
    import pickle

    class Exploit:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    path = tmp_path / "scaling_factors.pkl"
    path.write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(ValueError, match="not the DoMINO example's scaling factors .*refusing to load"):
        load_scaling_factors(path, allow_pickle=True)
