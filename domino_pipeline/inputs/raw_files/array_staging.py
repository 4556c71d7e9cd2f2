"""The arrays a block reader needs from a remote VTK XML file, decoded into local files by sweeps
of the file (one over every checksummed piece, or one per array read while it grows), so the
reader's many cursors never wait on the network. docs/remote_reading.md, "How a remote run is read"."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from domino_pipeline.storage.byte_reader import coalesce
from domino_pipeline.inputs.vtk.array_data import ArrayData, VtkXmlError

SLAB_BYTES = 3 << 22  # decoded bytes of an array decoded and written at a time (12 MiB)


class StagedArray:
    """An array's decoded bytes in a local file: ArrayData's ``read`` and ``local_file``."""

    def __init__(self, path: Path, n_bytes: int) -> None:
        self.path, self.n_bytes = path, n_bytes
        self._fd: int | None = None

    def read(self, start: int, stop: int) -> bytes:
        """Decoded bytes ``start:stop`` of the array."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        parts, at = [], start
        while at < stop:
            part = os.pread(self._fd, stop - at, at)
            if not part:
                raise VtkXmlError(f"{self.path}: staged array ends at byte {at}, expected {stop}")
            parts.append(part)
            at += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def local_file(self) -> tuple[Path, int]:
        """(the file holding the decoded bytes, their offset in it), for memory mapping."""
        return self.path, 0

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


class GrowingStagedArray(StagedArray):
    """A StagedArray its sweep still writes: a read waits for its bytes, or raises the sweep's error."""

    def __init__(self, path: Path, n_bytes: int) -> None:
        super().__init__(path, n_bytes)
        self._ready = 0
        self._error: BaseException | None = None
        self._changed = threading.Condition()

    def advance(self, ready: int) -> None:
        """The first ``ready`` bytes are staged (and flushed)."""
        with self._changed:
            self._ready = ready
            self._changed.notify_all()

    def fail(self, error: BaseException) -> None:
        """The sweep ended with ``error``: raised by every read of bytes not staged."""
        with self._changed:
            self._error = error
            self._changed.notify_all()

    def _wait(self, stop: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._ready >= stop or self._error is not None)
            if self._ready < stop:
                raise self._error

    def read(self, start: int, stop: int) -> bytes:
        """Decoded bytes ``start:stop`` of the array, once they are staged."""
        self._wait(stop)
        return super().read(start, stop)

    def local_file(self) -> tuple[Path, int]:
        """(the file, 0), once the whole array is staged."""
        self._wait(self.n_bytes)
        return super().local_file()


class Staging:
    """The sweeps of ``stage_growing``, one thread per array: ``close`` waits for them."""

    def __init__(self, threads: list[threading.Thread], stream) -> None:
        self.threads, self.stream = threads, stream

    def close(self) -> None:
        """Wait for every sweep (a stopped fetch ends one at its next GET); drop the stream's kept bytes."""
        for thread in self.threads:
            thread.join()
        self.stream.close()


class _Window:
    """The sweep's bytes from the slab being decoded to the frontier, which ArrayData reads."""

    def __init__(self, chunks: Iterator[tuple[int, memoryview]], stream) -> None:
        self.chunks, self.stream = chunks, stream
        self.held: deque[tuple[int, memoryview]] = deque()
        self.frontier = 0

    def advance(self, stop: int, keep: int) -> None:
        """Drop the bytes before ``keep``; take the sweep's bytes until those before ``stop`` are in."""
        while self.frontier < stop:
            try:
                position, data = next(self.chunks)
            except StopIteration:
                raise RuntimeError(f"{self.stream.file.url}: the sweep ended at byte {self.frontier}, "
                                   f"before byte {stop}") from None
            self.held.append((position, data))
            self.frontier = position + len(data)
            self._drop(keep)
        self._drop(keep)

    def _drop(self, keep: int) -> None:
        while self.held and self.held[0][0] + len(self.held[0][1]) <= keep:
            self.held.popleft()

    def finish(self, stop: int | None = None) -> None:
        """Take (and so hash) the rest of the sweep, or its bytes before ``stop``."""
        for position, data in self.chunks:
            self.held.clear()
            self.frontier = position + len(data)
            if stop is not None and self.frontier >= stop:
                return

    def read(self, position: int, n: int) -> memoryview | bytes:
        parts, at, stop = [], position, position + n
        for start, data in self.held:
            if start + len(data) <= at:
                continue
            if start > at:
                break
            part = data[at - start:min(stop, start + len(data)) - start]
            parts.append(part)
            at += len(part)
            if at >= stop:
                break
        if at < stop:
            raise RuntimeError(f"{self.stream.file.url}: bytes {at}..{stop} read while staging lie outside "
                               "the sweep's window")
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def where(self, position: int) -> str:
        return self.stream.where(position)


