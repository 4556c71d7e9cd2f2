"""The cache read from object storage (an S3 server on 127.0.0.1, moto): the same items as
from local disk, in DataLoader workers too; stale, corrupt and missing objects refused by name;
transient errors and slow responses survived."""

from __future__ import annotations

import pytest
import torch

from cache_fixtures import SAMPLES, tiny_settings
from s3_server import FaultProxy

from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.storage import byte_reader
from domino_pipeline.storage.byte_reader import ConflictError, Request, shared_reader, reader_and_key
from domino_pipeline.storage.object_store import split_url
from domino_pipeline.store.cache_format import CacheError, StaleCacheError
from domino_pipeline.store.manifest import read_manifest, read_manifest_version, write_manifest
from domino_pipeline.store.object_cache import upload_folder

pytestmark = pytest.mark.slow


def _same_items(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_items_from_s3_equal_the_local_caches_bit_for_bit(cache_dir, s3_cache, seed):
    local = CachedDoMINODataset(cache_dir, model_type="combined", seed=seed, **SAMPLES)
    remote = CachedDoMINODataset(s3_cache, model_type="combined", seed=seed, **SAMPLES)
    assert len(remote) == len(local) == 2
    for epoch in range(6):
        local.set_epoch(epoch)
        remote.set_epoch(epoch)
        for index in range(len(local)):
            _same_items(local[index], remote[index])


def test_dataloader_workers_read_s3_as_one_process_does(cache_dir, s3_cache):
    local = CachedDoMINODataset(cache_dir, model_type="surface", seed=5, **SAMPLES)
    remote = CachedDoMINODataset(s3_cache, model_type="surface", seed=5, **SAMPLES)
    remote[0]  # the parent's client and open runs stay in the parent
    for epoch in (0, 1):
        local.set_epoch(epoch)
        remote.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(remote, batch_size=None, num_workers=2,
                                             multiprocessing_context=remote.worker_context)
        for index, item in enumerate(loader):
            _same_items(local[index], item)


@pytest.mark.parametrize("exact, steady, first", [(False, 1, 3), (True, 2, 4)])
def test_a_steady_draw_is_one_request_wave_and_a_first_draw_three(s3_features_cache, exact, steady, first):
    """Windowed draws fetch their windows and the areas in one wave; a draw taking all of a
    part's rows (exact) reads the areas, then the chosen rows."""
    ds = CachedDoMINODataset(s3_features_cache, model_type="combined", exact=exact, **SAMPLES)
    source = shared_reader(split_url(s3_features_cache)[0])
    waves = []
    for epoch in range(6):
        ds.set_epoch(epoch)
        before = source.waves
        ds[1]
        waves.append(source.waves - before)
    assert waves == [first] + [steady] * 5, waves  # windows that wrap past the last row too


def test_a_cache_built_with_other_settings_is_refused(s3_cache):
    with pytest.raises(StaleCacheError, match="interp_res: cached \\[16, 8, 8\\], expected \\[32, 8, 8\\]"):
        CachedDoMINODataset(s3_cache, expected=tiny_settings(interp_res=[32, 8, 8]).fingerprinted())


def _copy_of(s3_server, cache_dir) -> str:
    url = f"s3://{s3_server.bucket()}/cache"
    upload_folder(cache_dir, url)
    return url


def _shard_key(url: str, run: str, array: str) -> str:
    """The key (within its bucket) of the first shard object of ``array`` in run ``run``."""
    source, prefix = reader_and_key(url)
    generation = read_manifest(url)["runs"][run]["path"]
    return f"{prefix}/{generation}/{array}/c/0/0"


def test_corrupt_and_missing_objects_are_named(s3_server, cache_dir):
    url = _copy_of(s3_server, cache_dir)
    source, _ = reader_and_key(url)
    key = _shard_key(url, "run_2", "surface_fields")
    [(data, _)] = source.fetch([Request(key)])
    flipped = bytearray(data)
    flipped[10] ^= 0xFF
    source.put(key, bytes(flipped))
    ds = CachedDoMINODataset(url, model_type="surface", **SAMPLES, surface_window_factor=None)
    ds[0]
    with pytest.raises(CacheError, match=r"s3://.*/cache/run_2/g1\.zarr: array 'surface_fields' is "
                                         r"corrupt or unreadable: surface_fields: inner chunk 0 of "
                                         r"shard c/0/0 failed its CRC32C check"):
        ds[1]
    source.delete(_shard_key(url, "run_1", "volume_fields"))
    ds = CachedDoMINODataset(url, model_type="volume", **SAMPLES)
    with pytest.raises(CacheError, match=r"s3://.*/cache/run_1/g1\.zarr: array 'volume_fields' is "
                                         r"corrupt or unreadable: volume_fields: shard c/0/0 is missing"):
        ds[0]


def test_a_missing_manifest_or_run_is_named(s3_server, cache_dir):
    url = f"s3://{s3_server.bucket()}/empty"
    with pytest.raises(FileNotFoundError, match=r"s3://.*/empty/manifest.json: no cache manifest"):
        CachedDoMINODataset(url)
    url = _copy_of(s3_server, cache_dir)
    source, prefix = reader_and_key(url)
    source.delete(f"{prefix}/run_1/g1.zarr/zarr.json")
    with pytest.raises(CacheError, match=r"/cache/run_1/g1.zarr: the run's metadata \(zarr.json\) is missing"):
        CachedDoMINODataset(url, model_type="surface", **SAMPLES)[0]


def test_transient_errors_and_slow_responses_are_survived(s3_server, cache_dir, monkeypatch):
    url = _copy_of(s3_server, cache_dir)
    proxy = FaultProxy(s3_server.endpoint, fail_every=3, slow_every=5, delay=0.3)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setattr(byte_reader, "_READERS", {})  # new clients, through the proxy
        local = CachedDoMINODataset(cache_dir, model_type="combined", **SAMPLES)
        remote = CachedDoMINODataset(url, model_type="combined", **SAMPLES)
        for index in range(2):
            _same_items(local[index], remote[index])
        assert proxy.failed > 0 and proxy.delayed > 0
    finally:
        proxy.stop()


def test_the_manifest_commit_is_a_conditional_put(s3_server, cache_dir):
    url = _copy_of(s3_server, cache_dir)
    manifest, version = read_manifest_version(url)
    settings = tiny_settings()
    write_manifest(url, settings, manifest["runs"], if_version=version)
    with pytest.raises(ConflictError, match="changed by another writer"):
        write_manifest(url, settings, {}, if_version=version)  # read before the last commit
    with pytest.raises(ConflictError, match="changed by another writer"):
        write_manifest(url, settings, {}, if_version=None)  # "create", but one exists
    assert sorted(read_manifest(url)["runs"]) == ["run_1", "run_2"]


def test_predict_reads_the_scaling_factors_of_a_cache_on_s3(cache_dir, s3_cache):
    """predict.py's factors (datapipe.scaling_factors_of): the cache's own, read from its URL and
    checked against its manifest, equal to the local cache's."""
    from conftest import typed_config
    from datapipe import scaling_factors_of

    from domino_pipeline.store.manifest import manifest_scaling_factors
    remote = scaling_factors_of(typed_config("cache.enabled=true", f"cache.dir={s3_cache}"))
    assert remote == manifest_scaling_factors(cache_dir, normalization=remote["normalization"])
    assert remote["runs"] == ["run_1", "run_2"]
