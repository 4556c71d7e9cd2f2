"""cache_data.py building into object storage (an S3 server on 127.0.0.1, moto): the same cache
as a local build, validated object by object; train.py and predict.py on it, with the
processed runs on object storage too; a kill -9 during an upload then a rerun; two builders at
once; credentials written nowhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from cache_fixtures import OVERRIDES, SAMPLES, tiny_settings
from s3_server import FaultProxy
from test_train import TINY

from domino_pipeline.processed.runs import list_runs
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.store.build import manifest_runs, write_scaling_factors
from domino_pipeline.storage.byte_reader import Request, reader_and_key
from domino_pipeline.store.cache_format import layout_arrays
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.manifest import read_manifest, read_manifest_version, run_path, write_manifest
from domino_pipeline.store.object_cache import upload_folder
from domino_pipeline.store.validate import validate_cache

ROOT = Path(__file__).resolve().parents[1]


def remote_arrays(url: str) -> dict[str, dict[str, np.ndarray]]:
    """Every array of every run the manifest at ``url`` names."""
    manifest = read_manifest(url)
    out = {}
    for name, entry in manifest["runs"].items():
        run = CacheRun(run_path(url, name, entry), metadata=entry["metadata_sha256"])
        out[name] = {a: run.read(a) for a in layout_arrays(run.attrs["settings"].get("neighbor_layout", "indices"))}
    return out


def assert_same_as(url: str, local: Path) -> None:
    """The cache at ``url`` holds the runs of the local cache, array for array identical."""
    left, manifest = remote_arrays(url), read_manifest(local)
    assert sorted(left) == sorted(manifest["runs"])
    for name, entry in manifest["runs"].items():
        run = CacheRun(run_path(local, name, entry))
        for array, data in left[name].items():
            np.testing.assert_array_equal(data, run.read(array), err_msg=f"{name}/{array}")


def _args(processed: Path, url: str, hydra: Path, *extra: str) -> list[str]:
    return [sys.executable, "cache_data.py", "--config-name=cached", f"data.processed_dir={processed}",
            f"cache.dir={url}", *OVERRIDES, f"hydra.run.dir={hydra}", "hydra.output_subdir=null", *extra]


@pytest.mark.slow
def test_a_cache_built_on_s3_reads_as_the_local_build(s3_server, tiny_processed_dir, cache_dir):
    from cache_data import build_cache
    url, settings = f"s3://{s3_server.bucket()}/built", tiny_settings()
    runs = list_runs(tiny_processed_dir)
    assert [r.status for r in build_cache(runs, url, settings, rebuild=False)] == ["built", "built"]
    assert [r.status for r in build_cache(runs, url, settings, rebuild=False)] == ["skipped", "skipped"]
    factors = write_scaling_factors(runs, url, settings, normalization="min_max")
    write_manifest(url, settings, manifest_runs(runs, url, settings), scaling_factors=factors)
    assert_same_as(url, cache_dir)
    assert [r.status for r in validate_cache(runs, url, settings)] == ["ok", "ok"]
    local = CachedDoMINODataset(cache_dir, model_type="combined", **SAMPLES)
    remote = CachedDoMINODataset(url, model_type="combined", **SAMPLES)
    for index in range(2):
        a, b = local[index], remote[index]
        assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


@pytest.mark.slow
def test_a_build_on_s3_removes_the_staging_folders_of_killed_builds_only(
        s3_server, tiny_processed_dir, tmp_path, monkeypatch):
    from cache_data import build_cache
    from domino_pipeline.storage.atomic_store import hold_temporary
    from domino_pipeline.store.build import staging_root

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = staging_root()
    killed = root / ".run_1.tmp-4194305-abcd1234"  # above Linux's largest pid: no process has it
    (killed / "run_1").mkdir(parents=True)
    (killed / "run_1" / "chunk").write_bytes(bytes(1 << 16))
    live = root / f".run_2.tmp-{os.getppid()}-abcd1234"
    live.mkdir()
    held = hold_temporary(live)  # a build still running
    try:
        url = f"s3://{s3_server.bucket()}/staged"
        results = build_cache(list_runs(tiny_processed_dir)[:1], url, tiny_settings(), rebuild=False)
        assert [r.status for r in results] == ["built"], results
        assert list(root.iterdir()) == [live]  # the killed build's gone, this build's own too
    finally:
        os.close(held)


@pytest.mark.slow
def test_the_command_lines_build_validate_train_and_predict_on_s3_and_write_no_secret(
        s3_server, tiny_raw_dir, tiny_processed_dir, cache_dir, tmp_path, monkeypatch):
    """Processed runs and the cache both on S3: cache_data.py builds and validates, train.py
    trains, predict.py takes the cache's scaling factors; the secret is in nothing written."""
    marker = "MARKER-SECRET-5f1c9e"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", marker)
    processed = f"s3://{s3_server.bucket('processed')}/runs"
    upload_folder(tiny_processed_dir, processed)
    url = f"s3://{s3_server.bucket()}/cli"
    built = subprocess.run(_args(processed, url, tmp_path / "hydra"), cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert "2 runs: 2 built" in built.stdout
    checked = subprocess.run(_args(processed, url, tmp_path / "hydra", "cache.validate=true"),
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 runs validated, 0 with problems" in checked.stdout
    assert_same_as(url, cache_dir)
    both = ["--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={url}", *TINY,
            "geometry.neighbor_layout=indices", f"hydra.run.dir={tmp_path / 'hydra'}"]
    trained = subprocess.run([sys.executable, "train.py", *both, "train.epochs=1", "train.num_workers=1",
                              f"output_dir={tmp_path / 'train'}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert (tmp_path / "train" / "checkpoints").is_dir()
    predicted = subprocess.run([sys.executable, "predict.py", *both,
                                f"predict.checkpoint={tmp_path / 'train' / 'checkpoints' / 'model_last.mdlus'}",
                                f"predict.runs=[{tiny_raw_dir / 'run_1'}]", "predict.plot=false",
                                f"predict.out_dir={tmp_path / 'predicted'}"],
                               cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert predicted.returncode == 0, predicted.stdout[-3000:] + predicted.stderr[-3000:]
    assert (tmp_path / "predicted" / "predictions.csv").is_file()
    written = built.stdout + built.stderr + checked.stdout + checked.stderr + trained.stdout + trained.stderr
    _assert_no_secret(marker, [url, processed], tmp_path, written + predicted.stdout + predicted.stderr)


def _assert_no_secret(marker: str, urls: list[str], folder: Path, printed: str) -> None:
    """``marker`` is in no object under ``urls``, no file under ``folder``, nothing printed."""
    for url in urls:
        source, key = reader_and_key(url)
        objects = source.list_all(key)
        assert len(objects) > 20
        for obj in objects:
            [(data, _)] = source.fetch([Request(obj["path"])])
            assert marker.encode() not in bytes(data), obj["path"]
    for path in folder.rglob("*"):
        if path.is_file():
            assert marker.encode() not in path.read_bytes(), path
    assert marker not in printed


REPEATS = int(os.environ.get("DOMINO_STORE_REPEATS", "1"))  # 5 for the acceptance runs


def _generation_objects(url: str, run: str) -> dict[str, list[str]]:
    """The objects under each generation prefix of ``run``, by generation name."""
    source, key = reader_and_key(url)
    found: dict[str, list[str]] = {}
    for obj in source.list_all(f"{key}/{run}"):
        generation = obj["path"][len(key) + len(run) + 2:].split("/", 1)
        found.setdefault(generation[0], []).append(generation[1])
    return found


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(REPEATS))
def test_kill_9_during_an_upload_then_a_rerun_equals_a_clean_build(
        s3_server, tiny_processed_dir, cache_dir, tmp_path, attempt):
    url = f"s3://{s3_server.bucket()}/killed"
    # every second PUT held 1 s: half the objects of an upload land at once, its group zarr.json
    # (sent only once every other object is in) never before the delayed ones, so the kill
    # below comes well before the commit is sent
    proxy = FaultProxy(s3_server.endpoint, slow_every=2, delay=1.0, slow_methods=("PUT",))
    (tmp_path / "tmp").mkdir()  # the builders' TMPDIR
    staging = tmp_path / "tmp" / f"domino-cache-staging-{os.getuid()}"
    env = os.environ | {"AWS_ENDPOINT_URL": proxy.endpoint, "TMPDIR": str(tmp_path / "tmp")}
    builder = subprocess.Popen(_args(tiny_processed_dir, url, tmp_path / "hydra"), cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            uploading = _generation_objects(url, "run_1").get("g1.zarr", [])
            if len(uploading) >= 3 and "zarr.json" not in uploading:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the upload was never seen half done")
        os.kill(builder.pid, signal.SIGKILL)
        builder.wait()
    finally:
        proxy.stop()
    with pytest.raises(FileNotFoundError):
        read_manifest(url)  # nothing is committed
    assert [p.name.split(".tmp-")[0] for p in staging.iterdir()] == [".run_1"]  # the killed build's
    rerun = subprocess.run(_args(tiny_processed_dir, url, tmp_path / "hydra"), cwd=ROOT,
                           env=os.environ | {"TMPDIR": str(tmp_path / "tmp")},
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert list(staging.iterdir()) == []  # removed by the rerun
    assert_same_as(url, cache_dir)
    manifest = read_manifest(url)
    assert manifest["runs"]["run_1"]["path"] == "run_1/g2.zarr"  # the killed upload: no manifest names it
    assert "zarr.json" not in _generation_objects(url, "run_1")["g1.zarr"]


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(REPEATS))
def test_two_builders_at_once_lose_no_run(s3_server, tiny_processed_dir, cache_dir, tmp_path, attempt):
    url = f"s3://{s3_server.bucket()}/shared"
    builders = []
    for run in ("run_1", "run_2"):
        alone = tmp_path / run / "processed"
        alone.mkdir(parents=True)
        (alone / f"{run}.zarr").symlink_to(tiny_processed_dir / f"{run}.zarr")
        builders.append(subprocess.Popen(_args(alone, url, tmp_path / run / "hydra"), cwd=ROOT,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for builder in builders:
        output, _ = builder.communicate(timeout=300)
        assert builder.returncode == 0, output
    assert sorted(read_manifest(url)["runs"]) == ["run_1", "run_2"]
    assert_same_as(url, cache_dir)


@pytest.mark.slow
def test_rank_records_on_s3_let_the_last_rank_finish_the_job_once(s3_server):
    from domino_pipeline.store.rank_records import finish_rank, remove_finished_jobs

    url, calls = f"s3://{s3_server.bucket()}/ranks", []
    assert finish_rank(url, "job-a", 1, 3, {"failed": 1}, calls.append) is None
    assert finish_rank(url, "job-a", 0, 3, {"failed": 0}, calls.append) is None
    assert finish_rank(url, "job-a", 2, 3, {"failed": 2}, lambda r: calls.append(r) or "done") == "done"
    assert calls == [[{"failed": 0}, {"failed": 1}, {"failed": 2}]]
    source, key = reader_and_key(url)
    assert [o["path"].rsplit("/", 1)[-1] for o in source.list_all(f"{key}/.ranks/job-a")] == ["finished"]
    # two ranks that see every record at once: the one whose claim comes second does nothing
    assert finish_rank(url, "job-b", 0, 2, {"failed": 0}, calls.append) is None
    source.put(f"{key}/.ranks/job-b/finished", b"rank 0\n", mode="create")
    assert finish_rank(url, "job-b", 1, 2, {"failed": 0}, calls.append) is None
    assert len(calls) == 1
    assert finish_rank(url, "job-c", 0, 2, {"failed": 0}, calls.append) is None  # unfinished
    assert remove_finished_jobs(url, 3600.0) == []  # claimed just now
    assert sorted(remove_finished_jobs(url, 0.0)) == ["job-a"]  # job-b's records are still there
    assert [o["path"].rsplit("/", 1)[-1] for o in source.list_all(f"{key}/.ranks")] == [
        "finished", "rank-0.json", "rank-1.json", "rank-0.json"]


@pytest.mark.slow
def test_torchrun_builds_into_s3_and_the_last_rank_commits_the_manifest(
        s3_server, tiny_processed_dir, cache_dir, tmp_path, monkeypatch):
    marker = "MARKER-SECRET-91d07a"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", marker)
    url = f"s3://{s3_server.bucket()}/ranked"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               *_args(tiny_processed_dir, url, tmp_path / "hydra")[1:]]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert out.count("1 runs: 1 built") == 2  # each rank built its run
    assert out.count("manifest: ") == 1 and out.count("the last rank to finish writes the manifest") == 1
    assert_same_as(url, cache_dir)
    source, key = reader_and_key(url)
    left = [o["path"].rsplit("/", 1)[-1] for o in source.list_all(f"{key}/.ranks")]
    assert left == ["finished"]  # the records are gone, the job's claim stays
    _assert_no_secret(marker, [url], tmp_path, out + result.stderr)


@pytest.mark.slow
def test_a_build_removes_the_generations_no_reader_needs(s3_server, cache_dir):
    """After each upload: complete generations beyond the newest two that the manifest does not
    name, and claimed prefixes never completed once untouched for the grace period."""
    from cache_fixtures import generation

    from domino_pipeline.store.object_cache import publish_generation

    url, local = f"s3://{s3_server.bucket()}/collected", generation(cache_dir, "run_1")
    for _ in range(2):
        publish_generation(local, url, "run_1")
    write_manifest(url, tiny_settings(), {"run_1": {"path": "run_1/g1.zarr"}})
    publish_generation(local, url, "run_1")
    assert sorted(_generation_objects(url, "run_1")) == ["g1.zarr", "g2.zarr", "g3.zarr"]  # g1: named
    write_manifest(url, tiny_settings(), {"run_1": {"path": "run_1/g3.zarr"}},
                   if_version=read_manifest_version(url)[1])
    source, key = reader_and_key(url)
    source.put(f"{key}/run_1/g4.zarr/.claim", b"pid 1\n", mode="create")  # killed during its upload
    source.put(f"{key}/run_1/g4.zarr/surface_areas/c/0", b"partial")
    publish_generation(local, url, "run_1")  # g5; g4 is young: perhaps a live upload
    assert sorted(_generation_objects(url, "run_1")) == ["g3.zarr", "g4.zarr", "g5.zarr"]
    publish_generation(local, url, "run_1", abandoned_after_s=0.0)  # g6; g4 abandoned, g3 named
    assert sorted(_generation_objects(url, "run_1")) == ["g3.zarr", "g5.zarr", "g6.zarr"]
    write_manifest(url, tiny_settings(), {"run_1": {"path": "run_1/g6.zarr"}},
                   if_version=read_manifest_version(url)[1])
    publish_generation(local, url, "run_1")  # g7
    assert sorted(_generation_objects(url, "run_1")) == ["g6.zarr", "g7.zarr"]
    assert sorted(_generation_objects(url, "run_1")["g7.zarr"]) == sorted(
        [".claim", *(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())])


def test_an_upload_holds_a_bounded_batch_of_files_in_memory(tmp_path, monkeypatch):
    from domino_pipeline.store import object_cache

    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * 100)
    (tmp_path / "manifest.json").write_bytes(b"{}")
    batches, singles = [], []

    class Recorder:
        def put_many(self, items):
            batches.append([(key, len(data)) for key, data in items])

        def put(self, key, data, **kwargs):
            singles.append(key)
    monkeypatch.setattr(object_cache, "reader_and_key", lambda location: (Recorder(), "pre"))
    monkeypatch.setattr(object_cache, "UPLOAD_BATCH_BYTES", 250)
    assert object_cache.upload_folder(tmp_path, "s3://bucket/pre") == 6
    assert [len(b) for b in batches] == [3, 2]  # 300 bytes reach the bound; the rest after
    assert sorted(k for b in batches for k, _ in b) == [f"pre/f{i}" for i in range(5)]
    assert singles == ["pre/manifest.json"]  # last, alone: the commit
