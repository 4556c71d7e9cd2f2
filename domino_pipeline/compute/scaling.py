"""Target scaling factors: computed once over the training runs, saved as JSON, applied per draw
(targets are stored unscaled, so new factors never invalidate a cache). The file holds, per target
kind, each variable's ``min``, ``max``, ``mean`` and ``std`` and the ``normalization``: ``min_max``,
``2 (x - min) / (max - min) - 1`` (DoMINO's, in [-1, 1]), or ``mean_std``, ``(x - mean) / std``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from domino_pipeline.storage.atomic_store import read_json, write_json_atomic
from domino_pipeline.compute.example_factors import is_pickle, read_example_factors
from domino_pipeline.configuration.variables import VARIABLE_WIDTH

NORMALIZATIONS = ("min_max", "mean_std")
KINDS = ("surface", "volume")
_STAT_NAMES = ("min", "max", "mean", "std")
_ROW_BLOCK = 1_000_000  # rows summed at a time, so memory stays bounded on large runs
MAX_VOLUME_ROWS = 2_000_000  # volume rows per run that the statistics use, drawn uniformly


def _check_normalization(normalization: str) -> None:
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown normalization {normalization!r}; expected one of {NORMALIZATIONS}")


class _RunningStats:
    """Per-column count, min, max, sum and sum of squares over row blocks, in float64."""

    def __init__(self) -> None:
        self.n = 0
        self.lo = self.hi = self.s1 = self.s2 = None

    def add(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim == 1:
            rows = rows[:, None]
        if not np.isfinite(rows).all():
            raise ValueError("target fields hold NaN or infinite values")
        if len(rows) == 0:
            return
        self.merge(len(rows), rows.min(axis=0), rows.max(axis=0), rows.sum(axis=0), np.square(rows).sum(axis=0))

    def merge(self, n: int, lo, hi, s1, s2) -> None:
        """Add the statistics of other rows (``as_dict``'s values)."""
        lo, hi, s1, s2 = (np.asarray(v, dtype=np.float64) for v in (lo, hi, s1, s2))
        if self.n == 0:
            self.lo, self.hi, self.s1, self.s2 = lo, hi, s1, s2
        else:
            self.lo, self.hi = np.minimum(self.lo, lo), np.maximum(self.hi, hi)
            self.s1, self.s2 = self.s1 + s1, self.s2 + s2
        self.n += int(n)

    def as_dict(self) -> dict:
        """JSON-able sums (float64 survives JSON exactly), for a cache run's attributes."""
        return {"n": self.n, "lo": self.lo.tolist(), "hi": self.hi.tolist(),
                "s1": self.s1.tolist(), "s2": self.s2.tolist()}

    def result(self) -> dict[str, list[float]]:
        mean = self.s1 / self.n
        std = np.sqrt(np.maximum(self.s2 / self.n - mean**2, 0.0))
        return {"min": self.lo.tolist(), "max": self.hi.tolist(), "mean": mean.tolist(), "std": std.tolist()}


def uniform_rows(n_rows: int, limit: int | None) -> np.ndarray | None:
    """``limit`` sorted uniform rows of ``n_rows`` (fixed seed: every reader takes the same), or None for all."""
    if limit is None or n_rows <= limit:
        return None
    return np.sort(np.random.default_rng(0).choice(n_rows, limit, replace=False))


def _stream_rows(array, rows: np.ndarray | None) -> Iterator[np.ndarray]:
    """``array``'s ``rows`` (None: all) in blocks of _ROW_BLOCK stored rows, in memory or on disk alike."""
    total = array.shape[0]
    for start in range(0, total, _ROW_BLOCK):
        stop = min(start + _ROW_BLOCK, total)
        if rows is None:
            yield np.asarray(array[start:stop])
            continue
        wanted = rows[np.searchsorted(rows, start):np.searchsorted(rows, stop)]
        if len(wanted):
            yield np.asarray(array[start:stop])[wanted - start]


def run_statistics(fields: Mapping[str, object], *, parts: Sequence[str] = KINDS,
                   max_volume_rows: int | None = MAX_VOLUME_ROWS, source: str = "run") -> dict[str, dict]:
    """Per-run sums of the ``parts``' fields, the volume's on ``max_volume_rows`` uniform rows."""
    stats = {}
    for kind in (k for k in KINDS if k in parts):
        name = f"{kind}_fields"
        if name not in fields:
            raise ValueError(f"{source}: array {name!r} is missing")
        array = fields[name]
        rows = uniform_rows(array.shape[0], max_volume_rows if kind == "volume" else None)
        running = _RunningStats()
        try:
            for block in _stream_rows(array, rows):
                running.add(block)
        except ValueError as err:
            raise ValueError(f"{source}: array {name!r}: {err}") from err
        stats[kind] = running.as_dict()
    return stats


def merge_statistics(per_run: Sequence[dict], run_names: Sequence[str], *, normalization: str = "min_max",
                     variables: Mapping[str, Sequence] | None = None) -> dict:
    """Scaling factors from several runs' ``run_statistics``, in their order, of the parts every run has."""
    _check_normalization(normalization)
    if not per_run:
        raise ValueError("scaling factors need at least one run")
    kinds = [kind for kind in KINDS if all(kind in stats for stats in per_run)]
    if not kinds:
        raise ValueError(f"scaling factors: runs {list(run_names)} have no part (surface, volume) in common")
    totals = {kind: _RunningStats() for kind in kinds}
    for stats in per_run:
        for kind in kinds:
            part = stats[kind]
            totals[kind].merge(part["n"], part["lo"], part["hi"], part["s1"], part["s2"])
    factors = {"normalization": normalization, "runs": list(run_names)}
    if variables is not None:
        factors["variables"] = {kind: [list(v) for v in variables[kind]] for kind in kinds}
    factors.update({kind: totals[kind].result() for kind in kinds})
    return factors


def compute_scaling_factors(processed_paths: Sequence[str | os.PathLike], *, normalization: str = "min_max",
                            max_volume_rows_per_run: int | None = MAX_VOLUME_ROWS, options=None,
                            variables: Mapping[str, Sequence] | None = None, rank: int = 0, world_size: int = 1,
                            gather: Callable[[dict], list[dict]] | None = None) -> dict:
    """Target statistics over the runs, streamed, each volume on ``max_volume_rows_per_run`` uniform rows; in parts:
    ``rank`` of ``world_size`` reads every ``world_size``-th run, ``gather`` brings the shares, merged in run order."""
    from domino_pipeline.processed.runs import run_name

    _check_normalization(normalization)
    if not processed_paths:
        raise ValueError("compute_scaling_factors needs at least one processed run")
    mine = {i: processed_run_statistics(path, options=options, max_volume_rows=max_volume_rows_per_run)
            for i, path in enumerate(processed_paths) if i % world_size == rank}
    per_run = {i: stats for share in ([mine] if gather is None else gather(mine)) for i, stats in share.items()}
    return merge_statistics([per_run[i] for i in range(len(processed_paths))], [run_name(p) for p in processed_paths],
                            normalization=normalization, variables=variables)


def processed_run_statistics(path: str | os.PathLike, *, options=None,
                             max_volume_rows: int | None = MAX_VOLUME_ROWS) -> dict[str, dict]:
    """``run_statistics`` of one processed run, streamed from disk: one run's share of the factors."""
    from domino_pipeline.processed.runs import ReadOptions, open_run, run_parts

    run = open_run(path, options or ReadOptions())
    return run_statistics(run.arrays, parts=run_parts(run), max_volume_rows=max_volume_rows, source=str(path))


def check_factors_match(factors: dict | None, surface_variables, volume_variables, source: str,
                        parts: Sequence[str] = ()) -> None:
    """Refuse (ValueError naming ``source``) factors of other target variables or lacking ``parts``."""
    if factors is None:
        return
    kinds = factor_kinds(factors)
    absent = [part for part in parts if part not in kinds]
    if absent:
        raise ValueError(f"{source}: the scaling factors have no {' and '.join(absent)} part (computed from "
                         f"runs or a cache of the {' and '.join(kinds)} only); the model needs {list(parts)}")
    given = {"surface": surface_variables, "volume": volume_variables}
    expected = {kind: [list(v) for v in given[kind]] for kind in kinds}
    recorded = factors.get("variables")
    if recorded is not None and recorded != expected:
        raise ValueError(f"{source}: scaling factors were computed for variables {recorded}, "
                         f"not {expected}; recompute them (cache_data.py writes them)")
    for kind in kinds:
        width = sum(VARIABLE_WIDTH[k] for _, k in expected[kind])
        if len(factors[kind]["min"]) != width:
            raise ValueError(f"{source}: {kind} scaling factors have {len(factors[kind]['min'])} "
                             f"columns; the configured {kind} variables have {width}")


def factor_kinds(factors: dict) -> list[str]:
    """The parts (surface, volume) a factors dict holds factors of."""
    return [kind for kind in KINDS if kind in factors]


def _validate_factors(factors: dict, source: str) -> dict:
    """Check the structure of a factors dict (factors of one part or both); return it."""
    _check_normalization(factors.get("normalization", ""))
    if not factor_kinds(factors):
        raise ValueError(f"{source}: scaling factors need {KINDS[0]!r} or {KINDS[1]!r} with {_STAT_NAMES}")
    for kind in factor_kinds(factors):
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


def load_scaling_factors(path: str | os.PathLike, normalization: str | None = None, *,
                         allow_pickle: bool = False) -> dict:
    """Read factors (the example's pickle with ``allow_pickle``); ``normalization`` replaces the stored one."""
    if is_pickle(path):
        return checked_scaling_factors(read_example_factors(path, allow_pickle=allow_pickle), str(path), normalization)
    return checked_scaling_factors(read_json(path, "no scaling factors file"), str(path), normalization)


def checked_scaling_factors(factors: object, where: str, normalization: str | None = None) -> dict:
    """Factors parsed from a factors file's JSON (``where``: the file, for messages), checked."""
    if normalization is not None and isinstance(factors, dict):
        factors["normalization"] = str(normalization)
    return _validate_factors(factors, where)


def affine(factors: dict, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(offset, scale) of ``kind``'s columns with scaled = (x - offset) / scale."""
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}; expected one of {KINDS}")
    if kind not in factors:
        raise ValueError(f"the scaling factors have no {kind} part (they hold {factor_kinds(factors)})")
    part = factors[kind]
    if factors["normalization"] == "min_max":
        lo, hi = np.asarray(part["min"]), np.asarray(part["max"])
        half = (hi - lo) / 2.0
        offset, scale = lo + half, half
    else:
        offset, scale = np.asarray(part["mean"]), np.asarray(part["std"])
    scale = np.where(scale > 0, scale, 1.0)  # a constant variable maps to 0 instead of NaN
    return offset.astype(np.float32), scale.astype(np.float32)


def _is_tensor(values) -> bool:
    """Whether ``values`` is a torch tensor, without importing torch (a cache build never does)."""
    return type(values).__module__.split(".")[0] == "torch"


def scale_fields(fields, factors: dict, kind: str):
    """Scale target fields (..., n_vars) of ``kind`` "surface" or "volume"; numpy or torch, float32 out."""
    offset, scale = affine(factors, kind)
    if _is_tensor(fields):
        import torch
        return (fields - torch.from_numpy(offset).to(fields)) / torch.from_numpy(scale).to(fields)
    return ((np.asarray(fields, dtype=np.float32) - offset) / scale).astype(np.float32)


def unscale_fields(fields, factors: dict, kind: str):
    """Inverse of ``scale_fields``: model outputs back to physical (non-dimensional) units."""
    offset, scale = affine(factors, kind)
    if _is_tensor(fields):
        import torch
        return fields * torch.from_numpy(scale).to(fields) + torch.from_numpy(offset).to(fields)
    return (np.asarray(fields, dtype=np.float32) * scale + offset).astype(np.float32)
