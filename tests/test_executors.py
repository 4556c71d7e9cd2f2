"""The executors of the per-run stages: a local Dask cluster writes the local pool's processed
runs and caches bit for bit; a Dask worker killed mid-run costs that run one retry and no other
run; two shards of process_data.py running side by side write each run once, together the runs
of one unsharded process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cache_fixtures import tiny_settings
from conftest import PROCESS_OPTIONS

from domino_pipeline.configuration.config import ExecutorConfig
from domino_pipeline.runtime.executors import LOCAL_POOL, run_tasks
from domino_pipeline.processed.runs import list_runs
from domino_pipeline.processed.statistics_table import TABLE_NAME as STATISTICS_TABLE
from domino_pipeline.runtime.run_report import RunResult
from domino_pipeline.inputs.processing.process_runs import process_all
from synthetic_data import generate_runs

ROOT = Path(__file__).resolve().parents[1]
DASK = ExecutorConfig(kind="dask", address=None)
RUNS = 6
# what differs between two writes of the same run: the processed run's write id (a rewrite must
# change its metadata), a cache run's build time, and the pid in a cache run's lock file
VOLATILE = ("write_id", "build_seconds")


def store_differences(a: Path, b: Path) -> list[str]:
    """The files of two stores (or folders of them) that differ: bytes, except the JSON
    metadata's VOLATILE attributes and lock files (a writer's pid); missing files count."""
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()} | {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    return [str(n) for n in sorted(names) if not n.name.endswith(".lock") and n.name != STATISTICS_TABLE
            and _content(a / n) != _content(b / n)]


def _content(path: Path) -> object:
    if not path.is_file():
        return None
    if path.name != "zarr.json":
        return path.read_bytes()
    metadata = json.loads(path.read_text())
    for key in VOLATILE:
        metadata.get("attributes", {}).pop(key, None)
    return metadata


@pytest.fixture(scope="module")
def raw_runs(tmp_path_factory) -> Path:
    """RUNS tiny runs in DrivAerML's layout."""
    out = tmp_path_factory.mktemp("raw")
    generate_runs(out, RUNS, preset="tiny", seed=3)
    return out


@pytest.fixture(scope="module")
def pool_processed(raw_runs, tmp_path_factory) -> Path:
    """``raw_runs`` processed by the local pool (one worker: in this process)."""
    out = tmp_path_factory.mktemp("pool")
    assert [r.status for r in process_all(raw_runs, out, PROCESS_OPTIONS)] == ["processed"] * RUNS
    return out


def _named(name: str, status: str) -> RunResult:
    if status == "raise":
        raise RuntimeError(f"{name} exploded\nsecond line")
    return RunResult(name, status)


def test_results_come_in_the_tasks_order_and_a_raising_task_is_one_failure():
    tasks = {"run_3": ("run_3", "processed"), "run_1": ("run_1", "raise"), "run_2": ("run_2", "skipped")}
    results = run_tasks(_named, tasks, LOCAL_POOL, workers=1, progress="test")
    assert [(r.name, r.status) for r in results] == [("run_3", "processed"), ("run_1", "failed"), ("run_2", "skipped")]
    assert results[1].message == "task error RuntimeError: run_1 exploded"


def test_dask_missing_is_an_error_saying_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ImportError
    with pytest.raises(ImportError, match=r"^executor.kind=dask needs dask.distributed: pip install 'dask\[distributed\]'"):
        run_tasks(_named, {"run_1": ("run_1", "processed")}, DASK, workers=1, progress="test")


@pytest.mark.slow
def test_a_local_dask_cluster_processes_the_pools_bits(raw_runs, pool_processed, tmp_path):
    results = process_all(raw_runs, tmp_path, PROCESS_OPTIONS, num_processes=2, executor=DASK, runs=["2-3"])
    assert [(r.name, r.status) for r in results] == [("run_2", "processed"), ("run_3", "processed")]
    for run in ("run_2.zarr", "run_3.zarr"):
        assert store_differences(pool_processed / run, tmp_path / run) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "run_2.zarr", "run_3.zarr"]


