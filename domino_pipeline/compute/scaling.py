"""Target scaling factors: computed once over the training runs, saved as JSON, applied per draw.

Targets are stored unscaled in the processed runs and in the cache, so changing the factors never
invalidates a cache. The factors file holds, for the surface and the volume targets, the
per-variable ``min``, ``max``, ``mean`` and ``std`` (all four, so either normalisation can be
chosen later) and the ``normalization`` that ``scale_fields`` applies:

- ``min_max``: ``2 (x - min) / (max - min) - 1`` (DoMINO's convention, values in [-1, 1]);
- ``mean_std``: ``(x - mean) / std``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from domino_pipeline.store.atomic_store import read_json, write_json_atomic

NORMALIZATIONS = ("min_max", "mean_std")
KINDS = ("surface", "volume")
_STAT_NAMES = ("min", "max", "mean", "std")
_ROW_BLOCK = 1_000_000  # rows summed at a time, so memory stays bounded on large runs


def _check_normalization(normalization: str) -> str:
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown normalization {normalization!r}; expected one of {NORMALIZATIONS}")
    return normalization


class _RunningStats:
    """Per-column min, max, sum and sum of squares over row blocks, in float64."""

    def __init__(self) -> None:
        self.n = 0
        self.lo = self.hi = self.s1 = self.s2 = None

    def add(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim == 1:
            rows = rows[:, None]
        if not np.isfinite(rows).all():
            raise ValueError("target fields hold NaN or infinite values")
        lo, hi = rows.min(axis=0), rows.max(axis=0)
        s1, s2 = rows.sum(axis=0), np.square(rows).sum(axis=0)
        if self.n == 0:
            self.lo, self.hi, self.s1, self.s2 = lo, hi, s1, s2
        else:
            self.lo, self.hi = np.minimum(self.lo, lo), np.maximum(self.hi, hi)
            self.s1, self.s2 = self.s1 + s1, self.s2 + s2
        self.n += len(rows)

    def result(self) -> dict[str, list[float]]:
        mean = self.s1 / self.n
        std = np.sqrt(np.maximum(self.s2 / self.n - mean**2, 0.0))
        return {"min": self.lo.tolist(), "max": self.hi.tolist(), "mean": mean.tolist(),
                "std": std.tolist()}


def _stream_rows(array, max_rows: int | None) -> Iterator[np.ndarray]:
    """Yield blocks of the first ``max_rows`` rows (volume rows are stored in random order,
    so a prefix is a uniform random subset)."""
    total = array.shape[0] if max_rows is None else min(array.shape[0], max_rows)
    for start in range(0, total, _ROW_BLOCK):
        yield np.asarray(array[start:min(start + _ROW_BLOCK, total)])


def compute_scaling_factors(
    processed_paths: Sequence[str | os.PathLike],
    *,
    normalization: str = "min_max",
    max_volume_rows_per_run: int | None = 2_000_000,
) -> dict:
    """Statistics of ``surface_fields`` and ``volume_fields`` over the given processed runs.

    Streams run by run and block by block. The volume of each run contributes at most
    ``max_volume_rows_per_run`` rows: its leading rows, a uniform random subset because the
    processed volume rows are stored in a random permutation.
    """
    from domino_pipeline.inputs.processed_run import open_processed_run

    _check_normalization(normalization)
    if not processed_paths:
        raise ValueError("compute_scaling_factors needs at least one processed run")
    stats = {kind: _RunningStats() for kind in KINDS}
    for path in processed_paths:
        group = open_processed_run(path)
        for kind in KINDS:
            name = f"{kind}_fields"
            if name not in group:
                raise ValueError(f"{path}: array {name!r} is missing")
            limit = max_volume_rows_per_run if kind == "volume" else None
            try:
                for block in _stream_rows(group[name], limit):
                    stats[kind].add(block)
            except ValueError as err:
                raise ValueError(f"{path}: array {name!r}: {err}") from err
    factors = {"normalization": normalization, "runs": [Path(p).name for p in processed_paths]}
    factors.update({kind: stats[kind].result() for kind in KINDS})
    return factors


def _validate_factors(factors: dict, source: str) -> dict:
    """Check the structure of a factors dict; return it."""
    _check_normalization(factors.get("normalization", ""))
    for kind in KINDS:
        part = factors.get(kind)
        if not isinstance(part, dict) or any(k not in part for k in _STAT_NAMES):
            raise ValueError(f"{source}: scaling factors need {kind!r} with {_STAT_NAMES}")
        lengths = {len(part[k]) for k in _STAT_NAMES}
        if len(lengths) != 1:
            raise ValueError(f"{source}: {kind} statistics have different lengths {lengths}")
    return factors


def save_scaling_factors(path: str | os.PathLike, factors: dict) -> Path:
    """Write the factors as JSON (atomically: temporary file, then rename)."""
    path = Path(path)
    _validate_factors(factors, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, factors)
    return path


def load_scaling_factors(path: str | os.PathLike, normalization: str | None = None) -> dict:
    """Read factors written by ``save_scaling_factors``; plain JSON, nothing is executed.

    ``normalization`` (when given) replaces the one stored: the file holds min, max, mean and std,
    so the configured choice applies whichever was configured when the file was computed.
    """
    factors = read_json(path, "no scaling factors file")
    if normalization is not None and isinstance(factors, dict):
        factors["normalization"] = str(normalization)
    return _validate_factors(factors, str(path))


def _affine(factors: dict, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Return (offset, scale) with scaled = (x - offset) / scale."""
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}; expected one of {KINDS}")
    part = factors[kind]
    if factors["normalization"] == "min_max":
        lo, hi = np.asarray(part["min"]), np.asarray(part["max"])
        half = (hi - lo) / 2.0
        offset, scale = lo + half, half
    else:
        offset, scale = np.asarray(part["mean"]), np.asarray(part["std"])
    scale = np.where(scale > 0, scale, 1.0)  # a constant variable maps to 0 instead of NaN
    return offset.astype(np.float32), scale.astype(np.float32)


def scale_fields(fields, factors: dict, kind: str):
    """Scale target fields (..., n_vars) of ``kind`` "surface" or "volume"; numpy or torch in,
    the same type out, float32."""
    offset, scale = _affine(factors, kind)
    if isinstance(fields, torch.Tensor):
        return (fields - torch.from_numpy(offset).to(fields)) / torch.from_numpy(scale).to(fields)
    return ((np.asarray(fields, dtype=np.float32) - offset) / scale).astype(np.float32)


def unscale_fields(fields, factors: dict, kind: str):
    """Inverse of ``scale_fields``: model outputs back to physical (non-dimensional) units."""
    offset, scale = _affine(factors, kind)
    if isinstance(fields, torch.Tensor):
        return fields * torch.from_numpy(scale).to(fields) + torch.from_numpy(offset).to(fields)
    return (np.asarray(fields, dtype=np.float32) * scale + offset).astype(np.float32)
