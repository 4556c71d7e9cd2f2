"""One read-only byte stream over a file published in pieces (``volume_1.vtu.part1``, ``.part2``,
...), read in sequence without joining them on disk; positions are 64-bit throughout."""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path


def part_paths(path: Path) -> list[Path]:
    """The ``<path>.part<k>`` pieces of ``path`` in numeric order of k (empty when none)."""
    pattern = re.compile(re.escape(path.name) + r"\.part(\d+)$")
    found = [(int(m.group(1)), p) for p in path.parent.glob(f"{path.name}.part*")
             if (m := pattern.match(p.name))]
    return [p for _, p in sorted(found)]


class ConcatBytes:
    """Positional reads (``read(position, n)``) over the concatenation of ``paths``."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = [Path(p) for p in paths]
        sizes = [p.stat().st_size for p in self.paths]
        self.starts = [0]
        for size in sizes:
            self.starts.append(self.starts[-1] + size)
        self.size = self.starts[-1]
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

    def close(self) -> None:
        """Close the open pieces."""
        for i, fd in enumerate(self._fds):
            if fd is not None:
                os.close(fd)
                self._fds[i] = None

    def __del__(self) -> None:
        self.close()
