"""The one place bytes of files and objects are read, whole or by ranges, in waves of requests
(docs/remote_reading.md, "Clients, credentials, forks"; docs/cache_format.md, "On object
storage"): the cache's readers, the processed runs' (``read_bytes``) and the raw runs'
(``get_listed_range``). Readers are made per process (``shared_reader``)."""

from __future__ import annotations

import atexit
import mmap
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domino_pipeline.storage.object_store import ObjectStoreError, is_url, join, make_store, named_errors, split_url

THREADS = 32  # objects fetched at once (a draw touches about a dozen)


@dataclass(frozen=True)
class Request:
    """One read: ``length`` bytes of ``key`` from ``start`` (None: the last ones; ``length`` None: all)."""

    key: str
    start: int | None = None
    length: int | None = None


Result = tuple[memoryview | None, int | None]  # (bytes, or None: the object is absent; its size)


def coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int, list[int]]]:
    """Merge touching or overlapping (start, length) ranges into (start, length, indexes they serve)."""
    merged: list[tuple[int, int, list[int]]] = []
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
        start, length = ranges[i]
        if merged and start <= merged[-1][0] + merged[-1][1]:
            first, size, members = merged[-1]
            merged[-1] = (first, max(size, start + length - first), members + [i])
        else:
            merged.append((start, length, [i]))
    return merged


class ByteReader:
    """Reads requests in waves, counting ``waves``, ``requests`` (coalesced) and ``bytes``, for benchmarks."""

    location: str

    def __init__(self) -> None:
        self.waves = self.requests = self.bytes = 0

    def fetch(self, requests: list[Request]) -> list[Result]:
        """Every request's bytes, in order, fetched together (one wave)."""
        if not requests:
            return []
        self.waves += 1
        results: list[Result | None] = [None] * len(requests)
        ranged: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            if request.start is not None and request.length is not None:
                ranged.setdefault(request.key, []).append(i)
        self._fetch(requests, ranged, results)
        return results  # type: ignore[return-value]

    def url(self, key: str) -> str:
        """The full location of object ``key``, for messages."""
        return str(join(self.location, key))

    def _fetch(self, requests, ranged, results) -> None:
        raise NotImplementedError

    def _deliver(self, buffer: memoryview, merged, ranges, members: list[int], results) -> None:
        """Count the merged range's ``buffer``; each member range gets its view of it (shorter at an object's end)."""
        self.bytes += len(buffer)
        for i in merged[2]:
            offset = ranges[i][0] - merged[0]
            results[members[i]] = (buffer[offset:offset + ranges[i][1]], None)

    def close(self) -> None:
        """Release what the reader keeps open."""


class ConflictError(RuntimeError):
    """A conditional write lost: the object exists, or changed since it was read."""


class LocalReader(ByteReader):
    """A local folder read through read-only maps of its files, remade when a size changes (short at the end)."""

    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__()
        self.root = Path(root)
        self.location = str(self.root)
        self._prefix = str(self.root) + os.sep
        self._fds: dict[str, int] = {}  # the files opened (an absent one is not kept)
        self._maps: dict[str, memoryview] = {}

    def _fd(self, key: str) -> int | None:
        if key not in self._fds:
            try:
                self._fds[key] = os.open(self._prefix + key, os.O_RDONLY)
            except FileNotFoundError:
                return None
        return self._fds[key]

    def _mapped(self, key: str, fd: int) -> memoryview:
        """File ``key`` (open as ``fd``) mapped whole, kept until its size changes."""
        size = os.fstat(fd).st_size
        view = self._maps.get(key)
        if view is None or len(view) != size:
            view = memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ)) if size else memoryview(b"")
            self._maps[key] = view
        return view

    def _fetch(self, requests, ranged, results) -> None:
        for key, members in ranged.items():
            fd = self._fd(key)
            ranges = [(requests[i].start, requests[i].length) for i in members]
            view = None if fd is None else self._mapped(key, fd)
            for merged in coalesce(ranges):
                self.requests += 1
                if view is None:
                    for i in merged[2]:
                        results[members[i]] = (None, None)
                    continue
                os.posix_fadvise(fd, merged[0], merged[1], os.POSIX_FADV_WILLNEED)
                self._deliver(view[merged[0]:merged[0] + merged[1]], merged, ranges, members, results)
        for i, request in enumerate(requests):
            if results[i] is None:
                results[i] = self._whole_or_tail(request)

    def _whole_or_tail(self, request: Request) -> Result:
        fd = self._fd(request.key)
        self.requests += 1
        if fd is None:
            return None, None
        size = os.fstat(fd).st_size
        length = size if request.length is None else min(request.length, size)
        buffer = bytearray(length)
        got = _pread_into(fd, memoryview(buffer), size - length)
        self.bytes += got
        return memoryview(buffer)[:got], size

    def close(self) -> None:
        for view in self._maps.values():
            view.release()  # the mapping itself goes when the caller's views of it do
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        self.close()


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``offset`` of ``fd``, short reads continued; the bytes read (fewer at the end)."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            break
        done += n
    return done


