"""Building cache runs (store/build.py): what cache_run does with a run that is absent,
current, stale or unreadable; the manifest entries of the current runs; scaling factors from
the statistics the builds recorded, equal to those computed from the processed runs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from cache_fixtures import generation, tiny_settings

from domino_pipeline.compute.scaling import compute_scaling_factors, load_scaling_factors
from domino_pipeline.processed.runs import list_runs, source_fingerprint
from domino_pipeline.store.build import cache_run, manifest_runs, write_scaling_factors
from domino_pipeline.store.cache_format import generations


@pytest.fixture
def cache(cache_dir, tmp_path):
    """A writable copy of the tiny cache."""
    return shutil.copytree(cache_dir, tmp_path / "cache")


def test_a_current_run_is_skipped_and_a_stale_one_kept_unless_rebuilt(cache, tiny_processed_dir):
    run = tiny_processed_dir / "run_1.zarr"
    skipped = cache_run(run, cache, tiny_settings(), rebuild=False)
    assert (skipped.status, skipped.message, skipped.format) == ("skipped", "current", "processed")
    other = tiny_settings(permutation_seed=3)
    stale = cache_run(run, cache, other, rebuild=False)
    assert stale.status == "stale" and "permutation_seed" in stale.message
    assert [n for n, _ in generations(cache / "run_1")] == [1]
    built = cache_run(run, cache, other, rebuild=True)
    assert built.status == "built" and built.bytes > 0
    assert generation(cache, "run_1").name == "g2.zarr"
    assert cache_run(run, cache, other, rebuild=False).status == "skipped"


def test_an_absent_run_is_built_with_its_source_recorded(tiny_processed_dir, tmp_path):
    run = tiny_processed_dir / "run_2.zarr"
    result = cache_run(run, tmp_path / "cache", tiny_settings(), rebuild=False)
    assert result.status == "built" and result.name == "run_2"
    (entry,) = manifest_runs([run], tmp_path / "cache", tiny_settings()).values()
    assert entry["source"]["fingerprint"] == source_fingerprint(run)
    assert entry["path"].endswith("run_2/g1.zarr")


def test_an_unreadable_processed_run_fails_naming_it(tmp_path):
    broken = tmp_path / "processed" / "run_9.zarr"
    broken.mkdir(parents=True)
    (broken / "zarr.json").write_text("{")
    result = cache_run(broken, tmp_path / "cache", tiny_settings(), rebuild=False)
    assert result.status == "failed" and str(broken) in result.message


def test_the_manifest_lists_only_current_runs(cache, tiny_processed_dir):
    runs = list_runs(tiny_processed_dir)
    assert sorted(manifest_runs(runs, cache, tiny_settings())) == ["run_1", "run_2"]
    assert manifest_runs(runs, cache, tiny_settings(permutation_seed=3)) == {}


def test_scaling_factors_from_recorded_statistics_equal_those_of_the_processed_runs(cache, tiny_processed_dir):
    runs = list_runs(tiny_processed_dir)
    record = write_scaling_factors(runs, cache, tiny_settings(), normalization="mean_std")
    assert record["runs"] == ["run_1", "run_2"] and record["normalization"] == "mean_std"
    written = load_scaling_factors(cache / record["path"])
    reference = compute_scaling_factors(runs, normalization="mean_std")
    for kind in ("surface", "volume"):
        for stat in ("min", "max", "mean", "std"):
            np.testing.assert_allclose(written[kind][stat], reference[kind][stat], rtol=1e-6,
                                       err_msg=f"{kind} {stat}")
