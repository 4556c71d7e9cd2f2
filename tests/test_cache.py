"""The cache format: arrays, chunks and checksums on disk, attributes, manifest, fingerprints,
both neighbour layouts, corruption and staleness caught with the run and the array or setting
named."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import zarr
from cache_fixtures import (
    SAMPLES,
    first_chunk,
    flip_byte,
    generation,
    tiny_settings,
    write_run,
)

from datapipe import CachedDoMINODataset
from domino_pipeline.compute.preprocessing import preprocess_run
from domino_pipeline.compute.scaling import run_statistics
from domino_pipeline.compute.settings import NEIGHBOR_FEATURES
from domino_pipeline.processed.runs import list_runs, load_run, source_fingerprint
from domino_pipeline.store.cache_format import (
    ARRAYS,
    NEIGHBOR_FEATURE_ARRAYS,
    CacheError,
    StaleCacheError,
    diff_settings,
    file_sizes,
    layout_arrays,
)
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import read_manifest


def test_runs_hold_what_preprocessing_computes(cache_dir, tiny_processed_dir):
    path = list_runs(tiny_processed_dir)[0]
    arrays = load_run(path)
    expected = preprocess_run(arrays, tiny_settings())
    expected["scalars"]["field_statistics"] = run_statistics(arrays)  # for the scaling factors
    expected["scalars"]["published_velocity"] = None  # DrivAerML's speed is the profile's, no run's own
    run = CacheRun(generation(cache_dir, path.stem))
    for name, spec in ARRAYS.items():
        data = run.read(name)
        assert data.dtype == np.dtype(spec.dtype), name
        np.testing.assert_array_equal(data, expected[name], err_msg=name)
    assert run.attrs["scalars"] == json.loads(json.dumps(expected["scalars"]))
    assert run.attrs["counts"] == {"geometry": len(expected["geometry_coordinates"]),
                                   "surface": len(expected["surface_coordinates"]),
                                   "volume": len(expected["volume_coordinates"])}


def test_arrays_are_sharded_by_rows_with_crc32c_checked_inner_chunks(cache_dir):
    meta = json.loads((generation(cache_dir, "run_1") / "volume_fields" / "zarr.json").read_text())
    (sharding,) = meta["codecs"]
    assert sharding["name"] == "sharding_indexed"
    config = sharding["configuration"]
    assert [c["name"] for c in config["codecs"]] == ["bytes", "crc32c"]
    assert [c["name"] for c in config["index_codecs"]] == ["bytes", "crc32c"]
    rows = min(ARRAYS["volume_fields"].chunk_rows, meta["shape"][0])
    assert config["chunk_shape"] == [rows, 5]
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    assert shard[0] % rows == 0 and shard[0] >= meta["shape"][0]  # a tiny run: one shard
    neighbors = zarr.open_array(str(generation(cache_dir, "run_1") / "surface_neighbors"), mode="r")
    assert neighbors.dtype == np.int32
    # one shard file per array and a zarr.json per array and the group: tens of files, not thousands
    assert len(file_sizes(generation(cache_dir, "run_1"))) == 2 * len(ARRAYS) + 1


def test_manifest_records_format_settings_and_runs(cache_dir, tiny_processed_dir):
    manifest = read_manifest(cache_dir)
    assert manifest["format"] == "domino-cache" and manifest["format_version"] == 2
    assert manifest["settings"] == tiny_settings().fingerprinted()
    assert manifest["fingerprint"] == tiny_settings().fingerprint()
    assert sorted(manifest["runs"]) == ["run_1", "run_2"]
    entry = manifest["runs"]["run_1"]
    run = CacheRun(generation(cache_dir, "run_1"))
    assert entry["fingerprint"] == run.attrs["fingerprint"] and entry["bytes"] > 0
    assert entry["path"] == "run_1/g1.zarr" and entry["generation"] == 1 and entry["files"] == 25
    assert entry["source"]["fingerprint"] == source_fingerprint(tiny_processed_dir / "run_1.zarr")


def test_a_features_run_adds_its_neighbours_features_chunked_by_rows(features_cache_dir, cache_dir):
    run, indices = CacheRun(generation(features_cache_dir, "run_1")), CacheRun(generation(cache_dir, "run_1"))
    for name in ARRAYS:  # everything the indices layout stores, the same
        np.testing.assert_array_equal(run.read(name), indices.read(name), err_msg=name)
    neighbors, ns = run.read("surface_neighbors"), run.attrs["counts"]["surface"]
    for name in NEIGHBOR_FEATURES:
        array = f"surface_neighbor_{name}"
        assert run.reader(array) is not None, array  # read straight from its chunk files
        np.testing.assert_array_equal(run.read(array), run.read(f"surface_{name}")[neighbors], err_msg=name)
        meta = json.loads((generation(features_cache_dir, "run_1") / array / "zarr.json").read_text())
        rows = min(NEIGHBOR_FEATURE_ARRAYS[array].chunk_rows, ns)
        shape = [ns, *neighbors.shape[1:]] + ([] if name == "areas" else [3])
        assert meta["shape"] == shape
        (sharding,) = meta["codecs"]
        assert sharding["configuration"]["chunk_shape"] == [rows, *shape[1:]]
        assert [c["name"] for c in sharding["configuration"]["codecs"]] == ["bytes", "crc32c"]
    assert set(read_manifest(features_cache_dir)["arrays"]) == set(layout_arrays("features"))
    assert set(read_manifest(cache_dir)["arrays"]) == set(ARRAYS)


def test_writing_a_layout_without_its_arrays_is_refused(tiny_processed_dir, tmp_path):
    contents = preprocess_run(load_run(list_runs(tiny_processed_dir)[0]), tiny_settings())
    with pytest.raises(ValueError, match=r"run run_1: the 'features' neighbour layout of parts \['surface', 'volume'\] needs arrays "
                                         r"\['surface_neighbor_areas'"):
        write_run(tmp_path, "run_1", contents, tiny_settings(neighbor_layout="features"))
    assert not (tmp_path / "run_1").exists() or not list((tmp_path / "run_1").iterdir())
    with pytest.raises(ValueError, match="neighbor_layout must be one of"):
        layout_arrays("feature")


def test_source_fingerprint_follows_contents_not_location(tiny_processed_dir, tmp_path):
    copy = tmp_path / "run_1.zarr"
    shutil.copytree(tiny_processed_dir / "run_1.zarr", copy)
    assert source_fingerprint(copy) == source_fingerprint(tiny_processed_dir / "run_1.zarr")
    group = zarr.open_group(str(copy), mode="r+")
    group.attrs["counts"] = {**group.attrs["counts"], "volume_points": 1}
    assert source_fingerprint(copy) != source_fingerprint(tiny_processed_dir / "run_1.zarr")


def test_a_flipped_byte_names_the_run_and_the_array(cache_dir, tmp_path):
    broken = tmp_path / "cache"
    shutil.copytree(cache_dir, broken)
    flip_byte(first_chunk(generation(broken, "run_2"), "surface_grid_sdf"))
    ds = CachedDoMINODataset(broken, model_type="surface", **SAMPLES)
    ds[0]  # run_1 is intact
    with pytest.raises(CacheError, match=r"run_2/g1\.zarr: array 'surface_grid_sdf' is corrupt"):
        ds[1]


def test_a_changed_setting_is_refused_and_named(cache_dir):
    expected = tiny_settings(interp_res=(32, 8, 8)).fingerprinted()
    with pytest.raises(StaleCacheError, match=r"interp_res: cached \[16, 8, 8\], expected \[32, 8, 8\]"):
        CachedDoMINODataset(cache_dir, expected=expected, **SAMPLES)
    expected = tiny_settings(num_neighbors_surface=5).fingerprinted()
    with pytest.raises(StaleCacheError, match="num_neighbors_surface: cached 7, expected 5") as err:
        CachedDoMINODataset(cache_dir, expected=expected, **SAMPLES)
    assert "interp_res" not in str(err.value)
    CachedDoMINODataset(cache_dir, expected=tiny_settings().fingerprinted(), **SAMPLES)


def test_a_cache_of_the_other_neighbor_layout_is_refused_and_named(cache_dir, features_cache_dir):
    features = tiny_settings(neighbor_layout="features").fingerprinted()
    stale = r"rebuild it(.|\n)*neighbor_layout: cached indices, expected features"
    with pytest.raises(StaleCacheError, match=stale):
        CachedDoMINODataset(cache_dir, expected=features, **SAMPLES)
    with pytest.raises(StaleCacheError, match="neighbor_layout: cached features, expected indices"):
        CachedDoMINODataset(features_cache_dir, expected=tiny_settings().fingerprinted(), **SAMPLES)
    assert CachedDoMINODataset(features_cache_dir, expected=features, **SAMPLES).neighbor_layout == "features"


def test_an_edited_run_attribute_is_refused_at_open(cache_dir, tmp_path):
    mixed = tmp_path / "cache"
    shutil.copytree(cache_dir, mixed)
    group = zarr.open_group(str(generation(mixed, "run_1")), mode="r+")
    group.attrs["settings"] = {**group.attrs["settings"], "num_neighbors_surface": 9}
    ds = CachedDoMINODataset(mixed, **SAMPLES)
    ds[1]  # run_2 is intact
    with pytest.raises(CacheError, match=r"run_1/g1\.zarr: its metadata .* differ from what manifest\.json records"):
        ds[0]


def test_missing_or_foreign_caches(tmp_path, cache_dir):
    with pytest.raises(FileNotFoundError, match="no cache manifest"):
        CachedDoMINODataset(tmp_path, **SAMPLES)
    with pytest.raises(FileNotFoundError, match=r"runs \['run_9'\] are not in the cache manifest"):
        CachedDoMINODataset(cache_dir, runs=["run_9"], **SAMPLES)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CacheError, match="not a domino-cache manifest"):
        read_manifest(tmp_path)
    with pytest.raises(FileNotFoundError, match="cache run does not exist"):
        CacheRun(tmp_path / "run_1.zarr")
    (tmp_path / "run_1").mkdir()
    with pytest.raises(FileNotFoundError, match="cache run does not exist"):  # gone, not replaced
        CacheRun(tmp_path / "run_1" / "g1.zarr")
    (tmp_path / "run_1" / "g2.zarr").mkdir()
    with pytest.raises(StaleCacheError, match="this generation of the run was replaced by a rebuild"):
        CacheRun(tmp_path / "run_1" / "g1.zarr")
    group = zarr.create_group(store=str(tmp_path / "x.zarr"), zarr_format=3)
    group.attrs["format"] = "domino-cache"
    group.attrs["format_version"] = 99
    with pytest.raises(CacheError, match="format_version 99"):
        CacheRun(tmp_path / "x.zarr")


def test_diff_settings_lists_nested_differences():
    a = {"interp_res": [1, 2, 3], "box": {"min": [0], "max": [1]}, "k": 7}
    b = {"interp_res": [1, 2, 3], "box": {"min": [0], "max": [2]}, "extra": 1, "k": 7}
    assert diff_settings(a, b) == ["box.max: cached [1], expected [2]", "extra: cached <absent>, expected 1"]
    # a setting left out at its implicit default is shown with that value
    assert diff_settings({}, {"neighbor_layout": "features"}) == \
        ["neighbor_layout: cached indices, expected features"]
    assert diff_settings({"neighbor_layout": "indices"}, {}) == []


def test_byte_counting_counts_the_chunks_read(cache_dir):
    run = CacheRun(generation(cache_dir, "run_1"))
    rows = min(ARRAYS["volume_fields"].chunk_rows, run.attrs["counts"]["volume"])
    run.read("volume_fields", slice(0, 10))
    small = run.bytes_read
    assert 10 * 5 * 4 <= small <= rows * 5 * 4 + 16384  # one inner chunk, the index and metadata
    run.read("volume_fields")
    assert run.bytes_read - small >= run.attrs["counts"]["volume"] * 5 * 4