class ObjectReader(ByteReader):
    """An object-store prefix read through obstore's blocking calls in threads, one per object (no
    Python object handed to the client's threads, which could outlive the interpreter); it also writes, lists and
    deletes objects (a local folder is written through the file system)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        import obstore

        self.location = url.rstrip("/")
        self._obstore = obstore
        self.store = make_store(self.location)
        self._pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="object-reader")

    def _fetch(self, requests, ranged, results) -> None:
        singles = [i for i, r in enumerate(requests) if r.start is None or r.length is None]
        jobs = [self._pool.submit(self._ranges, key, members, requests, results)
                for key, members in ranged.items()]
        jobs += [self._pool.submit(self._get, i, requests[i], results) for i in singles]
        for job in jobs:
            job.result()

    def _ranges(self, key: str, members: list[int], requests, results) -> None:
        ranges = [(requests[i].start, requests[i].length) for i in members]
        merged = coalesce(ranges)
        self.requests += len(merged)
        try:
            with named_errors(self.url(key)):
                buffers = self._obstore.get_ranges(self.store, key, starts=[m[0] for m in merged],
                                                   lengths=[m[1] for m in merged], coalesce=0)
        except FileNotFoundError:
            for i in members:
                results[i] = (None, None)
            return
        for m, buffer in zip(merged, buffers):
            self._deliver(memoryview(buffer), m, ranges, members, results)  # obstore's own buffer, not copied

    def _get(self, i: int, request: Request, results) -> None:
        self.requests += 1
        options = {} if request.length is None else {"range": {"suffix": request.length}}
        try:
            with named_errors(self.url(request.key)):
                got = self._obstore.get(self.store, request.key, options=options)
                data = memoryview(got.bytes())
        except FileNotFoundError:
            results[i] = (None, None)
            return
        self.bytes += len(data)
        results[i] = (data, got.meta["size"])

    def get_versioned(self, key: str) -> tuple[bytes | None, str | None]:
        """Object ``key``'s bytes and the e-tag of that very version (None, None if absent)."""
        self.waves += 1
        self.requests += 1
        try:
            got = self._obstore.get(self.store, key)
        except FileNotFoundError:
            return None, None
        return bytes(got.bytes()), got.meta.get("e_tag")

    def put(self, key: str, data: bytes, *, mode: str | dict = "overwrite") -> dict:
        """Write object ``key`` (``mode`` "create" or {"e_tag"}: else ConflictError); its new {"e_tag"}."""
        from obstore.exceptions import AlreadyExistsError, PreconditionError
        try:
            result = self._obstore.put(self.store, key, data, mode=mode)
        except (AlreadyExistsError, PreconditionError) as err:
            raise ConflictError(f"{self.url(key)}: changed by another writer") from err
        return {"e_tag": result.get("e_tag")}

    def put_many(self, items: list[tuple[str, bytes]]) -> None:
        """Write every (key, bytes) object, several at a time."""
        for job in [self._pool.submit(self._obstore.put, self.store, k, d) for k, d in items]:
            job.result()

    def head(self, key: str) -> dict | None:
        """{"size", "e_tag"} of object ``key``, or None if absent."""
        try:
            meta = self._obstore.head(self.store, key)
        except FileNotFoundError:
            return None
        return {"size": meta["size"], "e_tag": meta.get("e_tag")}

    def list(self, prefix: str) -> tuple[list[str], list[dict]]:
        """(the sub-folder names, the objects {"path", "size"}) directly under ``prefix``."""
        found = self._obstore.list_with_delimiter(self.store, prefix.rstrip("/") + "/" if prefix else None)
        folders = [p.rstrip("/").rsplit("/", 1)[-1] for p in found["common_prefixes"]]
        return folders, [{"path": o["path"], "size": o["size"]} for o in found["objects"]]

    def list_all(self, prefix: str) -> list[dict]:
        """Every object under ``prefix`` (recursively), {"path", "size"}."""
        return [{"path": o["path"], "size": o["size"]}
                for batch in self._obstore.list(self.store, prefix.rstrip("/") + "/") for o in batch]

    def delete(self, key: str) -> None:
        """Remove object ``key`` (nothing if absent)."""
        try:
            self._obstore.delete(self.store, key)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.store = None


