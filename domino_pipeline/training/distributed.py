"""Process-group setup for one process or many (torchrun, srun) and the few collectives training needs, no-ops in a
world of size 1. NCCL on CUDA, gloo on the CPU; timeouts from ``distributed`` (docs/gpu.md, "Several GPUs")."""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from domino_pipeline.runtime.devices import cuda_index
from domino_pipeline.runtime.launch import Launch

START_WAIT_S = 600.0  # how long the job's first meeting waits for a rank still starting


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job: rank, world size, its torch device and what started it."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    launcher: str = "single"

    @property
    def is_main(self) -> bool:
        """Rank 0 does all file and console I/O."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def resolve_train_device(name: str, local_rank: int) -> torch.device:
    """`auto` is this rank's CUDA device (``devices.cuda_index``) when CUDA is present, else the CPU."""
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"train device must be one of auto, cpu, cuda, not {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train device 'cuda' was requested but CUDA is not available")
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", cuda_index(torch.cuda.device_count(), local_rank))


def init_distributed(launch: Launch, device_name: str = "auto", timeout_s: float = 1800.0) -> DistInfo:
    """Join the job's process group (``timeout_s`` for its collectives), or describe a single process."""
    device = resolve_train_device(device_name, launch.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if launch.world_size > 1 and not dist.is_initialized():
        cuda = device.type == "cuda"
        join_group(launch, "nccl" if cuda else "gloo", timeout_s, device_id=device if cuda else None)
    return DistInfo(rank=launch.rank, local_rank=launch.local_rank, world_size=launch.world_size,
                    device=device, launcher=launch.launcher)


def join_group(launch: Launch, backend: str, timeout_s: float, device_id: torch.device | None = None) -> None:
    """``init_process_group`` at ``launch``'s rendezvous, its rank and world size given, not read again."""
    dist.init_process_group(backend=backend, init_method=launch.init_method, rank=launch.rank,
                            world_size=launch.world_size, timeout=timedelta(seconds=timeout_s), device_id=device_id)


def work_group(timeout_s: float) -> Any:
    """A gloo group of every rank waiting up to ``timeout_s``, for per-rank work; None in a single process."""
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s)) if dist.is_initialized() else None


def job_id(launch: Launch, timeout_s: float) -> str:
    """One id shared by every rank of this job (rank 0's, broadcast), then the process group is left so later work
    cannot time out; the ranks meet as they start, so the meeting waits at least ``START_WAIT_S``."""
    chosen = [uuid.uuid4().hex]
    if launch.world_size > 1:
        join_group(launch, "gloo", max(timeout_s, START_WAIT_S))
        dist.broadcast_object_list(chosen, src=0)
        dist.destroy_process_group()
    return chosen[0]


def shutdown_distributed() -> None:
    """Leave the process group (if any) so the launcher sees a clean exit."""
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (in place on a copy); returns it unchanged in a single process."""
    values = values.clone()
    if dist.is_initialized():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def any_ranks(flags: Sequence[bool], device: torch.device) -> list[bool]:
    """Each flag: True when set on any rank (one collective for them all), so that all ranks act together."""
    if not dist.is_initialized():
        return [bool(flag) for flag in flags]
    values = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return [value > 0 for value in values.tolist()]


def gather_objects(obj: Any, group: Any = None) -> list[Any]:
    """Every rank's small object, in rank order (``[obj]`` alone); ``group``: e.g. a ``work_group``."""
    if not dist.is_initialized():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj, group=group)
    return gathered
