"""Hugging Face Hub repositories as read-only folders: ``hf://`` URLs, their file tree and the
HTTPS URLs their files are read from with ranged GETs (docs/remote_reading.md).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

SCHEME = "hf://"
DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_TYPES = ("datasets", "models", "spaces")
RETRIES = 6  # transient failures (5xx, 429, dropped connections) of a tree request
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


class HubError(OSError):
    """A Hub request that failed for good, named by URL."""


def is_hub(location: object) -> bool:
    """Whether ``location`` is an ``hf://`` URL."""
    return isinstance(location, str) and location.lower().startswith(SCHEME)


def endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` (a mirror, a local test server) or huggingface.co."""
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def token_headers(anonymous: bool) -> dict[str, str]:
    """The Authorization header of ``HF_TOKEN`` (none when anonymous or unset)."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token and not anonymous else {}


@dataclass(frozen=True)
class HubFolder:
    """A folder of a Hub repository at a revision: ``repo_type`` (datasets, models, spaces),
    ``repo_id`` (owner/name), ``revision`` and ``path`` ("" for the repository's root)."""

    repo_type: str
    repo_id: str
    revision: str
    path: str

    @classmethod
    def parse(cls, url: str) -> HubFolder:
        """The folder an ``hf://`` URL names; ValueError for one that names no repository."""
        parts = url[len(SCHEME):].strip("/").split("/")
        if len(parts) < 3 or parts[0] not in REPO_TYPES or not all(parts[:3]):
            raise ValueError(f"{url}: expected hf://datasets/<owner>/<name>[@<revision>][/<path>]")
        name, _, revision = parts[2].partition("@")
        return cls(parts[0], f"{parts[1]}/{name}", urllib.parse.unquote(revision) or "main",
                   "/".join(parts[3:]))

    @property
    def url(self) -> str:
        """The folder as an ``hf://`` URL."""
        revision = "" if self.revision == "main" else "@" + urllib.parse.quote(self.revision, safe="")
        return "/".join(p for p in (f"{SCHEME}{self.repo_type}/{self.repo_id}{revision}", self.path) if p)

    def child(self, name: str) -> HubFolder:
        """The folder ``name`` inside this one."""
        return HubFolder(self.repo_type, self.repo_id, self.revision, "/".join(p for p in (self.path, name) if p))

    @property
    def resolve_base(self) -> str:
        """The HTTPS URL under which the repository's files (by path from its root) are read."""
        kind = "" if self.repo_type == "models" else f"/{self.repo_type}"  # a model's files sit under its id
        return f"{endpoint()}{kind}/{self.repo_id}/resolve/{urllib.parse.quote(self.revision, safe='')}"

    @property
    def tree_url(self) -> str:
        """The tree API's URL of this folder (its first page)."""
        path = "/" + urllib.parse.quote(self.path) if self.path else ""
        return (f"{endpoint()}/api/{self.repo_type}/{self.repo_id}/tree/"
                f"{urllib.parse.quote(self.revision, safe='')}{path}")


def tree(folder: HubFolder, *, recursive: bool = False, anonymous: bool = False) -> list[dict]:
    """The entries of ``folder`` (every page), each with ``type``, ``path``, ``size`` and for files
    ``oid`` and ``lfs``; FileNotFoundError for no such folder, HubError for a failed request."""
    url = folder.tree_url + ("?recursive=true" if recursive else "")
    entries = []
    while url:
        page, url = _page(url, folder, anonymous)
        entries += page
    return entries


def _page(url: str, folder: HubFolder, anonymous: bool) -> tuple[list[dict], str | None]:
    """One page of a tree listing and the URL of the next (None after the last)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json", **token_headers(anonymous)})
    for attempt in itertools.count():
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                found = _NEXT.search(reply.headers.get("Link") or "")
                return json.loads(reply.read()), (urllib.parse.urljoin(url, found.group(1)) if found else None)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(f"{folder.url}: no such folder on the Hub ({url}: 404)") from None
            if err.code not in (429, 500, 502, 503, 504) or attempt >= RETRIES:
                raise HubError(f"{url}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            if attempt >= RETRIES:
                raise HubError(f"{url}: {getattr(err, 'reason', err)}") from None
        time.sleep(min(0.1 * 2 ** attempt, 5.0))
