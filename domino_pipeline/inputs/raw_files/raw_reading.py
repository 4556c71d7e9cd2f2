"""How one run's raw files are read: on local disk, or from where they are published through the
same block readers, a remote run's files fetched or staged into a temporary folder beside its
processed run. docs/remote_reading.md, "How a remote run is read"."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from domino_pipeline.storage.atomic_store import temporary_directory
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.raw_files.concat_bytes import file_pieces
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_stl_triangles
from domino_pipeline.inputs.meshes.mesh_stream import open_rows
from domino_pipeline.inputs.processing.published_forces import Published, read_published
from domino_pipeline.inputs.raw_files.remote_bytes import CHUNK_BYTES, IN_FLIGHT, FetchCounter, RemoteBytes
from domino_pipeline.inputs.raw_files.remote_files import RemoteFile
from domino_pipeline.inputs.raw_files.run_folder import RunFiles
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from domino_pipeline.storage.object_store import RETRY_DEADLINE_S

T = TypeVar("T")
HUB_CHUNK_BYTES, HUB_IN_FLIGHT = 32 << 20, 4  # the Hub's sweeps: fewer, larger GETs


@dataclass(frozen=True)
class RemoteAccess:
    """How remote raw files are read (data.anonymous, verify_checksums, retry_deadline_s) and read ahead."""

    anonymous: bool | None = None
    verify: bool = True
    chunk_bytes: int | None = None
    in_flight: int | None = None
    retry_deadline_s: float = RETRY_DEADLINE_S

    def __post_init__(self) -> None:
        if min(self.chunk_bytes or 1, self.in_flight or 1) < 1:
            raise ValueError(f"remote reads need chunk_bytes and in_flight of at least 1, not "
                             f"{self.chunk_bytes} and {self.in_flight}")
        if not self.retry_deadline_s > 0:
            raise ValueError(f"data.retry_deadline_s must be positive, not {self.retry_deadline_s}")

    def read_ahead(self, hub: bool) -> tuple[int, int]:
        """(bytes per GET, GETs at once) of a sweep: as set, else 8 MiB x 8, or 32 MiB x 4 from the Hub."""
        chunk, in_flight = (HUB_CHUNK_BYTES, HUB_IN_FLIGHT) if hub else (CHUNK_BYTES, IN_FLIGHT)
        return self.chunk_bytes or chunk, self.in_flight or in_flight


class LocalReading:
    """A local run folder's files, read where they lie."""

    def stl_triangles(self, path: Path) -> dict[str, np.ndarray]:
        """The STL's triangles (vtk_reader.read_stl_triangles)."""
        return read_stl_triangles(path)

    def open(self, path: Path) -> VtkXmlFile:
        """The VTU or VTP (or its pieces) opened for reading by rows (mesh_stream.open_rows)."""
        return open_rows(path)

    def local(self, path: Path) -> Path:
        """A small file where it can be read whole: where it lies."""
        return path

    def record(self, path: Path) -> dict:
        """What the processed run records of the file: its name and size."""
        return {"name": path.name, "bytes": sum(p.stat().st_size for p in file_pieces(path))}

    def published(self, files: RunFiles, profile: DatasetConfig) -> Published:
        """What the run folder publishes (published_forces.read_published)."""
        return read_published(Path(files.folder), files.index, profile)

    def stop(self) -> None:
        """Nothing to stop: local files are not fetched."""

    @contextmanager
    def alongside(self, task: Callable[[], T]) -> Iterator[Callable[[], T]]:
        """Run ``task`` at once; yield what gives its result or raises its error (the block's error first)."""
        done: Future = Future()
        try:
            done.set_result(task())
        except Exception as err:
            done.set_exception(err)
        yield done.result


