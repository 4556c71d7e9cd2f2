"""benchmarks/learning_baselines.py: each baseline against figures worked by hand or brute force,
and none of them reads a test body's coefficients."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import import_benchmark
from scipy.spatial.distance import cdist

COEFFICIENTS = {"a": {"cd": 1.0, "cl": 0.1}, "b": {"cd": 1.2, "cl": 0.3}, "c": {"cd": 1.6, "cl": 0.2},
                "d": {"cd": 9.0, "cl": 9.0}}


def test_the_training_mean_and_the_nearest_body_guess_from_the_training_bodies():
    baselines = import_benchmark("learning_baselines")
    assert baselines.training_mean(COEFFICIENTS, ["a", "b", "c"], ["d"]) == {"d": {"cd": pytest.approx(3.8 / 3),
                                                                                  "cl": pytest.approx(0.2)}}
    distances = np.array([[0.3, 0.1, 0.2], [0.05, 0.4, 0.3]])  # rows: test bodies d, e; columns: a, b, c
    nearest = baselines.nearest_bodies(distances, ["a", "b", "c"], ["d", "e"])
    assert nearest == {"d": "b", "e": "a"}
    assert baselines.nearest_guesses(COEFFICIENTS, nearest)["d"] == {"cd": 1.2, "cl": 0.3, "run": "b"}


def test_the_linear_fit_is_least_squares_with_a_constant():
    baselines = import_benchmark("learning_baselines")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 1))
    y = 2.0 * x[:, 0] - 1.0 + 0.1 * rng.normal(size=30)
    slope, intercept = np.polyfit(x[:, 0], y, 1)
    np.testing.assert_allclose(baselines.linear_fit_predict(x, y, np.array([[0.0], [1.5]])),
                               [intercept, intercept + 1.5 * slope], rtol=1e-10)


def test_a_regression_fits_the_training_bodies_only_and_drops_a_constant_feature():
    baselines = import_benchmark("learning_baselines")
    rng = np.random.default_rng(1)
    names = [f"run_{i}" for i in range(12)]
    features = {n: np.array([rng.uniform(1, 2), rng.uniform(3, 5), 7.0]) for n in names}  # the third is constant
    coefficients = {n: {"cd": 0.5 * f[0] - 0.2 * f[1] + 1.0, "cl": f[0] * f[1]} for n, f in features.items()}
    train, test = names[:9], names[9:]
    linear = baselines.regression_guesses(features, coefficients, train, test, "linear")
    for run in test:
        assert linear[run]["cd"] == pytest.approx(coefficients[run]["cd"], rel=1e-9)  # Cd is linear: exact
    gp = baselines.regression_guesses(features, coefficients, train, test, "gp")
    poisoned = {n: ({"cd": 100.0, "cl": -100.0} if n in test else c) for n, c in coefficients.items()}
    assert baselines.regression_guesses(features, poisoned, train, test, "gp") == gp
    assert baselines.regression_guesses(features, poisoned, train, test, "linear") == linear
    for run in test:
        assert gp[run]["cd"] == pytest.approx(coefficients[run]["cd"], rel=0.02)


def test_fields_are_carried_by_the_nearest_cell_in_box_normalised_coordinates():
    baselines = import_benchmark("learning_baselines")
    rng = np.random.default_rng(2)
    source = rng.uniform(0, 1, size=(200, 3)) * [4.0, 1.8, 1.3]
    fields = rng.normal(size=(200, 4))
    # the same body twice as long and moved: every cell meets its own copy
    np.testing.assert_array_equal(baselines.carried_fields(source, fields, source * [2.0, 1.0, 1.0] + 5.0), fields)
    target = rng.uniform(0, 1, size=(50, 3)) * [3.0, 2.0, 1.0] - 1.0
    low_s, low_t = source.min(0), target.min(0)
    scaled_s = (source - low_s) / (source.max(0) - low_s)
    scaled_t = (target - low_t) / (target.max(0) - low_t)
    expected = fields[np.argmin(cdist(scaled_t, scaled_s), axis=1)]  # brute force
    np.testing.assert_array_equal(baselines.carried_fields(source, fields, target), expected)


def test_the_training_mean_field_weights_every_cell_by_its_area():
    baselines = import_benchmark("learning_baselines")
    fields = [np.array([[1.0, 0.0], [3.0, 2.0]]), np.array([[5.0, 1.0]])]
    areas = [np.array([1.0, 1.0]), np.array([2.0])]
    np.testing.assert_allclose(baselines.area_weighted_mean(fields, areas), [(1 + 3 + 10) / 4, (0 + 2 + 2) / 4])
