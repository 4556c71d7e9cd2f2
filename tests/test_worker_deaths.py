"""A DataLoader worker's death named (which worker, which signal), also when the main process
holds its batches and the next one is lost on the socket that carries its file descriptors."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
from test_batch_transfer import Items
from torch.utils.data import DataLoader

from datapipe import collate_items
from domino_pipeline.loading.worker_deaths import WorkerDiedError, checked_batches, describe_exit


class _Iterator:
    """A loader iterator whose next batch is lost on the socket, as a dead worker's is."""

    def __init__(self, workers, error: BaseException) -> None:
        self._workers, self.error = workers, error

    def __iter__(self):
        return self

    def __next__(self):
        raise self.error


def test_exit_codes_are_described():
    assert describe_exit(-9) == "was killed by signal SIGKILL (9)"
    assert describe_exit(3) == "exited with status 3"


@pytest.mark.slow
def test_a_lost_batch_names_the_killed_worker_and_its_signal():
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        os.kill(workers[1].pid, signal.SIGKILL)
        lost = ConnectionResetError(104, "Connection reset by peer")
        with pytest.raises(WorkerDiedError, match=rf"^DataLoader worker 1 \(pid {workers[1].pid}\) was killed "
                                                  r"by signal SIGKILL \(9\); its batch was lost \(ConnectionResetError"):
            next(checked_batches(_Iterator(workers[:2], lost)))
        # every worker alive: the error is not a death and passes unchanged (after the settle time)
        with pytest.raises(ConnectionResetError):
            next(checked_batches(_Iterator(workers[:1], lost)))
    finally:
        for worker in workers:
            worker.kill()
            worker.join()


@pytest.mark.slow
def test_a_worker_killed_while_its_batches_are_held_is_named():
    loader = DataLoader(Items(), batch_size=1, num_workers=2, collate_fn=collate_items, prefetch_factor=2)
    held = []
    # torch's SIGCHLD handler may name the death first (its RuntimeError names pid and signal)
    with pytest.raises((WorkerDiedError, RuntimeError)) as caught:
        for i, batch in enumerate(checked_batches(loader)):
            held.append(batch)  # every pooled buffer of both workers stays held
            if i == 30:
                pid = _worker_pids(loader)[0]
                os.kill(pid, signal.SIGKILL)
    message = str(caught.value)
    assert str(pid) in message and ("SIGKILL" in message or "Killed" in message), message


def _worker_pids(loader: DataLoader) -> list[int]:
    import gc
    for obj in gc.get_objects():
        if type(obj).__name__ == "_MultiProcessingDataLoaderIter" and obj._dataset is loader.dataset:
            return [w.pid for w in obj._workers]
    raise AssertionError("no multi-process iterator")
