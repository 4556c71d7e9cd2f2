"""cache_data.py end to end through its command line: build, resume, stale settings, validate,
the features neighbour layout, kill -9 and resume, and torchrun with two ranks giving the same
cache as one process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import VARIABLES
from cache_fixtures import (
    OVERRIDES,
    SURFACE_VARIABLES,
    VOLUME_VARIABLES,
    assert_same_cache,
    build_tiny_cache,
    first_chunk,
    flip_byte,
    generation,
    tiny_settings,
)

from domino_pipeline.store.manifest import read_manifest

pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[1]


def _args(processed: Path, cache: Path, *extra: str) -> list[str]:
    return ["cache_data.py", "--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={cache}",
            *OVERRIDES, "hydra.run.dir=" + str(cache.parent / "hydra"), "hydra.output_subdir=null", *extra]


def _run(processed: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *_args(processed, cache, *extra)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def reference_cache(tiny_processed_dir, tmp_path_factory):
    """A clean build in this process, for array-by-array comparisons."""
    return build_tiny_cache(tiny_processed_dir, tmp_path_factory.mktemp("reference") / "cache")


def test_build_resume_and_validate(tiny_processed_dir, reference_cache, tmp_path):
    cache = tmp_path / "cache"
    first = _run(tiny_processed_dir, cache)
    assert first.returncode == 0, first.stderr
    assert "2 runs: 2 built, 0 skipped, 0 stale, 0 failed" in first.stdout
    assert_same_cache(cache, reference_cache)
    manifest = read_manifest(cache)
    assert sorted(manifest["runs"]) == ["run_1", "run_2"]
    assert manifest["config"]["geometry"]["interp_res"] == [16, 8, 8]
    assert_factors_are_train_pys(cache, manifest, tiny_processed_dir)
    again = _run(tiny_processed_dir, cache)
    assert again.returncode == 0 and "2 runs: 0 built, 2 skipped" in again.stdout
    valid = _run(tiny_processed_dir, cache, "cache.validate=true")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "ok run_1" in valid.stdout and "2 runs validated, 0 with problems" in valid.stdout
    assert "ok scaling factors" in valid.stdout
    (cache / "scaling_factors.json").write_text((cache / "scaling_factors.json").read_text().replace("0", "1", 1))
    changed = _run(tiny_processed_dir, cache, "cache.validate=true")
    assert changed.returncode != 0 and "PROBLEM scaling factors: " in changed.stdout
    assert "scaling_factors.json: changed since cache_data.py wrote it" in changed.stdout


def assert_factors_are_train_pys(cache: Path, manifest: dict, processed: Path) -> None:
    """The factors beside the cache are recorded (SHA-256) and equal, bit for bit, those
    train.py computes from the processed training runs of the same split."""
    import hashlib

    from conftest import DEFAULTS

    from domino_pipeline.compute.scaling import compute_scaling_factors
    from domino_pipeline.processed.runs import list_runs, run_split_from_config

    record = manifest["scaling_factors"]
    stored = (cache / record["path"]).read_bytes()
    assert record["sha256"] == hashlib.sha256(stored).hexdigest()
    train_runs = run_split_from_config(list_runs(processed), DEFAULTS.train, DEFAULTS.seed).train
    variables = {"surface": SURFACE_VARIABLES, "volume": VOLUME_VARIABLES}
    expected = compute_scaling_factors(train_runs, normalization=DEFAULTS.sampling.normalization, variables=variables)
    assert json.loads(stored) == json.loads(json.dumps(expected)) and record["runs"] == expected["runs"]


def test_stale_runs_fail_unless_rebuilt_and_validate_catches_problems(tiny_processed_dir, reference_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(reference_cache, cache)
    stale = _run(tiny_processed_dir, cache, "geometry.num_neighbors_surface=5")
    assert stale.returncode != 0
    assert "STALE run_1: num_neighbors_surface: cached 7, expected 5" in stale.stdout
    assert "cache.rebuild=true" in stale.stdout
    flip_byte(first_chunk(generation(cache, "run_2"), "volume_fields"))
    check = _run(tiny_processed_dir, cache, "cache.validate=true")
    assert check.returncode != 0
    assert "ok run_1" in check.stdout
    assert "PROBLEM run_2: " in check.stdout and "array 'volume_fields' is corrupt" in check.stdout
    rebuilt = _run(tiny_processed_dir, cache, "geometry.num_neighbors_surface=5", "cache.rebuild=true")
    assert rebuilt.returncode == 0 and "2 built" in rebuilt.stdout
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["settings"] == tiny_settings(num_neighbors_surface=5).fingerprinted()


def test_the_features_layout_builds_validates_and_is_stale_for_indices(tiny_processed_dir, tmp_path):
    cache, features = tmp_path / "cache", "geometry.neighbor_layout=features"
    built = _run(tiny_processed_dir, cache, features)
    assert built.returncode == 0, built.stdout + built.stderr
    reference = build_tiny_cache(tiny_processed_dir, tmp_path / "reference",
                                 tiny_settings(neighbor_layout="features"))
    assert_same_cache(cache, reference)
    assert read_manifest(cache)["settings"]["neighbor_layout"] == "features"
    valid = _run(tiny_processed_dir, cache, features, "cache.validate=true")
    assert valid.returncode == 0 and "2 runs validated, 0 with problems" in valid.stdout, valid.stdout
    stale = _run(tiny_processed_dir, cache)
    assert stale.returncode != 0
    assert "STALE run_1: neighbor_layout: cached features, expected indices" in stale.stdout
    flip_byte(first_chunk(generation(cache, "run_2"), "surface_neighbor_normals"))
    check = _run(tiny_processed_dir, cache, features, "cache.validate=true")
    assert check.returncode != 0 and "ok run_1" in check.stdout
    assert "PROBLEM run_2: " in check.stdout and "array 'surface_neighbor_normals' is corrupt" in check.stdout


def test_a_failed_run_is_named_and_the_others_go_on(tiny_processed_dir, tmp_path):
    processed = tmp_path / "processed"
    shutil.copytree(tiny_processed_dir, processed)
    shutil.rmtree(processed / "run_1.zarr" / "stl_faces")
    result = _run(processed, tmp_path / "cache")
    assert result.returncode != 0
    assert "FAILED run_1: " in result.stdout and "stl_faces" in result.stdout
    assert "1 built" in result.stdout and "1 failed" in result.stdout
    assert list(read_manifest(tmp_path / "cache")["runs"]) == ["run_2"]


def _temporaries(cache: Path) -> list[Path]:
    """Temporaries of unfinished writers, in the cache folder or in a run's folder."""
    if not cache.is_dir():
        return []
    return [p for folder in [cache, *(d for d in cache.iterdir() if d.is_dir())]
            for p in folder.iterdir() if p.name.startswith(".") and ".tmp-" in p.name]


