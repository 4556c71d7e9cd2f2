"""A remote file's bytes (its pieces on object storage or the Hub) as one read-only stream, read
by parsing reads (``read``) and read-ahead sweeps (``sweep``), never held or stored whole; each
GET checked against the listing, checksums and read records hashed as the bytes arrive.
docs/remote_reading.md, "How a remote run is read"."""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from domino_pipeline.inputs.raw_files.concat_bytes import PiecedStream
from domino_pipeline.inputs.raw_files.remote_files import RemoteFile, RemoteObject
from domino_pipeline.storage.byte_reader import get_listed_range
from domino_pipeline.storage.object_store import ObjectStoreError

CHUNK_BYTES = 8 << 20  # one ranged GET of a sweep
IN_FLIGHT = 8  # GETs of a sweep at once: 64 MiB in flight
MIN_READ = 16 << 10  # the least a parsing read fetches (nearby small reads share it)
KEPT_BYTES = 64 << 20  # bytes of parsing reads kept (the oldest are dropped beyond it)
_HASHES = {"sha256": "SHA-256", "md5": "MD5", "git-sha1": "git blob SHA-1"}


class ChecksumError(ValueError):
    """A piece whose bytes do not hash to the checksum its listing publishes."""


class FetchStopped(RuntimeError):
    """Fetching was stopped (``FetchCounter.stop``): the run it was for failed already."""


@dataclass
class FetchCounter:
    """Bytes fetched, counted from any thread as they arrive; ``progress(n)`` is told of each."""

    bytes: int = 0
    progress: Callable[[int], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event, repr=False)  # set: fetch no more
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            if self.progress is not None:
                self.progress(n)


@dataclass(frozen=True)
class _Item:
    """One step of a sweep: bytes ``lo:hi`` of ``piece`` at stream ``position`` (``kept``: fetched)."""

    position: int
    piece: int
    lo: int
    hi: int
    kept: memoryview | None = None
    span: int = 0  # the sweep's range it belongs to


