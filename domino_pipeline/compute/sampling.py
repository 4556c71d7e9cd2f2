"""The one sampling function of both datasets: which rows a draw takes, from (seed, epoch, index).

Every row store a draw samples from (STL vertices, kept surface rows, kept volume rows) is in a
random permutation fixed by ``preprocessing.prepare_rows``, so a contiguous window of rows is a
uniform random subset. A draw therefore reads windows, not scattered rows:

- geometry: a window of ``geometry_points`` STL vertices;
- volume: a window of ``volume_points`` rows (uniform sampling, as DoMINO does);
- surface: a window of ``surface_window_factor * surface_points`` rows, from which
  ``surface_points`` rows are drawn without replacement with probability proportional to the
  cell area (Efraimidis-Spirakis keys, the law of ``torch.multinomial`` without replacement).
  Compared with area weighting over the whole surface, a cell's chance of being drawn is capped
  at the window's share of the surface; ``surface_window_factor=None`` uses the whole surface
  (exact, but reads every row's area per draw).

The random streams depend only on (seed, epoch, index) and on which part is drawn, never on the
worker that draws, nor on the model type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_STREAM = {"geometry": 0, "surface": 1, "volume": 2}


class TooFewPointsError(ValueError):
    """A run has fewer rows than a draw asks for."""


@dataclass(frozen=True)
class Draw:
    """The rows of one draw: windows as (start, stop) and the sorted surface rows taken."""

    geometry: tuple[int, int]
    surface_rows: np.ndarray | None  # int64, sorted, indices into the kept surface rows
    volume: tuple[int, int] | None


def draw_rng(seed: int, epoch: int, index: int, part: str) -> np.random.Generator:
    """The generator of one part of one draw; independent streams per (seed, epoch, index, part)."""
    return np.random.default_rng([int(seed), int(epoch), int(index), _STREAM[part]])


def choose_window(rng: np.random.Generator, n_rows: int, size: int, what: str) -> tuple[int, int]:
    """A uniformly placed window of ``size`` consecutive rows among ``n_rows``."""
    if size > n_rows:
        raise TooFewPointsError(f"{what}: {n_rows} rows, fewer than the {size} a draw needs")
    start = int(rng.integers(0, n_rows - size + 1))
    return start, start + size


def choose_weighted(rng: np.random.Generator, weights: np.ndarray, size: int) -> np.ndarray:
    """``size`` distinct positions drawn with probability proportional to ``weights`` (> 0),
    successively without replacement; returned sorted."""
    keys = rng.exponential(size=len(weights)) / weights.astype(np.float64)
    if size == len(weights):
        return np.arange(size, dtype=np.int64)
    taken = np.argpartition(keys, size - 1)[:size]
    return np.sort(taken).astype(np.int64)


def sample_draw(
    seed: int,
    epoch: int,
    index: int,
    *,
    counts: dict[str, int],
    geometry_points: int,
    surface_points: int | None,
    volume_points: int | None,
    read_surface_areas: Callable[[int, int], np.ndarray] | None,
    surface_window_factor: int | None = 8,
) -> Draw:
    """Choose the rows of draw (seed, epoch, index).

    ``counts``: rows available, keys "geometry", "surface", "volume". ``surface_points`` /
    ``volume_points`` None skip that part. ``read_surface_areas(start, stop)`` returns the
    areas of kept surface rows [start, stop), so each dataset reads them its own way.
    """
    geometry = choose_window(draw_rng(seed, epoch, index, "geometry"), counts["geometry"],
                             geometry_points, "STL vertices")
    surface_rows = None
    if surface_points is not None:
        rng = draw_rng(seed, epoch, index, "surface")
        n = counts["surface"]
        width = n if surface_window_factor is None else min(n, surface_window_factor * surface_points)
        start, stop = choose_window(rng, n, max(width, surface_points), "surface cells")
        surface_rows = start + choose_weighted(rng, read_surface_areas(start, stop), surface_points)
    volume = None
    if volume_points is not None:
        volume = choose_window(draw_rng(seed, epoch, index, "volume"), counts["volume"],
                               volume_points, "volume points")
    return Draw(geometry=geometry, surface_rows=surface_rows, volume=volume)