def test_kill_9_then_rerun_gives_the_clean_build(tiny_processed_dir, reference_cache, tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, *_args(tiny_processed_dir, cache)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not _temporaries(cache) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.0005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the build finished before it could be killed"
    assert _temporaries(cache), "no run was being written when the build was killed"
    assert not (cache / "manifest.json").exists()
    resumed = _run(tiny_processed_dir, cache)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert not _temporaries(cache)
    assert_same_cache(cache, reference_cache)
    assert sorted(read_manifest(cache)["runs"]) == ["run_1", "run_2"]


def test_torchrun_two_ranks_build_the_same_cache(tiny_processed_dir, reference_cache, tmp_path):
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               *_args(tiny_processed_dir, cache)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("1 runs: 1 built, 0 skipped") == 2  # each rank built one run
    assert result.stdout.count("manifest: ") == 1
    assert_same_cache(cache, reference_cache)
    assert sorted(read_manifest(cache)["runs"]) == ["run_1", "run_2"]


def test_two_shards_side_by_side_build_the_same_cache_and_the_last_writes_it_whole(
        tiny_processed_dir, reference_cache, tmp_path):
    cache = tmp_path / "cache"
    shards = [subprocess.Popen([sys.executable, *_args(tiny_processed_dir, cache, f"data.shard={i}/2")], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [shard.communicate(timeout=300) for shard in shards]
    assert [shard.returncode for shard in shards] == [0, 0], outputs
    for stdout, _ in outputs:  # each built its one run
        assert "1 runs: 1 built, 0 skipped, 0 stale, 0 failed" in stdout, stdout
    assert_same_cache(cache, reference_cache)
    manifest = read_manifest(cache)
    assert sorted(manifest["runs"]) == ["run_1", "run_2"]
    assert_factors_are_train_pys(cache, manifest, tiny_processed_dir)
    only = _run(tiny_processed_dir, tmp_path / "only", "data.runs=[2]")
    assert only.returncode == 0 and "1 runs: 1 built" in only.stdout, only.stdout + only.stderr
    assert "scaling factors not written: training runs run_1 are not in the cache (yet)" in only.stdout
    assert sorted(read_manifest(tmp_path / "only")["runs"]) == ["run_2"]


def test_a_missing_processed_directory_is_one_clear_line(tmp_path):
    result = _run(tmp_path / "nowhere", tmp_path / "cache")
    assert result.returncode == 1
    assert "error: " in result.stderr and "nowhere: no such processed-data directory" in result.stderr


@pytest.fixture(scope="module")
def curator_dir(tiny_processed_dir, tmp_path_factory) -> Path:
    """The tiny runs as physicsnemo-curator writes them: run_1 a Zarr v2 group, run_2 an .npz
    (float32 faces, curator attributes, volume rows in the file's order, as process_data.py
    keeps them too)."""
    from curator_fixtures import write_curator_npz, write_curator_zarr

    from domino_pipeline.processed.runs import load_run

    out = tmp_path_factory.mktemp("curator")
    write_curator_zarr(out / "run_1.zarr", load_run(tiny_processed_dir / "run_1.zarr"))
    write_curator_npz(out / "run_2.npz", load_run(tiny_processed_dir / "run_2.zarr"))
    return out


def test_curator_output_builds_the_cache_of_the_processed_runs(curator_dir, tiny_processed_dir,
                                                                 reference_cache, tmp_path):
    """Acceptance: cache_data.py reads curator Zarr v2 and .npz runs unchanged, and the items
    equal those of the same data processed by process_data.py, in every sampling mode."""
    import torch

    from datapipe import CachedDoMINODataset, DoMINODataPipe
    from domino_pipeline.store.manifest import manifest_scaling_factors

    cache = tmp_path / "cache"
    built = _run(curator_dir, cache)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "2 runs: 2 built" in built.stdout and "run formats: curator-npz 1, curator-zarr-v2 1" in built.stdout
    assert_same_cache(cache, reference_cache)
    factors = manifest_scaling_factors(cache)
    assert factors["runs"] == ["run_1"] or factors["runs"] == ["run_2"]  # the training split
    for law in ({}, {"exact": True}, {"surface_window_factor": 2, "volume_window_factor": 3}):
        common = dict(model_type="combined", seed=3, surface_points=128, volume_points=256,
                      geometry_points=300, scaling_factors=factors, **law)
        curated, processed = CachedDoMINODataset(cache, **common), CachedDoMINODataset(reference_cache, **common)
        for index in range(2):
            a, b = curated[index], processed[index]
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    common = dict(model_type="surface", seed=3, surface_points=128, geometry_points=300, scaling_factors=factors,
                  bounding_box_volume=((-3.5, -2.25, -0.32), (8.5, 2.25, 3.0)),
                  bounding_box_surface=((-1.5, -1.4, -0.32), (5.0, 1.4, 1.4)), interp_res=(16, 8, 8), device="cpu",
                  **VARIABLES)
    a, b = DoMINODataPipe(curator_dir, **common)[1], DoMINODataPipe(tiny_processed_dir, **common)[1]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_rewriting_a_curator_run_makes_its_cache_run_stale(curator_dir, tiny_processed_dir, tmp_path):
    from curator_fixtures import write_curator_zarr

    from domino_pipeline.processed.runs import load_run

    curated = tmp_path / "curated"
    shutil.copytree(curator_dir, curated)
    cache = tmp_path / "cache"
    assert _run(curated, cache).returncode == 0
    arrays = load_run(tiny_processed_dir / "run_1.zarr")
    shutil.rmtree(curated / "run_1.zarr")
    write_curator_zarr(curated / "run_1.zarr", dict(arrays, surface_fields=arrays["surface_fields"] * 2))
    again = _run(curated, cache)
    assert again.returncode != 0
    assert "STALE run_1: source: the processed run has changed" in again.stdout
    assert "skipped" in again.stdout and "1 stale" in again.stdout


def test_a_folder_without_runs_is_an_error_naming_what_it_holds(tmp_path):
    folder = tmp_path / "processed"
    folder.mkdir()
    (folder / "run_1.vtp").write_text("")
    result = _run(folder, tmp_path / "cache")
    assert result.returncode == 1
    assert "no run found" in result.stderr and "it holds run_1.vtp" in result.stderr
