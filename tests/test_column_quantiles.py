"""ColumnQuantiles: numpy's quantiles while every row fits the sample; beyond, the same sample
however the rows are cut into blocks, and quantiles close to numpy's over all rows."""

from __future__ import annotations

import numpy as np
import pytest

from domino_pipeline.inputs.statistics.column_quantiles import ColumnQuantiles, row_keys


def _fed(rows: np.ndarray, block: int, size: int) -> ColumnQuantiles:
    quantiles = ColumnQuantiles(rows.shape[1], size=size)
    for start in range(0, len(rows), block):
        quantiles.add(rows[start:start + block])
    return quantiles


def test_every_row_in_the_sample_gives_numpys_quantiles():
    rows = np.random.default_rng(0).standard_normal((1000, 3)).astype(np.float32)
    got = _fed(rows, 77, size=1000).summary(["a", "b", "c"])
    for j, name in enumerate("abc"):
        column = rows[:, j].astype(np.float64)
        low, high = np.quantile(column, 0.01), np.quantile(column, 0.99)
        inside = np.sort(column)[10:-10]  # 1000 values: the 10 smallest and 10 largest dropped
        assert (low, high) == (got[name]["p01"], got[name]["p99"])
        assert got[name]["mean_trimmed"] == pytest.approx(inside.mean(), rel=1e-12)
        assert got[name]["std_trimmed"] == pytest.approx(inside.std(), rel=1e-12)


def test_a_few_extreme_cells_do_not_move_the_quantiles_as_they_move_the_extremes():
    rows = np.random.default_rng(1).standard_normal((2000, 1))
    spiked = rows.copy()
    spiked[[5, 900, 1500]] = 1e4
    clean, dirty = (_fed(r, 500, size=4096).summary(["x"])["x"] for r in (rows, spiked))
    assert dirty["std_trimmed"] == pytest.approx(clean["std_trimmed"], rel=0.02) and spiked.std() > 100 * rows.std()
    # three of 2000 values moved past the 99% quantile shift it by three ranks of the tail, not to 1e4
    assert dirty["p99"] == pytest.approx(clean["p99"], rel=0.1) and dirty["p01"] == pytest.approx(clean["p01"], rel=0.02)
    assert dirty["p99"] < 3.0 < 1e4 == spiked.max()


def test_the_sample_does_not_depend_on_the_blocks():
    rows = np.random.default_rng(2).standard_normal((20000, 2))
    one, many = _fed(rows, 20000, size=1024), _fed(rows, 333, size=1024)
    assert len(one.keys) == 1024
    np.testing.assert_array_equal(np.sort(one.keys), np.sort(many.keys))
    assert one.summary(["a", "b"]) == many.summary(["a", "b"])
    chosen = np.sort(np.argsort(row_keys(0, len(rows)))[:1024])  # the brute-force bottom 1024 keys
    np.testing.assert_array_equal(np.sort(one.rows[:, 0]), np.sort(rows[chosen, 0]))


def test_a_sample_estimates_the_quantiles_of_all_rows():
    rows = np.random.default_rng(3).uniform(0.0, 1.0, (200000, 1))
    got = _fed(rows, 50000, size=65536).summary(["u"])["u"]
    assert got["p01"] == pytest.approx(0.01, abs=0.002) and got["p99"] == pytest.approx(0.99, abs=0.002)


def test_non_finite_values_are_left_out_and_an_empty_column_is_nan():
    rows = np.array([[1.0, np.nan], [np.inf, np.nan], [3.0, np.nan]])
    got = _fed(rows, 2, size=10).summary(["a", "b"])
    assert (got["a"]["p01"], got["a"]["p99"]) == (np.quantile([1.0, 3.0], 0.01), np.quantile([1.0, 3.0], 0.99))
    assert (got["a"]["mean_trimmed"], got["a"]["std_trimmed"]) == (2.0, 1.0)  # 2 values: none dropped
    assert all(np.isnan(value) for value in got["b"].values()) and len(got["b"]) == 4


def test_row_keys_are_distinct_and_depend_on_the_position_only():
    keys = row_keys(0, 100000)
    assert len(np.unique(keys)) == len(keys)
    np.testing.assert_array_equal(row_keys(500, 10), keys[500:510])
