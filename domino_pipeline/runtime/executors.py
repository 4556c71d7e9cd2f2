"""Where the per-run tasks of process_data.py and cache_data.py run: a pool of worker processes
on this machine (``executor.kind=pool``) or a ``dask.distributed`` cluster (``dask``;
docs/scaling.md, "All of DrivAerML on each engine"). Each run is one task and its only writer,
so a task run again writes nothing twice; results come back in the tasks' order. A task's
``report(message)`` reaches ``on_report`` in the pool (dropped on Dask). Dask is imported only
for ``executor.kind=dask``; its workers need this package on their path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm

from domino_pipeline.configuration.config import ExecutorConfig
from domino_pipeline.runtime.run_report import RunResult

LOCAL_POOL = ExecutorConfig(kind="pool", address=None)
# A run is one long task: a local cluster's workers need not profile their stacks every 10 ms nor
# check their event loop every 20 ms, CPU that runs compete for (benchmarks/benchmark_executors.py).
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}
Task = Callable[..., RunResult]
_REPORTS: list[Callable[[Any], None]] = []  # in a task's process: where report() sends messages


def report(message: Any) -> None:
    """In a task: send ``message`` to the stage's ``on_report`` (nothing where none listens)."""
    if _REPORTS:
        _REPORTS[0](message)


def run_tasks(function: Task, tasks: Mapping[str, tuple], executor: ExecutorConfig, *, workers: int,
              progress: str, position: int = 0, on_report: Callable[[Any], None] | None = None) -> list[RunResult]:
    """``function(*tasks[name])`` for every run, ``workers`` at a time under a ``progress`` bar; results
    in the order of ``tasks``, a lost or failed task a failed result; reports go to ``on_report``."""
    bar = tqdm(total=len(tasks), desc=progress, unit="run", position=position, disable=not tasks)
    done: dict[str, RunResult] = {}
    finished = (_dask_results(function, tasks, executor, workers) if executor.kind == "dask"
                else _pool_results(function, tasks, workers, on_report))
    for name, result in finished:
        done[name] = result
        bar.update()
        bar.set_postfix(last=f"{name}:{result.status}")
    bar.close()
    return [done[name] for name in tasks]


def _pool_results(function: Task, tasks: Mapping[str, tuple], workers: int,
                  on_report: Callable[[Any], None] | None) -> Iterator[tuple[str, RunResult]]:
    """(name, result) as tasks finish, from a spawn pool of ``workers`` processes (in this
    process for one worker or one task); the tasks' reports go to ``on_report`` through a queue."""
    if workers <= 1 or len(tasks) <= 1:
        _REPORTS[:] = [on_report] if on_report else []
        try:
            for name, args in tasks.items():
                yield name, _checked(name, lambda: function(*args), BrokenProcessPool, "worker process died")
        finally:
            _REPORTS.clear()
        return
    context = multiprocessing.get_context("spawn")
    queue = context.Queue() if on_report else None
    listener = _listen(queue, on_report) if queue is not None else None
    try:
        with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context,
                                 initializer=die_with_parent, initargs=(os.getpid(), queue)) as pool:
            futures = {pool.submit(function, *args): name for name, args in tasks.items()}
            for future in as_completed(futures):
                name = futures[future]
                yield name, _checked(name, future.result, BrokenProcessPool, "worker process died")
    finally:
        if queue is not None:
            queue.put(None)
            listener.join()


def _listen(queue: Any, on_report: Callable[[Any], None]) -> threading.Thread:
    """A started thread that hands the messages of ``queue`` to ``on_report`` until it gets None."""
    def run() -> None:
        while (message := queue.get()) is not None:
            on_report(message)

    thread = threading.Thread(target=run, name="task-reports", daemon=True)
    thread.start()
    return thread


def _dask_results(function: Task, tasks: Mapping[str, tuple], executor: ExecutorConfig,
                  workers: int) -> Iterator[tuple[str, RunResult]]:
    """(name, result) as tasks finish, from the Dask cluster; each result is let go as soon as
    it is here, so that a worker lost later costs no finished run."""
    try:
        import distributed
    except ImportError as err:
        raise ImportError("executor.kind=dask needs dask.distributed: pip install 'dask[distributed]' "
                          "(requirements.txt pins the tested version)") from err
    lost = ("its worker process died each time it ran it (more often than the scheduler's "
            "distributed.scheduler.allowed-failures)")
    batch = uuid.uuid4().hex[:8]
    with _warnings_only("distributed"), _dask_client(distributed, executor, workers) as client:
        futures = {client.submit(function, *args, key=f"{name}-{batch}", pure=False): name
                   for name, args in tasks.items()}
        for future in distributed.as_completed(futures):
            name = futures[future]
            yield name, _checked(name, future.result, distributed.KilledWorker, lost)
            future.release()


@contextmanager
def _dask_client(distributed: Any, executor: ExecutorConfig, workers: int) -> Iterator[Any]:
    """A client of the scheduler at ``executor.address``, or of a local cluster of ``workers`` processes."""
    if executor.address is not None:
        with distributed.Client(executor.address) as client:
            print(f"dask: scheduler {executor.address}, {len(client.scheduler_info()['workers'])} "
                  "workers now", flush=True)
            yield client
        return
    import dask

    with dask.config.set(LOCAL_CLUSTER_CONFIG), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield client


@contextmanager
def _warnings_only(logger: str) -> Iterator[None]:
    """Let only warnings and errors of ``logger`` through meanwhile (Dask narrates every worker's start)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)


def _checked(name: str, result: Callable[[], RunResult], killed: type[BaseException], lost: str) -> RunResult:
    """The task's result; a failed one saying ``lost`` when its worker died, or naming the error it raised."""
    try:
        return result()
    except killed:
        return RunResult(name, "failed", lost)
    except Exception as err:  # a task returns its failures; anything else is the executor's or the program's
        first = str(err).splitlines()[0] if str(err) else ""
        return RunResult(name, "failed", f"task error {type(err).__name__}: {first}")


def die_with_parent(parent: int, reports: Any = None) -> None:
    """In a pool worker: be killed when the pool's parent dies (``PR_SET_PDEATHSIG``), so a killed
    batch leaves no worker writing behind it; send report() messages to the queue ``reports``."""
    _REPORTS[:] = [reports.put] if reports is not None else []
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown is all there is
        return
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
