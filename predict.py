"""Predict the fields of cars with a trained DoMINO: surface VTP (and volume VTU), errors, drag and lift.

    python predict.py --config-name=demo output_dir=outputs/demo/train_cached predict.split=val
    python predict.py predict.checkpoint=/runs/a/checkpoints/model_best.mdlus \
        'predict.runs=[/data/drivaerml/run_7,/data/new_car.stl]' predict.out_dir=/runs/a/predictions
    python predict.py ... model_type=combined predict.volume=true     # also the volume points (VTU)

Give the same config as training (the bounding boxes, grid, variables and scaling factors the
model was trained with). `predict.checkpoint` is a physicsnemo `.mdlus` (this project's
model_best / model_last, or any DoMINO saved with `Module.save`) or this project's checkpoint.pt.
`predict.runs` takes raw DrivAerML run folders, processed `<run>.zarr` groups (local, or URLs:
`s3://bucket/processed/run_7.zarr`, gs://, az://) or `.stl` files; `predict.split=val` adds the
validation runs of `<predict.train_dir>/split.json` (from `data.processed_dir`, a folder or a URL,
where `data.raw_dir` has no folder of the run).

For each run, in `predict.out_dir`: `<run>_surface.vtp` with the predicted arrays `<name>_pred`
beside the true `<name>` (physical units, as in the source files), `<run>_volume.vtu` when asked,
`<run>_pressure.png`; for all runs `predictions.csv`: the force and moment coefficients (Cd, Cs,
Cl, CmRoll, CmPitch, CmYaw, Clf, Clr) predicted and true (integrated over the cells in physical
units, with the dataset profile's flow, `dataset.flow`), the published ones where the run has
them (`dataset.coefficients`; a processed run keeps those of its raw folder), over the run's own
references (where it has them and `forces.reference_area_per_run`) and over the constant ones
(`dataset.references`, columns `_constref`), relative L2 per variable. The table printed shows
Cd, Cl, Clf and Clr over the run's own references. Conventions: domino_pipeline/inference/forces.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from datapipe import scaling_factors_of
from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.config import DataConfig, PipelineConfig, PredictConfig
from domino_pipeline.entry_point import entry_point
from domino_pipeline.inference.forces import ForceSettings
from domino_pipeline.dataset_profile import COEFFICIENTS
from domino_pipeline.inference.predict_runs import (
    REFERENCE_SET_COLUMNS,
    coefficient_columns,
    predict_run,
    run_record,
    write_run_outputs,
)
from domino_pipeline.inference.report import format_table, write_csv
from domino_pipeline.inference.run_inputs import Physics, load_run, split_runs_of
from domino_pipeline.inference.trained_model import load_trained_model
from domino_pipeline.object_store import as_location
from domino_pipeline.training.distributed import resolve_train_device
from domino_pipeline.training.domino_model import check_data_fits_model, variable_names

def runs_to_predict(options: PredictConfig, data: DataConfig) -> list[Path | str]:
    """The runs of ``predict.runs`` and of ``predict.split`` (paths, and URLs of processed runs)."""
    runs = [as_location(run) for run in options.runs]
    if options.split is not None:
        runs += split_runs_of(Path(options.train_dir), options.split, data.raw_dir, data.processed_dir)
    if not runs:
        raise ValueError("nothing to predict: give predict.runs=[...] or predict.split=val")
    return runs


PRINTED_COEFFICIENTS = ("cd", "cl", "clf", "clr")  # of the run's own references; the CSV has every one


def table_columns(records: list[dict], surface_names: list[str]) -> list[str]:
    """Every column of the CSV: the references, each coefficient predicted, true and published
    over the run's own references and over the constant ones, the errors."""
    columns = ["run", "cells", "u_inf"]
    for which in ("own", "constant"):
        suffix = REFERENCE_SET_COLUMNS[which]
        columns += [f"a_ref{suffix}", f"l_ref{suffix}"]
        columns += [column for name in COEFFICIENTS for kind in ("pred", "true", "published")
                    for column in [coefficient_columns(which, kind)[name]]]
    columns = [c for c in columns if c == "run" or any(c in r for r in records)]
    columns += [f"rel_l2_area_{name}" for name in surface_names] + [f"rel_l2_{name}" for name in surface_names]
    columns += sorted({key for r in records for key in r if key.startswith("rel_l2_volume_")})
    return columns + ["cells_not_predicted", "seconds"]


