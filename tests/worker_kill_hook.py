"""Test-only fault for Dask workers: imported into every worker of a cluster through
``distributed.worker.preload``, it wraps process_data's per-run work so that

- every call of ``process_run`` appends the run's name to ``$KILL_HOOK_DIR/calls.log`` (one
  line per call, from any worker), and
- the first worker to process ``$KILL_HOOK_RUN`` kills itself with SIGKILL after the run's
  surface and volume rows are written to its temporary store, before the rename: a worker lost
  mid-run. The claim is a marker file made with O_EXCL, so the retry of the run (on any
  worker) goes through.

    with dask.config.set({"distributed.worker.preload": ["worker_kill_hook"]}): ...
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from domino_pipeline.inputs.processing import process_runs

_original_process_run = process_runs.process_run
_original_scaled = process_runs._scaled
_current = {"run": None, "parts": 0}


def _process_run(run_dir, out_path, options, *args, **kwargs):
    _current.update(run=Path(run_dir).name, parts=0)
    with open(Path(os.environ["KILL_HOOK_DIR"]) / "calls.log", "a") as log:
        log.write(f"{Path(run_dir).name}\n")
    return _original_process_run(run_dir, out_path, options, *args, **kwargs)


def _scaled(blocks, divisors):
    """The blocks; after the last volume block of the target run, the first time: SIGKILL."""
    yield from _original_scaled(blocks, divisors)
    _current["parts"] += 1  # the surface, then the volume
    if _current["run"] == os.environ["KILL_HOOK_RUN"] and _current["parts"] == 2 and _claim():
        os.kill(os.getpid(), signal.SIGKILL)


def _claim() -> bool:
    """True for the first caller in any process (the marker file did not exist)."""
    try:
        os.close(os.open(Path(os.environ["KILL_HOOK_DIR"]) / "killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


process_runs.process_run = _process_run
process_runs._scaled = _scaled
