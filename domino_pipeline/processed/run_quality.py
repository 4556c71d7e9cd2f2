"""Which runs of a processed folder are wrong as runs, from its statistics table, each with every reason; cache_data.py
and train.py leave them out (``data.quality``). The checks, their formulas and defaults: docs/data_quality.md, "Which
runs are rejected". A run the table lacks, or holds without statistics, is not checked, and the summary says so."""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from domino_pipeline.configuration.config import DataConfig, QualityConfig
from domino_pipeline.configuration.dataset_profile import DatasetConfig, FlowProfile
from domino_pipeline.configuration.force_integration import ALL_CONVENTIONS, ForceConvention, FreeStream, coefficients_of_force
from domino_pipeline.processed.runs import run_name
from domino_pipeline.processed.statistics_table import TABLE_NAME, read_statistics_table
from domino_pipeline.configuration.variables import column_names

MAD_TO_SIGMA = 1.4826  # the MAD of normal values times this is their standard deviation
RELATIVE_FLOOR = 1e-3
SCORED = (
    "stl.points", "stl.triangles", "stl.open_edges", "stl.non_manifold_edges", "stl.degenerate_triangles",
    "surface.count", "volume.count", "surface.area.total", "surface.area.mean",
    "surface.fields.*.p01", "surface.fields.*.p99", "surface.fields.*.mean_trimmed", "surface.fields.*.std_trimmed",
    "surface.fields.*.nonfinite", "volume.fields.*.p01", "volume.fields.*.p99", "volume.fields.*.mean_trimmed",
    "volume.fields.*.std_trimmed", "volume.fields.*.nonfinite",
    "consistency.surface_to_stl_volume", "consistency.surface_stl_bounds_gap",
)
# Floors of the robust scale (docs/data_quality.md, "Which runs are rejected"): the bounding boxes'
# gap in 0.1% of the car's extent, a field's location statistics in a fiftieth of its spread.
MINIMUM_SCALE = {"consistency.surface_stl_bounds_gap": 1e-3}
LOCATION_SCALE_OF_SPREAD = 0.02
LOCATION_STATISTICS = ("p01", "p99", "mean_trimmed")
COEFFICIENTS = ("cd", "cl")
OTHER_REFERENCES_WEIGHT = 1e12  # the constant references' mismatch, shown after the own ones' and the strongest score
MIN_SCORED_RUNS = 8  # fewer runs, and their median absolute deviation says little


@dataclass
class QualityVerdicts:
    """The checks' outcome: ``rejected`` run -> reasons, ``scores``, runs ``checked``, ``notes``."""

    rejected: dict[str, list[str]] = field(default_factory=dict)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    convention: ForceConvention | None = None
    _weights: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def reject(self, run: str, reason: str, weight: float = math.inf) -> None:
        """Add a reason to reject ``run``, weighted by |z| (a failed comparison outweighs all)."""
        self.rejected.setdefault(run, []).append(reason)
        self._weights.setdefault(run, []).append(weight)

    def strongest_first(self) -> None:
        """Each run's reasons by weight, the strongest first (ties in the order found)."""
        for run, reasons in self.rejected.items():
            order = sorted(range(len(reasons)), key=lambda k: -self._weights[run][k])
            self.rejected[run] = [reasons[k] for k in order]

    def flagged(self, column: str, threshold: float) -> set[str]:
        """The runs whose score of ``column`` is beyond ``threshold``."""
        return {run for run, scores in self.scores.items() if abs(scores.get(column, 0.0)) > threshold}


