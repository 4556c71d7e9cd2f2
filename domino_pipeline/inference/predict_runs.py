"""One run through prediction: the model over every cell (and volume point), the errors against the truth, the force and
moment coefficients, and the files people look at (docs/predict.md, "Outputs")."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from domino_pipeline.compute.nondimensional_form import RunForm
from domino_pipeline.compute.scaling import unscale_fields
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.configuration.dataset_profile import COEFFICIENTS
from domino_pipeline.inference.forces import ForceSettings, Loads
from domino_pipeline.inference.full_resolution import (BatchItems, model_parts, part_forward, predict_part,
                                                       prepare_run, rows_to_mesh)
from domino_pipeline.inference.report import (PREDICTED_SUFFIX, add_arrays, format_table, plot_surface_pressure,
                                              relative_l2, split_columns, write_csv, write_mesh)
from domino_pipeline.inference.run_inputs import PredictionRun
from domino_pipeline.configuration.variables import column_names


@dataclass
class RunPrediction:
    """Non-dimensional predictions per surface cell (NaN: none) and volume point; seconds in all and per step."""

    surface: np.ndarray | None
    volume: np.ndarray | None
    seconds: float
    steps: dict[str, float] = field(default_factory=dict)


def predict_run(model: torch.nn.Module, run: PredictionRun, settings: PreprocessSettings, *,
                scaling_factors: dict, geometry_points: int, batch_points: int, device: torch.device,
                volume: bool = False, seed: int = 0, progress: bool = False, form: RunForm | None = None) -> RunPrediction:
    """Predict the run's surface and (when asked) volume; ``form``: a mixture model's form of the run."""
    start = time.perf_counter()
    parts = model_parts(model)
    if volume and "volume" not in parts:
        raise ValueError(f"{run.name}: predict.volume=true, but the model has no volume head (it predicts {parts})")
    prepared = prepare_run(run.arrays, settings, parts=parts, source=run.name)
    if form is not None and "surface" in parts:  # as mixture.ItemTransform converts a drawn item
        prepared.surface_normals = prepared.surface_normals * np.float32(form.normal)
        prepared.surface_areas = prepared.surface_areas * np.float32(form.area)
    steps = {"prepare": time.perf_counter() - start}
    if progress:
        knn = f" and the surface kNN of {len(prepared.surface_areas):,} cells" if "surface" in parts else ""
        tqdm.write(f"{run.name}: the grid SDFs{knn}, once per run ...")
    items = BatchItems(prepared, settings, parts=parts, geometry_points=geometry_points)
    steps["geometry"] = time.perf_counter() - start - steps["prepare"]
    forward = part_forward(model)
    results: dict[str, np.ndarray | None] = {"surface": None, "volume": None}
    for part in ("surface", "volume"):
        if part in parts and (part == "surface" or volume):
            begun = time.perf_counter()
            torch.manual_seed(seed)  # DoMINO's volume noise: the global generator, seeded per part
            total = len(prepared.surface_areas) if part == "surface" else len(prepared.volume_coordinates)
            with progress_bar(run.name, part, total, enabled=progress) as bar:
                scaled = predict_part(forward, items, part=part, batch_points=batch_points, device=device,
                                      progress=lambda _, done: bar.update(done - bar.n))
            unscaled = unscale_fields(scaled, scaling_factors, part)
            unscaled = unscaled if form is None else form.to_stored(part, unscaled)
            results[part] = rows_to_mesh(unscaled, getattr(prepared, f"{part}_rows"),
                                         len(run.arrays[f"{part}_mesh_centers"]))
            steps[part] = time.perf_counter() - begun
    return RunPrediction(surface=results["surface"], volume=results["volume"], seconds=time.perf_counter() - start,
                         steps=steps)


def progress_bar(run_name: str, part: str, total: int, *, enabled: bool = True, file=None) -> tqdm:
    """The bar of one part's batches: ``<run> <part>: 42%|...| 3.70M/8.80M [.., 1.2kcells/s]``
    (rows done / rows in all, and rows per second; benchmark_full_run.py reads this line)."""
    return tqdm(total=total, desc=f"{run_name} {part}", unit="cells" if part == "surface" else "points",
                unit_scale=True, disable=not enabled, leave=False, file=file)


def run_record(run: PredictionRun, prediction: RunPrediction, *, variables: Mapping[str, Mapping[str, str]],
               forces: ForceSettings) -> dict[str, Any]:
    """The run's row of the table: cells, coefficients predicted, true and published, relative L2 errors."""
    record: dict[str, Any] = {"run": run.name, "kind": run.kind, "seconds": prediction.seconds}
    if prediction.surface is not None:
        record |= _surface_record(run, prediction.surface, dict(variables["surface"]), forces)
    if prediction.volume is not None and run.has_truth:
        errors = relative_l2(prediction.volume, run.arrays["volume_fields"])
        record |= {f"rel_l2_volume_{name}": float(e) for name, e in zip(column_names(variables["volume"]), errors)}
    return record


