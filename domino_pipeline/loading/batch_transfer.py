"""Batches from DataLoader workers to the main process through reused shared memory: each worker keeps a pool of memfd
buffers; a batch is copied into a free one and sent as a small message, the descriptor travelling once; the receiver
maps each buffer once, builds the batch as views of it and frees the buffer (byte 0: 1 held, 0 free; data from
``HEADER``) with the last view. Constants (``mark_constant``) travel as recipes; ``output_array`` arrays are in the
buffer already. Without memfd or a free buffer ``pack`` returns None (torch's own shared memory)."""

from __future__ import annotations

import math
import mmap
import os
import secrets
import threading
import weakref
from collections.abc import Callable
from multiprocessing.reduction import DupFd

import numpy as np
import torch
from torch.utils.data import get_worker_info

HEADER = 64  # bytes before the data: the flag, then alignment padding
ALIGN = 64
POOL_SIZE = 8  # buffers per worker: prefetched batches + the ones the consumer holds
HELD, FREE = 1, 0

_constants: dict[int, tuple[weakref.ref, Callable, tuple]] = {}


def mark_constant(tensor: torch.Tensor, factory: Callable[..., torch.Tensor], args: tuple) -> None:
    """Record that ``factory(*args)`` (cached, module-level) rebuilds ``tensor``, so batches carry the recipe."""
    _constants[id(tensor)] = (weakref.ref(tensor), factory, args)


def _constant_recipe(tensor: torch.Tensor) -> tuple[Callable, tuple] | None:
    entry = _constants.get(id(tensor))
    return entry[1:] if entry is not None and entry[0]() is tensor else None


class _Buffer:
    """One pooled buffer of a worker: a memfd mapped read-write."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fd = os.memfd_create("domino-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.token = secrets.token_hex(8)
        self.announced = False  # the receiver has its file descriptor
        self._lease: weakref.ref | None = None

    @property
    def free(self) -> bool:
        """Neither the receiver nor an array of this process uses the buffer."""
        return self.map[0] == FREE and (self._lease is None or self._lease() is None)

    def lease(self) -> torch.Tensor:
        """The buffer's bytes as a tensor that keeps the buffer from reuse until it and every view are freed."""
        holder = np.frombuffer(self.map, dtype=np.uint8)
        self._lease = weakref.ref(holder)
        return torch.from_numpy(holder)  # the tensor's storage holds ``holder``

    def close(self) -> None:
        del self.bytes  # the mapping cannot close while a tensor exports it
        self.map.close()
        os.close(self.fd)


class _Arena:
    """Bump allocation, in one buffer, of the arrays of the item being drawn."""

    def __init__(self, buffer: _Buffer) -> None:
        self.buffer, self.bytes, self.used = buffer, buffer.lease(), HEADER

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        start = _aligned(self.used)
        nbytes = math.prod(shape) * dtype.itemsize
        if start + nbytes > self.buffer.size:
            return None
        self.used = start + nbytes
        return self.bytes[start:start + nbytes].numpy().view(dtype).reshape(shape)

    def offset_of(self, tensor: torch.Tensor) -> int | None:
        """Where ``tensor``'s data lies in the buffer, if it was allocated here and is contiguous."""
        nbytes = tensor.numel() * tensor.element_size()
        start = tensor.data_ptr() - self.bytes.data_ptr()
        inside = nbytes and tensor.is_contiguous() and HEADER <= start and start + nbytes <= self.used
        return start if inside else None


def _aligned(offset: int) -> int:
    return math.ceil(offset / ALIGN) * ALIGN


class _Pool:
    """The buffers of this process (a forked worker starts with an empty pool)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.buffers: list[_Buffer] = []
        self.retired: list[str] = []  # tokens the receiver can forget
        self.arena: _Arena | None = None  # where the current item's arrays go
        self.batch_bytes = 0  # the largest batch packed so far: the size of the next arena

    def acquire(self, size: int) -> _Buffer | None:
        """A free buffer of at least ``size`` bytes: reused, new, or replacing a smaller free one."""
        free = [b for b in self.buffers if b.free]
        fitting = [b for b in free if b.size >= size]
        if fitting:
            return fitting[0]
        if len(self.buffers) >= POOL_SIZE:
            if not free:
                return None
            self.buffers.remove(free[0])
            self.retired.append(free[0].token)
            free[0].close()
        buffer = _Buffer(math.ceil(size * 1.25 / mmap.PAGESIZE) * mmap.PAGESIZE)
        self.buffers.append(buffer)
        return buffer

    def output(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An empty array in the current arena (opened on demand), else an ordinary one."""
        if self.arena is None and self.batch_bytes:
            buffer = self.acquire(self.batch_bytes)
            self.arena = None if buffer is None else _Arena(buffer)
        out = None if self.arena is None else self.arena.array(shape, dtype)
        return np.empty(shape, dtype) if out is None else out


_pool: _Pool | None = None


def _this_process_pool() -> _Pool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = _Pool()
    return _pool