def stage_arrays(file, keys: list[tuple[str, str]], folder: Path, stream,
                 whole: list[tuple[int, int]], *, verify: bool) -> None:
    """Decode ``keys`` of ``file`` into ``folder`` in one sweep over them and the spans ``whole``."""
    arrays = _in_stream_order(file, keys)
    spans = [(data.position, data.end) for _, data in arrays] + whole
    ranges = [(start, start + n) for start, n, _ in coalesce([(a, b - a) for a, b in spans if b > a])]
    window = _Window(stream.sweep(ranges, verify=verify), stream)
    folder.mkdir(parents=True, exist_ok=True)
    staged = {}
    try:
        for number, (key, data) in enumerate(arrays):
            staged[key] = _stage(data, window, folder / f"array_{number}.bin")
        window.finish()
    except VtkXmlError:
        if verify:  # a changed byte behind the error is named as such: hash on to the piece's end
            window.finish(stream.piece_end(window.frontier))
        raise
    for key, array in staged.items():
        file.use_staged(*key, array)


def _in_stream_order(file, keys: list[tuple[str, str]]) -> list[tuple[tuple[str, str], ArrayData]]:
    """(key, ArrayData) of the arrays ``keys`` of ``file``, each once, in the order they lie in its stream."""
    return sorted({key: file.array_data(*key) for key in keys}.items(), key=lambda kv: kv[1].position)


def stage_growing(file, keys: list[tuple[str, str]], folder: Path, stream) -> Staging:
    """Stage each of ``keys`` by its own sweep in a thread, read as it grows; the caller closes it."""
    arrays = _in_stream_order(file, keys)
    folder.mkdir(parents=True, exist_ok=True)
    threads = []
    for number, (key, data) in enumerate(arrays):
        array = GrowingStagedArray(folder / f"array_{number}.bin", data.n_bytes)
        file.use_staged(*key, array)
        threads.append(threading.Thread(target=_sweep_one, args=(data, stream, array), daemon=True,
                                        name=f"staging {key[1]}"))
    for thread in threads:
        thread.start()
    return Staging(threads, stream)


def _sweep_one(data: ArrayData, stream, array: GrowingStagedArray) -> None:
    try:
        window = _Window(stream.sweep([(data.position, data.end)], verify=False), stream)
        _stage(data, window, array.path, array.advance)
        window.finish()
    except BaseException as err:  # raised by the reads that wait for these bytes
        array.fail(err)


def _stage(data: ArrayData, window: _Window, path: Path, staged=None) -> StagedArray:
    """Decode one array from the sweep into ``path`` by slabs, telling ``staged(n)`` the bytes done."""
    reader = data.bound_to(window)
    step = SLAB_BYTES if data.blocks is None else data.block_size * max(1, SLAB_BYTES // data.block_size)
    with open(path, "wb") as out:
        for start in range(0, data.n_bytes, step):
            stop = min(start + step, data.n_bytes)
            first, end = data.stream_span(start, stop)
            window.advance(end, keep=first)
            out.write(reader.read(start, stop))
            if staged is not None:
                out.flush()
                staged(stop)
    return StagedArray(path, data.n_bytes)
