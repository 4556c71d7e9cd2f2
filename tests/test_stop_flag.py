"""SIGTERM or a first Ctrl-C asks training to stop after the current step; a second Ctrl-C aborts."""

from __future__ import annotations

import os
import signal

import pytest

from domino_pipeline.training.stop_flag import StopFlag


@pytest.fixture
def restored_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_sets_the_flag_and_a_second_ctrl_c_aborts(restored_handlers):
    flag = StopFlag()
    assert not flag.is_set
    os.kill(os.getpid(), signal.SIGTERM)
    assert flag.is_set and flag.signal_number == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    fresh = StopFlag()
    os.kill(os.getpid(), signal.SIGINT)
    assert fresh.signal_number == signal.SIGINT
