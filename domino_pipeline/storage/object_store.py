"""Locations on object storage: URLs, the one place object-store clients are made (retries,
timeouts, credentials, unsigned requests, the fork guard), the listings that processed runs and
caches need, and the one-line naming of a failed request. The reads themselves: byte_reader.py.
docs/remote_reading.md, "Retries" and "Clients, credentials, forks"."""

from __future__ import annotations

import atexit
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

URL_SCHEMES = ("s3://", "s3a://", "gs://", "gcs://", "az://", "abfs://", "abfss://", "azure://")
HTTP_SCHEMES = ("http://", "https://")
# the environment variables, per cloud, that give a client credentials (object_store reads them)
CREDENTIAL_VARIABLES = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI"),
    "gs": ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH",
           "GOOGLE_SERVICE_ACCOUNT_KEY"),
    "az": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_SAS_KEY",
           "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_STORAGE_TOKEN"),
}
_CLOUD = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az", "azure": "az"}
RETRIES = 64  # at most, per request: the deadline ends them first (about 20 fill 60 s of backoff)
RETRY_DEADLINE_S = 60.0  # seconds after a request is first sent past which it is not retried
REQUEST_TIMEOUT = "60s"
_STATUS_WORDS = {400: "bad request", 401: "unauthenticated", 403: "access denied", 404: "not found",
                 405: "method not allowed", 409: "conflict", 412: "changed (precondition failed)",
                 416: "range not satisfiable", 429: "too many requests", 500: "server error",
                 501: "not implemented", 502: "bad gateway", 503: "unavailable", 504: "gateway timeout"}


def is_url(location: str | os.PathLike) -> bool:
    """Whether ``location`` names an object-store prefix rather than a local path."""
    return isinstance(location, str) and location.lower().startswith(URL_SCHEMES)


def join(location: str | os.PathLike, *parts: str) -> str | Path:
    """``location`` with ``parts`` appended: a URL stays a string ("/"-joined), a path a Path."""
    if is_url(location):
        return "/".join([str(location).rstrip("/"), *(p.strip("/") for p in parts)])
    return Path(location).joinpath(*parts)


def split_url(url: str) -> tuple[str, str]:
    """(``scheme://bucket``, the key prefix after it) of an object-store URL."""
    scheme, rest = url.rstrip("/").split("://", 1)
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}", key


def name_of(location: str | os.PathLike) -> str:
    """The last part of a location (a run folder's or a generation's name)."""
    return str(location).rstrip("/").rsplit("/", 1)[-1] if is_url(location) else Path(location).name


def as_location(location: str | os.PathLike) -> str | Path:
    """A URL as a string without a trailing "/", else a Path (which would fold the URL's "//")."""
    return str(location).rstrip("/") if is_url(location) else Path(location)


class ObjectStoreError(OSError):
    """A request to object storage that failed for good (after its retries), named by URL."""


def _reason(err: Exception) -> str:
    """A failed request in words: its HTTP status and error code, never its body (docs/remote_reading.md)."""
    from obstore.exceptions import PermissionDeniedError, PreconditionError, UnauthenticatedError

    text = str(err)
    status, code = re.search(r"status code: (\d{3})", text), re.search(r"<Code>(.*?)</Code>", text)
    kinds = ((PermissionDeniedError, 403), (UnauthenticatedError, 401), (PreconditionError, 412), (FileNotFoundError, 404))
    number = int(status.group(1)) if status else next((n for kind, n in kinds if isinstance(err, kind)), None)
    if number is None and code is None:
        return _unanswered(text) or type(err).__name__
    said = " ".join(str(part) for part in (f"HTTP {number}" if number else None, code and code.group(1)) if part)
    return f"{_STATUS_WORDS.get(number, 'failed')} ({said})"


