"""What a timed training arm reports, read off its epochs.jsonl records and its processes.

benchmark_learning.py's ``train``/``watch_training`` run train.py in a child process and note when
each epoch record appears (``at_s``, seconds since the child started); this module adds what a
time-to-accuracy comparison needs on top: a stop rule (a validation-loss target or a time cap),
the peak memory of the child and everything it started (``PeakRss``: DataLoader workers count),
and one arm's summary (time to the target, epoch time, data-wait share, peak memory, the curve).
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Callable

REACHED_SLACK = 1e-3  # a loss within this relative slack of the target reaches it (float noise)


def reached(loss: float | None, target: float) -> bool:
    """Whether a validation ``loss`` reaches ``target`` (within REACHED_SLACK)."""
    return loss is not None and loss <= target * (1 + REACHED_SLACK)


def stop_rule(target: float, cap_s: float, last_epoch: int) -> Callable[[list[dict], float], bool]:
    """``watch_training``'s stop: once the latest epoch's validation loss reaches ``target`` or
    ``cap_s`` seconds have passed; never after ``last_epoch`` (the run ends there by itself)."""
    def stop(records: list[dict], seconds: float) -> bool:
        if records and records[-1]["epoch"] == last_epoch:
            return False
        return seconds > cap_s or bool(records and reached(records[-1].get("val_loss"), target))
    return stop


class PeakRss:
    """The largest summed resident memory (MB) of this process's descendants, sampled every
    ``interval_s`` on a thread while in the ``with`` block: a training child and its workers."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil
        me = psutil.Process(os.getpid())
        while not self._stop.wait(self.interval_s):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:  # exited between the listing and the read
                    continue
            self.peak_mb = max(self.peak_mb, total / 2**20)


def first_reaching_epoch(epochs: list[dict], target: float) -> dict | None:
    """The first epoch record whose validation loss reaches ``target``."""
    return next((r for r in epochs if reached(r.get("val_loss"), target)), None)


def data_wait_share(epochs: list[dict]) -> float | None:
    """The share of the training steps' time spent waiting for data over ``epochs``: data wait over
    data wait plus compute (validation and start-up excluded)."""
    wait = sum(r["data_wait_s"] for r in epochs)
    total = wait + sum(r["compute_s"] for r in epochs)
    return wait / total if total > 0 else None


def device_peak_mb(epochs: list[dict]) -> float | None:
    """The largest GPU peak of the epochs (train.py's ``peak_memory_mb`` where it counts CUDA
    memory); None on the CPU, where that figure is the main process's RSS."""
    cuda = [r["peak_memory_mb"] for r in epochs if str(r.get("memory_kind", "")).startswith("cuda")]
    return max(cuda) if cuda else None


def arm_summary(result: dict, target: float, cap_s: float, peak_host_mb: float | None) -> dict:
    """One arm of a time-to-accuracy run from ``watch_training``'s result: ``time_to_target_s``
    (seconds from the child's start to the epoch record that reached ``target``; None when it did
    not), the median training epoch (``epoch_s``, validation excluded), the data-wait share up to
    the target (all epochs when not reached), peak host and device memory, how it ended and its
    curve of (seconds, validation loss) per epoch."""
    epochs = result["epochs"]
    hit = first_reaching_epoch(epochs, target)
    counted = epochs if hit is None else [r for r in epochs if r["epoch"] <= hit["epoch"]]
    losses = [r["val_loss"] for r in epochs if "val_loss" in r]
    ended = ("reached the target" if hit is not None else "cut at the time cap" if result["stopped"]
             else "ran all epochs without reaching it")
    return {
        "time_to_target_s": None if hit is None else hit["at_s"],
        "epoch_reached": None if hit is None else hit["epoch"],
        "cap_s": cap_s, "ended": ended, "wall_s": result["wall_s"], "epochs_run": len(epochs),
        "epoch_s": statistics.median(r["epoch_s"] for r in epochs) if epochs else None,
        "data_wait_share": data_wait_share(counted),
        "samples_per_s": statistics.median(r["samples_per_s"] for r in epochs) if epochs else None,
        "loss_at_end": losses[-1] if losses else None, "best_val_loss": min(losses) if losses else None,
        "peak_host_mb": peak_host_mb, "peak_device_mb": device_peak_mb(epochs),
        "curve": [[r["at_s"], r["val_loss"], r["epoch"]] for r in epochs if "val_loss" in r],
    }


def time_ratio(slow: dict, fast: dict) -> dict:
    """``slow``'s time to the target over ``fast``'s; when ``slow`` never reached it, a lower bound
    (its wall time over ``fast``'s time: it had not reached the target by then)."""
    if fast["time_to_target_s"] is None:
        return {"ratio": None, "bound": None, "text": "-"}
    if slow["time_to_target_s"] is not None:
        ratio = slow["time_to_target_s"] / fast["time_to_target_s"]
        return {"ratio": ratio, "bound": None, "text": f"{ratio:.1f}x"}
    bound = slow["wall_s"] / fast["time_to_target_s"]
    return {"ratio": None, "bound": bound, "text": f"> {bound:.1f}x (not reached)"}
