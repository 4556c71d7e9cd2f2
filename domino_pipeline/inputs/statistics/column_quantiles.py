"""Per-column quantiles of a stream of row blocks, and the trimmed mean and std between them, from
a bottom-k sample of the rows that does not depend on how the stream is cut into blocks
(docs/data_quality.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SAMPLE_ROWS = 65536  # the 1% quantile's rank is then within about 0.04% of the rows
QUANTILES = {"p01": 0.01, "p99": 0.99}


def row_keys(first: int, count: int) -> np.ndarray:
    """splitmix64 of the row numbers ``first`` .. ``first + count - 1``: the rows' sort keys."""
    z = np.arange(first, first + count, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class ColumnQuantiles:
    """The ``QUANTILES`` of each of ``width`` columns, from a sample of at most ``size`` rows."""

    def __init__(self, width: int, size: int = SAMPLE_ROWS) -> None:
        self.size, self.seen = size, 0
        self.keys = np.empty(0, np.uint64)
        self.rows = np.empty((0, width), np.float64)

    def add(self, rows: np.ndarray) -> None:
        """Take in a block of rows (n, width)."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        keys = row_keys(self.seen, len(rows))
        self.seen += len(rows)
        if len(self.keys) == self.size:  # full: only rows that beat the largest key kept can enter
            beats = keys < self.keys.max()
            keys, rows = keys[beats], rows[beats]
        keys = np.concatenate([self.keys, keys])
        rows = np.concatenate([self.rows, rows.astype(np.float64)])
        if len(keys) > self.size:
            keep = np.argpartition(keys, self.size - 1)[:self.size]
            keys, rows = keys[keep], rows[keep]
        self.keys, self.rows = keys, rows

    def summary(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """{column: {"p01", "p99", "mean_trimmed", "std_trimmed"}}, NaN for a column without finite values."""
        return {name: trimmed_statistics(self.rows[:, j]) for j, name in enumerate(names)}


def trimmed_statistics(column: np.ndarray) -> dict[str, float]:
    """One column's quantiles and trimmed mean and std (sorted first: independent of the rows' order)."""
    column = np.sort(column[np.isfinite(column)])
    if not len(column):
        return {key: math.nan for key in (*QUANTILES, "mean_trimmed", "std_trimmed")}
    found = {key: float(np.quantile(column, q)) for key, q in QUANTILES.items()}
    cut = len(column) // 100
    inside = column[cut:len(column) - cut]
    return {**found, "mean_trimmed": float(inside.mean()), "std_trimmed": float(inside.std())}