def test_the_comparison_sees_a_changed_value(tiny_processed_dir, tmp_path):
    """store_differences itself: one byte of one chunk, and a changed attribute, are found."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_processed_dir / "run_1.zarr", copy)
    chunk = next(p for p in sorted(copy.rglob("*")) if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(bytes([chunk.read_bytes()[0] ^ 1]) + chunk.read_bytes()[1:])
    metadata = json.loads((copy / "zarr.json").read_text())
    metadata["attributes"]["nut_length_scale"] = 1.0
    (copy / "zarr.json").write_text(json.dumps(metadata))
    assert store_differences(tiny_processed_dir / "run_1.zarr", copy) == sorted([str(chunk.relative_to(copy)), "zarr.json"])


@pytest.mark.slow
def test_a_dask_cluster_at_an_address_builds_the_pools_cache(tiny_processed_dir, cache_dir, tmp_path, capsys):
    import distributed

    from cache_data import build_cache

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        executor = ExecutorConfig(kind="dask", address=cluster.scheduler_address)
        results = build_cache(list_runs(tiny_processed_dir), tmp_path, tiny_settings(), rebuild=False,
                              executor=executor, workers=1)
    assert f"dask: scheduler {cluster.scheduler_address}, 2 workers now" in capsys.readouterr().out
    assert [(r.name, r.status) for r in results] == [("run_1", "built"), ("run_2", "built")]
    assert store_differences(cache_dir / "run_1", tmp_path / "run_1") == []
    assert store_differences(cache_dir / "run_2", tmp_path / "run_2") == []


KILLED = "run_3"


@pytest.mark.slow
def test_a_worker_killed_mid_run_costs_that_run_one_retry_and_no_other(raw_runs, pool_processed, tmp_path,
                                                                       monkeypatch):
    """Five times, each on a new local cluster of 2 workers: the first worker to process KILLED
    kills itself (SIGKILL) after writing its rows to the temporary store
    (tests/worker_kill_hook.py); Dask runs it again on the live worker. Runs the dead worker had
    finished but not yet handed back are run again too: they find their run written and skip
    it ("already processed"), so no run but KILLED is processed twice."""
    import dask
    import distributed  # noqa: F401 (its defaults join dask.config first: a set() restores what it found)

    monkeypatch.syspath_prepend(str(ROOT / "tests"))  # the hook, for the workers to import
    monkeypatch.setenv("KILL_HOOK_RUN", KILLED)
    outcomes = []
    for attempt in range(5):
        hook, out = tmp_path / f"hook{attempt}", tmp_path / f"processed{attempt}"
        hook.mkdir()
        monkeypatch.setenv("KILL_HOOK_DIR", str(hook))
        with dask.config.set({"distributed.worker.preload": ["worker_kill_hook"]}):
            results = process_all(raw_runs, out, PROCESS_OPTIONS, num_processes=2, executor=DASK, runs=["1-4"])
        calls = (hook / "calls.log").read_text().split()
        outcomes.append({
            "killed": (hook / "killed").exists(),
            "left a partial store": any(p.name.startswith(f".{KILLED}.zarr.tmp-") for p in out.iterdir()),
            "statuses": [(r.status, r.message) if r.status != "processed" else r.status for r in results],
            "calls": {name: calls.count(name) for name in sorted(set(calls))},
            "runs": [p.name for p in list_runs(out)],
            "differences": [d for p in list_runs(out) for d in store_differences(pool_processed / p.name, p)],
        })
    runs = [f"run_{i}" for i in range(1, 5)]
    lost_finished = ("skipped", "already processed")
    skips = sum(outcome["statuses"].count(lost_finished) for outcome in outcomes)
    for outcome in outcomes:
        assert outcome["statuses"][runs.index(KILLED)] == "processed"
        assert set(outcome["statuses"]) <= {"processed", lost_finished}, outcome
        outcome["statuses"] = "processed, or finished by the lost worker"
    expected = {"killed": True, "left a partial store": True, "statuses": "processed, or finished by the lost worker",
                "calls": {run: 2 if run == KILLED else 1 for run in runs},
                "runs": [f"{run}.zarr" for run in runs], "differences": []}
    print(f"{sum(o == expected for o in outcomes)}/5 kills retried with no other run redone "
          f"({skips} finished runs of the lost workers run again and skipped)")
    assert outcomes == [expected] * 5


@pytest.mark.slow
def test_two_shards_side_by_side_write_each_run_once(raw_runs, pool_processed, tmp_path):
    out = tmp_path / "processed"
    shards = [subprocess.Popen(
        [sys.executable, "process_data.py", f"data.raw_dir={raw_runs}", f"data.processed_dir={out}",
         f"data.shard={i}/2", "process.num_processes=1", f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [shard.communicate(timeout=300) for shard in shards]
    assert [shard.returncode for shard in shards] == [0, 0], outputs
    for stdout, _ in outputs:  # each processed its 3 runs, none found one done by the other
        assert "3 runs: 3 processed, 0 skipped, 0 failed" in stdout, stdout
    assert [p.name for p in list_runs(out)] == [f"run_{i}.zarr" for i in range(1, RUNS + 1)]
    assert store_differences(pool_processed, out) == []