def _unanswered(text: str) -> str:
    """``<what failed>: <method> failed after <n> retries in <t> s`` from an unanswered request's message."""
    first = re.sub(r"^(Generic \w+ error: )+", "", text.strip().splitlines()[0] if text.strip() else "")
    performing = re.match(r"Error performing (\w+) \S+ in ([\d.]+)(ns|µs|ms|s)(?:, after (\d+) retries)?.*? - (.*)$",
                          first)
    if performing is None:
        return first
    method, took, unit, retries, cause = performing.groups()
    seconds = float(took) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    cause = re.sub(r"^(HTTP error: |Generic \w+ error: )+", "", cause).strip()
    refused = " (connection refused)" if "Connection refused" in text else ""
    return f"{cause}{refused}: {method} failed after {retries or 0} retries in {seconds:.1f} s"


@contextmanager
def named_errors(url: str) -> Iterator[None]:
    """The client's errors in the block as one-line ObjectStoreErrors (FileNotFoundError) naming ``url``."""
    from obstore.exceptions import BaseError

    try:
        yield
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{url}: {_reason(err)}") from err
    except BaseError as err:
        raise ObjectStoreError(f"{url}: {_reason(err)}") from err


_CLIENT_PID: list[int] = []  # the process that made an object-store client, once one has


def anonymous_for(url: str, setting: bool | None) -> bool:
    """Whether ``url`` is read unsigned: ``setting``, or where None, when the environment gives no credentials for its
    cloud (CREDENTIAL_VARIABLES, gcloud's file)."""
    if setting is not None:
        return bool(setting)
    cloud = _CLOUD.get(url.split("://", 1)[0].lower())
    gcloud = Path.home() / ".config/gcloud/application_default_credentials.json"
    return cloud is None or not (any(os.environ.get(name) for name in CREDENTIAL_VARIABLES[cloud])
                                 or (cloud == "gs" and gcloud.is_file()))


def make_store(url: str, *, anonymous: bool = False, headers: dict[str, str] | None = None,
               retry_deadline_s: float = RETRY_DEADLINE_S) -> Any:
    """A new obstore client for ``url`` (docs/remote_reading.md), unsigned if ``anonymous``."""
    if _CLIENT_PID and _CLIENT_PID[0] != os.getpid():
        raise RuntimeError(f"{url}: object storage cannot be read in a process forked after "
                           "its parent read it; start DataLoader workers with "
                           "multiprocessing_context='spawn' (CachedDoMINODataset.worker_context)")
    from obstore.store import from_url

    _CLIENT_PID[:] = [os.getpid()]
    # an S3 endpoint in the environment over plain http: a local test server
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    retries = {"max_retries": RETRIES, "retry_timeout": timedelta(seconds=retry_deadline_s),
               "backoff": {"init_backoff": timedelta(milliseconds=100),  # each wait drawn up to 4x the last
                           "max_backoff": timedelta(seconds=5), "base": 4}}
    options = {"timeout": REQUEST_TIMEOUT, "connect_timeout": "10s",
               **({"allow_http": True} if endpoint.startswith("http://") or url.startswith("http://") else {})}
    with named_errors(url):
        if url.lower().startswith(HTTP_SCHEMES):
            from obstore.store import HTTPStore

            return HTTPStore.from_url(url.rstrip("/"), retry_config=retries,
                                      client_options={**options, **({"default_headers": headers} if headers else {})})
        return from_url(url.rstrip("/"), retry_config=retries, client_options=options,
                        **({"skip_signature": True} if anonymous else {}))


_STORES: dict[tuple, Any] = {}


@atexit.register
def _drop_stores() -> None:
    """Drop this process's clients at exit: their threads must not outlive Python."""
    _STORES.clear()


def shared_store(url: str, *, anonymous: bool = False, headers: dict[str, str] | None = None,
                 retry_deadline_s: float = RETRY_DEADLINE_S) -> Any:
    """One client per process, URL and ``make_store`` options."""
    key = (os.getpid(), str(url).rstrip("/"), anonymous, tuple(sorted((headers or {}).items())), retry_deadline_s)
    if key not in _STORES:
        _STORES[key] = make_store(key[1], anonymous=anonymous, headers=headers, retry_deadline_s=retry_deadline_s)
    return _STORES[key]


