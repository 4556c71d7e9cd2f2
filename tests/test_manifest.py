"""The manifest: its checksum and run paths checked, a validation that reports every run
(phantom, unlisted, other settings), stale sources refused by the dataset, one-line errors when
the manifest cannot be written, and no write at all when nothing changed."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
from cache_fixtures import SAMPLES, build_tiny_cache, tiny_settings
from omegaconf import OmegaConf

from datapipe import CachedDoMINODataset
from domino_pipeline.processed.runs import list_runs, stat_fingerprint
from domino_pipeline.store import manifest as manifest_module
from domino_pipeline.store.build import commit_manifest
from domino_pipeline.store.cache_format import CacheError, StaleCacheError
from domino_pipeline.store.manifest import manifest_digest, read_manifest, write_manifest
from domino_pipeline.store.validate import validate_cache


@pytest.fixture
def cache(cache_dir, tmp_path):
    """A writable copy of the tiny cache."""
    return shutil.copytree(cache_dir, tmp_path / "cache")


def _edit(cache, change, *, rehash: bool) -> None:
    path = cache / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    if rehash:
        manifest["sha256"] = manifest_digest(manifest)
    path.write_text(json.dumps(manifest))


def test_an_edited_manifest_fails_its_checksum(cache):
    _edit(cache, lambda m: m["runs"]["run_1"].update(bytes=1), rehash=False)
    with pytest.raises(CacheError, match=r"manifest\.json: its checksum does not match its contents"):
        read_manifest(cache)
    with pytest.raises(CacheError, match="checksum does not match"):
        CachedDoMINODataset(cache, **SAMPLES)


@pytest.mark.parametrize("path", ["../elsewhere/g1.zarr", "/tmp/run_1/g1.zarr", "run_2/g1.zarr",
                                  "run_1/../run_2/g1.zarr", "run_1"])
def test_run_paths_must_stay_inside_the_cache(cache, path):
    _edit(cache, lambda m: m["runs"]["run_1"].update(path=path), rehash=True)
    with pytest.raises(CacheError, match=r"run 'run_1': path .* is not 'run_1/g<N>\.zarr' inside"):
        read_manifest(cache)


def test_validate_reports_every_run_phantom_unlisted_and_settings(cache, tiny_processed_dir):
    settings = tiny_settings()
    runs = list_runs(tiny_processed_dir)
    assert all(r.status == "ok" for r in validate_cache(runs, cache, settings))
    _edit(cache, lambda m: m["runs"]["run_1"].update(path="run_1/g7.zarr"), rehash=True)
    shutil.copytree(cache / "run_2", cache / "run_9")
    results = {r.name: r for r in validate_cache(runs, cache, settings)}
    assert "run_1/g7.zarr: listed in manifest.json but absent" in results["run_1"].message
    assert results["run_2"].status == "ok"
    assert "run_9: not listed in manifest.json" in results["run_9"].message
    other = {r.name: r for r in validate_cache(runs, cache, tiny_settings(num_neighbors_surface=5))}
    assert "built with other settings than the config: num_neighbors_surface: cached 7, expected 5" \
        in other["manifest.json"].message


def test_validate_names_a_run_whose_checks_raise_and_goes_on(cache, tiny_processed_dir, monkeypatch):
    from domino_pipeline.store import validate

    def explode(run, name, rows=1 << 20):
        if "run_1" in str(run.path):
            raise RuntimeError("disk on fire")
    monkeypatch.setattr(validate, "read_in_blocks", explode)
    results = {r.name: r for r in validate_cache(list_runs(tiny_processed_dir), cache, tiny_settings())}
    assert results["run_1"].message == "RuntimeError: disk on fire" and results["run_2"].status == "ok"


def test_a_reprocessed_run_is_refused_by_the_dataset(cache, tiny_processed_dir):
    stats = {p.stem: stat_fingerprint(p) for p in list_runs(tiny_processed_dir)}
    CachedDoMINODataset(cache, processed_stats=stats, **SAMPLES)
    with pytest.raises(StaleCacheError, match=r"runs \[.run_2.\] were written again"):
        CachedDoMINODataset(cache, processed_stats={**stats, "run_2": "0" * 64}, **SAMPLES)
    with pytest.warns(DeprecationWarning, match="processed_stats"):  # the earlier keyword, still checked
        with pytest.raises(StaleCacheError, match=r"runs \[.run_2.\] were written again"):
            CachedDoMINODataset(cache, sources={**stats, "run_2": "0" * 64}, **SAMPLES)


def test_a_manifest_that_cannot_be_written_is_one_line(cache, monkeypatch, capsys):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(manifest_module, "write_json_atomic", full)
    with pytest.raises(CacheError, match=r"manifest\.json: cannot write the manifest: No space left on device"):
        write_manifest(cache, tiny_settings(), {})


def test_a_rerun_with_nothing_new_writes_nothing_and_takes_no_lock(cache, tiny_processed_dir):
    cfg = OmegaConf.create({"any": 1})
    before = (cache / "manifest.json").stat().st_mtime_ns
    (cache / ".manifest.lock").unlink(missing_ok=True)
    (cache / ".manifest.lock").mkdir()  # as unusable as a lock on a read-only cache
    commit_manifest(cfg, list_runs(tiny_processed_dir), cache, tiny_settings())
    assert (cache / "manifest.json").stat().st_mtime_ns == before


def test_a_dataset_keeps_few_runs_open(cache_dir):
    ds = CachedDoMINODataset(cache_dir, max_open_runs=1, **SAMPLES)
    ds[0]
    first = ds.run(0)
    assert ds.open_run_indices() == [0]
    ds[1]
    assert ds.open_run_indices() == [1]
    assert ds.run(0) is not first  # closed, so opened again
    assert ds.open_run_indices() == [0]


def test_an_edited_array_description_is_caught_by_validate_and_at_open(cache, tiny_processed_dir):
    meta = cache / "run_2" / "g1.zarr" / "surface_fields" / "zarr.json"
    meta.write_text(meta.read_text().replace('"little"', '"big"'))
    results = {r.name: r for r in validate_cache(list_runs(tiny_processed_dir), cache, tiny_settings())}
    assert results["run_1"].status == "ok" and results["run_2"].status == "failed"
    assert "run_2/g1.zarr: its metadata" in results["run_2"].message
    with pytest.raises(CacheError, match=r"run_2/g1\.zarr: its metadata .* differ from what manifest\.json records"):
        CachedDoMINODataset(cache, scaling_factors=None, **SAMPLES)[1]


def test_a_read_only_cache_fails_each_run_in_one_line(tiny_processed_dir, tmp_path, monkeypatch):
    from domino_pipeline.storage import atomic_store
    from domino_pipeline.store.build import cache_run

    real_open = atomic_store.os.open

    def read_only(path, flags, *args):
        if flags & (atomic_store.os.O_CREAT | atomic_store.os.O_RDWR | atomic_store.os.O_WRONLY):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)
    monkeypatch.setattr(atomic_store.os, "open", read_only)
    results = [cache_run(p, tmp_path / "cache", tiny_settings(), rebuild=False) for p in list_runs(tiny_processed_dir)]
    assert [r.status for r in results] == ["failed", "failed"]
    for r in results:
        assert "\n" not in r.message and "Read-only file system" in r.message and ".lock" in r.message


def test_a_rewrite_that_keeps_size_and_mtime_is_seen_without_validate(tiny_processed_dir, tmp_path):
    """One byte of a processed run changed in place, its size kept and its mtime restored: the
    stat fingerprint (which holds the inode change time) differs, so a rerun hashes the bytes and
    rebuilds the run, and a dataset given the current stats refuses it."""
    from cache_data import build_cache

    processed = shutil.copytree(tiny_processed_dir, tmp_path / "processed")
    cache = build_tiny_cache(processed, tmp_path / "cache")
    runs = list_runs(processed)
    chunk = sorted(p for p in (processed / "run_1.zarr" / "surface_fields" / "c").rglob("*") if p.is_file())[0]
    before = chunk.stat()
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    with open(chunk, "r+b") as handle:  # in place: same inode, same size
        handle.write(raw)
    os.utime(chunk, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime a copy tool keeps
    assert (chunk.stat().st_size, chunk.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    sources = {p.stem: stat_fingerprint(p) for p in runs}
    with pytest.raises(StaleCacheError, match=r"runs \['run_1'\] were written again"):
        CachedDoMINODataset(cache, processed_stats=sources, **SAMPLES)
    results = {r.name: r for r in build_cache(runs, cache, tiny_settings(), rebuild=False)}
    assert results["run_1"].status == "stale" and "source: the processed run has changed" in results["run_1"].message
    assert results["run_2"].status == "skipped"
