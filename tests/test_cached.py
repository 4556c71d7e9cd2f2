"""CachedDoMINODataset (loading/cached.py) as a DataLoader sees it: pickled to workers without
its open runs, a run subset in the order asked, runs kept open up to the limit, least recently
used closed first, and draws that depend on (seed, epoch, index) only."""

from __future__ import annotations

import pickle

import numpy as np
from cache_fixtures import SAMPLES

from domino_pipeline.loading.cached import CachedDoMINODataset


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_a_pickled_dataset_carries_no_open_run_and_draws_the_same(cache_dir):
    ds = CachedDoMINODataset(cache_dir, seed=4, **SAMPLES)
    ds.set_epoch(2)
    first = ds[1]
    assert ds.open_run_indices() == [1]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.open_run_indices() == [] and copy.epoch == 2
    assert _same(copy[1], first)


def test_a_subset_is_read_in_the_order_asked(cache_dir):
    both = CachedDoMINODataset(cache_dir, seed=0, **SAMPLES)
    reversed_ = CachedDoMINODataset(cache_dir, runs=["run_2.zarr", "run_1"], seed=0, **SAMPLES)
    assert len(both) == len(reversed_) == 2
    assert [p.parent.name for p in reversed_.run_paths] == ["run_2", "run_1"]
    # a draw depends on (seed, epoch, index): index 0 of the subset draws run_2 as index 0 would
    one = CachedDoMINODataset(cache_dir, runs=["run_2"], seed=0, **SAMPLES)
    assert _same(one[0], reversed_[0]) and not _same(both[0], reversed_[0])


def test_runs_stay_open_up_to_the_limit_least_recently_used_closed_first(cache_dir):
    ds = CachedDoMINODataset(cache_dir, max_open_runs=2, **SAMPLES)
    ds[0], ds[1], ds[0]
    assert ds.open_run_indices() == [1, 0]
    small = CachedDoMINODataset(cache_dir, max_open_runs=1, **SAMPLES)
    small[0], small[1]
    assert small.open_run_indices() == [1]
