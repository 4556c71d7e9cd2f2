"""Atomic directories and JSON files, writer locks and stale temporaries: a failed write leaves
the old contents, a second writer waits for the first, and clean-up spares live writers."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from domino_pipeline.storage.atomic_store import (
    atomic_directory,
    exclusive_lock,
    read_json,
    remove_stale_temporaries,
    temporary_directory,
    write_json_atomic,
)


def test_a_directory_appears_whole_and_replaces_the_old_one(tmp_path):
    final = tmp_path / "run.zarr"
    with atomic_directory(final) as tmp:
        (tmp / "a").mkdir(parents=True)
        assert not final.exists()
    assert (final / "a").is_dir()
    with atomic_directory(final) as tmp:
        (tmp / "b").mkdir(parents=True)
    assert sorted(p.name for p in final.iterdir()) == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["run.zarr"]  # no temporaries left


def test_a_failed_write_leaves_the_old_directory_and_no_temporary(tmp_path):
    final = tmp_path / "run.zarr"
    with atomic_directory(final) as tmp:
        (tmp / "old").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="disk full"), atomic_directory(final) as tmp:
        (tmp / "new").mkdir(parents=True)
        raise RuntimeError("disk full")
    assert [p.name for p in final.iterdir()] == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["run.zarr"]


def test_json_is_written_whole_and_read_with_named_errors(tmp_path):
    path = write_json_atomic(tmp_path / "f.json", {"a": [1, 2]})
    assert read_json(path, "missing") == {"a": [1, 2]} == json.loads(path.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
    with pytest.raises(FileNotFoundError, match=r"g\.json: run cache_data\.py first"):
        read_json(tmp_path / "g.json", "run cache_data.py first")
    path.write_text("{not json")
    with pytest.raises(KeyError, match=r"f\.json: not valid JSON"):
        read_json(path, "missing", error=KeyError)


class _Signalling(io.StringIO):
    """A stderr that sets ``written`` on each write."""

    def __init__(self) -> None:
        super().__init__()
        self.written = threading.Event()

    def write(self, text: str) -> int:
        count = super().write(text)
        self.written.set()
        return count


def test_a_second_writer_waits_for_the_first(tmp_path, monkeypatch):
    """flock excludes another open of the file, in this process as in another one."""
    lock, stderr, acquired = tmp_path / ".lock", _Signalling(), threading.Event()
    monkeypatch.setattr(sys, "stderr", stderr)

    def second_writer():
        with exclusive_lock(lock, "run_1"):
            acquired.set()

    with exclusive_lock(lock, "run_1"):
        waiter = threading.Thread(target=second_writer)
        waiter.start()
        assert stderr.written.wait(timeout=30)  # it found the lock held and said so
        assert not acquired.is_set()
    waiter.join(timeout=30)
    assert acquired.is_set()
    assert f"waiting for another writer of run_1 (pid {os.getpid()})" in stderr.getvalue()


def test_temporaries_of_dead_writers_are_removed_and_of_live_ones_kept(tmp_path):
    live = tmp_path / f".g2.zarr.tmp-{os.getppid()}-abcd1234"  # our parent: alive, not us
    live.mkdir()
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout.strip()
    dead = tmp_path / f".g2.zarr.tmp-{dead_pid}-abcd1234"
    dead.mkdir()
    dead_file = tmp_path / f".manifest.json.tmp-{dead_pid}-abcd1234"
    dead_file.write_text("{}")
    kept = tmp_path / "g1.zarr"
    kept.mkdir()
    assert sorted(remove_stale_temporaries(tmp_path)) == sorted([dead, dead_file])
    assert live.is_dir() and kept.is_dir() and not dead.exists() and not dead_file.exists()


def test_a_temporary_directory_is_held_while_in_use_and_removed_after_it(tmp_path):
    with pytest.raises(RuntimeError, match="failed"):
        with temporary_directory(tmp_path / "staging", "run_1") as tmp:
            (tmp / "data").write_bytes(b"x")
            old = time.time() - 3600
            os.utime(tmp, (old, old))
            assert tmp.name.startswith(f".run_1.tmp-{os.getpid()}-")
            assert remove_stale_temporaries(tmp_path / "staging") == [] and tmp.is_dir()  # held
            raise RuntimeError("failed")
    assert list((tmp_path / "staging").iterdir()) == []


WRITER = """
import sys, time
from domino_pipeline.storage.atomic_store import atomic_directory
with atomic_directory(sys.argv[1]) as tmp:
    print(tmp, flush=True)
    time.sleep(60)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.slow
def test_a_temporary_is_stale_once_no_process_holds_its_lock_zombie_writer_included(tmp_path):
    """A writer killed but not reaped (a zombie: ``os.kill(pid, 0)`` still succeeds) holds no
    lock any more, so its temporary goes; while it ran, its temporary stayed."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "run_1.zarr")],
                              stdout=subprocess.PIPE, text=True)
    try:
        tmp = Path(writer.stdout.readline().strip())
        old = time.time() - 3600
        os.utime(tmp, (old, old))  # past the grace given to a writer that has not locked yet
        assert remove_stale_temporaries(tmp_path) == [] and tmp.is_dir()
        os.kill(writer.pid, signal.SIGKILL)
        deadline = time.time() + 10
        while _state(writer.pid) != "Z" and time.time() < deadline:
            time.sleep(0.02)
        assert _state(writer.pid) == "Z"
        os.kill(writer.pid, 0)  # a zombie answers a signal: the old test said "alive"
        assert remove_stale_temporaries(tmp_path) == [tmp] and not tmp.exists()
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.slow
def test_an_unlocked_temporary_of_a_reused_pid_is_stale(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        left = tmp_path / f".g2.zarr.tmp-{sleeper.pid}-abcd1234"  # a running pid, no lock held
        left.mkdir()
        old = time.time() - 3600
        os.utime(left, (old, old))
        assert remove_stale_temporaries(tmp_path) == [left]
    finally:
        sleeper.kill()
        sleeper.wait()
