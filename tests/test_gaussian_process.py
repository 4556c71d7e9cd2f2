"""benchmarks/gaussian_process.py: the posterior against one worked by hand, the marginal likelihood
against scipy's multivariate normal, and fits that find what the data hold."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import import_benchmark
from scipy.stats import multivariate_normal


def test_the_posterior_of_two_points_is_the_one_worked_by_hand():
    gp = import_benchmark("gaussian_process")
    hyper = gp.Hyperparameters(lengths=np.array([1.0]), signal=1.0, noise=0.01)
    x, y = np.array([[0.0], [1.0]]), np.array([1.0, -1.0])
    # K = [[a, b], [b, a]], a = 1.01, b = exp(-1/2); y is K's eigenvector of eigenvalue a - b
    a, b, c = 1.01, math.exp(-0.5), math.exp(-0.125)
    mean, variance = gp.posterior(x, y, np.array([[0.0], [0.5]]), hyper)
    assert mean[0] == pytest.approx((1 - b) / (a - b), rel=1e-8)     # k* = [1, b]
    assert mean[1] == pytest.approx(0.0, abs=1e-12)                   # k* = [c, c], orthogonal to y
    assert variance[0] == pytest.approx(1 - (a - 2 * b**2 + a * b**2) / (a**2 - b**2), rel=1e-8)
    assert variance[1] == pytest.approx(1 - 2 * c**2 / (a + b), rel=1e-8)


def test_the_log_marginal_likelihood_is_the_multivariate_normal_density():
    gp = import_benchmark("gaussian_process")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 2)), rng.normal(size=6)
    hyper = gp.Hyperparameters(lengths=np.array([0.7, 2.0]), signal=1.5, noise=0.05)
    distance = (x[:, None, :] - x[None, :, :]) / hyper.lengths
    covariance = 1.5 * np.exp(-0.5 * np.sum(distance**2, axis=2)) + 0.05 * np.eye(6)
    expected = multivariate_normal(mean=np.zeros(6), cov=covariance).logpdf(y)
    assert gp.log_marginal_likelihood(x, y, hyper) == pytest.approx(expected, rel=1e-8)


def test_a_fit_finds_the_input_that_matters_and_beats_a_grid_of_hyperparameters():
    gp = import_benchmark("gaussian_process")
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, size=(25, 2))
    y = np.sin(3 * x[:, 0]) + 0.01 * rng.normal(size=25)  # the second input does nothing
    fitted = gp.fit(x, y)
    assert fitted.hyper.lengths[1] > 10 * fitted.hyper.lengths[0]
    inputs, target = (x - x.mean(0)) / x.std(0), (y - y.mean()) / y.std()
    grid = itertools.product([0.3, 1.0, 3.0], [0.3, 1.0, 3.0], [0.5, 2.0], [1e-4, 1e-2])
    best_on_grid = max(gp.log_marginal_likelihood(inputs, target, gp.Hyperparameters(np.array([l0, l1]), s, n))
                       for l0, l1, s, n in grid)
    assert fitted.log_likelihood >= best_on_grid
    test = rng.uniform(-1, 1, size=(50, 2))
    assert np.max(np.abs(gp.predict(fitted, test) - np.sin(3 * test[:, 0]))) < 0.1


def test_a_fit_does_not_depend_on_the_units_of_inputs_and_target():
    gp = import_benchmark("gaussian_process")
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, size=(10, 2))
    y = x @ [1.0, -2.0] + 0.3 * np.cos(4 * x[:, 0])
    at = rng.uniform(0, 1, size=(5, 2))
    base = gp.predict(gp.fit(x, y), at)
    moved = gp.predict(gp.fit(x * [10.0, 0.1] + 7.0, 100.0 * y - 5.0), at * [10.0, 0.1] + 7.0)
    np.testing.assert_allclose(moved, 100.0 * base - 5.0, rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="a GP needs 2 or more rows"):
        gp.fit(x[:1], y[:1])


def test_the_likelihood_gradient_is_the_finite_difference_one():
    gp = import_benchmark("gaussian_process")
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(7, 2)), rng.normal(size=7)
    theta = np.log([0.8, 1.7, 1.3, 0.02])
    value, gradient = gp.likelihood_and_gradient(x, y, theta)
    assert value == pytest.approx(gp.log_marginal_likelihood(x, y, gp.Hyperparameters(np.exp(theta[:2]), 1.3, 0.02)))
    step = 1e-6
    numeric = [(gp.likelihood_and_gradient(x, y, theta + step * e)[0]
                - gp.likelihood_and_gradient(x, y, theta - step * e)[0]) / (2 * step) for e in np.eye(4)]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-7)
