"""What a remote run folder is made of: where its objects are read from (Origin), each listed
object (RemoteObject), a file of one or more pieces (RemoteFile) and the run (RemoteRun);
remote_runs.py finds them by listing."""

from __future__ import annotations

import os
from dataclasses import dataclass

from domino_pipeline.storage.hub import is_hub, token_headers
from domino_pipeline.storage.object_store import RETRY_DEADLINE_S, is_url, shared_store


def is_remote(location: str | os.PathLike) -> bool:
    """Whether a raw-data location is an object-store or Hub URL rather than a local folder."""
    return is_url(location) or is_hub(location)


@dataclass(frozen=True)
class Origin:
    """Where objects are read from, in a form that crosses to workers; ``store()``: this process's client."""

    store_url: str
    anonymous: bool
    hub: bool = False
    retry_deadline_s: float = RETRY_DEADLINE_S

    def store(self):
        """This process's obstore client of the origin (object_store.shared_store)."""
        headers = token_headers(self.anonymous) if self.hub else None
        return shared_store(self.store_url, anonymous=self.anonymous, headers=headers,
                            retry_deadline_s=self.retry_deadline_s)


@dataclass(frozen=True)
class RemoteObject:
    """One listed object: URL (for messages), key, size, published checksum (``sha256:``, ``md5:``,
    ``git-sha1:<hex>``, or None) and version (its listed ETag, which every GET must match)."""

    url: str
    key: str
    size: int
    checksum: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class RemoteFile:
    """A file of a remote run folder: its name, URL and pieces (listed objects, in order)."""

    name: str
    url: str
    pieces: tuple[RemoteObject, ...]
    origin: Origin

    @property
    def size(self) -> int:
        """The file's bytes (its pieces' together)."""
        return sum(piece.size for piece in self.pieces)

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True)
class RemoteRun:
    """A run folder on object storage or the Hub: its name and URL, and where it is read."""

    name: str
    url: str
    origin: Origin
