"""The one sampling function of both datasets: which rows a draw takes, from (seed, epoch, index) and the part drawn
only, never from the worker or the model type. The law (``SamplingLaw``) is specified in docs/cache_format.md, "What a
draw reads"; it relies on the stored rows being in a fixed random permutation (``rows.prepare_rows``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from domino_pipeline.configuration.config import SamplingConfig

_STREAM = {"geometry": 0, "surface": 1, "volume": 2}


class TooFewPointsError(ValueError):
    """A run has fewer rows than a draw asks for."""


@dataclass(frozen=True)
class SamplingLaw:
    """How a draw picks its rows (docs/cache_format.md). A factor of None is the whole part."""

    surface_window_factor: int | None = 8
    volume_window_factor: int | None = 8
    exact: bool = False

    def __post_init__(self) -> None:
        for name in ("surface_window_factor", "volume_window_factor"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"sampling.{name} must be an integer >= 1 or null (the whole part); got {value!r}")

    def window(self, part: str, points: int, n_rows: int) -> int:
        """Rows in the window a draw of ``points`` takes from ``n_rows`` (``n_rows``: no window)."""
        factor = None if self.exact else getattr(self, f"{part}_window_factor")
        return n_rows if factor is None else min(n_rows, int(factor) * points)


def sampling_law(sampling: SamplingConfig, *, validation: bool = False) -> SamplingLaw:
    """The law of the ``sampling`` section; a validation draw's is exact when ``sampling.val_exact``."""
    return SamplingLaw(surface_window_factor=sampling.surface_window_factor,
                       volume_window_factor=sampling.volume_window_factor,
                       exact=sampling.exact or (validation and sampling.val_exact))


@dataclass(frozen=True)
class Draw:
    """The rows of one draw, each sorted (int64 indices into the stored rows of the part)."""

    geometry_rows: np.ndarray
    surface_rows: np.ndarray | None
    volume_rows: np.ndarray | None


def draw_rng(seed: int, epoch: int, index: int, part: str) -> np.random.Generator:
    """The generator of one part of one draw; independent streams per (seed, epoch, index, part)."""
    return np.random.default_rng([int(seed), int(epoch), int(index), _STREAM[part]])


def _check_enough(n_rows: int, size: int, what: str) -> None:
    if size > n_rows:
        raise TooFewPointsError(f"{what}: {n_rows} rows, fewer than the {size} a draw needs")


def choose_uniform(rng: np.random.Generator, n_rows: int, size: int, what: str) -> np.ndarray:
    """``size`` distinct rows of ``n_rows``, uniformly without replacement, sorted int64."""
    _check_enough(n_rows, size, what)
    if 2 * size <= n_rows:
        return np.sort(rng.choice(n_rows, size, replace=False, shuffle=False)).astype(np.int64)
    keep = np.ones(n_rows, dtype=bool)
    keep[rng.choice(n_rows, n_rows - size, replace=False, shuffle=False)] = False
    return np.flatnonzero(keep).astype(np.int64)


def cyclic_window(rng: np.random.Generator, n_rows: int, width: int) -> tuple[int, int]:
    """(start, width) of ``width`` consecutive rows of ``n_rows``, wrapping, with a uniform start."""
    if width >= n_rows:
        return 0, n_rows
    return int(rng.integers(0, n_rows)), width


def part_window(seed: int, epoch: int, index: int, part: str, n_rows: int, points: int,
                law: SamplingLaw) -> tuple[int, int]:
    """(start, width) of ``part``'s cyclic window in draw (seed, epoch, index), known before rows are chosen."""
    return cyclic_window(draw_rng(seed, epoch, index, part), n_rows, law.window(part, points, n_rows))


def window_spans(start: int, width: int, n_rows: int) -> list[tuple[int, int]]:
    """The [a, b) row spans of a cyclic window, in window order: one, or two where it wraps."""
    stop = start + width
    return [(start, stop)] if stop <= n_rows else [(start, n_rows), (0, stop - n_rows)]


def read_window(read: Callable[[int, int], np.ndarray], start: int, width: int, n_rows: int) -> np.ndarray:
    """The values of a cyclic window from ``read(a, b)`` (rows a..b-1): one or two spans."""
    spans = window_spans(start, width, n_rows)
    if len(spans) == 1:
        return np.asarray(read(*spans[0]))
    return np.concatenate([read(a, b) for a, b in spans])


def choose_weighted(rng: np.random.Generator, weights: np.ndarray, size: int) -> np.ndarray:
    """``size`` distinct positions drawn successively with probability proportional to ``weights``; sorted."""
    keys = rng.exponential(size=len(weights)) / weights.astype(np.float64)
    if size == len(weights):
        return np.arange(size, dtype=np.int64)
    return np.sort(np.argpartition(keys, size - 1)[:size]).astype(np.int64)


def draw_surface(rng: np.random.Generator, n_rows: int, points: int,
                 read_areas: Callable[[int, int], np.ndarray], law: SamplingLaw) -> np.ndarray:
    """Area-weighted rows of a cyclic window (the whole surface when exact); sorted."""
    _check_enough(n_rows, points, "surface cells")
    start, width = cyclic_window(rng, n_rows, law.window("surface", points, n_rows))
    taken = choose_weighted(rng, read_window(read_areas, start, width, n_rows), points)
    return np.sort(((start + np.arange(width, dtype=np.int64)) % n_rows)[taken])  # the window's rows, in its order


def draw_volume(rng: np.random.Generator, n_rows: int, points: int, law: SamplingLaw) -> np.ndarray:
    """Uniform rows of a cyclic window (all rows when exact); sorted."""
    _check_enough(n_rows, points, "volume points")
    start, width = cyclic_window(rng, n_rows, law.window("volume", points, n_rows))
    if width == n_rows:
        return choose_uniform(rng, n_rows, points, "volume points")
    local = rng.choice(width, points, replace=False, shuffle=False)
    return np.sort((start + local) % n_rows).astype(np.int64)


def sample_draw(seed: int, epoch: int, index: int, *, counts: dict[str, int], geometry_points: int,
                surface_points: int | None, volume_points: int | None,
                read_surface_areas: Callable[[int, int], np.ndarray] | None, law: SamplingLaw = SamplingLaw()) -> Draw:
    """The rows of draw (seed, epoch, index) by ``law``; None points skip a part; areas through a reader."""
    geometry = choose_uniform(draw_rng(seed, epoch, index, "geometry"), counts["geometry"],
                              geometry_points, "STL vertices")
    surface = None if surface_points is None else draw_surface(
        draw_rng(seed, epoch, index, "surface"), counts["surface"], surface_points, read_surface_areas, law)
    volume = None if volume_points is None else draw_volume(
        draw_rng(seed, epoch, index, "volume"), counts["volume"], volume_points, law)
    return Draw(geometry_rows=geometry, surface_rows=surface, volume_rows=volume)