def robust_scores(values: Sequence[float | None], minimum_scale: float = 0.0) -> tuple[np.ndarray, float, float]:
    """(z of each value or NaN, the median, the scale at least ``minimum_scale``) of a statistic."""
    data = np.array([np.nan if v is None else float(v) for v in values])
    present = data[np.isfinite(data)]
    if not len(present):
        return np.full(len(data), np.nan), math.nan, math.nan
    median = float(np.median(present))
    scale = max(MAD_TO_SIGMA * float(np.median(np.abs(present - median))), RELATIVE_FLOOR * abs(median), minimum_scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (data - median) / scale if scale > 0 else np.where(data == median, 0.0, np.sign(data - median) * np.inf)
    return z, median, scale


def minimum_scale(column: str, rows: Sequence[Mapping]) -> float:
    """The smallest scale ``column`` is scored in (docs/data_quality.md)."""
    field_column, _, statistic = column.rpartition(".")
    if statistic not in LOCATION_STATISTICS:
        return MINIMUM_SCALE.get(column, 0.0)
    spreads = [row.get(f"{field_column}.std_trimmed") for row in rows]
    spreads = [float(v) for v in spreads if v is not None and math.isfinite(float(v))]
    return LOCATION_SCALE_OF_SPREAD * float(np.median(spreads)) if spreads else 0.0


def label(column: str) -> str:
    """A statistic's name for a reason: ``surface.fields.pMeanTrim.max`` -> ``surface pMeanTrim max``."""
    return " ".join(p for p in column.split(".") if p not in ("fields", "consistency"))


def _score(rows: Sequence[Mapping], threshold: float, verdicts: QualityVerdicts) -> None:
    if len(rows) < MIN_SCORED_RUNS:
        verdicts.notes.append(f"robust scores not computed: {len(rows)} runs with statistics, "
                              f"at least {MIN_SCORED_RUNS} needed")
        return
    names = [row["run"] for row in rows]
    columns = list(dict.fromkeys(key for row in rows for key in row))  # in the table's order
    for column in [c for c in columns if any(fnmatch.fnmatchcase(c, pattern) for pattern in SCORED)]:
        values = [row.get(column) for row in rows]
        z, median, _ = robust_scores(values, minimum_scale(column, rows))
        for name, value, score in zip(names, values, z):
            if np.isnan(score):
                continue
            verdicts.scores.setdefault(name, {})[column] = float(score)
            if abs(score) > threshold:
                spread = f"{abs(score):.0f} sigma" if np.isfinite(score) else f"median {median:.4g}, no spread"
                verdicts.reject(name, f"{label(column)} {value:.4g}, {spread}", abs(score))


def integrated_coefficients(statistics: Mapping[str, Any], flow: FlowProfile,
                            convention: ForceConvention) -> dict[str, dict[str, float]]:
    """{"own", "constant": {cd, cl}} of a run's force sums under ``convention``; empty without a speed."""
    sums = (statistics.get("surface") or {}).get("force_sums")
    published = statistics.get("published") or {}
    velocity = flow.velocity or published.get("velocity")
    if sums is None or not velocity:
        return {}
    force = convention.force(sums["pressure"], sums["shear"])
    dynamic_pressure = FreeStream(velocity, flow.density, flow.kinematic).dynamic_pressure
    found = {}
    for which in ("own", "constant"):
        area = published.get(f"{which}_area")
        if area:
            found[which] = coefficients_of_force(force, reference_area=area, dynamic_pressure=dynamic_pressure,
                                                 drag_direction=flow.drag_direction, lift_direction=flow.lift_direction)
    return found


def coefficient_mismatches(row: Mapping, flow: FlowProfile, convention: ForceConvention,
                           tolerance: float) -> dict[str, str]:
    """{reference set: reason} where a row's integrated Cd or Cl miss the published beyond ``tolerance``."""
    statistics = unflatten(row)
    reasons = {}
    for which, found in integrated_coefficients(statistics, flow, convention).items():
        published = (statistics.get("published") or {}).get(which) or {}
        if not {"cd", "cl"} <= set(published):
            continue
        scale = max(abs(published["cd"]), 1e-12)
        wrong = [f"{name.capitalize()} {found[name]:.3g} vs published {published[name]:.3g}" for name in COEFFICIENTS
                 if abs(found[name] - published[name]) > tolerance * max(scale, abs(published[name]))]
        if wrong:
            reasons[which] = f"{', '.join(wrong)} ({which} references)"
    return reasons


def _choose_convention(rows: Sequence[Mapping], flow: FlowProfile, tolerance: float,
                       verdicts: QualityVerdicts) -> ForceConvention:
    """The profile's convention, unless another makes most runs, and more, agree with what they publish."""
    profile = ForceConvention(flow.normals, flow.wall_shear)
    checked = [row for row in rows if any(k.startswith("surface.force_sums.") for k in row) and any(  # comparable
        row.get(f"published.{w}.cd") is not None and row.get(f"published.{w}_area") for w in ("own", "constant"))]
    agreeing = {c: sum(not coefficient_mismatches(r, flow, c, tolerance) for r in checked) for c in ALL_CONVENTIONS}
    best = max(ALL_CONVENTIONS, key=lambda c: (agreeing[c], c == profile))
    if agreeing[best] > agreeing[profile] and 2 * agreeing[best] > len(checked):
        verdicts.notes.append(
            f"the published coefficients of {agreeing[best]} of {len(checked)} runs fit normals {best.normals} and "
            f"wall shear {best.wall_shear}, of {agreeing[profile]} the profile's ({profile.normals}, "
            f"{profile.wall_shear}): checked with the former; set dataset.flow.normals and dataset.flow.wall_shear")
        return best
    return profile


def _check_coefficients(rows: Sequence[Mapping], flow: FlowProfile, tolerance: float,
                        verdicts: QualityVerdicts) -> None:
    verdicts.convention = _choose_convention(rows, flow, tolerance, verdicts)
    for row in rows:
        if row.get("published.error"):
            verdicts.reject(row["run"], f"published coefficients unreadable: {row['published.error']}")
        for which, reason in coefficient_mismatches(row, flow, verdicts.convention, tolerance).items():
            verdicts.reject(row["run"], reason, math.inf if which == "own" else OTHER_REFERENCES_WEIGHT)


def _check_curator_limits(rows: Sequence[Mapping], quality: QualityConfig, dataset: DatasetConfig,
                          verdicts: QualityVerdicts) -> None:
    limits = quality.curator
    for part, role, limit in (("volume", "velocity", limits.velocity_max), ("volume", "pressure", limits.pressure_max),
                              ("surface", "pressure", limits.pressure_max)):
        name = getattr(dataset.fields, part).get(role)
        if name is None:
            continue
        for column in column_names({name: dataset.variables(part)[name]}):
            for row in rows:
                largest = clipped_magnitude(row, f"{part}.fields.{column}", limits.sigma)
                if largest is not None and largest > limit:
                    verdicts.reject(row["run"], f"{part} {column} |max| {largest:.3g} > {limit:g} "
                                                f"(physicsnemo-curator's limit)")


def clipped_magnitude(row: Mapping, column: str, sigma: float) -> float | None:
    """A field column's largest magnitude clipped to mean +- ``sigma`` std (None: not in the row)."""
    low, high, mean, std = (row.get(f"{column}.{s}") for s in ("min", "max", "mean", "std"))
    if None in (low, high, mean, std):
        return None
    low, high = max(low, mean - sigma * std), min(high, mean + sigma * std)
    return max(abs(low), abs(high))


def judge(rows: Sequence[Mapping], quality: QualityConfig, dataset: DatasetConfig) -> QualityVerdicts:
    """Every check of docs/data_quality.md's "Which runs are rejected" over a table's rows."""
    verdicts = QualityVerdicts()
    unreadable = [row for row in rows if row.get("error")]
    for row in unreadable:
        verdicts.reject(row["run"], f"unreadable: {row['error']}")
    rows = [row for row in rows if not row.get("error") and row.get("version") is not None]
    verdicts.checked = [row["run"] for row in rows] + [row["run"] for row in unreadable]
    _score(rows, quality.robust_threshold, verdicts)
    _check_coefficients(rows, dataset.flow, quality.coefficient_tolerance, verdicts)
    if quality.curator.enabled:
        _check_curator_limits(rows, quality, dataset, verdicts)
    verdicts.strongest_first()
    return verdicts


def unflatten(row: Mapping) -> dict:
    """A table row's dotted names as nested mappings again (x, y, z triples as lists)."""
    nested: dict = {}
    for key, value in row.items():
        *path, last = key.split(".")
        target = nested
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return _lists(nested)


def _lists(value):
    if not isinstance(value, dict):
        return value
    if set(value) == {"x", "y", "z"} and not any(isinstance(v, dict) for v in value.values()):
        return [value["x"], value["y"], value["z"]]
    return {k: _lists(v) for k, v in value.items()}


SHOWN_REASONS = 2  # reasons per run on the summary's first line; every one on a line below


def short(reasons: Sequence[str]) -> str:
    """The strongest reasons of a run, and how many more there are."""
    more = len(reasons) - SHOWN_REASONS
    return "; ".join(reasons[:SHOWN_REASONS]) + (f"; {more} more below" if more > 0 else "")


@dataclass
class Selection:
    """The runs to use, those ``excluded`` or ``included`` despite reasons, not checked; notes."""

    kept: list
    excluded: dict[str, list[str]] = field(default_factory=dict)
    included: dict[str, list[str]] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def require_some(self, where: str | os.PathLike) -> list:
        """The kept runs; ValueError naming ``where`` and the reasons when the checks left none."""
        if not self.kept and self.excluded:
            raise ValueError(f"{where}: every run is excluded by quality ({self.summary()}); see "
                             "data.quality.include and data.quality.enabled")
        return self.kept

    def summary(self) -> str:
        """The lines a stage prints: excluded runs, strongest reasons first, every reason, the rest."""
        lines = [f"quality: {note}" for note in self.notes]
        if self.excluded:
            named = ", ".join(f"{run} ({short(reasons)})" for run, reasons in self.excluded.items())
            lines.append(f"{len(self.excluded)} run{'s' * (len(self.excluded) != 1)} excluded by quality: {named}")
            lines += [f"    {run}: {'; '.join(reasons)}" for run, reasons in self.excluded.items()
                      if len(reasons) > SHOWN_REASONS]
        for run, reasons in self.included.items():
            lines.append(f"quality: {run} used though rejected (data.quality.include): {'; '.join(reasons)}")
        if self.unchecked:
            lines.append(f"quality: {len(self.unchecked)} runs not checked (no statistics): "
                         f"{', '.join(self.unchecked[:10])}{' ...' if len(self.unchecked) > 10 else ''}")
        return "\n".join(lines) or "quality: no run excluded"


def quality_selection(runs: Sequence[Path | str], data: DataConfig, dataset: DatasetConfig) -> Selection:
    """``runs`` less those the statistics table rejects, unless ``data.quality`` is off or includes them."""
    quality = data.quality
    if not quality.enabled:
        return Selection(list(runs), notes=["checks off (data.quality.enabled=false)"])
    rows = read_statistics_table(data.processed_dir)
    if rows is None:
        return Selection(list(runs), unchecked=[run_name(r) for r in runs],
                         notes=[f"no {TABLE_NAME} in {data.processed_dir} (process_data.py writes it, "
                                "benchmarks/dataset_report.py for other processed folders)"])
    names = {run_name(r) for r in runs}
    verdicts = judge([row for row in rows if row["run"] in names], quality, dataset)
    unknown = sorted(set(quality.include) - names)
    notes = verdicts.notes + ([f"data.quality.include names no run here: {unknown}"] if unknown else [])
    selection = Selection([], unchecked=[run_name(r) for r in runs if run_name(r) not in verdicts.checked], notes=notes)
    for run in runs:
        reasons = verdicts.rejected.get(run_name(run))
        if reasons and run_name(run) not in quality.include:
            selection.excluded[run_name(run)] = reasons
        else:
            selection.kept.append(run)
            if reasons:
                selection.included[run_name(run)] = reasons
    return selection