# each reference set's columns: <coefficient>_<kind> over the run's own, <coefficient>_constref_<kind> over the constant
REFERENCE_SET_COLUMNS = {"own": "", "constant": "_constref"}


def coefficient_columns(which: str, kind: str) -> dict[str, str]:
    """{coefficient: column} of reference set ``which`` and ``kind``: ``cd_pred``, ``cd_constref_true``, ..."""
    return {name: f"{name}{REFERENCE_SET_COLUMNS[which]}_{kind}" for name in COEFFICIENTS}


PRINTED_COEFFICIENTS = ("cd", "cl", "clf", "clr")  # of the run's own references; the CSV has every one


def table_columns(records: list[dict], surface_names: list[str]) -> list[str]:
    """Every CSV column: references, each coefficient (pred, true, published; own and constant), errors."""
    columns = ["run", "cells", "u_inf"]
    for which, suffix in REFERENCE_SET_COLUMNS.items():
        kinds = ("pred", "true", "published")
        columns += [f"a_ref{suffix}", f"l_ref{suffix}",
                    *(coefficient_columns(which, kind)[name] for name in COEFFICIENTS for kind in kinds)]
    columns = [c for c in columns if c == "run" or any(c in r for r in records)]
    columns += [f"rel_l2_area_{name}" for name in surface_names] + [f"rel_l2_{name}" for name in surface_names]
    columns += sorted({key for r in records for key in r if key.startswith("rel_l2_volume_")})
    return columns + ["cells_not_predicted", "seconds"]


def printed_columns(columns: list[str]) -> list[str]:
    """The printed table's: drag, lift, front and rear lift (own references), area-weighted L2 errors."""
    coefficients = {coefficient_columns("own", kind)[name] for name in PRINTED_COEFFICIENTS
                    for kind in ("pred", "true", "published")}
    return [c for c in columns if c in ("run", "cells", "a_ref", "seconds") or c in coefficients
            or c.startswith("rel_l2_area_")]


def report_table(records: list[dict], surface_names: list[str], *, out_dir: Path, forces: ForceSettings) -> Path:
    """Write ``<out_dir>/predictions.csv``, print the chosen columns and the conventions; the CSV's path."""
    columns = table_columns(records, surface_names)
    csv_path = write_csv(records, columns, out_dir / "predictions.csv")
    shown = printed_columns(columns)  # the CSV has every column
    print(format_table(records, shown, {c: c.removeprefix("rel_l2_area_") for c in shown}))
    print("columns after the coefficients: relative L2 error per variable over the surface, area-weighted")
    speed = f"{forces.velocity} m/s" if forces.velocity is not None else "each run's own (u_inf)"
    fields = ("coefficient fields (dynamic pressure 1)" if forces.fields_are_coefficients else
              "kinematic fields" if forces.kinematic else f"density {forces.density} kg/m^3")
    print(f"coefficients: reference area a_ref (m^2) and length l_ref (m), free stream {speed}, {fields}, normals "
          f"{forces.convention.normals}, wall shear {forces.convention.wall_shear}; every coefficient, over the "
          f"run's own and the constant references (_constref): {csv_path}")
    if any(r.get("cd_true", 1.0) < 0 for r in records):
        print("warning: a true drag coefficient is negative: check dataset.flow.normals and dataset.flow.wall_shear",
              file=sys.stderr)
    return csv_path


