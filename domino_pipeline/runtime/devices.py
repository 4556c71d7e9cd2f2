"""The one rule that picks this process's GPU, for torch and Warp: the visible CUDA device of the
local rank, or the only visible one (docs/gpu.md, "Several GPUs"). Imports neither torch nor Warp.
"""

from __future__ import annotations

import os

from domino_pipeline.runtime.launch import launch_environment


def cuda_index(visible: int, rank: int | None = None) -> int:
    """The visible CUDA device (0-based) of local rank ``rank`` (default: this process's, by
    ``launch_environment``), among ``visible`` devices; a ValueError when there is none for it."""
    rank = launch_environment().local_rank if rank is None else rank
    if visible < 1:
        raise ValueError("no CUDA device is visible to this process")
    if rank < visible:
        return rank
    if visible == 1:
        return 0  # one GPU bound to each process
    raise ValueError(f"local rank {rank} but only {visible} CUDA devices are visible "
                     f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): "
                     "start at most one process per visible GPU, or bind one GPU to each process")
