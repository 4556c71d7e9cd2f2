"""Write directory-shaped stores (Zarr groups) so that they exist wholly or not at all.

A store is built under a hidden temporary name beside its final path and renamed into place
only when complete, so a crash or ``kill -9`` never leaves a partial ``<run>.zarr``; leftovers of
killed writers are hidden names that readers never list and that ``remove_stale_temporaries``
clears on the next run.
"""

from __future__ import annotations

import json
import os
import shutil
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
    """Delete temporaries left in ``parent`` by writers that were killed; return what was removed.

    Call it only when no other writer is active in ``parent`` (before a batch job starts).
    """
    parent = Path(parent)
    if not parent.is_dir():
        return []
    stale = [p for p in parent.iterdir() if p.name.startswith(".") and _TMP_MARK in p.name]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return stale
