"""What benchmark_learning.py reports about test bodies: scores of predicted coefficients against
the published ones, and the family's parameter table (the oracle baseline's inputs). Pure
functions over plain numbers."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Columns of a family's parameter table that are not shape parameters: solver outputs, mesh
# figures, and angles derived from the sampled parameters (they would count those twice).
NOT_SHAPE = ("run", "cd", "cl", "cs", "aref", "cells", "seconds", "iterations", "converged")
DERIVED_SUFFIX = "_deg"


def r_squared(predicted: Sequence[float], true: Sequence[float]) -> float:
    """Coefficient of determination of ``predicted`` against ``true``: 1 - SS_res / SS_tot (NaN
    when the true values do not vary); below 0 when worse than the true values' own mean."""
    predicted, true = np.asarray(predicted, float), np.asarray(true, float)
    total = float(np.sum((true - true.mean()) ** 2))
    if total == 0.0:
        return math.nan
    return 1.0 - float(np.sum((predicted - true) ** 2)) / total


def mean_abs_percent(predicted: Sequence[float], true: Sequence[float]) -> float:
    """Mean of |predicted - true| / |true| over the bodies, in percent."""
    predicted, true = np.asarray(predicted, float), np.asarray(true, float)
    return float(np.mean(np.abs(predicted - true) / np.abs(true)) * 100.0)


def mean_abs(predicted: Sequence[float], true: Sequence[float]) -> float:
    """Mean of |predicted - true| over the bodies."""
    return float(np.mean(np.abs(np.asarray(predicted, float) - np.asarray(true, float))))


def coefficient_scores(predicted: Sequence[float], true: Sequence[float]) -> dict[str, float]:
    """R^2, mean absolute error in percent of the true value, and mean absolute error."""
    return {"r2": r_squared(predicted, true), "mae_percent": mean_abs_percent(predicted, true),
            "mae": mean_abs(predicted, true)}


def read_parameters(path: Path, columns: Sequence[str] | None = None) -> tuple[list[str], dict[str, np.ndarray]]:
    """The shape parameters of each run in a family's CSV (a ``run`` column naming ``run_<i>``
    or giving ``i``): (the parameter columns used, run name -> values). ``columns`` None: every
    column but NOT_SHAPE and the derived ``*_deg`` angles."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "run" not in rows[0]:
        raise ValueError(f"{path}: a parameter table needs a header with a 'run' column and one row per run")
    header = list(rows[0])
    if columns is None:
        columns = [c for c in header if c.lower() not in NOT_SHAPE and not c.endswith(DERIVED_SUFFIX)]
    missing = [c for c in columns if c not in header]
    if missing or not columns:
        raise ValueError(f"{path}: no parameter column {missing or 'left'}; it has {header}")
    table = {}
    for number, row in enumerate(rows, start=2):
        try:
            table[_run_name(row["run"])] = np.array([float(row[c]) for c in columns])
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}:{number}: not a number in {columns} ({error})") from error
    return list(columns), table


def _run_name(value: str) -> str:
    value = value.strip()
    return f"run_{value}" if value.isdigit() else value
