"""Blocks of rows produced in a background thread a few blocks ahead of their use, so decoding
overlaps the STL's parsing and the arrays' writing (docs/raw_inputs.md, "One run")."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
_BLOCK, _END, _ERROR = range(3)
_POLL_S = 0.1  # how often a producer waiting for room checks whether it was stopped


class ReadAhead(Generic[T]):
    """The items of ``blocks``, read in a thread named ``name`` up to ``depth`` ahead."""

    def __init__(self, blocks: Iterable[T], depth: int = 1, name: str = "read-ahead") -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, args=(iter(blocks),), name=name, daemon=True)
        self._thread.start()

    def _produce(self, blocks: Iterator[T]) -> None:
        try:
            for block in blocks:
                if not self._put((_BLOCK, block)):
                    return
            self._put((_END, None))
        except BaseException as err:  # handed to the consumer, raised there
            self._put((_ERROR, err))
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    def _put(self, item: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "ReadAhead[T]":
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        kind, value = self._queue.get()
        if kind == _BLOCK:
            return value
        self._finished = True
        self._thread.join()
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the producer and wait for it to close its iterator; the blocks not taken are dropped."""
        self._finished = True
        self._stop.set()
        self._thread.join()
        while not self._queue.empty():
            self._queue.get_nowait()
