"""Run generations and writers: a rebuild writes the next generation and keeps the previous one
for open readers, an incomplete write places nothing, one writer per run at a time."""

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest
from cache_fixtures import SAMPLES, generation, tiny_settings

from datapipe import CachedDoMINODataset
from domino_pipeline.processed.runs import list_runs
from domino_pipeline.store.build import cache_run, manifest_runs
from domino_pipeline.store.cache_format import ARRAYS, StaleCacheError, generations
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import write_manifest
from domino_pipeline.store.run_writer import RunWriter


def _item_equal(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_a_rebuild_writes_a_new_generation_and_open_datasets_keep_theirs(tiny_processed_dir, cache_dir, tmp_path):
    cache = shutil.copytree(cache_dir, tmp_path / "cache")
    runs = list_runs(tiny_processed_dir)
    before = CachedDoMINODataset(cache, model_type="combined", scaling_factors=None, **SAMPLES)
    first = before[0]
    assert cache_run(runs[0], cache, tiny_settings(), rebuild=True).status == "skipped"  # current
    for generation_number in (2, 3):
        changed = tiny_settings(permutation_seed=generation_number)
        assert cache_run(runs[0], cache, changed, rebuild=True).status == "built"
        write_manifest(cache, changed, manifest_runs(runs[:1], cache, changed))
    numbers = [n for n, _ in generations(cache / "run_1")]
    assert numbers == [2, 3]  # the newest and the one before it; g1 is gone
    after = CachedDoMINODataset(cache, model_type="combined", scaling_factors=None, **SAMPLES)
    assert after.run_paths[0].name == "g3.zarr"
    assert not _item_equal(after[0], first)
    # g1 was removed two rebuilds later: the old dataset says so, never "corrupt"
    with pytest.raises(StaleCacheError, match=r"run_1/g1\.zarr: removed while open"):
        before[0]
    with pytest.raises(StaleCacheError, match=r"run_1/g1\.zarr: this generation of the run was replaced"):
        CacheRun(before.run_paths[0])  # what a worker that had not opened it yet meets


def test_an_incomplete_write_places_nothing(tmp_path):
    writer_shapes = {name: (4,) for name in ARRAYS} | {"geometry_coordinates": (4, 3)}
    with pytest.raises(ValueError, match="arrays written only in part"):
        with RunWriter(tmp_path, "run_1", writer_shapes, {}, neighbor_layout="indices") as writer:
            writer.write_rows("geometry_coordinates", 0, np.zeros((2, 3), np.float32))
    assert generations(tmp_path / "run_1") == []
    assert [p for p in (tmp_path / "run_1").iterdir()] == []


def test_two_builders_of_one_cache_end_with_one_complete_run_each(tiny_processed_dir, tmp_path):
    runs = list_runs(tiny_processed_dir)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        [cache_run(r, tmp_path, tiny_settings(), rebuild=False) for r in runs])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(r.status for batch in results for r in batch)
    assert statuses == ["built", "built", "skipped", "skipped"], results
    for run in runs:
        assert [n for n, _ in generations(tmp_path / run.stem)] == [1]
        assert generation(tmp_path, run.stem).name == "g1.zarr"
    assert not [p for d in tmp_path.iterdir() for p in d.iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
def test_paused_second_writers_and_a_reader_during_a_rebuild(tmp_path):
    """The fault-injection scenarios once each: a writer paused (SIGSTOP) mid-build while a
    second starts, then resumed; a process drawing in a loop while every run is rebuilt."""
    import random

    from conftest import import_benchmark

    faults = import_benchmark("fault_injection")
    _, processed, cache = faults.prepare(tmp_path / "faults")
    rng = random.Random(1)
    assert faults.scenario_two_writers(processed, cache, tmp_path, rng)
    assert faults.scenario_reader_during_rebuild(processed, cache, tmp_path, rng)
