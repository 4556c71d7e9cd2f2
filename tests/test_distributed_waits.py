"""Ranks that finish at very different times: the scaling factors that train.py computes in
parts, and a torchrun cache build, both succeed where one rank is idle far longer than the job's
(shortened) collective timeout; a control shows that a plain wait on that timeout fails."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from cache_fixtures import OVERRIDES, build_tiny_cache, tiny_settings
from conftest import DEFAULTS

from domino_pipeline.compute.scaling import compute_scaling_factors, load_scaling_factors
from domino_pipeline.configuration.config import VariablesConfig
from domino_pipeline.runtime.launch import Launch
from domino_pipeline.processed.runs import DEFAULT_OPTIONS, list_runs
from domino_pipeline.store.manifest import read_manifest
from domino_pipeline.compute import scaling
from domino_pipeline.training import distributed, target_scaling
from domino_pipeline.training.distributed import DistInfo

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SHORT_TIMEOUT_S = 1.0
SLOW_RANK_DELAY_S = 4.0
GRID = (64, 32, 32)  # the torchrun build's grid: a run's grid SDFs take a good part of a second
VARIABLES = {"surface": [("pMeanTrim", "scalar"), ("wallShearStressMeanTrim", "vector")],
             "volume": [("UMeanTrim", "vector"), ("pMeanTrim", "scalar"), ("nutMeanTrim", "scalar")]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slow_on_rank_0(rank: int) -> None:
    """Rank 0's share of the statistics takes SLOW_RANK_DELAY_S longer."""
    real = scaling.processed_run_statistics

    def slow(path, **kwargs):
        time.sleep(SLOW_RANK_DELAY_S if rank == 0 else 0.0)
        return real(path, **kwargs)

    scaling.processed_run_statistics = slow


def _rank(rank: int, world_size: int, port: int, runs: list[Path], out: Path, work_timeout_s: float) -> None:
    """train.py's scaling factors on ``rank``: its waits bounded by a work group's ``work_timeout_s``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=SHORT_TIMEOUT_S))
    _slow_on_rank_0(rank)
    sampling = replace(DEFAULTS.sampling, normalization="min_max", scaling_factors=None, allow_other_split=False)
    variables = VariablesConfig(surface=dict(VARIABLES["surface"]), volume=dict(VARIABLES["volume"]))
    info = DistInfo(rank=rank, local_rank=rank, world_size=world_size, device=torch.device("cpu"))
    try:
        target_scaling.ensure_scaling_factors(
            out / "scaling_factors.json", runs, sampling=sampling, cached=False, variables=variables,
            options=DEFAULT_OPTIONS, info=info, work_timeout_s=work_timeout_s)
    finally:
        dist.destroy_process_group()


def test_scaling_factors_in_parts_survive_a_rank_idle_past_the_collective_timeout(tiny_processed_dir, tmp_path):
    runs = list_runs(tiny_processed_dir)
    assert len(runs) == 2  # rank 0 reads run_1 (slowed), rank 1 reads run_2 and waits
    mp.spawn(_rank, args=(2, _free_port(), runs, tmp_path, 120.0), nprocs=2, join=True)
    expected = compute_scaling_factors(runs, normalization="min_max", variables=VARIABLES)
    assert load_scaling_factors(tmp_path / "scaling_factors.json") == json.loads(json.dumps(expected))


def test_control_the_same_wait_on_the_short_collective_timeout_fails(tiny_processed_dir, tmp_path):
    runs = list_runs(tiny_processed_dir)
    with pytest.raises(Exception, match="(?i)timed? ?out"):
        mp.spawn(_rank, args=(2, _free_port(), runs, tmp_path, SHORT_TIMEOUT_S), nprocs=2, join=True)


def _late_rank(rank: int, port: int, out: Path) -> None:
    """``job_id`` on ``rank``, rank 1 starting SLOW_RANK_DELAY_S after rank 0; the id written to ``out``."""
    time.sleep(SLOW_RANK_DELAY_S if rank == 1 else 0.0)
    launch = Launch("slurm", rank=rank, world_size=2, local_rank=rank, master_addr="127.0.0.1", master_port=port)
    (out / f"rank-{rank}").write_text(distributed.job_id(launch, SHORT_TIMEOUT_S))


def test_the_job_id_waits_for_a_rank_that_starts_later_than_the_collective_timeout(tmp_path):
    mp.spawn(_late_rank, args=(_free_port(), tmp_path), nprocs=2, join=True)
    ids = {(tmp_path / f"rank-{rank}").read_text() for rank in (0, 1)}
    assert len(ids) == 1 and len(ids.pop()) == 32


def test_torchrun_build_writes_the_manifest_when_one_rank_finishes_long_before_the_other(
        tiny_processed_dir, tmp_path):
    processed, cache = tmp_path / "processed", tmp_path / "cache"
    names = [f"run_{i:02d}" for i in range(1, 16)]
    for i, name in enumerate(names):
        shutil.copytree(tiny_processed_dir / f"run_{i % 2 + 1}.zarr", processed / f"{name}.zarr")
    # rank 1's runs (every second) are current already: rank 1 is done at once, rank 0 builds
    # eight, on a grid large enough that they take longer than the collective timeout
    reference = build_tiny_cache(processed, tmp_path / "reference", tiny_settings(interp_res=GRID))
    for name in names[1::2]:
        shutil.copytree(reference / name, cache / name)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "cache_data.py", "--config-name=cached", f"data.processed_dir={processed}",
               f"cache.dir={cache}", *OVERRIDES, f"geometry.interp_res=[{','.join(map(str, GRID))}]",
               f"distributed.timeout_s={SHORT_TIMEOUT_S}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "7 runs: 0 built, 7 skipped" in out and "8 runs: 8 built, 0 skipped" in out
    assert out.index("rank 1 done") < out.index("8 runs: 8 built")  # rank 1 left while rank 0 built
    per_run_s = float(out.split("8 runs: 8 built")[1].split(" s per built run")[0].split(", ")[-1])
    assert 8 * per_run_s > SHORT_TIMEOUT_S  # rank 0 built for longer than any collective may wait
    assert out.count("manifest: ") == 1
    assert sorted(read_manifest(cache)["runs"]) == names
    assert not list((cache / ".ranks").glob("*/rank-*.json"))  # the job's records are gone