def _surface_record(run: PredictionRun, predicted: np.ndarray, variables: dict[str, str],
                    forces: ForceSettings) -> dict[str, Any]:
    """The coefficients over every predicted cell, over the own and constant references; and the errors."""
    vector_areas = run.cell_vector_areas
    areas = np.linalg.norm(vector_areas, axis=1)
    to_physical = run.divisors["surface"].astype(np.float64)
    missing = ~np.all(np.isfinite(predicted), axis=1)
    record = {"cells": len(predicted), "cells_not_predicted": int(missing.sum())}
    loads = {"pred": forces.loads(np.where(missing[:, None], 0.0, predicted) * to_physical, vector_areas, areas,
                                  run.cell_centres, variables)}
    if run.has_truth:
        loads["true"] = forces.loads(run.true_surface * to_physical, vector_areas, areas, run.cell_centres, variables)
    record |= _coefficients_record(run, loads, forces)
    if run.has_truth:
        names = column_names(variables)
        record |= {f"rel_l2_{name}": float(e) for name, e in zip(names, relative_l2(predicted, run.true_surface))}
        weighted = relative_l2(predicted, run.true_surface, weights=areas)
        record |= {f"rel_l2_area_{name}": float(e) for name, e in zip(names, weighted)}
    return record


def _coefficients_record(run: PredictionRun, loads: dict[str, Loads], forces: ForceSettings) -> dict[str, Any]:
    """Each reference set's references, coefficients of ``loads`` and published ones; none without a speed."""
    free_stream = forces.free_stream(run.published)
    if free_stream is None:
        run.notes.append(f"{run.name}: no coefficients: dataset.flow.velocity is null and the run states no "
                         "free-stream speed (dataset.references.columns.velocity)")
        return {}
    record: dict[str, Any] = {"u_inf": free_stream.velocity}
    for which, chosen in forces.reference_sets(run.published).items():
        suffix = REFERENCE_SET_COLUMNS[which]
        record |= {f"a_ref{suffix}": chosen.references.area, f"l_ref{suffix}": chosen.references.length}
        for kind, summed in loads.items():
            values = forces.coefficients(summed, chosen.references, free_stream)
            record |= {column: values[name] for name, column in coefficient_columns(which, kind).items()}
        if chosen.published:
            published = coefficient_columns(which, "published")
            record |= {column: chosen.published[name] for name, column in published.items() if name in chosen.published}
    return record


def write_run_outputs(run: PredictionRun, prediction: RunPrediction, *, variables: Mapping[str, Mapping[str, str]],
                      out_dir: Path, plot: bool, record: Mapping[str, Any], pressure: str) -> list[Path]:
    """``<run>_surface.vtp`` (``<name>_pred`` beside ``<name>``), ``<run>_volume.vtu``, ``<run>_pressure.png``."""
    paths = []
    if prediction.surface is not None:
        mesh = run.surface_mesh.copy()
        if run.kind == "processed":  # the raw VTP carries its own true arrays
            add_arrays(mesh, run.arrays["surface_fields"] * run.divisors["surface"], variables["surface"], where="cells")
        add_arrays(mesh, prediction.surface * run.divisors["surface"], variables["surface"],
                   where=run.surface_location, suffix=PREDICTED_SUFFIX)
        paths.append(write_mesh(mesh, out_dir / f"{run.name}_surface.vtp"))
        if plot:
            paths.append(_plot(run, prediction.surface, variables, out_dir, record, pressure))
    if prediction.volume is not None:
        mesh = run.volume_mesh.copy()
        if run.has_truth:
            add_arrays(mesh, run.arrays["volume_fields"] * run.divisors["volume"], variables["volume"], where="points")
        add_arrays(mesh, prediction.volume * run.divisors["volume"], variables["volume"], where="points",
                   suffix=PREDICTED_SUFFIX)
        paths.append(write_mesh(mesh, out_dir / f"{run.name}_volume.vtu"))
    return paths


def _plot(run: PredictionRun, predicted: np.ndarray, variables: Mapping[str, Mapping[str, str]], out_dir: Path,
          record: Mapping[str, Any], pressure: str) -> Path:
    scale = split_columns(run.divisors["surface"][None], variables["surface"])[pressure]
    predicted_p = split_columns(predicted, variables["surface"])[pressure] * scale
    true_p = split_columns(run.arrays["surface_fields"], variables["surface"])[pressure] * scale if run.has_truth else None
    title = (f"{run.name}: Cd predicted {record['cd_pred']:.4f}, Cl predicted {record['cl_pred']:.4f}"
             if "cd_pred" in record else f"{run.name}: surface pressure")
    if run.has_truth and "cd_true" in record:
        title += f" | Cd true {record['cd_true']:.4f}, Cl true {record['cl_true']:.4f}"
    return plot_surface_pressure(run.arrays["surface_mesh_centers"], predicted_p, true_p,
                                 out_dir / f"{run.name}_pressure.png", title)
