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
from cache_fixtures import (
    OVERRIDES,
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
    again = _run(tiny_processed_dir, cache)
    assert again.returncode == 0 and "2 runs: 0 built, 2 skipped" in again.stdout
    valid = _run(tiny_processed_dir, cache, "cache.validate=true")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "ok run_1" in valid.stdout and "2 runs validated, 0 with problems" in valid.stdout


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


def test_the_features_layout_builds_validates_and_is_stale_for_the_default(tiny_processed_dir, tmp_path):
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


def test_a_missing_processed_directory_is_one_clear_line(tmp_path):
    result = _run(tmp_path / "nowhere", tmp_path / "cache")
    assert result.returncode == 1
    assert "error: " in result.stderr and "nowhere: no such processed-data directory" in result.stderr
