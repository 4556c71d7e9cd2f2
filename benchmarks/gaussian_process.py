"""Gaussian-process regression with an ARD squared-exponential kernel, for the learning benchmark's
baselines (a regression of Cd or Cl on a few numbers per body). numpy and scipy only.

The inputs are standardised by the training rows' mean and standard deviation and the target by
its mean and standard deviation; the kernel is ``s2 * exp(-0.5 * sum_d ((x_d - x'_d) / l_d)^2)``
plus ``n2`` on the diagonal (noise), with one length scale per input (ARD). The hyperparameters
(``l_d``, ``s2``, ``n2``) maximise the log marginal likelihood of the training rows alone
(L-BFGS-B over their logarithms, from a few fixed starts, the best kept), so a fit is
deterministic. Rasmussen & Williams, "Gaussian Processes for Machine Learning", algorithm 2.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize

# bounds of the hyperparameters, on standardised inputs and target
LENGTH_BOUNDS = (0.05, 100.0)
SIGNAL_BOUNDS = (1e-2, 1e2)
NOISE_BOUNDS = (1e-6, 1.0)
STARTS = ((1.0, 1.0, 1e-2), (0.5, 1.0, 1e-4), (3.0, 1.0, 1e-3), (10.0, 1.0, 1e-1))  # (l, s2, n2)
JITTER = 1e-10


@dataclass(frozen=True)
class Hyperparameters:
    """The kernel's length scales (one per input), signal variance and noise variance."""

    lengths: np.ndarray
    signal: float
    noise: float


@dataclass(frozen=True)
class GaussianProcess:
    """A fitted GP: the standardisation, the hyperparameters and the training rows' weights."""

    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: float
    y_scale: float
    hyper: Hyperparameters
    inputs: np.ndarray        # standardised training inputs (n, d)
    weights: np.ndarray       # (K + n2 I)^-1 y on the standardised target
    factor: tuple             # scipy's Cholesky factor of K + n2 I
    log_likelihood: float     # of the standardised training target at the chosen hyperparameters


def kernel(a: np.ndarray, b: np.ndarray, lengths: np.ndarray, signal: float) -> np.ndarray:
    """The ARD squared-exponential covariance between the rows of ``a`` and of ``b``."""
    scaled_a, scaled_b = a / lengths, b / lengths
    squared = (np.sum(scaled_a**2, axis=1)[:, None] + np.sum(scaled_b**2, axis=1)[None, :]
               - 2.0 * scaled_a @ scaled_b.T)
    return signal * np.exp(-0.5 * np.maximum(squared, 0.0))


def log_marginal_likelihood(x: np.ndarray, y: np.ndarray, hyper: Hyperparameters) -> float:
    """log p(y | x) of a zero-mean GP: -y^T K^-1 y / 2 - log|K| / 2 - n log(2 pi) / 2 (K with noise)."""
    covariance = kernel(x, x, hyper.lengths, hyper.signal) + (hyper.noise + JITTER) * np.eye(len(x))
    factor = cho_factor(covariance, lower=True)
    weights = cho_solve(factor, y)
    return float(-0.5 * y @ weights - np.sum(np.log(np.diag(factor[0]))) - 0.5 * len(x) * math.log(2 * math.pi))


def posterior(x: np.ndarray, y: np.ndarray, at: np.ndarray, hyper: Hyperparameters) -> tuple[np.ndarray, np.ndarray]:
    """The zero-mean GP's posterior mean and variance (of the latent function) at the rows of ``at``."""
    covariance = kernel(x, x, hyper.lengths, hyper.signal) + (hyper.noise + JITTER) * np.eye(len(x))
    factor = cho_factor(covariance, lower=True)
    cross = kernel(at, x, hyper.lengths, hyper.signal)
    mean = cross @ cho_solve(factor, y)
    variance = hyper.signal - np.sum(cross * cho_solve(factor, cross.T).T, axis=1)
    return mean, np.maximum(variance, 0.0)


def _unpack(theta: np.ndarray) -> Hyperparameters:
    return Hyperparameters(lengths=np.exp(theta[:-2]), signal=float(np.exp(theta[-2])), noise=float(np.exp(theta[-1])))


