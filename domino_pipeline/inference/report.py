"""What predict.py reports: relative L2 errors, the per-run table (printed and CSV), the written
VTP / VTU with predicted arrays beside the true ones, and a picture of the surface pressure."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyvista as pv

from domino_pipeline.configuration.variables import VARIABLE_WIDTH

PREDICTED_SUFFIX = "_pred"


def relative_l2(predicted: np.ndarray, true: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Per column (C,): ||pred - true|| / ||true|| over the rows that were predicted (finite);
    with ``weights`` (N,), e.g. cell areas, the weighted norms sqrt(sum w d^2) / sqrt(sum w t^2)."""
    rows = np.all(np.isfinite(predicted), axis=1)
    weight = np.ones(int(rows.sum())) if weights is None else np.asarray(weights, dtype=np.float64)[rows]
    difference = predicted[rows].astype(np.float64) - true[rows]
    error = np.sqrt(weight @ difference**2)
    reference = np.sqrt(weight @ np.asarray(true[rows], dtype=np.float64) ** 2)
    return np.where(reference > 0, error / np.maximum(reference, np.finfo(np.float64).tiny), np.nan)


def split_columns(values: np.ndarray, variables: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The columns of ``values`` (N, C) per variable: (N,) for a scalar, (N, 3) for a vector."""
    out, start = {}, 0
    for name, kind in variables.items():
        width = VARIABLE_WIDTH[kind]
        out[name] = values[:, start] if width == 1 else values[:, start:start + width]
        start += width
    if start != values.shape[1]:
        raise ValueError(f"{values.shape[1]} columns, but the variables {dict(variables)} have {start}")
    return out


def add_arrays(mesh: pv.DataSet, values: np.ndarray, variables: Mapping[str, str], *, where: str,
               suffix: str = "") -> None:
    """Put each variable of ``values`` on the mesh's cell or point data as ``<name><suffix>``."""
    data = mesh.cell_data if where == "cells" else mesh.point_data
    for name, column in split_columns(values, variables).items():
        data[name + suffix] = np.ascontiguousarray(column, dtype=np.float32)


def write_mesh(mesh: pv.DataSet, path: Path) -> Path:
    """Write a VTP (PolyData) or VTU (UnstructuredGrid), binary and compressed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mesh.save(str(path), binary=True)
    return path


def format_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str],
                 labels: Mapping[str, str] | None = None) -> str:
    """A plain-text table of ``records`` (numbers to 4 significant digits); ``labels`` renames headers."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "-" if math.isnan(value) else f"{value:.4g}"
        return str(value)

    rows = [[cell(r.get(c, float("nan"))) for c in columns] for r in records]
    headers = [(labels or {}).get(c, c) for c in columns]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in [headers, *rows])


def write_csv(records: Sequence[Mapping[str, Any]], columns: Sequence[str], path: Path) -> Path:
    """One row per run; numbers at full precision (repr)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for record in records:
            writer.writerow({c: record.get(c, "") for c in columns})
    return path


def plot_surface_pressure(centers: np.ndarray, predicted: np.ndarray, true: np.ndarray | None, path: Path,
                          title: str) -> Path:
    """Side and top views of the surface coloured by pressure, true above, predicted below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("true", true), ("predicted", predicted)] if true is not None else [("predicted", predicted)]
    shown = np.isfinite(predicted)
    values = np.concatenate([v[shown] for _, v in rows])
    low, high = np.percentile(values, [1, 99])
    figure, axes = plt.subplots(len(rows), 2, figsize=(11, 2.6 * len(rows) + 0.6), squeeze=False, layout="constrained")
    for row, (label, pressure) in enumerate(rows):
        for column, (axis_a, axis_b, depth, view) in enumerate(((0, 2, 1, "side, from -y"), (0, 1, 2, "top, from +z"))):
            order = np.argsort(centers[shown, depth] * (-1 if view.startswith("side") else 1))
            points = centers[shown][order]
            image = axes[row, column].scatter(points[:, axis_a], points[:, axis_b], c=pressure[shown][order], s=1,
                                              cmap="coolwarm", vmin=low, vmax=high, rasterized=True)
            axes[row, column].set(aspect="equal", xlabel="xyz"[axis_a], ylabel="xyz"[axis_b])
            axes[row, column].set_title(f"{label} pressure ({view})", fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.8, label="pressure")
    figure.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
