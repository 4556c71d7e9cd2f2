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
where `data.raw_dir` has no folder of the run), `predict.split=test` its test runs (held out of
training and validation: `train.test_fraction` or `train.test_runs`).

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

from pathlib import Path

from domino_pipeline.compute.nondimensional_form import stored_run_form
from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.configuration.config import PipelineConfig, SourceConfig
from domino_pipeline.configuration.source_configs import mixture, nondimensional, sources_of
from domino_pipeline.configuration.variables import column_names
from domino_pipeline.inference.forces import ForceSettings
from domino_pipeline.inference.predict_runs import predict_run, report_table, run_record, write_run_outputs
from domino_pipeline.inference.run_inputs import Physics, load_prediction_run, split_runs_of
from domino_pipeline.inference.trained_model import load_trained_model
from domino_pipeline.loading.assembly import scaling_factors_of
from domino_pipeline.runtime.entry_point import entry_point
from domino_pipeline.storage.object_store import as_location
from domino_pipeline.training.distributed import resolve_train_device
from domino_pipeline.training.domino_model import check_data_fits_model


@entry_point
def main(config: PipelineConfig) -> None:
    """Predict every run asked for, source by source; write and print the table (over a mixture, one
    per source, each into ``<out_dir>/<source>/``)."""
    options, mixed = config.predict, mixture(config)
    chosen = chosen_sources(config)  # refusals before the model loads
    device = resolve_train_device(options.device, 0)
    model, parameters = load_trained_model(options.checkpoint, device)
    factors = scaling_factors_of(config)  # train.py's: the cache's (a local folder or a URL), checked
    if not options.runs and options.split is None:
        raise ValueError("nothing to predict: give predict.runs=[...] or predict.split=val")
    for source, own in chosen:
        runs = [as_location(r) for r in options.runs]
        if options.split is not None:
            runs += split_runs_of(Path(options.train_dir), options.split, own.data.raw_dir, own.data.processed_dir,
                                  source.name if mixed else None)
        if not runs:
            continue
        if mixed:
            print(f"source {source.name} (dataset {own.dataset.name}):", flush=True)
        predict_runs(own, runs, model, parameters, factors, device,
                     Path(options.out_dir) / source.name if mixed else Path(options.out_dir), form=nondimensional(config))


def chosen_sources(config: PipelineConfig) -> list[tuple[SourceConfig, PipelineConfig]]:
    """The sources whose runs predict.py predicts (``predict.source``, else all); refused: runs of
    several sources without their source, an unknown source."""
    options, sources = config.predict, sources_of(config)
    names = [s.name for s, _ in sources]
    if options.runs and options.source is None and len(sources) > 1:
        raise ValueError(f"predict.runs={options.runs}: a model over sources needs to know whose runs they are: "
                         f"set predict.source to one of {names}")
    chosen = [(s, own) for s, own in sources if options.source in (None, s.name)]
    if not chosen:
        raise ValueError(f"predict.source={options.source}: no such source; the sources are {names}")
    return chosen


def predict_runs(config: PipelineConfig, runs: list, model, parameters: dict, factors: dict, device,
                 out_dir: Path, *, form: bool) -> None:
    """Predict ``runs`` of the config's dataset into ``out_dir``; ``form``: of a model in the
    non-dimensional form (each run's own), else in the stored units."""
    options, forces = config.predict, ForceSettings.from_config(config.forces, config.dataset)
    settings = settings_from_config(config.geometry, config.variables)
    variables = {"surface": config.variables.surface, "volume": config.variables.volume}
    check_data_fits_model(settings.fingerprinted(), parameters, "the config")
    physics = Physics(config.physics.stream_velocity, config.physics.air_density, config.physics.reference_length)
    records = []
    for path in runs:
        run = load_prediction_run(path, dataset=config.dataset, physics=physics, volume=options.volume,
                                  volume_source=config.process.volume_source)
        prediction = predict_run(model, run, settings, scaling_factors=factors,
                                 geometry_points=config.sampling.geometry_points, batch_points=options.batch_points,
                                 device=device, volume=options.volume, seed=config.seed, progress=True,
                                 form=stored_run_form(config.dataset, run.arrays["global_params_values"],
                                                      run.published.velocity if run.published else None, run.name,
                                                      form))
        record = run_record(run, prediction, variables=variables, forces=forces)
        written = write_run_outputs(run, prediction, variables=variables, out_dir=out_dir, plot=options.plot,
                                    record=record, pressure=forces.pressure)
        steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in prediction.steps.items())
        print(f"{run.name}: {record.get('cells', 0):,} cells in {prediction.seconds:.1f} s ({steps}) -> "
              + ", ".join(str(p) for p in written), flush=True)
        for note in run.notes:
            print(f"note {note}", flush=True)
        records.append(record)
    report_table(records, column_names(variables["surface"]), out_dir=out_dir, forces=forces)


if __name__ == "__main__":
    main()
