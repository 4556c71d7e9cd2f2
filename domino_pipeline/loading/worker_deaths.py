"""A DataLoader worker's death named: a worker killed while the main process fetches a batch's descriptors surfaces as a
socket error before torch notices; ``checked_batches`` turns those and torch's "worker ... exited" errors into
``WorkerDiedError`` naming the worker's index, pid and signal."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable, Iterator
from typing import Any

from domino_pipeline.loading.worker_errors import raised_in_worker, with_worker_message

SETTLE_S = 2.0  # how long a worker killed a moment ago may take to be seen as exited
_TRANSFER_ERRORS = (ConnectionError, EOFError, FileNotFoundError, RuntimeError)


class WorkerDiedError(ChildProcessError):
    """A DataLoader worker died while batches were expected (an OSError: one line at every entry point)."""


def checked_batches(loader: Iterable) -> Iterator:
    """The loader's batches; a dead worker raises WorkerDiedError, a worker's own error its own message."""
    iterator = iter(loader)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except _TRANSFER_ERRORS as err:
            if raised_in_worker(err):
                raise with_worker_message(err)
            maybe_death = not isinstance(err, RuntimeError) or "DataLoader worker" in str(err)  # torch's say so
            death = worker_deaths(iterator) if maybe_death else None
            if death is None:
                raise
            raise WorkerDiedError(f"{death}; its batch was lost ({type(err).__name__}: {err})") from err
        except Exception as err:
            raise with_worker_message(err)
        yield batch


def worker_deaths(iterator: Any, settle_s: float = SETTLE_S) -> str | None:
    """A line per exited worker of a torch iterator, waiting up to ``settle_s``; None when all live."""
    workers = list(getattr(iterator, "_workers", None) or [])
    deadline = time.monotonic() + settle_s
    while workers:
        dead = [(i, w) for i, w in enumerate(workers) if w.exitcode is not None]
        if dead:
            return "; ".join(f"DataLoader worker {i} (pid {w.pid}) {describe_exit(w.exitcode)}" for i, w in dead)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return None


def describe_exit(exitcode: int) -> str:
    """How a process ended, from multiprocessing's exit code (negative: the signal)."""
    if exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name} ({-exitcode})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"
