"""The learning benchmark's baselines: what one could predict for a test body from the training
bodies alone, without DoMINO. Pure functions over plain arrays (learning_bodies.py reads the bodies).

- ``training_mean``: every test body gets the training bodies' mean Cd and Cl (and, as a field,
  the training cells' area-weighted mean of each variable);
- ``nearest_bodies``: the training body nearest in geometry (the smallest symmetric surface
  distance, shape_geometry.py), its Cd and Cl, and its fields carried onto the test body's cells
  by ``carried_fields``: each cell takes the values of the nearest cell of the other body, both
  bodies scaled into their own bounding box (so a longer body's tail meets the other's tail);
- ``regression_guesses``: a least-squares linear fit or a Gaussian process (gaussian_process.py)
  of Cd and Cl on a few numbers per body: the descriptors any car's STL gives (length, width,
  height, frontal area, wetted area, volume), or a parametric family's own parameters (an oracle:
  a real dataset has no such table).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.spatial import cKDTree

import gaussian_process

COEFFICIENTS = ("cd", "cl")
Guesses = dict[str, dict[str, float]]  # test run -> {"cd": .., "cl": ..} (and "run": the body it came from)


def training_mean(coefficients: dict[str, dict[str, float]], train: Sequence[str], test: Sequence[str]) -> Guesses:
    """Every test body guessed as the training bodies' mean Cd and Cl."""
    mean = {k: float(np.mean([coefficients[r][k] for r in train])) for k in COEFFICIENTS}
    return {run: dict(mean) for run in test}


def nearest_bodies(distances: np.ndarray, train: Sequence[str], test: Sequence[str]) -> dict[str, str]:
    """For each test body (a row of ``distances``), the training body (a column) at the smallest distance."""
    return {run: train[int(np.argmin(row))] for run, row in zip(test, distances)}


def nearest_guesses(coefficients: dict[str, dict[str, float]], nearest: dict[str, str]) -> Guesses:
    """Each test body guessed as its nearest training body's Cd and Cl (naming that body)."""
    return {run: {k: coefficients[near][k] for k in COEFFICIENTS} | {"run": near} for run, near in nearest.items()}


def linear_fit_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """Least squares of ``y_train`` on the columns of ``x_train`` and a constant (the minimum-norm
    solution when the training rows do not fix every coefficient), evaluated at ``x_test``."""
    design = np.column_stack([np.ones(len(x_train)), x_train])
    solution = np.linalg.lstsq(design, y_train, rcond=None)[0]
    return np.column_stack([np.ones(len(x_test)), x_test]) @ solution


def gaussian_process_fit_predict(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray) -> np.ndarray:
    """A Gaussian process fitted to the training rows alone (gaussian_process.fit), its mean at ``x_test``."""
    return gaussian_process.predict(gaussian_process.fit(x_train, y_train), x_test)


REGRESSIONS = {"linear": linear_fit_predict, "gp": gaussian_process_fit_predict}


def regression_guesses(features: dict[str, np.ndarray], coefficients: dict[str, dict[str, float]],
                       train: Sequence[str], test: Sequence[str], method: str) -> Guesses:
    """Cd and Cl of each test body by ``method`` (REGRESSIONS) on ``features`` (run -> numbers),
    fitted to the training bodies only; the inputs scaled by the training bodies' mean and
    standard deviation (a column constant over them dropped)."""
    x_train = np.stack([features[r] for r in train]).astype(np.float64)
    x_test = np.stack([features[r] for r in test]).astype(np.float64)
    spread = x_train.std(axis=0)
    varied = spread > 0
    mean = x_train.mean(axis=0)
    x_train, x_test = ((x - mean)[:, varied] / spread[varied] for x in (x_train, x_test))
    guesses: Guesses = {run: {} for run in test}
    for name in COEFFICIENTS:
        predicted = REGRESSIONS[method](x_train, np.array([coefficients[r][name] for r in train]), x_test)
        for run, value in zip(test, predicted):
            guesses[run][name] = float(value)
    return guesses


def box_normalised(points: np.ndarray) -> np.ndarray:
    """``points`` scaled into their bounding box: each coordinate from 0 (its least) to 1 (its greatest)."""
    low, high = points.min(axis=0), points.max(axis=0)
    return (points - low) / np.where(high > low, high - low, 1.0)


def carried_fields(source_centres: np.ndarray, source_fields: np.ndarray, target_centres: np.ndarray) -> np.ndarray:
    """The source body's fields at the target body's cells: each target cell takes the values of
    the source cell nearest to it, both bodies in box-normalised coordinates."""
    _, nearest = cKDTree(box_normalised(source_centres)).query(box_normalised(target_centres))
    return source_fields[nearest]


def area_weighted_mean(fields: Sequence[np.ndarray], areas: Sequence[np.ndarray]) -> np.ndarray:
    """Each column's mean over every cell of every body, weighted by the cells' areas."""
    total = sum(float(a.sum()) for a in areas)
    return sum(a.astype(np.float64) @ f.astype(np.float64) for f, a in zip(fields, areas)) / total
