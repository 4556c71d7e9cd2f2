"""The one launch rule (torchrun's variables, else Slurm's, else one process) against crafted
environments, and cache_data.py and train.py started as two Slurm tasks (Slurm's variables only)
giving the cache and the training steps of the same job under torchrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_fixtures import OVERRIDES, assert_same_cache
from test_train import PYTHON, ROOT, TINY, TORCHRUN, epochs

from domino_pipeline.runtime.launch import SLURM_PORTS, Launch, first_host, launch_environment
from domino_pipeline.store.manifest import read_manifest
from domino_pipeline.training import checkpointing

TORCHRUN_ENV = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "node01", "MASTER_PORT": "29500"}
# Task 9 of 16, the second on its node, in a job on five nodes.
SLURM_ENV = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
             "SLURM_JOB_NODELIST": "node[01-04,07]", "SLURM_JOB_ID": "123456"}


def test_no_launcher_is_a_single_process():
    assert launch_environment({}) == Launch("single", 0, 1, 0, None, None)


def test_torchrun_variables_give_the_rank_and_its_rendezvous():
    launch = launch_environment(TORCHRUN_ENV)
    assert launch == Launch("torchrun", 5, 8, 1, "node01", 29500)
    assert launch.init_method == "env://"  # torchrun's own rendezvous, its agent's store included


def test_torchrun_of_one_process_needs_no_master():
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    assert launch_environment(env) == Launch("torchrun", 0, 1, 0)


def test_torchrun_inside_a_slurm_step_follows_torchrun():
    """`srun torchrun ...` (one torchrun per node): the ranks are torchrun's, not the tasks'."""
    assert launch_environment(SLURM_ENV | TORCHRUN_ENV) == launch_environment(TORCHRUN_ENV)


def test_slurm_variables_give_the_rank_and_rank_0s_address():
    launch = launch_environment(SLURM_ENV)
    port = SLURM_PORTS[0] + 123456 % (SLURM_PORTS[1] - SLURM_PORTS[0])
    assert launch == Launch("slurm", 9, 16, 1, "node01", port)
    assert launch.init_method == f"tcp://node01:{port}"


def test_every_task_of_a_job_derives_the_same_unprivileged_port_and_other_jobs_others():
    ports = {launch_environment(SLURM_ENV | {"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r % 4)}).master_port
             for r in range(16)}
    assert len(ports) == 1
    others = {launch_environment(SLURM_ENV | {"SLURM_JOB_ID": str(job)}).master_port for job in range(5000, 5100)}
    assert len(others) == 100
    assert all(SLURM_PORTS[0] <= p < SLURM_PORTS[1] and p >= 1024 for p in ports | others)


@pytest.mark.parametrize(("nodelist", "first"), [
    ("node[01-04,07],gpu3", "node01"),
    ("gpu3,node[01-04,07]", "gpu3"),
    ("node[07,09-12]", "node07"),
    ("node[001-128]", "node001"),
    ("rack[2-3]-node[09-10],login1", "rack2-node09"),
    ("n1,n2", "n1"),
    ("localhost", "localhost"),
    ("127.0.0.1", "127.0.0.1"),
    ("gpu-a100-[3,5]", "gpu-a100-3"),
])
def test_rank_0s_host_is_the_first_of_the_compact_node_list(nodelist, first):
    assert first_host(nodelist) == first
    assert launch_environment(SLURM_ENV | {"SLURM_JOB_NODELIST": nodelist}).master_addr == first


def test_the_steps_node_list_and_the_users_master_come_first():
    step = SLURM_ENV | {"SLURM_STEP_NODELIST": "node[03-04]"}  # srun --nodes=2 inside the job's five
    assert launch_environment(step).master_addr == "node03"
    given = step | {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400"}
    assert launch_environment(given).init_method == "tcp://10.0.0.7:29400"
    assert launch_environment(given | {"MASTER_ADDR": "fe80::1"}).init_method == "tcp://[fe80::1]:29400"


@pytest.mark.parametrize("env", [
    {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "node01"},
    {"SLURM_JOB_NODELIST": "node[01-02]", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2"},
])
def test_a_single_task_allocation_is_a_single_process(env):
    """`python train.py` in an `salloc` shell of one task, or of nodes without --ntasks."""
    assert launch_environment(env) == Launch("single")


@pytest.mark.parametrize(("env", "match"), [
    ({"SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[01-02]"},
     r"SLURM_NTASKS=4 but SLURM_PROCID and SLURM_LOCALID are not set: .*start each task with srun"),
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "1"}, r"SLURM_NTASKS=4 but SLURM_LOCALID is not set"),
    (SLURM_ENV | {"SLURM_PROCID": "16"}, r"SLURM_PROCID=16 is not below SLURM_NTASKS=16"),
    (SLURM_ENV | {"SLURM_PROCID": "one"}, r"SLURM_PROCID='one' is not an integer"),
    (SLURM_ENV | {"SLURM_NTASKS": "2x"}, r"SLURM_NTASKS='2x' is not an integer"),
    (SLURM_ENV | {"SLURM_LOCALID": "-1"}, r"SLURM_LOCALID=-1 is below 0"),
    (SLURM_ENV | {"SLURM_PROCID": "0"}, r"SLURM_LOCALID=1 is above SLURM_PROCID=0"),
    (SLURM_ENV | {"SLURM_JOB_ID": "12.3"}, r"SLURM_JOB_ID='12.3' is not an integer"),
    ({k: v for k, v in SLURM_ENV.items() if k != "SLURM_JOB_ID"},
     r"SLURM_NTASKS=16 but neither MASTER_PORT nor SLURM_JOB_ID is set"),
    ({k: v for k, v in SLURM_ENV.items() if k != "SLURM_JOB_NODELIST"},
     r"none of MASTER_ADDR, SLURM_STEP_NODELIST, SLURM_JOB_NODELIST is set"),
    (SLURM_ENV | {"SLURM_JOB_NODELIST": "node[01-04"}, r"SLURM_JOB_NODELIST='node\[01-04' is not a Slurm node list"),
    (SLURM_ENV | {"SLURM_STEP_NODELIST": "node[a-b]"}, r"SLURM_STEP_NODELIST='node\[a-b\]' is not a Slurm node list"),
    (SLURM_ENV | {"MASTER_PORT": "70000"}, r"MASTER_PORT=70000 is not a port"),
    ({"RANK": "0"}, r"RANK=0 is set but WORLD_SIZE and LOCAL_RANK are not set: torchrun sets all of"),
    ({"LOCAL_RANK": "2"}, r"LOCAL_RANK=2 is set but RANK and WORLD_SIZE are not set"),
    (TORCHRUN_ENV | {"RANK": "8"}, r"RANK=8 is not below WORLD_SIZE=8"),
    (TORCHRUN_ENV | {"WORLD_SIZE": "0"}, r"WORLD_SIZE=0 is below 1"),
    (TORCHRUN_ENV | {"LOCAL_RANK": "x"}, r"LOCAL_RANK='x' is not an integer"),
    ({k: v for k, v in TORCHRUN_ENV.items() if k != "MASTER_PORT"}, r"WORLD_SIZE=8 but MASTER_PORT is not set"),
])
def test_missing_or_inconsistent_variables_are_refused_by_name(env, match):
    with pytest.raises(ValueError, match=match):
        launch_environment(env)


def test_an_unknown_launcher_is_refused():
    with pytest.raises(ValueError, match="launcher must be one of torchrun, slurm, single, not 'mpi'"):
        Launch("mpi")


# ---- cache_data.py and train.py as two Slurm tasks, beside torchrun ----

LAUNCH_PREFIXES = ("SLURM_", "TORCHELASTIC_")
LAUNCH_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _clean_environment() -> dict[str, str]:
    """This process's environment without any launcher's variables, one thread per process."""
    return {k: v for k, v in os.environ.items() if k not in LAUNCH_NAMES and not k.startswith(LAUNCH_PREFIXES)} | {
        "OMP_NUM_THREADS": "1"}


def _free_slurm_job_id() -> int:
    """A job id whose derived port (launch.SLURM_PORTS) is free here now."""
    low, high = SLURM_PORTS
    for port in np.random.default_rng().permutation(np.arange(low, high))[:200]:
        with socket.socket() as s:
            try:
                s.bind(("", int(port)))
            except OSError:
                continue
        return 7 * (high - low) + int(port) - low
    raise RuntimeError("no free port in SLURM_PORTS")


def _slurm_tasks(arguments: list[str], job_id: int, logs: Path) -> str:
    """``python <arguments>`` as srun starts two tasks of one node: Slurm's variables only. The
    tasks' output, rank 0's first; an AssertionError when a task fails."""
    logs.mkdir(parents=True, exist_ok=True)
    tasks = []
    for rank in range(2):
        env = _clean_environment() | {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank),
                                      "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": str(job_id)}
        with open(logs / f"task{rank}.log", "w") as log:
            tasks.append(subprocess.Popen([PYTHON, *arguments], cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT))
    try:
        codes = [task.wait(timeout=300) for task in tasks]
    finally:
        for task in tasks:
            task.kill()
    output = "".join((logs / f"task{rank}.log").read_text() for rank in range(2))
    assert codes == [0, 0], f"{arguments[0]} as Slurm tasks: exit codes {codes}\n{output[-4000:]}"
    return output


def _torchrun(arguments: list[str]) -> str:
    result = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node=2", *arguments], cwd=ROOT,
                            env=_clean_environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"torchrun {arguments[0]}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _cache_arguments(processed: Path, cache: Path) -> list[str]:
    return ["cache_data.py", "--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={cache}",
            *TINY, *OVERRIDES, "train.val_fraction=0", f"hydra.run.dir={cache.parent / 'hydra'}",
            "hydra.output_subdir=null"]


def _train_arguments(processed: Path, cache: Path, out: Path) -> list[str]:
    return ["train.py", "--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={cache}",
            *TINY, *OVERRIDES, "train.val_fraction=0", "train.epochs=2", f"output_dir={out}"]


def _steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_slurm_tasks_build_the_cache_and_train_as_torchrun_does(tiny_processed_dir, tmp_path):
    job_id = _free_slurm_job_id()
    port = launch_environment({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                               "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": str(job_id)}).master_port
    slurm, reference = tmp_path / "slurm", tmp_path / "torchrun"
    built = _slurm_tasks(_cache_arguments(tiny_processed_dir, slurm / "cache"), job_id, slurm / "cache_logs")
    _torchrun(_cache_arguments(tiny_processed_dir, reference / "cache"))
    assert built.count("1 runs: 1 built, 0 skipped") == 2 and built.count("manifest: ") == 1  # a run per task
    assert_same_cache(slurm / "cache", reference / "cache")
    mine, theirs = read_manifest(slurm / "cache"), read_manifest(reference / "cache")
    assert sorted(mine["runs"]) == ["run_1", "run_2"]
    assert mine["settings"] == theirs["settings"] and mine["scaling_factors"] == theirs["scaling_factors"]
    for run, entry in theirs["runs"].items():  # all but the build's time (and the metadata's bytes, that hold it)
        timeless = {k: v for k, v in entry.items() if k not in ("build_seconds", "metadata_sha256", "bytes")}
        assert {k: mine["runs"][run][k] for k in timeless} == timeless, run

    # the same job, the same derived port again: as an sbatch script runs both stages
    trained = _slurm_tasks(_train_arguments(tiny_processed_dir, slurm / "cache", slurm / "train"), job_id,
                           slurm / "train_logs")
    logged = _torchrun(_train_arguments(tiny_processed_dir, reference / "cache", reference / "train"))
    assert "x 2 (slurm)" in trained and "x 2 (torchrun)" in logged, f"port {port}"
    for out in (slurm / "train", reference / "train"):
        records = epochs(out)
        assert [r["world_size"] for r in records] == [2, 2]
        assert all(sorted(map(len, r["runs_by_rank"])) == [1, 1] for r in records)
        assert set(records[0]["runs_by_rank"][0]) != set(records[0]["runs_by_rank"][1])
    steps, reference_steps = _steps(slurm / "train"), _steps(reference / "train")
    assert len(steps) == 2 and all(np.isfinite(s["loss"]) for s in steps)
    assert steps == reference_steps
    weights = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(slurm / "train"))["model"]
    reference_weights = checkpointing.load_checkpoint(checkpointing.newest_checkpoint(reference / "train"))["model"]
    assert sorted(weights) == sorted(reference_weights)
    for name, tensor in reference_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=0, msg=name)