def bucket_and_key(url: str, *, anonymous: bool = False, retry_deadline_s: float = RETRY_DEADLINE_S
                   ) -> tuple[Any, str]:
    """The shared client of the bucket holding URL ``url``, and the object key there."""
    root, key = split_url(url)
    return shared_store(root, anonymous=anonymous, retry_deadline_s=retry_deadline_s), key


def zarr_store(url: str) -> tuple[Any, str]:
    """A read-only zarr store over the bucket of ``url`` (one client per bucket), and the path in it."""
    from zarr.storage import ObjectStore

    root, key = split_url(url)
    return ObjectStore(shared_store(root), read_only=True), key


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing says of an object: its size and version (e-tag, last-modified time)."""

    size: int
    e_tag: str | None
    last_modified: datetime | None


def list_objects(url: str, *, anonymous: bool = False, retry_deadline_s: float = RETRY_DEADLINE_S
                 ) -> dict[str, ObjectInfo]:
    """Every object under the URL prefix ``url`` (recursively), by key relative to it."""
    store, key = bucket_and_key(url, anonymous=anonymous, retry_deadline_s=retry_deadline_s)
    prefix = key.rstrip("/") + "/" if key else ""
    import obstore

    with named_errors(url):
        return {o["path"][len(prefix):]: ObjectInfo(o["size"], o.get("e_tag"), o.get("last_modified"))
                for batch in obstore.list(store, prefix or None) for o in batch}


def objects_by_folder(url: str) -> dict[str, dict[str, ObjectInfo]]:
    """``list_objects(url)`` grouped by each key's first part (its folder), keyed within by the rest."""
    grouped: dict[str, dict[str, ObjectInfo]] = {}
    for key, info in list_objects(url).items():
        folder, _, rest = key.partition("/")
        grouped.setdefault(folder, {})[rest] = info
    return grouped


def head(url: str) -> ObjectInfo | None:
    """The size and version of the object at URL ``url``; None when it is absent."""
    import obstore

    store, key = bucket_and_key(url)
    try:
        with named_errors(url):
            meta = obstore.head(store, key)
    except FileNotFoundError:
        return None
    return ObjectInfo(meta["size"], meta.get("e_tag"), meta.get("last_modified"))


def exists(location: str | os.PathLike) -> bool:
    """Whether a file, folder, object or non-empty prefix is at ``location``."""
    if not is_url(location):
        return Path(location).exists()
    return head(str(location)) is not None or any(folder_contents(str(location)))  # an object, or a non-empty prefix


def folder_contents(url: str, *, anonymous: bool = False, retry_deadline_s: float = RETRY_DEADLINE_S
                    ) -> tuple[list[str], dict[str, ObjectInfo]]:
    """(the sub-prefix names, {object name: ObjectInfo}) directly under the URL prefix ``url``."""
    import obstore

    store, key = bucket_and_key(url, anonymous=anonymous, retry_deadline_s=retry_deadline_s)
    with named_errors(url):
        found = obstore.list_with_delimiter(store, key.rstrip("/") + "/" if key else None)
    return ([p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"]],
            {o["path"].rsplit("/", 1)[-1]: ObjectInfo(o["size"], o.get("e_tag"), o.get("last_modified"))
             for o in found["objects"]})


def delete_objects(url: str, keys: list[str]) -> None:
    """Delete the objects ``keys`` (relative to the URL prefix ``url``) in bulk requests."""
    import obstore

    store, key = bucket_and_key(url)
    prefix = key.rstrip("/") + "/" if key else ""
    for start in range(0, len(keys), 1000):  # S3's bulk delete takes at most 1000 keys
        with named_errors(url):
            obstore.delete(store, [prefix + k for k in keys[start:start + 1000]])
