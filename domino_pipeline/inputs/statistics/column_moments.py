"""Per-column count, minimum, maximum, mean and standard deviation of a stream of row blocks, in one
pass and float64, merged by Chan's pairwise update (docs/data_quality.md); non-finite values
counted apart."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


class ColumnMoments:
    """The running statistics of each of ``width`` columns."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.count = np.zeros(width, dtype=np.int64)
        self.mean = np.zeros(width)
        self.m2 = np.zeros(width)
        self.low = np.full(width, np.inf)
        self.high = np.full(width, -np.inf)
        self.nonfinite = np.zeros(width, dtype=np.int64)

    def add(self, rows: np.ndarray) -> None:
        """Take in a block of rows (n, width), or (n,) for one column."""
        rows = np.asarray(rows).reshape(len(rows), self.width)
        if not len(rows):
            return
        columns = np.array(rows.T, dtype=np.float64, order="C")  # a copy, each column contiguous: fast reductions
        total = columns.sum(axis=1)
        if np.isfinite(total).all():  # a finite sum of float32 or moderate float64 values: every value finite
            count = np.full(self.width, len(rows), dtype=np.int64)
            mean = total / len(rows)
            low, high = columns.min(axis=1), columns.max(axis=1)
            columns -= mean[:, None]
            m2 = np.einsum("ij,ij->i", columns, columns)
        else:
            count, mean, m2, low, high = _masked_moments(columns, np.isfinite(columns))
            self.nonfinite += len(rows) - count
        self._merge(count, mean, m2)
        np.minimum(self.low, low, out=self.low)
        np.maximum(self.high, high, out=self.high)

    def _merge(self, count: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        total = self.count + count
        safe = np.maximum(total, 1)
        delta = mean - self.mean
        self.mean = self.mean + delta * count / safe
        self.m2 = self.m2 + m2 + delta**2 * self.count * count / safe
        self.count = total

    @property
    def std(self) -> np.ndarray:
        """The population standard deviation of each column (NaN for a column of no values)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, np.sqrt(self.m2 / np.maximum(self.count, 1)), np.nan)

    def summary(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """{column name: {min, max, mean, std, nonfinite}}, NaN where a column had no finite value."""
        if len(names) != self.width:
            raise ValueError(f"{len(names)} names {list(names)} for {self.width} columns")
        empty = self.count == 0
        low, high = np.where(empty, np.nan, self.low), np.where(empty, np.nan, self.high)
        mean, std = np.where(empty, np.nan, self.mean), self.std
        return {name: {"min": float(low[j]), "max": float(high[j]), "mean": float(mean[j]),
                       "std": float(std[j]), "nonfinite": int(self.nonfinite[j])}
                for j, name in enumerate(names)}


def _masked_moments(columns: np.ndarray, finite: np.ndarray) -> tuple[np.ndarray, ...]:
    """count, mean, M2, min, max of each column (a row of ``columns``) over its finite values."""
    count = finite.sum(axis=1)
    mean = np.where(finite, columns, 0.0).sum(axis=1) / np.maximum(count, 1)
    deviations = np.where(finite, columns - mean[:, None], 0.0)
    m2 = np.einsum("ij,ij->i", deviations, deviations)
    low = np.where(finite, columns, np.inf).min(axis=1)
    high = np.where(finite, columns, -np.inf).max(axis=1)
    return count, mean, m2, low, high


class ColumnBounds:
    """The running minimum and maximum of ``width`` columns (a bounding box), in the rows' dtype."""

    def __init__(self, width: int) -> None:
        self.low, self.high = np.full(width, np.inf), np.full(width, -np.inf)
        self.count = 0

    def add(self, rows: np.ndarray) -> None:
        """Take in a block of rows (n, width)."""
        if len(rows):
            columns = np.ascontiguousarray(np.asarray(rows).T)  # reducing (n, 3) along rows is ten times slower
            np.minimum(self.low, columns.min(axis=1), out=self.low)
            np.maximum(self.high, columns.max(axis=1), out=self.high)
            self.count += len(rows)

    def summary(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """{column name: {min, max}}, NaN before any row."""
        empty = self.count == 0
        return {name: {"min": math.nan if empty else float(self.low[j]),
                       "max": math.nan if empty else float(self.high[j])} for j, name in enumerate(names)}
