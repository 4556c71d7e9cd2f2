"""Convergence of one simpleFoam case, judged from its log and forceCoeffs' coefficient.dat.

A case is converged when (1) every solved field's initial residual at the last iteration is
below ``residual_tol`` and (2) the Cd history is flat: over the last ``window`` fraction of the
iterations, (max Cd - min Cd) / |mean Cd| is below ``cd_tol``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

RESIDUAL = re.compile(r"Solving for (\w+), Initial residual = ([0-9.eE+-]+)")
TIME = re.compile(r"^Time = (\S+)\s*$")


@dataclass(frozen=True)
class Criteria:
    """The thresholds a converged case meets."""

    residual_tol: float = 1e-3
    cd_tol: float = 0.01
    window: float = 0.2


@dataclass(frozen=True)
class Verdict:
    """One case's convergence: the figures judged and whether it passes."""

    iterations: int
    cd: float
    cd_rel_range: float
    residuals: dict[str, float]
    converged: bool
    reason: str


def final_residuals(log_text: str) -> dict[str, float]:
    """Each field's initial residual at the last iteration of a simpleFoam log (a field solved
    twice in one iteration, as p with non-orthogonal correctors, counts by its first solve)."""
    step: dict[str, float] | None = None
    for line in log_text.splitlines():
        if TIME.match(line):
            step = {}
        elif step is not None and (found := RESIDUAL.search(line)):
            step.setdefault(found.group(1), float(found.group(2)))
    if not step:
        raise ValueError("simpleFoam log: no 'Time = ' iteration with residuals found")
    return step


def coefficient_columns(text: str) -> dict[str, np.ndarray]:
    """The columns of a forceCoeffs coefficient.dat (v1912: '#'-header, the last header line
    naming the columns, tab separated), by name."""
    names: list[str] = []
    rows: list[list[float]] = []
    for line in text.splitlines():
        if line.startswith("#"):
            fields = line[1:].split()
            if fields[:1] == ["Time"]:
                names = fields
        elif line.strip():
            rows.append([float(x) for x in line.split()])
    if not names or not rows:
        raise ValueError("coefficient.dat: no column header ('# Time ...') or no data rows")
    table = np.asarray(rows)
    if table.shape[1] != len(names):
        raise ValueError(f"coefficient.dat: {table.shape[1]} values per row, {len(names)} column names")
    return {name: table[:, i] for i, name in enumerate(names)}


def cd_flatness(cd: np.ndarray, window: float) -> float:
    """(max - min) / |mean| of Cd over the last ``window`` fraction of the iterations."""
    n = max(2, int(round(window * len(cd))))
    tail = cd[-n:]
    return float((tail.max() - tail.min()) / abs(tail.mean()))


def judge(log_text: str, coefficient_text: str, criteria: Criteria = Criteria()) -> Verdict:
    """The convergence verdict of one case from its simpleFoam log and coefficient.dat texts."""
    residuals = final_residuals(log_text)
    cd = coefficient_columns(coefficient_text)["Cd"]
    flat = cd_flatness(cd, criteria.window)
    reasons = [f"{name} residual {value:.2e} >= {criteria.residual_tol:g}"
               for name, value in sorted(residuals.items()) if value >= criteria.residual_tol]
    if not flat < criteria.cd_tol:
        reasons.append(f"Cd varies {flat:.2%} over the last {criteria.window:.0%} (tolerance {criteria.cd_tol:.2%})")
    return Verdict(iterations=len(cd), cd=float(cd[-1]), cd_rel_range=flat, residuals=residuals,
                   converged=not reasons, reason="; ".join(reasons) or "ok")
