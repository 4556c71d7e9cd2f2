"""Progress bars of the runs being fetched from where they are published: one per run, in
bytes, with its MB/s and the time left, fed by messages ``(run, total, bytes)`` (total: a new
run's bytes; -1: the run ended), from this process or from pool workers (executors.report)."""

from __future__ import annotations

import threading

from tqdm import tqdm


class FetchBars:
    """One tqdm bar per run being fetched, below the batch's bar."""

    def __init__(self) -> None:
        self.bars: dict[str, tqdm] = {}
        self.positions: dict[str, int] = {}
        self.lock = threading.Lock()

    def take(self, message: tuple[str, int | None, int]) -> None:
        """Start, advance or end a run's bar."""
        name, total, n = message
        with self.lock:
            if total is not None and total >= 0:
                taken = set(self.positions.values())
                self.positions[name] = next(p for p in range(1, len(taken) + 2) if p not in taken)
                self.bars[name] = tqdm(total=total, desc=f"fetching {name}", unit="B", unit_scale=True,
                                       unit_divisor=1024, position=self.positions[name], leave=False)
            elif total == -1 and name in self.bars:
                self.bars.pop(name).close()
                self.positions.pop(name)
            elif name in self.bars:
                self.bars[name].update(n)
