"""Files that carry their SHA-256 digest beside them, written after the file itself and checked on
every read: training checkpoints and models (docs/checkpoints.md).

``<name>.sha256`` is a small JSON file: ``{"file": "<name>", "versions": [{"sha256": "<hex>",
"bytes": <size>}]}``. It lists one version, except while a file is replaced in place: then it lists
the old and the new one, so that the file matches its digest at every instant. A file without its
digest file is one whose write did not finish (or that this project did not write): it fails.
Both files are written through ``atomic_store.atomic_file`` and reach the disk before a write returns.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from domino_pipeline.storage.atomic_store import atomic_file, write_bytes_atomic

DIGEST_SUFFIX = ".sha256"


class DamagedFileError(ValueError):
    """A file that fails its digest or cannot be read; the message names it and what is wrong."""


@dataclass(frozen=True)
class Version:
    """What a file's digest records of one version of it."""

    sha256: str
    bytes: int


def digest_path(path: str | os.PathLike) -> Path:
    """The digest file of ``path``: ``<name>.sha256`` beside it."""
    path = Path(path)
    return path.with_name(path.name + DIGEST_SUFFIX)


def file_version(path: str | os.PathLike) -> Version:
    """The SHA-256 and size of the file at ``path`` as it is now."""
    with open(path, "rb") as file:
        return Version(hashlib.file_digest(file, "sha256").hexdigest(), os.fstat(file.fileno()).st_size)


def write_checked(path: str | os.PathLike, produce: Callable[[Path], None]) -> Version:
    """Write ``path`` by ``produce(temporary path)``, then its digest, then check it back: returns
    only once both are whole on disk and agree. A failed write leaves the old file and digest (or
    none) and raises OSError naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_file(path, durable=True, suffix=path.suffix) as tmp:
            produce(tmp)
            version = file_version(tmp)
            old = _current_versions(path)
            if old:  # while the new file replaces the old one, either matches the digest
                write_digest(path, [*old, version])
    except OSError as error:
        raise OSError(error.errno, f"not written ({error.strerror or error})", str(path)) from error
    except RuntimeError as error:  # torch's writer reports a full disk so
        raise OSError(None, f"not written ({error})", str(path)) from error
    write_digest(path, [version])
    check_file(path)
    return version


def write_digest(path: Path, versions: list[Version]) -> None:
    """Write the digest file of ``path`` listing ``versions`` (atomically, on disk before returning)."""
    record = {"file": path.name, "versions": [asdict(v) for v in versions]}
    write_bytes_atomic(digest_path(path), (json.dumps(record) + "\n").encode(), durable=True)


def listed_versions(path: str | os.PathLike) -> list[Version]:
    """The versions the digest file of ``path`` allows; DamagedFileError naming the file when it
    has none or it cannot be read."""
    path, sidecar = Path(path), digest_path(path)
    if not sidecar.is_file():
        raise DamagedFileError(f"{path}: no {sidecar.name} beside it: its write did not finish, "
                               "or this project did not write it")
    try:
        record = json.loads(sidecar.read_text())
        return [Version(str(v["sha256"]), int(v["bytes"])) for v in record["versions"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise DamagedFileError(f"{sidecar}: not a digest file ({type(error).__name__}: {error})") from error


def _current_versions(path: Path) -> list[Version]:
    """What the digest of an existing ``path`` lists; none where either is missing or the digest is damaged."""
    try:
        return listed_versions(path) if path.exists() else []
    except DamagedFileError:
        return []


def has_digest(path: str | os.PathLike) -> bool:
    """Whether ``path`` has a digest file beside it (a file this project wrote)."""
    return digest_path(path).is_file()


def check_file(path: str | os.PathLike) -> Version:
    """The version of ``path`` when it matches its digest; else DamagedFileError naming it and what
    is wrong (missing, no digest, truncated, changed bytes)."""
    path = Path(path)
    versions = listed_versions(path)
    if not path.is_file():
        raise DamagedFileError(f"{path}: missing; its {digest_path(path).name} is there")
    found = file_version(path)
    _compare(path, found, versions)
    return found


def read_checked(path: str | os.PathLike) -> bytes:
    """The bytes of ``path``, read once and checked against its digest (``check_file``'s errors)."""
    path = Path(path)
    versions = listed_versions(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DamagedFileError(f"{path}: cannot be read ({error.strerror or error})") from error
    _compare(path, Version(hashlib.sha256(data).hexdigest(), len(data)), versions)
    return data


def _compare(path: Path, found: Version, versions: list[Version]) -> None:
    if found in versions:
        return
    name = digest_path(path).name
    sizes = sorted({v.bytes for v in versions})
    if found.bytes not in sizes:
        kind = "truncated" if found.bytes < min(sizes) else "longer than written"
        raise DamagedFileError(f"{path}: {found.bytes:,} bytes where {name} says "
                               f"{' or '.join(f'{s:,}' for s in sizes)}: {kind}")
    raise DamagedFileError(f"{path}: its SHA-256 does not match {name}: its bytes changed after it was written")


def check_zip(path: str | os.PathLike, data: bytes | None = None) -> None:
    """Check every member of the zip file ``path`` (or of its bytes ``data``) against its CRC-32:
    how a ``.mdlus`` or ``.pt`` this project did not write (no digest) is checked."""
    path = Path(path)
    try:
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, NotImplementedError, OSError, EOFError,
            ValueError) as error:
        raise DamagedFileError(f"{path}: not a readable zip file ({error})") from error
    if bad is not None:
        raise DamagedFileError(f"{path}: its member {bad} fails its CRC-32 or header check: damaged")


def remove_checked(path: str | os.PathLike) -> None:
    """Remove ``path`` and then its digest file (a digest left alone names no file and is ignored)."""
    Path(path).unlink(missing_ok=True)
    digest_path(path).unlink(missing_ok=True)
