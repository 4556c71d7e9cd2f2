"""What a batch stage (process_data.py, cache_data.py) did to each run, and its closing summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class RunResult:
    """The outcome of one run: ``status`` is one of the stage's statuses; ``message`` says why
    for a failed, stale or skipped run; ``notes`` are remarks printed for any status."""

    name: str
    status: str
    message: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0
    format: str = ""  # the input run's form (processed, curator-zarr-v2/-v3, curator-npz/-npy), where read
    source_bytes: int = 0  # the bytes of the input files read (process_data.py of remote runs; ``bytes``: those fetched)
    detail: str = ""  # a traceback, for a failure that is not bad input but a fault of the program


def summarize(results: Sequence[RunResult], statuses: Sequence[str], *,
              named: Sequence[str] = ("failed",)) -> str:
    """One line per run whose status is in ``named`` and per note, then each status's count of runs."""
    lines = []
    for r in results:
        if r.status in named:
            lines.append(f"{r.status.upper()} {r.name}: {r.message}")
            lines += [f"    {line}" for line in r.detail.splitlines()]
    lines += [f"note {r.name}: {note}" for r in results for note in r.notes]
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in statuses)
    lines.append(f"{len(results)} runs: {counts}")
    return "\n".join(lines)