def output_array(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An empty array (``np.empty``'s signature), in a worker in the buffer its batch travels in: no copy."""
    if get_worker_info() is None or not hasattr(os, "memfd_create"):
        return np.empty(shape, dtype)
    return _this_process_pool().output(tuple(shape), np.dtype(dtype))


class PackedBatch:
    """A batch written into a pooled buffer; unpickles as the batch dict (``unpack``)."""

    def __init__(self, buffer: _Buffer, keys: tuple, layout: tuple, constants: dict, retired: tuple) -> None:
        self.buffer, self.keys, self.layout = buffer, keys, layout
        self.constants, self.retired = constants, retired

    def __reduce__(self):
        fd = None if self.buffer.announced else DupFd(self.buffer.fd)
        self.buffer.announced = True
        return unpack, (self.buffer.token, fd, self.buffer.size, os.getpid(), self.keys,
                        self.layout, self.constants, self.retired)


def pack(items: list[dict[str, torch.Tensor]]) -> PackedBatch | None:
    """The items stacked into one pooled buffer (constants by recipe); None where no buffer is available."""
    if not hasattr(os, "memfd_create"):
        return None
    pool = _this_process_pool()
    arena, pool.arena = pool.arena if len(items) == 1 else None, None
    constants, entries = {}, []
    for key, value in items[0].items():
        recipe = _constant_recipe(value) if len(items) == 1 else None
        if recipe is not None:
            constants[key] = recipe
            continue
        offset = None if arena is None else arena.offset_of(value)
        entries.append([key, value.dtype, (len(items), *value.shape), offset,
                        len(items) * value.numel() * value.element_size()])
    buffer, cursor = _destination(pool, arena, entries)
    if buffer is None:
        return None
    for entry in entries:
        if entry[3] is None:
            key, dtype, shape, _, nbytes = entry
            entry[3], cursor = _aligned(cursor), _aligned(cursor) + nbytes
            slot = buffer.bytes[entry[3]:cursor].view(dtype).view(shape)
            for i, item in enumerate(items):
                slot[i].copy_(item[key])
    pool.batch_bytes = max(pool.batch_bytes, cursor)
    buffer.map[0] = HELD
    retired, pool.retired = tuple(pool.retired), []
    return PackedBatch(buffer, tuple(items[0]), tuple(map(tuple, entries)), constants, retired)


def _destination(pool: _Pool, arena: _Arena | None, entries: list) -> tuple[_Buffer | None, int]:
    """The buffer a batch goes in and where its copies start: the item's arena if the rest fits, else a free one."""
    copied = sum(_aligned(nbytes) for *_, offset, nbytes in entries if offset is None)
    if arena is not None and _aligned(arena.used) + copied <= arena.buffer.size:
        return arena.buffer, arena.used
    for entry in entries:
        entry[3] = None
    return pool.acquire(HEADER + sum(_aligned(entry[4]) for entry in entries)), HEADER


_maps: dict[str, tuple[mmap.mmap, int]] = {}  # receiver: token -> (mapping, worker pid)
_maps_lock = threading.Lock()


def unpack(token: str, fd, size: int, pid: int, keys: tuple, layout: tuple, constants: dict,
           retired: tuple) -> dict[str, torch.Tensor]:
    """The batch dict in the receiving process: views of the mapped buffer, freed for reuse with the last view."""
    mapping = _mapping(token, fd, size, pid, retired)
    data = np.frombuffer(mapping, dtype=np.uint8, count=size - HEADER, offset=HEADER)
    weakref.finalize(data, _release, mapping)
    flat = torch.from_numpy(data)
    batch = {key: flat[start - HEADER:start - HEADER + nbytes].view(dtype).view(shape)
             for key, dtype, shape, start, nbytes in layout}
    batch.update({key: factory(*args).unsqueeze(0) for key, (factory, args) in constants.items()})
    return {key: batch[key] for key in keys}


def mapped_buffers() -> set[str]:
    """The tokens of the worker buffers this (receiving) process holds mapped."""
    with _maps_lock:
        return set(_maps)


def _mapping(token: str, fd, size: int, pid: int, retired: tuple) -> mmap.mmap:
    with _maps_lock:
        for old in retired:
            _maps.pop(old, None)
        if token not in _maps:
            if fd is None:
                raise RuntimeError(f"batch buffer {token} of worker {pid} arrived before its "
                                   "file descriptor (a batch was unpickled out of order)")
            _forget_dead_workers()
            handle = fd.detach()
            try:
                _maps[token] = (mmap.mmap(handle, size), pid)
            finally:
                os.close(handle)
        return _maps[token][0]


def _forget_dead_workers() -> None:
    """Drop the mappings of exited workers (views still alive keep theirs)."""
    for token, (_, pid) in list(_maps.items()):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            del _maps[token]
        except PermissionError:
            pass


def _release(mapping: mmap.mmap) -> None:
    if not mapping.closed:
        mapping[0] = FREE
