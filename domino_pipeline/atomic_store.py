"""Write directory-shaped stores (Zarr groups) so that they exist wholly or not at all, and
keep writers out of each other's way.

A store is built under a hidden temporary name beside its final path (the writer's pid in it)
and renamed into place only when complete, so a crash or ``kill -9`` never leaves a partial
``<run>.zarr``; leftovers of dead writers are hidden names that readers never list and that
``remove_stale_temporaries`` clears, leaving those of live writers alone. ``exclusive_lock``
makes a second writer of the same thing wait for the first (an advisory ``flock``, released by
the kernel when its holder dies).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_TMP_MARK = ".tmp-"


@contextmanager
def atomic_directory(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory path; on success move it to ``final``, replacing any old one.

    On an exception the temporary directory is removed and ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
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


def write_json_atomic(path: str | os.PathLike, data: object) -> Path:
    """Write ``data`` as indented JSON to ``path`` via a hidden temporary file and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_json(path: str | os.PathLike, missing: str, error: type[Exception] = ValueError) -> object:
    """Parse the JSON file ``path``; FileNotFoundError ``"<path>: <missing>"`` when it is absent,
    ``error`` naming the file when it is not valid JSON."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {missing}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid JSON ({err})") from err


def remove_stale_temporaries(parent: str | os.PathLike) -> list[Path]:
    """Delete the temporaries in ``parent`` whose writer process is gone; return what was removed.

    A temporary's name carries its writer's pid; those of live processes on this machine are
    kept, so starting a second writer never removes the first one's work.
    """
    parent = Path(parent)
    if not parent.is_dir():
        return []
    stale = [p for p in parent.iterdir()
             if p.name.startswith(".") and _TMP_MARK in p.name and not _writer_alive(p.name)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return stale


def _writer_alive(name: str) -> bool:
    """Whether the pid in a temporary's name (``.<final>.tmp-<pid>-<id>``) is a live process."""
    pid = name.rsplit(_TMP_MARK, 1)[1].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def exclusive_lock(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``path`` (created if absent) for the block; if
    another process holds it, say so on stderr naming ``what`` and wait for it."""
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
