"""The shared sampling: deterministic per (seed, epoch, index), windows of the right size,
area-weighted choice with torch.multinomial's law, clear errors for too few rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from domino_pipeline.compute.sampling import (
    TooFewPointsError,
    choose_weighted,
    choose_window,
    draw_rng,
    sample_draw,
)

COUNTS = {"geometry": 1000, "surface": 5000, "volume": 20000}


def _draw(seed=0, epoch=0, index=0, counts=COUNTS, areas=None, **kw):
    areas = np.ones(counts["surface"], dtype=np.float32) if areas is None else areas
    args = dict(counts=counts, geometry_points=300, surface_points=100, volume_points=400,
                read_surface_areas=lambda a, b: areas[a:b], surface_window_factor=4)
    args.update(kw)
    return sample_draw(seed, epoch, index, **args)


def _same(a, b) -> bool:
    return a.geometry == b.geometry and a.volume == b.volume and np.array_equal(a.surface_rows, b.surface_rows)


def test_same_key_same_draw_and_different_keys_differ():
    assert _same(_draw(1, 2, 3), _draw(1, 2, 3))
    for other in (_draw(2, 2, 3), _draw(1, 3, 3), _draw(1, 2, 4)):
        assert not _same(_draw(1, 2, 3), other)


def test_windows_and_rows_have_the_requested_sizes():
    d = _draw()
    assert d.geometry[1] - d.geometry[0] == 300 and 0 <= d.geometry[0] <= 700
    assert d.volume[1] - d.volume[0] == 400 and 0 <= d.volume[0] <= 19600
    rows = d.surface_rows
    assert len(rows) == 100 and len(np.unique(rows)) == 100 and np.all(np.diff(rows) > 0)
    assert rows[-1] - rows[0] < 4 * 100  # inside one window of factor x points


def test_parts_are_independent_of_the_model_type():
    both = _draw()
    surface_only = _draw(volume_points=None)
    volume_only = _draw(surface_points=None, read_surface_areas=None)
    assert surface_only.volume is None and volume_only.surface_rows is None
    assert np.array_equal(both.surface_rows, surface_only.surface_rows)
    assert both.volume == volume_only.volume and both.geometry == volume_only.geometry


def test_whole_surface_window_reads_all_areas():
    seen = []
    areas = np.ones(COUNTS["surface"], dtype=np.float32)
    _draw(areas=areas, surface_window_factor=None, read_surface_areas=lambda a, b: seen.append((a, b)) or areas[a:b])
    assert seen == [(0, COUNTS["surface"])]


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(TooFewPointsError, match="volume points: 20000 rows, fewer than the 30000"):
        _draw(volume_points=30000)
    with pytest.raises(TooFewPointsError, match="STL vertices: 1000 rows"):
        _draw(geometry_points=1001)
    with pytest.raises(TooFewPointsError, match="surface cells"):
        _draw(surface_points=5001)


def test_window_start_is_uniform():
    starts = [choose_window(draw_rng(0, 0, i, "volume"), 10, 6, "x")[0] for i in range(4000)]
    counts = np.bincount(starts, minlength=5)
    assert counts.shape == (5,) and np.all(np.abs(counts / 4000 - 0.2) < 0.03)


def test_weighted_choice_matches_torch_multinomial_without_replacement():
    weights = np.array([1, 1, 2, 4, 8, 16, 0.5, 3], dtype=np.float32)
    trials, size = 20000, 3
    ours = np.zeros(len(weights))
    rng = np.random.default_rng(0)
    for _ in range(trials):
        ours[choose_weighted(rng, weights, size)] += 1
    generator = torch.Generator().manual_seed(0)
    ref = np.zeros(len(weights))
    w = torch.from_numpy(weights).expand(trials, -1).contiguous()
    taken = torch.multinomial(w, size, replacement=False, generator=generator).numpy()
    np.add.at(ref, taken.reshape(-1), 1)
    np.testing.assert_allclose(ours / trials, ref / trials, atol=0.02)
    assert ours[5] > ours[4] > ours[3] > ours[0]


def test_weighted_choice_of_everything_is_everything():
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(choose_weighted(rng, np.ones(7), 7), np.arange(7))
