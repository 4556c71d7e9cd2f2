"""What the block readers of a run's VTU volume and VTP surface share: opening a file for reading
by rows, the warning when it must be read whole with VTK, a points table for random access by
connectivity, and the connectivity of a block of cells."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np

from domino_pipeline.inputs.raw_files.concat_bytes import PieceError
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlError, VtkXmlFile

T = TypeVar("T")


class WholeFileFallback(UserWarning):
    """A file read whole with VTK because it cannot be read by rows."""


def unreadable(err: VtkXmlError, path) -> RunError:
    """``<path>: unreadable (<problem>)``, as VTK's reading words a bad file, for a block reader's error."""
    named = [f"{path}: "] + ([f"{Path(path)}: "] if isinstance(path, (str, os.PathLike)) else [])
    problem = str(err).splitlines()[0]
    for prefix in named:
        problem = problem.removeprefix(prefix)
    return RunError(f"{path}: unreadable ({problem})")


def open_rows(path, source=None) -> VtkXmlFile:
    """The checked header of a VTU or VTP file (its pieces, or ``source``); RunError naming what is wrong."""
    try:
        return VtkXmlFile.open(path) if source is None else VtkXmlFile(source, path)
    except VtkXmlError as err:
        raise unreadable(err, path) from err
    except PieceError as err:
        raise RunError(str(err)) from err


def read_errors_named(blocks: Iterator[T], path: Path) -> Iterator[T]:
    """``blocks``, a read error (truncated or corrupt data) raised as RunError ``unreadable``."""
    try:
        yield from blocks
    except VtkXmlError as err:
        raise unreadable(err, path) from err


def require_rows(file: VtkXmlFile, path: Path, n_rows: int) -> None:
    """RunError when the file, or the rows to be read from it, are empty (as VTK's reading says)."""
    if n_rows == 0 or file.n_points == 0 or file.n_cells == 0:
        raise RunError(f"{path}: empty ({file.n_points} points, {file.n_cells} cells)")


def fall_back_to_vtk(file: VtkXmlFile, path: Path, reason: str) -> None:
    """Warn (WholeFileFallback) that ``path`` is read whole with VTK; RunError for pieces or a remote file."""
    if not isinstance(path, (str, os.PathLike)):
        raise RunError(f"{path}: {reason}; download it to read it with VTK")
    if not Path(path).is_file():
        raise RunError(f"{path}: {reason}; join its pieces with cat to read it with VTK")
    warnings.warn(f"{path}: {reason}; reading it whole with VTK, which takes about "
                  f"{file.whole_file_bytes() / 2**30:.1f} GiB of memory", WholeFileFallback, stacklevel=3)


def points_table(file: VtkXmlFile, tmp: Path, rows: int) -> np.ndarray:
    """The file's points for random access, memory-mapped (raw, staged, or decoded into ``tmp``)."""
    entry = file.entry("Points", "Points")
    shape = (file.n_points, entry.components)
    piece = file.array_data("Points", "Points").local_file()
    if piece is not None:
        return np.memmap(piece[0], dtype=entry.dtype, mode="r", offset=piece[1], shape=shape)
    table = np.memmap(tmp / "points.f", dtype=entry.dtype.newbyteorder("="), mode="w+", shape=shape)
    for start in range(0, file.n_points, rows):
        stop = min(start + rows, file.n_points)
        table[start:stop] = file.read("Points", "Points", start, stop)
    table.flush()
    return table


@contextmanager
def prepared_rows(file: VtkXmlFile, keys: list[tuple[str, str]]) -> Iterator[None]:
    """Within: the arrays ``keys`` of ``file`` ready for a block reader; decoding errors as RunError."""
    try:
        staging = file.source.prepare(file, keys)
    except VtkXmlError as err:
        raise unreadable(err, file.path) from err
    try:
        yield
    finally:
        if staging is not None:
            staging.close()


def cell_vertices(file: VtkXmlFile, section: str, start: int, stop: int,
                  n_points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(begins, ends, ids) of cells ``start:stop`` of ``section``; RunError for an id out of range."""
    ends = file.read(section, "offsets", start, stop)[:, 0].astype(np.int64)
    first = int(file.read(section, "offsets", start - 1, start)[0, 0]) if start else 0
    require_rising(ends, first, start, file, section)
    ids = file.read(section, "connectivity", first, int(ends[-1]))[:, 0]
    require_point_ids(ids, n_points, file.path, "cell connectivity")
    return np.concatenate([[0], ends[:-1] - first]), ends - first, ids


def require_point_ids(ids: np.ndarray, n_points: int, path, what: str) -> None:
    """RunError naming ``path`` when ``what`` (point ids) reach outside the ``n_points`` points."""
    if ids.size and (ids.min() < 0 or ids.max() >= n_points):
        raise RunError(f"{path}: {what} outside the {n_points} points")


def cell_types(file: VtkXmlFile) -> set[int]:
    """The VTK types of the cells of a VTU, read a slab at a time."""
    rows, step, types = file.rows("Cells", "types"), 1 << 24, set()
    for start in range(0, rows, step):
        types |= set(np.unique(file.read("Cells", "types", start, min(start + step, rows))).tolist())
    return types


def require_rising(ends: np.ndarray, first: int, start: int, file: VtkXmlFile, section: str) -> None:
    """VtkXmlError unless cell offsets ``ends`` (after ``first``) rise and stay within the connectivity."""
    steps = np.diff(ends, prepend=first)
    if steps.size and steps.min() < 0:
        cell = int(np.argmax(steps < 0))
        before = int(ends[cell - 1]) if cell else first
        raise VtkXmlError(f"{file.path}: {section} offsets decrease at cell {start + cell} "
                          f"({int(ends[cell])} after {before})")
    n_ids = file.rows(section, "connectivity")
    if ends.size and ends[-1] > n_ids:
        raise VtkXmlError(f"{file.path}: {section} offsets reach {int(ends[-1])}, past the {n_ids} "
                          f"entries of {section} connectivity")
