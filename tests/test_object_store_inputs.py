"""Processed runs on object storage (an S3 server on 127.0.0.1, moto): listed, opened and
loaded as from the local folder in every form, through transient errors too; absent chunks
named; fingerprints that equal the folder's bytes and change when an object is written again;
a cache built from them equal to the local build, refused once they change; the uncached
datapipe over them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import pytest
from cache_fixtures import SAMPLES, tiny_settings
from curator_fixtures import write_curator_npz, write_curator_zarr
from test_object_store_build import assert_same_as

from domino_pipeline.processed.run_layout import ARRAY_NAMES, ProcessedRunError
from domino_pipeline.processed.runs import list_runs, load_run, open_run, run_format, run_name
from domino_pipeline.processed.runs import source_fingerprint, stat_fingerprint
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.storage.byte_reader import read_bytes
from domino_pipeline.storage.object_store import bucket_and_key, is_url
from domino_pipeline.store.build import manifest_runs, write_scaling_factors
from domino_pipeline.store.cache_format import StaleCacheError
from domino_pipeline.store.manifest import write_manifest
from domino_pipeline.store.object_cache import upload_folder
from domino_pipeline.store.staleness import manifest_records, run_state


@pytest.fixture(scope="module")
def s3_processed(s3_server, tiny_processed_dir: Path) -> str:
    """``tiny_processed_dir`` uploaded to a bucket: its URL. Read only."""
    url = f"s3://{s3_server.bucket('processed')}/tiny"
    upload_folder(tiny_processed_dir, url)
    return url


def _put(url: str, data: bytes) -> None:
    import obstore

    store, key = bucket_and_key(url)
    obstore.put(store, key, data)


def upload_all(folder: Path, url: str) -> None:
    """Every file under ``folder`` to the prefix ``url``, hidden ones too (Zarr v2's .zgroup)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        _put(f"{url}/{path.relative_to(folder).as_posix()}", path.read_bytes())


@pytest.mark.slow
def test_runs_on_s3_list_open_and_load_as_the_local_ones(s3_processed, tiny_processed_dir):
    remote, local = list_runs(s3_processed), list_runs(tiny_processed_dir)
    assert [run_name(r) for r in remote] == [run_name(r) for r in local] == ["run_1", "run_2"]
    assert all(is_url(r) and r.startswith(s3_processed) for r in remote)
    for there, here in zip(remote, local):
        assert open_run(there).format == run_format(there) == "processed"
        loaded, expected = load_run(there), load_run(here)
        assert list(loaded) == list(ARRAY_NAMES)
        for name in ARRAY_NAMES:
            assert loaded[name].dtype == expected[name].dtype, name
            np.testing.assert_array_equal(loaded[name], expected[name], err_msg=name)
        assert source_fingerprint(there) == source_fingerprint(here)  # the same bytes


@pytest.mark.parametrize("form", ["curator-zarr-v2", "curator-zarr-v3", "curator-npz"])
@pytest.mark.slow
def test_curator_runs_on_s3_load_as_the_local_ones(s3_server, tiny_processed_dir, tmp_path, form):
    source = load_run(tiny_processed_dir / "run_1.zarr")
    writers = {"curator-zarr-v2": lambda: write_curator_zarr(tmp_path / "run_1.zarr", source, zarr_format=2),
               "curator-zarr-v3": lambda: write_curator_zarr(tmp_path / "run_1.zarr", source, zarr_format=3),
               "curator-npz": lambda: write_curator_npz(tmp_path / "run_1.npz", source)}
    local = writers[form]()
    url = f"s3://{s3_server.bucket('curator')}/runs"
    upload_all(tmp_path, url)
    [remote] = list_runs(url)
    assert remote == f"{url}/{local.name}" and run_format(remote) == form
    loaded = load_run(remote)
    for name in ARRAY_NAMES:
        np.testing.assert_array_equal(loaded[name], source[name], err_msg=name)
    assert source_fingerprint(remote) == source_fingerprint(local)


@pytest.mark.slow
def test_an_absent_chunk_of_a_run_on_s3_is_named(s3_server, tiny_processed_dir):
    import obstore

    url = f"s3://{s3_server.bucket('holes')}/runs"
    upload_folder(tiny_processed_dir, url)
    store, key = bucket_and_key(f"{url}/run_1.zarr/surface_areas/c/0")
    obstore.delete(store, key)
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: array surface_areas .* lacks chunks \['c/0'\]"):
        open_run(f"{url}/run_1.zarr")
    with pytest.raises(FileNotFoundError, match="no processed run there"):
        open_run(f"{url}/run_9.zarr")
    with pytest.raises(FileNotFoundError, match="no such processed-data prefix"):
        list_runs(f"{url}/nothing")


@pytest.mark.slow
def test_a_cache_built_from_s3_runs_equals_the_local_build_and_refuses_once_they_change(
        s3_server, tiny_processed_dir, cache_dir):
    from cache_data import build_cache

    processed = f"s3://{s3_server.bucket('processed')}/runs"
    upload_folder(tiny_processed_dir, processed)
    url, settings, runs = f"s3://{s3_server.bucket()}/from-s3", tiny_settings(), list_runs(processed)
    assert [r.status for r in build_cache(runs, url, settings, rebuild=False)] == ["built", "built"]
    factors = write_scaling_factors(runs, url, settings, normalization="min_max")
    write_manifest(url, settings, manifest_runs(runs, url, settings), scaling_factors=factors)
    assert_same_as(url, cache_dir)
    assert [r.status for r in build_cache(runs, url, settings, rebuild=False)] == ["skipped", "skipped"]
    sources = {run_name(r): stat_fingerprint(r) for r in runs}
    CachedDoMINODataset(url, model_type="surface", processed_stats=sources, **SAMPLES)[0]

    attrs = f"{runs[0]}/zarr.json"
    _put(attrs, read_bytes(attrs).replace(b'"write_id": "', b'"write_id": "0'))  # a rewrite
    assert stat_fingerprint(runs[0]) != sources["run_1"]
    state = run_state(url, runs[0], settings, manifest_records(url))
    assert not state.current and "the processed run has changed" in " ".join(state.reasons)
    changed = {run_name(r): stat_fingerprint(r) for r in runs}
    with pytest.raises(StaleCacheError, match=r"runs \['run_1'\] were written again"):
        CachedDoMINODataset(url, model_type="surface", processed_stats=changed, **SAMPLES)
    assert [r.status for r in build_cache(runs, url, settings, rebuild=False)] == ["stale", "skipped"]


@pytest.mark.slow
def test_the_same_bytes_put_again_change_the_stat_fingerprint_only(s3_server, tiny_processed_dir):
    url = f"s3://{s3_server.bucket('again')}/runs"
    upload_folder(tiny_processed_dir, url)
    run = f"{url}/run_2.zarr"
    stat, digest = stat_fingerprint(run), source_fingerprint(run)
    time.sleep(1.1)  # S3 modification times have one-second resolution
    _put(f"{run}/zarr.json", read_bytes(f"{run}/zarr.json"))
    assert stat_fingerprint(run) != stat and source_fingerprint(run) == digest


@pytest.mark.slow
def test_the_uncached_datapipe_reads_runs_on_s3_as_local_ones(s3_processed, tiny_processed_dir):
    from test_datapipe import _uncached

    remote, local = _uncached(s3_processed, seed=3), _uncached(tiny_processed_dir, seed=3)
    assert len(remote) == len(local) == 2
    a, b = remote[1], local[1]
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert remote.worker_context == "spawn" and local.worker_context is None


def test_process_data_refuses_to_write_to_a_url_in_one_line(tiny_raw_dir, capsys):
    from conftest import yaml_config
    from process_data import main

    with pytest.raises(SystemExit, match="1"):
        main(yaml_config(f"data.raw_dir={tiny_raw_dir}", "data.processed_dir=s3://bucket/processed"))
    assert capsys.readouterr().err.strip() == (
        "error: s3://bucket/processed: process_data.py writes to a local folder; upload the "
        "processed runs there to read them from object storage")


@pytest.mark.slow
def test_runs_on_s3_load_through_transient_errors_and_slow_responses(s3_server, s3_processed,
                                                                    tiny_processed_dir, monkeypatch):
    from s3_server import FaultProxy

    from domino_pipeline.storage import object_store
    proxy = FaultProxy(s3_server.endpoint, fail_every=3, slow_every=5, delay=0.1)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setattr(object_store, "_STORES", {})  # new clients, through the proxy
        [run, _] = list_runs(s3_processed)
        names = ["stl_faces", "surface_fields", "volume_mesh_centers"]
        loaded, expected = load_run(run, names), load_run(tiny_processed_dir / "run_1.zarr", names)
        for name in names:
            np.testing.assert_array_equal(loaded[name], expected[name], err_msg=name)
        assert proxy.failed > 0 and proxy.delayed > 0
    finally:
        proxy.stop()


@pytest.mark.slow
def test_a_missing_bucket_is_named_in_one_line(s3_server):
    from domino_pipeline.runtime.entry_point import one_line
    from domino_pipeline.storage.object_store import ObjectStoreError

    with pytest.raises(ObjectStoreError) as raised:
        list_runs("s3://no-such-bucket-7f3/processed")
    assert isinstance(raised.value, OSError)  # the entry points' one-line refusals
    assert one_line(raised.value) == "s3://no-such-bucket-7f3/processed: not found (HTTP 404 NoSuchBucket)"
