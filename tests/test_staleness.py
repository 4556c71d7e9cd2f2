"""Whether a cache run is current (store/staleness.py): against the settings, against the
processed run it was built from, with and without a generation, and the manifest's scaling
factors; checked against fingerprints computed here independently."""

from __future__ import annotations

import json
import shutil

import pytest
from cache_fixtures import generation, tiny_settings

from domino_pipeline.processed.runs import source_fingerprint, stat_fingerprint
from domino_pipeline.store.staleness import (
    check_scaling_factors,
    current_source,
    manifest_records,
    run_state,
    stale_reasons,
)


@pytest.fixture
def copies(cache_dir, tiny_processed_dir, tmp_path):
    """Writable copies of the tiny cache and of its processed runs."""
    cache = shutil.copytree(cache_dir, tmp_path / "cache")
    processed = shutil.copytree(tiny_processed_dir, tmp_path / "processed")
    return cache, processed


def test_a_built_run_is_current_with_the_source_record_of_its_processed_run(cache_dir, tiny_processed_dir):
    processed = tiny_processed_dir / "run_1.zarr"
    state = run_state(cache_dir, processed, tiny_settings(), manifest_records(cache_dir))
    assert state.built and state.current and state.reasons == []
    assert state.run.path == generation(cache_dir, "run_1")
    assert state.source["fingerprint"] == source_fingerprint(processed)
    assert state.source["stat"] == stat_fingerprint(processed)


def test_a_run_without_a_generation_is_not_built(copies):
    cache, processed = copies
    shutil.rmtree(cache / "run_2")
    state = run_state(cache, processed / "run_2.zarr", tiny_settings(), manifest_records(cache))
    assert not state.built and not state.current and state.run is None and state.reasons == []
    assert state.source["fingerprint"] == source_fingerprint(processed / "run_2.zarr")


def test_other_settings_are_named(cache_dir, tiny_processed_dir):
    state = run_state(cache_dir, tiny_processed_dir / "run_1.zarr", tiny_settings(num_neighbors_surface=5),
                      manifest_records(cache_dir))
    assert state.built and not state.current
    assert any("num_neighbors_surface" in r and "7" in r and "5" in r for r in state.reasons), state.reasons


def test_a_changed_processed_run_is_stale(copies):
    cache, processed = copies
    (processed / "run_1.zarr" / "extra").write_bytes(b"new data")
    state = run_state(cache, processed / "run_1.zarr", tiny_settings(), manifest_records(cache))
    assert state.reasons == ["source: the processed run has changed since the cache run was built"]
    assert state.source["fingerprint"] == source_fingerprint(processed / "run_1.zarr")
    assert stale_reasons(state.run, tiny_settings(), state.source["fingerprint"]) == state.reasons


def test_an_unreadable_generation_is_built_but_stale_and_says_why(copies):
    cache, processed = copies
    (generation(cache, "run_1") / "zarr.json").write_text("{")
    state = run_state(cache, processed / "run_1.zarr", tiny_settings(), manifest_records(cache))
    assert state.built and state.run is None and not state.current
    assert len(state.reasons) == 1 and "g1.zarr" in state.reasons[0], state.reasons


def test_the_recorded_fingerprint_is_reused_only_while_the_stat_fingerprint_matches(tiny_processed_dir):
    processed = tiny_processed_dir / "run_1.zarr"
    recorded = {"stat": stat_fingerprint(processed), "fingerprint": "recorded"}
    assert current_source(processed, recorded)["fingerprint"] == "recorded"  # no bytes hashed
    assert current_source(processed, recorded, full=True)["fingerprint"] == source_fingerprint(processed)
    moved = recorded | {"stat": "another"}
    assert current_source(processed, moved)["fingerprint"] == source_fingerprint(processed)


def test_manifest_records_are_empty_without_a_usable_manifest(copies):
    cache, _ = copies
    assert sorted(manifest_records(cache)) == ["run_1", "run_2"]
    (cache / "manifest.json").write_text("{")
    assert manifest_records(cache) == {}


def test_changed_scaling_factors_are_reported(copies):
    cache, _ = copies
    assert check_scaling_factors(cache) == ""
    path = cache / json.loads((cache / "manifest.json").read_text())["scaling_factors"]["path"]
    path.write_text(path.read_text().replace("min_max", "mean_std"))
    assert "changed since cache_data.py wrote it" in check_scaling_factors(cache)
    path.unlink()
    assert "unreadable" in check_scaling_factors(cache)
