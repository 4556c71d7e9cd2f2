"""Write directory-shaped stores (Zarr groups) so that they exist wholly or not at all, and keep
writers out of each other's way.

A store is built under a hidden temporary name beside its final path (the writer's pid in it)
and renamed into place only when complete. A writer holds an exclusive ``flock`` on its
temporary while it writes; the kernel releases it when the writer exits, zombie or not, so "no
process holds the lock" is what makes a temporary stale (a pid proves nothing: zombies answer
and pids are reused). ``exclusive_lock`` makes a second writer of the same thing wait.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_TMP_MARK = ".tmp-"


@contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory path; on success move it to ``final``, replacing any old one; on an
    exception remove it and leave ``final`` as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp, held = _new_temporary(final)  # the caller writes into ``tmp``; replacing the folder would drop the lock
    try:
        yield tmp
        if final.exists():
            old = final.parent / f".{final.name}{_TMP_MARK}old-{uuid.uuid4().hex[:8]}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(held)


@contextmanager
def temporary_directory(parent: str | os.PathLike, name: str) -> Iterator[Path]:
    """Yield a new hidden temporary folder in ``parent``, locked while the block runs and removed after
    it; one left by a dead process is removed by ``remove_stale_temporaries(parent)``."""
    parent = Path(parent)
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp, held = _new_temporary(parent / name)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(held)


def _new_temporary(final: Path) -> tuple[Path, int]:
    """A new hidden temporary folder beside ``final`` (pid in its name) and the descriptor holding its lock."""
    tmp = final.parent / f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp, hold_temporary(tmp)


def hold_temporary(path: Path) -> int:
    """An open descriptor of ``path`` holding an exclusive ``flock`` on it: this process's claim on a
    temporary, released when the descriptor is closed or the process exits."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh name: nobody else holds it
    return fd


def write_json_atomic(path: str | os.PathLike, data: object) -> Path:
    """Write ``data`` as indented JSON to ``path`` via a hidden temporary file and a rename."""
    return write_bytes_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` via a hidden temporary file and a rename: readers never see a part;
    ``durable``: on disk before this returns (``atomic_file``)."""
    with atomic_file(path, durable=durable) as tmp:
        tmp.write_bytes(data)
    return Path(path)


@contextmanager
def atomic_file(final: str | os.PathLike, *, durable: bool = False, suffix: str = "") -> Iterator[Path]:
    """Yield a new hidden temporary path beside ``final`` (ending in ``suffix``, for writers that insist on an
    extension), locked so that ``remove_stale_temporaries`` spares it; on success rename it to ``final``, replacing any
    old file; on an exception remove it, ``final`` as it was. ``durable``: the bytes reach the disk before the rename,
    and the rename before the return, so that a crash or power cut leaves the old file or the whole new one."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield tmp
        if durable:
            flush_to_disk(tmp)
        os.replace(tmp, final)
        if durable:
            flush_to_disk(final.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def flush_to_disk(path: str | os.PathLike) -> None:
    """``fsync`` a file's bytes, or a folder's entries (a rename in it), to the disk."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike, missing: str, error: type[Exception] = ValueError) -> object:
    """Parse the JSON file ``path``; FileNotFoundError when absent, ``error`` naming the file when invalid."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {missing}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid JSON ({err})") from err


def remove_stale_temporaries(parent: str | os.PathLike) -> list[Path]:
    """Delete the temporaries in ``parent`` no live writer holds (by their ``flock``), sparing those just
    created and not yet locked; return what was removed."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return [path for path in parent.iterdir()
            if path.name.startswith(".") and _TMP_MARK in path.name and _remove_if_unheld(path)]


def _remove_if_unheld(path: Path) -> bool:
    """Remove the temporary ``path`` if no process holds its lock (holding it meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # gone already, or not ours to open
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer holds it
        if _just_created(path):
            return False
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


def _just_created(path: Path, grace_s: float = 10.0) -> bool:
    """Whether ``path`` is younger than ``grace_s`` and the pid in its name is a running,
    non-zombie process other than this one: a writer between creating and locking it."""
    pid = path.name.rsplit(_TMP_MARK, 1)[1].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        young = time.time() - path.lstat().st_mtime < grace_s
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return young and state not in ("Z", "X")


@contextmanager
def exclusive_lock(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block, saying on stderr when waiting for another holder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            print(f"waiting for another writer of {what} (pid {holder}) to finish", file=sys.stderr,
                  flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