def likelihood_and_gradient(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """The log marginal likelihood at ``theta`` (log length scales, log signal, log noise) and its
    gradient in ``theta``: dL/dtheta_j = tr((a a^T - K^-1) dK/dtheta_j) / 2, a = K^-1 y."""
    hyper = _unpack(theta)
    squared = (x[:, None, :] - x[None, :, :]) ** 2 / hyper.lengths**2      # (n, n, d)
    signal_part = hyper.signal * np.exp(-0.5 * squared.sum(axis=2))
    covariance = signal_part + (hyper.noise + JITTER) * np.eye(len(x))
    factor = cho_factor(covariance, lower=True)
    weights = cho_solve(factor, y)
    likelihood = float(-0.5 * y @ weights - np.sum(np.log(np.diag(factor[0]))) - 0.5 * len(x) * math.log(2 * math.pi))
    inner = np.outer(weights, weights) - cho_solve(factor, np.eye(len(x)))
    gradient = [0.5 * np.sum(inner * signal_part * squared[:, :, d]) for d in range(x.shape[1])]
    gradient += [0.5 * np.sum(inner * signal_part), 0.5 * hyper.noise * np.trace(inner)]
    return likelihood, np.array(gradient)


def best_hyperparameters(x: np.ndarray, y: np.ndarray) -> tuple[Hyperparameters, float]:
    """The hyperparameters of the highest log marginal likelihood found from every start in
    STARTS (L-BFGS-B within the bounds, over logarithms, with the exact gradient), and that likelihood."""
    dimensions = x.shape[1]
    bounds = [tuple(map(math.log, LENGTH_BOUNDS))] * dimensions + [tuple(map(math.log, SIGNAL_BOUNDS)),
                                                                   tuple(map(math.log, NOISE_BOUNDS))]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        try:
            likelihood, gradient = likelihood_and_gradient(x, y, theta)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        return -likelihood, -gradient

    best = None
    for length, signal, noise in STARTS:
        start = np.log([length] * dimensions + [signal, noise])
        found = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds,
                         options={"ftol": 1e-12, "gtol": 1e-8, "maxiter": 500})
        if best is None or found.fun < best.fun:
            best = found
    return _unpack(best.x), float(-best.fun)


def fit(x: np.ndarray, y: np.ndarray) -> GaussianProcess:
    """A GP fitted to the rows ``x`` (n, d) and target ``y`` (n,): standardised, hyperparameters
    by marginal likelihood (``best_hyperparameters``). A ValueError for fewer than 2 rows."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(x) < 2:
        raise ValueError(f"a GP needs 2 or more rows of inputs (n, d) and n targets, not {x.shape} and {y.shape}")
    x_mean, x_scale = x.mean(axis=0), x.std(axis=0)
    x_scale[x_scale == 0] = 1.0  # a constant input: every row alike, it changes nothing
    y_mean, y_scale = float(y.mean()), float(y.std()) or 1.0
    inputs, target = (x - x_mean) / x_scale, (y - y_mean) / y_scale
    hyper, likelihood = best_hyperparameters(inputs, target)
    covariance = kernel(inputs, inputs, hyper.lengths, hyper.signal) + (hyper.noise + JITTER) * np.eye(len(x))
    factor = cho_factor(covariance, lower=True)
    return GaussianProcess(x_mean=x_mean, x_scale=x_scale, y_mean=y_mean, y_scale=y_scale, hyper=hyper,
                           inputs=inputs, weights=cho_solve(factor, target), factor=factor,
                           log_likelihood=likelihood)


def predict(gp: GaussianProcess, x: np.ndarray) -> np.ndarray:
    """The fitted GP's posterior mean at the rows of ``x``, in the target's units."""
    inputs = (np.asarray(x, dtype=np.float64) - gp.x_mean) / gp.x_scale
    return gp.y_mean + gp.y_scale * kernel(inputs, gp.inputs, gp.hyper.lengths, gp.hyper.signal) @ gp.weights
