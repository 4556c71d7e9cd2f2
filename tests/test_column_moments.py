"""Streaming per-column statistics against numpy over the whole array, in float64."""

from __future__ import annotations

import numpy as np
import pytest

from domino_pipeline.inputs.statistics.column_moments import ColumnMoments


def _streamed(rows: np.ndarray, sizes: list[int]) -> ColumnMoments:
    moments = ColumnMoments(rows.shape[1])
    start = 0
    for size in sizes:
        moments.add(rows[start:start + size])
        start += size
    assert start == len(rows)
    return moments


def test_blocks_of_any_size_give_numpys_statistics():
    rows = np.random.default_rng(0).normal([1.0, -3.0, 100.0], [0.5, 2.0, 1e-3], (1000, 3)).astype(np.float32)
    moments = _streamed(rows, [1, 0, 250, 333, 416])
    want = rows.astype(np.float64)
    np.testing.assert_allclose(moments.mean, want.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(moments.std, want.std(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(moments.low, want.min(axis=0))
    np.testing.assert_array_equal(moments.high, want.max(axis=0))
    summary = moments.summary(["a", "b", "c"])
    assert summary["b"]["nonfinite"] == 0 and summary["c"]["max"] == float(want[:, 2].max())


def test_a_large_mean_does_not_swallow_a_small_spread():
    """Summing x and x^2 loses the spread of values near 1e8; the pairwise update keeps it."""
    rows = (1e8 + np.random.default_rng(1).normal(0.0, 1.0, (20_000, 1)))
    moments = _streamed(rows, [7000, 7000, 6000])
    assert moments.std[0] == pytest.approx(rows.std(), rel=1e-6)
    naive = np.sqrt(max((rows**2).mean() - rows.mean() ** 2, 0.0))
    assert abs(naive - rows.std()) > 0.1 * rows.std()  # what the update avoids


def test_non_finite_values_are_counted_and_left_out():
    rows = np.array([[1.0, np.nan], [np.inf, 2.0], [3.0, 4.0], [5.0, -np.inf]])
    moments = _streamed(rows, [2, 2])
    summary = moments.summary(["a", "b"])
    assert (summary["a"]["nonfinite"], summary["b"]["nonfinite"]) == (1, 2)
    assert summary["a"]["mean"] == pytest.approx(3.0) and summary["a"]["std"] == pytest.approx(np.std([1, 3, 5]))
    assert (summary["b"]["min"], summary["b"]["max"], summary["b"]["std"]) == (2.0, 4.0, 1.0)


def test_a_column_without_values_has_none_and_names_must_fit():
    moments = ColumnMoments(2)
    assert np.isnan(moments.summary(["a", "b"])["a"]["mean"])
    with pytest.raises(ValueError, match=r"1 names \['a'\] for 2 columns"):
        moments.summary(["a"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(50,), (50, 1), (50, 3)])
def test_the_rows_given_are_left_as_they_were(dtype, shape):
    rows = np.random.default_rng(2).normal(size=shape).astype(dtype)
    before = rows.copy()
    ColumnMoments(1 if len(shape) == 1 else shape[1]).add(rows)
    np.testing.assert_array_equal(rows, before)