class RemoteReading:
    """A remote run's files (docs/remote_reading.md), read into the temporary folder ``staging``."""

    def __init__(self, staging: Path, access: RemoteAccess, progress: Callable[[int], None] | None) -> None:
        self.staging, self.access = staging, access
        self.files = staging / "files"  # the small files fetched whole, where the run folder has them
        self.counter = FetchCounter(progress=progress)
        self.reads: dict[str, list[tuple[int, int, str]]] = {}  # by file URL: stretches read, their SHA-256

    def _stream(self, file: RemoteFile) -> RemoteBytes:
        """The file's bytes, the stretches read recorded where not every piece's checksum is checked."""
        chunk_bytes, in_flight = self.access.read_ahead(file.origin.hub)
        checked = self.access.verify and all(piece.checksum for piece in file.pieces)
        reads = None if checked else self.reads.setdefault(file.url, [])
        return RemoteBytes(file, self.counter, staging=self.staging / file.name.replace(os.sep, "_"),
                           verify=self.access.verify, chunk_bytes=chunk_bytes, in_flight=in_flight, reads=reads)

    def stl_triangles(self, file: RemoteFile) -> dict[str, np.ndarray]:
        """The STL's triangles, the file fetched whole into the temporary folder, parsed and removed."""
        path = self.local(file)
        try:
            return read_stl_triangles(path)
        finally:
            path.unlink()

    def open(self, file: RemoteFile) -> VtkXmlFile:
        """The VTU or VTP opened for reading by rows over ranged GETs (arrays staged by the readers)."""
        return open_rows(file, self._stream(file))

    def published(self, files: RunFiles, profile: DatasetConfig) -> Published:
        """What the run publishes, its files fetched whole into the temporary folder first."""
        for file in files.published:
            self.local(file)
        return read_published(self.files, files.index, profile)

    def local(self, file: RemoteFile) -> Path:
        """A small file fetched whole, a GET's chunk at a time (checksum checked), to its place in the
        temporary run folder."""
        path = self.files / file.name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            for _, data in self._stream(file).sweep([(0, file.size)] if file.size else [], verify=self.access.verify):
                out.write(data)
        return path

    @contextmanager
    def alongside(self, task: Callable[[], T]) -> Iterator[Callable[[], T]]:
        """Run ``task`` in a thread while the block runs; yield what waits for it (leaving early stops it)."""
        with ThreadPoolExecutor(1, thread_name_prefix="staging") as pool:
            future = pool.submit(task)
            try:
                yield future.result
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """Stop every fetch of the run (a reader staging its arrays ends with FetchStopped)."""
        self.counter.stop.set()

    def record(self, file: RemoteFile) -> dict:
        """What the processed run records of the file: URL, pieces, what was checked, stretches read."""
        pieces = [{"url": p.url, "bytes": p.size,
                   **({"checksum": p.checksum} if p.checksum else {"etag": p.version} if p.version else {})}
                  for p in file.pieces]
        checked = sorted({p.checksum.partition(":")[0] for p in file.pieces if p.checksum}) if self.access.verify else []
        reads = sorted(set(self.reads.get(file.url, [])))
        return {"name": file.name, "bytes": file.size, "url": file.url, "pieces": pieces,
                "checked": "+".join(["size", *checked]),
                **({"read": [{"bytes": [start, stop], "sha256": digest} for start, stop, digest in reads]}
                   if reads else {})}


@contextmanager
def run_reading(files: RunFiles, out_path: Path, access: RemoteAccess,
                progress: Callable[[int], None] | None = None) -> Iterator[LocalReading | RemoteReading]:
    """The reading of ``files`` (a local or a remote run's) for the processed run ``out_path``."""
    if not isinstance(files.stl, RemoteFile):
        yield LocalReading()
        return
    with temporary_directory(Path(out_path).parent, f"{Path(out_path).name}.raw") as staging:
        reading = RemoteReading(staging, access, progress)
        try:
            yield reading
        except (RunError, OSError, ValueError) as err:  # name the run's URL, not the temporary copy
            renamed = _renamed(err, str(reading.files), str(files.folder))
            if renamed is err:
                raise
            raise renamed from err


def _renamed(err: Exception, old: str, new: str) -> Exception:
    """``err`` with ``old`` replaced by ``new`` (a RunError where its type cannot), or ``err``."""
    message = str(err).replace(old, new)
    if message == str(err):
        return err
    try:
        return type(err)(message)
    except TypeError:
        return RunError(message)