def printed_columns(records: list[dict], columns: list[str]) -> list[str]:
    """The printed table's: drag, lift, front and rear lift over the run's own references and the
    area-weighted relative L2 errors."""
    coefficients = {coefficient_columns("own", kind)[name] for name in PRINTED_COEFFICIENTS
                    for kind in ("pred", "true", "published")}
    shown = [c for c in columns if c in ("run", "cells", "a_ref", "seconds") or c in coefficients
             or c.startswith("rel_l2_area_")]
    return [c for c in shown if c != "cells_not_predicted" or any(r.get(c) for r in records)]


def print_table(records: list[dict], columns: list[str]) -> None:
    """The printed columns (the CSV has every column)."""
    shown = printed_columns(records, columns)
    print(format_table(records, shown, {c: c.removeprefix("rel_l2_area_") for c in shown}))
    print("columns after the coefficients: relative L2 error per variable over the surface, area-weighted")


@entry_point
def main(config: PipelineConfig) -> None:
    """Predict every run asked for; write and print the table."""
    options, forces = config.predict, ForceSettings.from_config(config.forces, config.dataset)
    device = resolve_train_device(options.device, 0)
    settings = settings_from_config(config.geometry, config.variables)
    variables = {"surface": config.variables.surface, "volume": config.variables.volume}
    model, parameters = load_trained_model(options.checkpoint, device)
    check_data_fits_model(settings.fingerprinted(), parameters, "the config")
    factors = scaling_factors_of(config)  # train.py's: the cache's (a local folder or a URL), checked
    physics = Physics(config.physics.stream_velocity, config.physics.air_density, config.physics.reference_length)
    out_dir = Path(options.out_dir)
    records = []
    for path in runs_to_predict(options, config.data):
        run = load_run(path, dataset=config.dataset, physics=physics, volume=options.volume,
                       volume_source=config.process.volume_source)
        prediction = predict_run(model, run, settings, scaling_factors=factors,
                                 geometry_points=config.sampling.geometry_points, batch_points=options.batch_points,
                                 device=device, volume=options.volume, seed=config.seed, progress=True)
        record = run_record(run, prediction, variables=variables, forces=forces)
        written = write_run_outputs(run, prediction, variables=variables, out_dir=out_dir, plot=options.plot,
                                    record=record, pressure=forces.pressure)
        steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in prediction.steps.items())
        print(f"{run.name}: {record.get('cells', 0):,} cells in {prediction.seconds:.1f} s ({steps}) -> "
              + ", ".join(str(p) for p in written), flush=True)
        for note in run.notes:
            print(f"note {note}", flush=True)
        records.append(record)
    columns = table_columns(records, variable_names(variables["surface"]))
    csv_path = write_csv(records, columns, out_dir / "predictions.csv")
    print_table(records, columns)
    speed = f"{forces.velocity} m/s" if forces.velocity is not None else "each run's own (u_inf)"
    print(f"coefficients: reference area a_ref (m^2) and length l_ref (m), free stream {speed}, "
          f"{'kinematic fields' if forces.kinematic else f'density {forces.density} kg/m^3'}, normals "
          f"{forces.convention.normals}, wall shear {forces.convention.wall_shear}; every coefficient, over the "
          f"run's own and the constant references (_constref): {csv_path}")
    if any(r.get("cd_true", 1.0) < 0 for r in records):
        print("warning: a true drag coefficient is negative: check dataset.flow.normals and dataset.flow.wall_shear",
              file=sys.stderr)


if __name__ == "__main__":
    main()
