"""The one rule that picks this process's GPU, for torch (training, prediction) and Warp (kNN, SDF).

A process uses visible CUDA device ``LOCAL_RANK`` (torchrun sets it; 0 otherwise). Launchers
that bind one GPU per process (``CUDA_VISIBLE_DEVICES`` set per rank, Slurm's ``--gpu-bind``)
leave a single visible device while LOCAL_RANK counts up: then that one device is used. Any
other LOCAL_RANK beyond the visible devices is an error, never a silent wrap-around that would
put two ranks on one GPU. Neither torch nor Warp is imported here: each caller passes its own
count of visible devices.
"""

from __future__ import annotations

import os


def local_rank() -> int:
    """This process's rank on its machine: ``LOCAL_RANK`` (torchrun), 0 in a single process."""
    value = os.environ.get("LOCAL_RANK", "0")
    try:
        rank = int(value)
    except ValueError:
        raise ValueError(f"LOCAL_RANK={value!r} is not an integer") from None
    if rank < 0:
        raise ValueError(f"LOCAL_RANK={rank} is negative")
    return rank


def cuda_index(visible: int, rank: int | None = None) -> int:
    """The visible CUDA device (0-based) of local rank ``rank`` (default: ``local_rank()``),
    among ``visible`` devices; a ValueError when there is none for it."""
    rank = local_rank() if rank is None else rank
    if visible < 1:
        raise ValueError("no CUDA device is visible to this process")
    if rank < visible:
        return rank
    if visible == 1:
        return 0  # one GPU bound to each process
    raise ValueError(f"LOCAL_RANK={rank} but only {visible} CUDA devices are visible "
                     f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                     "start at most one process per visible GPU, or bind one GPU to each process")