_READERS: dict[tuple[int, str], ByteReader] = {}


@atexit.register
def _close_readers() -> None:
    """Close this process's readers at exit: an object-store client's threads must not outlive Python."""
    for reader in _READERS.values():
        reader.close()
    _READERS.clear()


def read_bytes(location: str | os.PathLike, start: int | None = None, length: int | None = None
               ) -> bytes | None:
    """The bytes of a file or object (``length`` from ``start``, or the last ``length``); None if absent."""
    if is_url(location):
        root, key = split_url(str(location))
        [(data, _)] = shared_reader(root).fetch([Request(key, start, length)])
        return None if data is None else bytes(data)
    try:
        with open(location, "rb") as handle:
            if length is not None:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(size - length, 0) if start is None else start)
            return handle.read(-1 if length is None else length)
    except FileNotFoundError:
        return None


def read_in_order(locations: list[str], window: int = 8) -> Iterator[bytes | None]:
    """``read_bytes`` of each location, in order, ``window`` fetched (and held) at once."""
    with ThreadPoolExecutor(max_workers=window, thread_name_prefix="object-read") as pool:
        for start in range(0, len(locations), window):
            yield from pool.map(read_bytes, locations[start:start + window])


def get_listed_range(store: Any, listed: Any, lo: int, hi: int) -> memoryview:
    """Bytes ``lo:hi`` of a listed object by one ranged GET, If-Match its version, the reply checked."""
    import obstore

    options = {"range": (lo, hi), **({"if_match": listed.version} if listed.version else {})}
    with named_errors(listed.url):
        got = obstore.get(store, listed.key, options=options)
        data = memoryview(got.bytes())
    require_unchanged(listed, got.meta, lo, hi, len(data))
    return data


def require_unchanged(piece: Any, meta: dict, lo: int, hi: int, n_bytes: int) -> None:
    """ObjectStoreError naming ``piece`` as changed when a GET's reply has another size, ETag or length."""
    now = meta.get("e_tag")
    if piece.version and now and _bare(now) != _bare(piece.version):
        raise ObjectStoreError(f"{piece.url}: changed since it was listed (its ETag was {piece.version} "
                               f"then, {now} now)")
    if meta["size"] != piece.size:
        raise ObjectStoreError(f"{piece.url}: changed since it was listed ({piece.size} bytes then, "
                               f"{meta['size']} now)")
    if n_bytes != hi - lo:
        raise ObjectStoreError(f"{piece.url}: {n_bytes} bytes came for bytes {lo}..{hi}")


def _bare(e_tag: str) -> str:
    """An ETag without its quotes and weak marker, for comparing."""
    return e_tag.removeprefix("W/").strip('"')


def read_versioned(location: str) -> tuple[bytes | None, str | None]:
    """The object at URL ``location`` and the e-tag of the version read (None, None if absent)."""
    root, key = split_url(location)
    return shared_reader(root).get_versioned(key)


def reader_and_key(url: str) -> tuple[ObjectReader, str]:
    """The shared reader of the bucket holding the object-store ``url`` (its writes and listings), and the key there."""
    root, key = split_url(str(url))
    return shared_reader(root), key


def open_reader(location: str | os.PathLike) -> ByteReader:
    """A fresh reader for ``location``: an ObjectReader for a URL, a LocalReader otherwise."""
    return ObjectReader(str(location)) if is_url(location) else LocalReader(location)


def shared_reader(location: str | os.PathLike) -> ByteReader:
    """One reader per process and location, for small reads (manifests, metadata, listings)."""
    key = (os.getpid(), str(location))
    if key not in _READERS:
        _READERS[key] = open_reader(location)
    return _READERS[key]
