"""A file published whole or in pieces (``.00.part``, ... or ``.part1``, ...; docs/raw_inputs.md,
"VTK XML files by rows"), and one read-only byte stream over its pieces."""

from __future__ import annotations

import bisect
import itertools
import os
import re
from collections.abc import Collection, Iterable
from pathlib import Path

# how the k-th piece (from 0) of a file is named after the file's own name
PIECE_NAMINGS = {"00.part": lambda k: f".{k:02d}.part", "part1": lambda k: f".part{k + 1}"}
_PATTERNS = {"00.part": re.compile(r"\.(\d+)\.part"), "part1": re.compile(r"\.part(\d+)")}
_FIRST = {"00.part": 0, "part1": 1}


class PieceError(ValueError):
    """A file's pieces that do not make one file: a gap, a mix of namings, a whole file beside them."""


def piece_path(path: Path, k: int, naming: str) -> Path:
    """The path of piece ``k`` (from 0) of ``path`` in ``naming`` ("00.part" or "part1")."""
    if naming not in PIECE_NAMINGS:
        raise ValueError(f"piece naming {naming!r}, expected one of {sorted(PIECE_NAMINGS)}")
    return path.with_name(path.name + PIECE_NAMINGS[naming](k))


def _numbered_pieces(name: str, names: Iterable[str]) -> dict[str, list[tuple[int, str]]]:
    """(number, name) of the ``names`` that name pieces of file ``name``, by naming, in name order."""
    found: dict[str, list[tuple[int, str]]] = {naming: [] for naming in _PATTERNS}
    for other in sorted(n for n in names if n.startswith(name + ".")):
        for naming, pattern in _PATTERNS.items():
            match = pattern.fullmatch(other, len(name))
            if match:
                found[naming].append((int(match.group(1)), other))
    return found


def folder_names(folder: Path) -> list[str]:
    """The names of the files in ``folder`` (none when it is absent)."""
    try:
        return [entry.name for entry in os.scandir(folder) if entry.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _by_number(numbered: list[tuple[int, str]], folder: str) -> dict[int, str]:
    """``numbered`` by number; PieceError for two pieces of one number (``.1.part``, ``.01.part``)."""
    pieces: dict[int, str] = {}
    for number, piece in numbered:
        if number in pieces:
            raise PieceError(f"{folder}/{piece}: the same piece number as {pieces[number]}")
        pieces[number] = piece
    return pieces


def present_among(name: str, names: Collection[str]) -> bool:
    """True when file ``name`` is among a folder's file ``names`` whole or as any pieces."""
    return name in names or any(_numbered_pieces(name, names).values())


def file_pieces(path: Path) -> list[Path]:
    """The files that hold ``path``, in order: itself, or its ``.00.part``, ... or ``.part1``, ... pieces;
    FileNotFoundError for none, PieceError naming the file for a gap, two namings or whole and pieces."""
    path = Path(path)
    names = set(folder_names(path.parent))
    if path.is_file():
        names.add(path.name)
    return [path.parent / name for name in pieces_among(path.name, names, str(path.parent))]


def pieces_among(name: str, names: Collection[str], folder: str) -> list[str]:
    """``file_pieces`` among the file ``names`` of ``folder`` (which errors name)."""
    found = {naming: _by_number(numbered, folder)
             for naming, numbered in _numbered_pieces(name, names).items() if numbered}
    firsts = [pieces[min(pieces)] for pieces in found.values()]
    if name in names:
        if found:
            raise PieceError(f"{folder}/{name}: both the whole file and pieces of it ({firsts[0]}, ...) "
                             "are present; keep one")
        return [name]
    if not found:
        raise FileNotFoundError(f"{folder}/{name}: missing file (and no {name}.00.part or {name}.part1 pieces)")
    if len(found) > 1:
        raise PieceError(f"{folder}/{name}: pieces in two namings ({' and '.join(firsts)}); keep one")
    (naming, pieces), = found.items()
    return _in_sequence(name, folder, naming, pieces)


def _in_sequence(name: str, folder: str, naming: str, pieces: dict[int, str]) -> list[str]:
    """``pieces`` in order of number; PieceError naming the first one missing from the sequence."""
    numbers = sorted(pieces)
    for k, number in enumerate(numbers):
        expected = _FIRST[naming] + k
        if number != expected:
            missing = _missing_name(name, naming, expected, pieces[number])
            raise PieceError(f"{folder}/{missing}: missing piece (the next piece present is "
                             f"{pieces[number]})")
    return [pieces[number] for number in numbers]


def _missing_name(name: str, naming: str, number: int, like: str) -> str:
    """The name piece ``number`` would have, its digits as wide as those of ``like``."""
    if naming == "part1":
        return f"{name}.part{number}"
    width = len(_PATTERNS[naming].fullmatch(like, len(name)).group(1))
    return f"{name}.{number:0{width}d}.part"


class PiecedStream:
    """Pieces joined in order: ``paths``, ``starts`` (where each begins, then the end), ``size``."""

    def __init__(self, paths: list, sizes: list[int]) -> None:
        self.paths = paths
        self.starts = [0, *itertools.accumulate(sizes)]
        self.size = self.starts[-1]

    def where(self, position: int) -> str:
        """Where byte ``position`` lies, in words: ``byte N``, or ``byte N (byte M of <piece>)``."""
        if len(self.paths) == 1 or not 0 <= position < self.size:
            return f"byte {position}"
        index = bisect.bisect_right(self.starts, position) - 1
        return f"byte {position} (byte {position - self.starts[index]} of {self.paths[index].name})"


class ConcatBytes(PiecedStream):
    """Positional reads (``read(position, n)``) over the concatenation of ``paths``."""

    def __init__(self, paths: list[Path]) -> None:
        paths = [Path(p) for p in paths]
        super().__init__(paths, [p.stat().st_size for p in paths])
        self._fds: list[int | None] = [None] * len(self.paths)

    def _fd(self, index: int) -> int:
        if self._fds[index] is None:
            self._fds[index] = os.open(self.paths[index], os.O_RDONLY)
        return self._fds[index]

    def read(self, position: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``position`` (fewer only at the end of the stream)."""
        out = []
        while n > 0 and position < self.size:
            index = bisect.bisect_right(self.starts, position) - 1
            within = position - self.starts[index]
            take = min(n, self.starts[index + 1] - position)
            data = os.pread(self._fd(index), take, within)
            if not data:
                break
            out.append(data)
            position += len(data)
            n -= len(data)
        return out[0] if len(out) == 1 else b"".join(out)

    def single_file(self, position: int, n: int) -> tuple[Path, int] | None:
        """(file, offset in it) when bytes ``position:position+n`` lie in one piece, else None."""
        index = bisect.bisect_right(self.starts, position) - 1
        if position + n <= self.starts[index + 1]:
            return self.paths[index], position - self.starts[index]
        return None

    def prepare(self, file, keys: list[tuple[str, str]]) -> None:
        """Nothing: local arrays are read where they lie (a remote stream stages them first)."""
        return None

    def close(self) -> None:
        """Close the open pieces."""
        for i, fd in enumerate(self._fds):
            if fd is not None:
                os.close(fd)
                self._fds[i] = None

    def __del__(self) -> None:
        self.close()
