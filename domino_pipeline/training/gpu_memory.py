"""Peak GPU memory of a training or prediction process, Warp's allocations included.

torch's ``max_memory_allocated`` counts only torch's caching allocator. The uncached datapipe
and prediction also allocate through Warp (points, hash grids, meshes, kNN results), from Warp's
own CUDA memory pool, so the reported peak adds that pool's high-water mark. Warp keeps no
resettable high-water mark: its figure covers the whole process so far, which makes the sum an
upper bound of the true peak of an epoch. Where Warp's pool is off, its allocations are not
counted separately and the device's used memory (every process's, from ``cudaMemGetInfo``) is
reported instead. Warp is never imported here: a process that has not loaded it (the cached
path) has no Warp memory.
"""

from __future__ import annotations

import sys

import torch


def warp_pool_peak_bytes(device: torch.device) -> int | None:
    """High-water mark of Warp's memory pool on ``device``; 0 where this process has not loaded
    Warp, None where Warp is loaded but allocates outside a pool (not measurable that way)."""
    wp = sys.modules.get("warp")
    if wp is None or device.type != "cuda":
        return 0
    name = f"cuda:{device.index or 0}"
    if not wp.is_mempool_enabled(name):
        return None
    return int(wp.get_mempool_used_mem_high(name))


def cuda_peak_mib(device: torch.device) -> tuple[float, str]:
    """(peak MiB, what it counts) on a CUDA ``device``: torch's peak since the last reset plus
    Warp's pool high-water mark, or the device's used memory where Warp's pool is off."""
    warp_peak = warp_pool_peak_bytes(device)
    if warp_peak is None:
        free, total = torch.cuda.mem_get_info(device)
        return (total - free) / 2**20, "cuda_device_used"
    torch_peak = torch.cuda.max_memory_allocated(device)
    return (torch_peak + warp_peak) / 2**20, "cuda_torch_peak+warp_pool_peak"