class RemoteBytes(PiecedStream):
    """Parsing reads and sweeps over ``file``'s pieces; ``reads`` gets (start, stop, SHA-256) of each."""

    def __init__(self, file: RemoteFile, counter: FetchCounter, *, staging: Path | None = None,
                 verify: bool = True, chunk_bytes: int = CHUNK_BYTES, in_flight: int = IN_FLIGHT,
                 reads: list[tuple[int, int, str]] | None = None) -> None:
        self.file, self.counter, self.staging, self.verify, self.reads = file, counter, staging, verify, reads
        self.chunk_bytes, self.in_flight = chunk_bytes, in_flight
        super().__init__([PurePosixPath(p.key) for p in file.pieces], [p.size for p in file.pieces])
        self._kept: list[tuple[int, memoryview]] = []  # (stream position, bytes) of parsing reads
        self._sealed = False

    def read(self, position: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``position`` (fewer only at the end of the stream)."""
        if self._sealed:
            raise RuntimeError(f"{self.file.url}: read at byte {position} after its arrays were staged")
        stop = min(position + n, self.size)
        if position >= stop:
            return b""
        for start, data in self._kept:
            if start <= position and stop <= start + len(data):
                return bytes(data[position - start:stop - start])
        parts = []
        for start, end, kept in self._kept_or_not(position, min(max(stop, position + MIN_READ), self.size)):
            if kept is None:  # only the bytes not kept already are fetched
                kept = self._fetch(start, end)
                self._keep(start, kept)
                if self.reads is not None:
                    self.reads.append((start, end, hashlib.sha256(kept).hexdigest()))
            parts.append(kept)
        return b"".join(parts)[:stop - position]

    def _keep(self, position: int, data: memoryview) -> None:
        self._kept.append((position, data))
        while sum(len(d) for _, d in self._kept) > KEPT_BYTES and len(self._kept) > 1:
            self._kept.pop(0)

    def _fetch(self, start: int, stop: int) -> memoryview:
        """Stream bytes ``start:stop``, from each piece they lie in."""
        parts = [self._get(i, lo, hi) for i, lo, hi in self._pieces_of(start, stop)]
        return parts[0] if len(parts) == 1 else memoryview(b"".join(parts))

    def _pieces_of(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(piece, from, to) of the stream bytes ``start:stop``, piece by piece."""
        index = bisect.bisect_right(self.starts, start) - 1
        while start < stop:
            end = min(stop, self.starts[index + 1])
            yield index, start - self.starts[index], end - self.starts[index]
            start, index = end, index + 1

    def _get(self, index: int, lo: int, hi: int) -> memoryview:
        """Bytes ``lo:hi`` of piece ``index`` by one ranged GET, checked against its listing."""
        if self.counter.stop.is_set():
            raise FetchStopped(f"{self.file.url}: reading stopped")
        piece = self.file.pieces[index]
        try:
            data = get_listed_range(self.file.origin.store(), piece, lo, hi)
        except (ObjectStoreError, FileNotFoundError) as err:
            named = self._named(err, piece)
            if named is err:
                raise
            raise named from err
        self.counter.add(len(data))
        return data

    def _named(self, err: OSError, piece: RemoteObject) -> OSError:
        """A failed GET's error as a listed object's: changed or removed since, or refused unsigned."""
        from obstore.exceptions import PermissionDeniedError, PreconditionError, UnauthenticatedError

        if isinstance(err.__cause__, PreconditionError):
            return ObjectStoreError(f"{piece.url}: changed since it was listed (its ETag is no longer "
                                    f"{piece.version}: HTTP 412 to If-Match)")
        if isinstance(err, FileNotFoundError):
            return FileNotFoundError(f"{err}; it was listed, and has been removed since")
        if isinstance(err.__cause__, (PermissionDeniedError, UnauthenticatedError)) and self.file.origin.anonymous:
            return ObjectStoreError(f"{err} to unsigned requests (data.anonymous=false signs them with "
                                    "the environment's credentials)")
        return err

    def sweep(self, ranges: list[tuple[int, int]], *, verify: bool) -> Iterator[tuple[int, memoryview]]:
        """(position, bytes) over rising ``ranges``, read ahead; with ``verify``, whole pieces checked."""
        items = self._plan(ranges)
        covered = {i: sum(item.hi - item.lo for item in items if item.piece == i) for i in range(len(self.paths))}
        checked = {i for i, piece in enumerate(self.file.pieces)
                   if verify and piece.checksum and covered[i] == piece.size}
        with ThreadPoolExecutor(self.in_flight, thread_name_prefix="sweep") as pool, \
                closing(_Hashing({i: self.file.pieces[i] for i in checked}, self.in_flight,
                                 ranges if self.reads is not None else [], self.reads)) as hashing:
            ahead: deque[tuple[_Item, Future | None]] = deque()
            upcoming = iter(items)
            try:
                for item in upcoming:
                    ahead.append((item, None if item.kept is not None else
                                  pool.submit(self._get, item.piece, item.lo, item.hi)))
                    if len(ahead) >= self.in_flight:
                        yield self._next(ahead, hashing)
                while ahead:
                    yield self._next(ahead, hashing)
            finally:
                for _, future in ahead:
                    if future is not None:
                        future.cancel()

    def _next(self, ahead: deque, hashing: _Hashing) -> tuple[int, memoryview]:
        item, future = ahead.popleft()
        data = item.kept if future is None else future.result()
        hashing.update(item.piece, data, last=item.hi == self.file.pieces[item.piece].size)
        hashing.update_span(item.span, data, end=item.position + len(data))
        return item.position, data

    def _plan(self, ranges: list[tuple[int, int]]) -> list[_Item]:
        """The sweep's steps: kept bytes, else GETs of at most ``chunk_bytes`` within one piece."""
        items = []
        for span, (start, stop) in enumerate(ranges):
            for position, end, kept in self._kept_or_not(start, stop):
                for index, lo, hi in self._pieces_of(position, end):
                    at = self.starts[index] + lo
                    if kept is not None:
                        items.append(_Item(at, index, lo, hi, kept[at - position:at - position + hi - lo], span))
                        continue
                    for a in range(lo, hi, self.chunk_bytes):
                        items.append(_Item(self.starts[index] + a, index, a, min(a + self.chunk_bytes, hi), None, span))
        return items

    def _kept_or_not(self, start: int, stop: int) -> Iterator[tuple[int, int, memoryview | None]]:
        """(from, to, kept bytes or None) covering ``start:stop`` in order."""
        spans = sorted((s, s + len(d), d) for s, d in self._kept if s < stop and s + len(d) > start)
        position = start
        for s, e, data in spans:
            if e <= position:
                continue
            if s > position:
                yield position, s, None
                position = s
            end = min(e, stop)
            yield position, end, data[position - s:end - s]
            position = end
        if position < stop:
            yield position, stop, None

    def prepare(self, file, keys: list[tuple[str, str]]):
        """Stage the arrays ``keys`` of ``file`` into ``staging`` and seal the stream: None once staged
        (pieces checked whole), else the Staging of arrays read as they grow, to close after."""
        from domino_pipeline.inputs.raw_files.array_staging import stage_arrays, stage_growing

        whole = [(self.starts[i], self.starts[i + 1]) for i, piece in enumerate(self.file.pieces)
                 if self.verify and piece.checksum]
        if not whole:
            self._sealed = True
            return stage_growing(file, keys, self.staging, self)
        stage_arrays(file, keys, self.staging, self, whole, verify=self.verify)
        self._sealed = True
        self._kept.clear()
        return None

    def piece_end(self, position: int) -> int:
        """The stream position where the piece holding byte ``position`` ends."""
        return self.starts[min(bisect.bisect_right(self.starts, position), len(self.starts) - 1)]

    def single_file(self, position: int, n: int) -> None:
        """None: a remote stream has no local file to map."""
        return None

    def close(self) -> None:
        """Drop the bytes kept."""
        self._kept.clear()


class _Hashing:
    """Pieces' checksums and spans' SHA-256 (``reads``), hashed in order in a thread of their own."""

    def __init__(self, pieces: dict[int, RemoteObject], backlog: int, spans: list[tuple[int, int]] = (),
                 reads: list[tuple[int, int, str]] | None = None) -> None:
        self.pieces, self.backlog, self.spans, self.reads = pieces, backlog, spans, reads
        self.hashes = {i: _new_hash(piece) for i, piece in pieces.items()}
        self.span_hashes = {i: hashlib.sha256() for i in range(len(spans))}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="hash")
        self.queued: deque[Future] = deque()

    def update(self, index: int, data: memoryview, *, last: bool) -> None:
        if index not in self.hashes:
            return
        self._queue(self.hashes[index].update, data)
        if last:
            self._drain()
            self._compare(index)

    def update_span(self, span: int, data: memoryview, *, end: int) -> None:
        """Hash ``data`` of span ``span`` up to stream position ``end``; record its digest at its end."""
        if span not in self.span_hashes:
            return
        self._queue(self.span_hashes[span].update, data)
        if end == self.spans[span][1]:
            self._drain()
            self.reads.append((*self.spans[span], self.span_hashes.pop(span).hexdigest()))

    def _queue(self, update: Callable[[memoryview], None], data: memoryview) -> None:
        self.queued.append(self.pool.submit(update, data))
        while len(self.queued) > self.backlog:
            self.queued.popleft().result()

    def _drain(self) -> None:
        while self.queued:
            self.queued.popleft().result()

    def _compare(self, index: int) -> None:
        piece = self.pieces[index]
        kind, _, expected = piece.checksum.partition(":")
        digest = self.hashes[index].hexdigest()
        if digest != expected.lower():
            raise ChecksumError(f"{piece.url}: its {_HASHES[kind]} is {digest}, its listing says {expected}: "
                                "the object is corrupt or changed")

    def close(self) -> None:
        """Wait for the hashing under way; drop what is queued."""
        self.pool.shutdown(wait=True, cancel_futures=True)


def _new_hash(piece: RemoteObject):
    """A hash object of the kind of ``piece``'s checksum (git's blob hash primed with its header)."""
    kind = piece.checksum.partition(":")[0]
    if kind == "sha256":
        return hashlib.sha256()
    if kind == "md5":
        return hashlib.md5(usedforsecurity=False)
    if kind == "git-sha1":
        return hashlib.sha1(b"blob %d\0" % piece.size, usedforsecurity=False)
    raise ValueError(f"{piece.url}: unknown checksum kind {kind!r}")
