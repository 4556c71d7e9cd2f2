"""One device rule for torch and Warp, and resumes under any number of visible GPUs, checked on
the CPU by simulating the visible-device count (the count functions are replaced)."""

from __future__ import annotations

import sys

import pytest
import torch
import warp as wp

from domino_pipeline.compute import geometry
from domino_pipeline.runtime.devices import cuda_index
from domino_pipeline.runtime.launch import launch_environment
from domino_pipeline.training import checkpointing, distributed


@pytest.mark.parametrize(("visible", "rank", "expected"),
                         [(8, 0, 0), (8, 7, 7), (2, 1, 1), (1, 0, 0), (1, 5, 0)])
def test_a_rank_uses_its_own_visible_device_or_the_only_one(visible, rank, expected):
    assert cuda_index(visible, rank) == expected


@pytest.mark.parametrize(("visible", "rank", "match"),
                         [(2, 3, "local rank 3 but only 2 CUDA devices are visible"),
                          (0, 0, "no CUDA device is visible")])
def test_a_rank_without_a_device_is_refused(visible, rank, match):
    with pytest.raises(ValueError, match=match):
        cuda_index(visible, rank)


# The variables of a process of local rank {rank} in an 8-process job on two machines, per launcher.
LAUNCH_VARIABLES = {
    "torchrun": {"RANK": "{global_rank}", "WORLD_SIZE": "8", "LOCAL_RANK": "{rank}",
                 "MASTER_ADDR": "node01", "MASTER_PORT": "29500"},
    "slurm": {"SLURM_PROCID": "{global_rank}", "SLURM_NTASKS": "8", "SLURM_LOCALID": "{rank}",
              "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_JOB_ID": "4242"},
}


def _simulate_gpus(monkeypatch, count: int, local_rank: int, launcher: str = "torchrun") -> None:
    for name in (*LAUNCH_VARIABLES["torchrun"], *LAUNCH_VARIABLES["slurm"], "SLURM_STEP_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in LAUNCH_VARIABLES[launcher].items():
        monkeypatch.setenv(name, value.format(rank=local_rank, global_rank=4 + local_rank))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(wp, "is_cuda_available", lambda: True)
    monkeypatch.setattr(wp, "get_cuda_device_count", lambda: count)
    monkeypatch.setattr(wp, "get_device", lambda name: name)


@pytest.mark.parametrize("launcher", sorted(LAUNCH_VARIABLES))
@pytest.mark.parametrize(("count", "local_rank"), [(4, 0), (4, 3), (1, 0), (1, 3)])
def test_torch_and_warp_pick_the_same_gpu(monkeypatch, count, local_rank, launcher):
    _simulate_gpus(monkeypatch, count, local_rank, launcher)
    torch_device = distributed.resolve_train_device("auto", launch_environment().local_rank)
    assert torch_device.type == "cuda" and torch_device.index == (local_rank if count > 1 else 0)
    assert geometry.resolve_device("auto") == f"cuda:{torch_device.index}"
    assert geometry.resolve_device("cuda") == f"cuda:{torch_device.index}"


@pytest.mark.parametrize("launcher", sorted(LAUNCH_VARIABLES))
def test_torch_and_warp_refuse_the_same_missing_gpu(monkeypatch, launcher):
    _simulate_gpus(monkeypatch, 2, 3, launcher)
    with pytest.raises(ValueError, match="local rank 3 but only 2"):
        distributed.resolve_train_device("auto", launch_environment().local_rank)
    with pytest.raises(ValueError, match="local rank 3 but only 2"):
        geometry.resolve_device("cuda")


@pytest.mark.parametrize(("saved", "visible"), [(8, 1), (1, 4), (2, 2)])
def test_cuda_rng_states_are_restored_where_the_device_exists(monkeypatch, saved, visible):
    restored = {}
    cpu_state = checkpointing.capture_rng_state()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)

    def set_rng_state(state, device):
        if device >= visible:
            raise RuntimeError(f"invalid device ordinal {device}")
        restored[device] = state

    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: [set_rng_state(s, i) for i, s in enumerate(states)])
    states = [torch.full((16,), i, dtype=torch.uint8) for i in range(saved)]
    state = cpu_state | {"cuda": states}
    checkpointing.restore_rng_state(state)
    assert sorted(restored) == list(range(min(saved, visible)))
    assert all(torch.equal(restored[i], states[i]) for i in restored)


class _FakeWarp:
    """Warp's pool queries on a simulated GPU."""

    def __init__(self, pool: bool, high: int) -> None:
        self.pool, self.high = pool, high

    def is_mempool_enabled(self, name: str) -> bool:
        assert name == "cuda:1"
        return self.pool

    def get_mempool_used_mem_high(self, name: str) -> int:
        return self.high


def test_peak_gpu_memory_adds_warps_pool(monkeypatch):
    from domino_pipeline.training import run_log

    device = torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (6 * 2**20, 16 * 2**20))
    monkeypatch.delitem(sys.modules, "warp")
    assert run_log.cuda_peak_mib(device) == (3.0, "cuda_torch_peak+warp_pool_peak")  # no Warp loaded
    monkeypatch.setitem(sys.modules, "warp", _FakeWarp(pool=True, high=5 * 2**20))
    assert run_log.cuda_peak_mib(device) == (8.0, "cuda_torch_peak+warp_pool_peak")
    monkeypatch.setitem(sys.modules, "warp", _FakeWarp(pool=False, high=0))
    assert run_log.cuda_peak_mib(device) == (10.0, "cuda_device_used")
