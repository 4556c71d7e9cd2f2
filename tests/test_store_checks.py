"""Shard indexes checked as a whole, metadata checked against itself, its shard files and its
manifest entry, symbolic links refused: every crafted fault (checksums recomputed) ends in one
error naming the run, never in wrong rows, a bare IndexError or a huge allocation."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cache_fixtures import SAMPLES, build_tiny_cache, tiny_settings
from conftest import import_benchmark

from datapipe import CachedDoMINODataset
from domino_pipeline.compute.volume_order import VOLUME_BLOCK_ROWS
from domino_pipeline.processed.runs import list_runs
from domino_pipeline.store import cache_format
from domino_pipeline.store.cache_format import ArraySpec, CacheError
from domino_pipeline.store.shard_index import ABSENT, ShardIndexError, check_index, check_shards
from domino_pipeline.store.validate import validate_cache

crafted = import_benchmark("crafted_faults")
CHUNK = 20  # bytes per inner chunk with its checksum, in the unit tests


def _index(*entries) -> np.ndarray:
    return np.array(entries, dtype=np.uint64).reshape(-1, 2)


def test_a_whole_index_passes_and_each_defect_names_its_chunk():
    check_index(_index(0, CHUNK, CHUNK, CHUNK, ABSENT, ABSENT), 2 * CHUNK, CHUNK, written=2)
    cases = {
        "inner chunk 1 starts at byte 18446744073709551599, past the 40 data bytes":
            _index(0, CHUNK, 2**64 - 17, CHUNK),  # offset + size wraps in uint64
        "inner chunk 1 overlaps inner chunk 0": _index(0, CHUNK, 0, CHUNK),
        "inner chunk 0 has 24 bytes, expected 20": _index(0, 24, CHUNK, CHUNK),
        "inner chunk 1 is missing": _index(0, CHUNK, ABSENT, ABSENT),
        "inner chunk 1 has only one of offset and size absent": _index(0, CHUNK, ABSENT, CHUNK),
        "inner chunk 1 starts at byte 30": _index(0, CHUNK, 30, CHUNK),
    }
    for message, index in cases.items():
        with pytest.raises(ShardIndexError, match=message):
            check_index(index, 2 * CHUNK, CHUNK, written=2)


def test_shard_files_must_be_what_the_shape_implies():
    index = 2 * 16 + 4
    check_shards(50, 8, 16, CHUNK, {0: 2 * CHUNK + index, 1: 2 * CHUNK + index, 2: 2 * CHUNK + index,
                                    3: CHUNK + index})
    with pytest.raises(ShardIndexError, match=r"1099511627776 rows need 68719476736 shards, the store holds 1"):
        check_shards(2**40, 8, 16, CHUNK, {0: 2 * CHUNK + index})
    with pytest.raises(ShardIndexError, match="shard 0 has 50 bytes; 16 rows in this chunking make it 76"):
        check_shards(16, 8, 16, CHUNK, {0: 50})
    with pytest.raises(ShardIndexError, match="inner chunks of 1000000000 rows do not divide shards of 16"):
        check_shards(16, 10**9, 16, CHUNK, {0: 76})
    with pytest.raises(ShardIndexError, match="shard 1 is absent"):
        check_shards(32, 8, 16, CHUNK, {0: 76, 2: 76})


@pytest.fixture(scope="module")
def cache(tiny_processed_dir, tmp_path_factory):
    """A tiny cache whose volume shards hold several inner chunks (a chunk of 2,048 rows)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(cache_format.ARRAYS, "volume_fields", ArraySpec("float32", 2048, VOLUME_BLOCK_ROWS))
        return build_tiny_cache(tiny_processed_dir, tmp_path_factory.mktemp("cache") / "cache")


@pytest.mark.parametrize("fault", sorted(crafted.CRAFTS))
def test_every_crafted_fault_is_one_error_naming_the_run(cache, tiny_processed_dir, tmp_path, fault):
    copy = shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    name, phrase = crafted.CRAFTS[fault](copy)
    results = {r.name: r for r in validate_cache(list_runs(tiny_processed_dir), copy, tiny_settings())}
    assert results[name].status == "failed" and phrase in results[name].message, results[name]
    assert f"/{name}" in results[name].message
    assert all(r.status == "ok" for n, r in results.items() if n != name)
    dataset = CachedDoMINODataset(copy, model_type="combined", **SAMPLES)  # volume rows drawn too
    index = [p.parent.name for p in dataset.run_paths].index(name)
    with pytest.raises(CacheError) as caught:
        dataset.set_epoch(0)
        dataset[index]
    assert phrase in str(caught.value) and f"/{name}" in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_absent_generation_is_not_called_replaced(cache, tmp_path):
    copy = shutil.copytree(cache, tmp_path / "cache")
    dataset = CachedDoMINODataset(copy, **SAMPLES)
    shutil.rmtree(dataset.run_paths[1])
    with pytest.raises(FileNotFoundError, match="cache run does not exist"):
        dataset[1]
