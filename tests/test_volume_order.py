"""The stored order of volume rows: a permutation of the kept rows, the same whether computed in
memory or streamed through buckets (in memory or scratch files), and uniformly random."""

from __future__ import annotations

import numpy as np
import pytest
from cache_fixtures import tiny_settings

from domino_pipeline.compute.preprocessing import (
    VOLUME_ARRAYS,
    plan_run,
    preprocess_run,
)
from domino_pipeline.compute.rows import normalize
from domino_pipeline.compute.volume_order import bucket_sizes, volume_order
from domino_pipeline.processed.runs import list_runs, load_run


def test_volume_order_is_a_permutation_of_the_kept_rows():
    inside = np.random.default_rng(1).random(1000) > 0.3
    for block_rows in (7, 64, 1000, 5000):
        order = volume_order(inside, seed=3, block_rows=block_rows)
        np.testing.assert_array_equal(np.sort(order), np.flatnonzero(inside))
    assert list(bucket_sizes(10, 4)) == [4, 4, 2] and list(bucket_sizes(8, 4)) == [4, 4]


@pytest.mark.slow
def test_every_source_row_lands_anywhere_with_equal_chance():
    """Over many seeds, each (source row, stored position) pair is hit about equally often:
    a block-wise deal that kept rows near their source block would fail this."""
    n, block_rows, seeds = 12, 5, 6000
    hits = np.zeros((n, n))
    for seed in range(seeds):
        order = volume_order(np.ones(n, bool), seed, block_rows)
        hits[order, np.arange(n)] += 1
    expected = seeds / n
    sigma = np.sqrt(expected * (1 - 1 / n))
    assert np.abs(hits - expected).max() < 5 * sigma, hits


def test_the_streamed_build_stores_the_in_memory_order(tiny_processed_dir, tmp_path):
    arrays = load_run(list_runs(tiny_processed_dir)[0])
    settings = tiny_settings()
    centers = arrays["volume_mesh_centers"]
    inside = np.all((centers > np.float32(settings.bounding_box_volume[0]))
                    & (centers < np.float32(settings.bounding_box_volume[1])), axis=1)
    for block_rows in (997, 1 << 22):  # many buckets, one bucket
        order = volume_order(inside, settings.permutation_seed, block_rows)
        contents = preprocess_run(arrays, settings, block_rows=block_rows)
        np.testing.assert_array_equal(contents["volume_coordinates"],
                                      normalize(centers[order], settings.bounding_box_volume))
        np.testing.assert_array_equal(contents["volume_fields"], arrays["volume_fields"][order])
    volume = {name: arrays[name] for name in VOLUME_ARRAYS}
    plan = plan_run(arrays, volume, settings, scratch_dir=tmp_path, block_rows=997)
    streamed = {}
    for name, start, rows in plan.pieces:
        if name.startswith("volume_"):
            streamed.setdefault(name, []).append((start, rows))
    coordinates = np.concatenate([rows for _, rows in sorted(streamed["volume_coordinates"], key=lambda p: p[0])])
    np.testing.assert_array_equal(coordinates, preprocess_run(arrays, settings, block_rows=997)["volume_coordinates"])
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone
