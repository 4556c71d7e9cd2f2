"""Ctrl-C and SIGTERM as a request: training stops after the current step and saves a checkpoint."""

from __future__ import annotations

import signal
from typing import Any


class StopFlag:
    """Set by SIGINT/SIGTERM so that training stops after the current step; a second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal_number is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum

    @property
    def is_set(self) -> bool:
        return self.signal_number is not None
