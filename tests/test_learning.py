"""The learning guard: a tiny DoMINO trained through the pipeline predicts the pressure of bodies
it never saw, far better than the training mean does.

Eight tiny synthetic runs go through the stages' own entry points, in this process:
process_data.py (surface only), cache_data.py, train.py (a tiny surface model, a fixed number of
steps on the cached draws, seeded, one torch thread) and predict.py on the two held-out runs of
train.py's split. predict.py reads those runs from their raw folders and builds the model's inputs
itself (its full-resolution path, no cache), and compares with the true fields of the raw files;
its area-weighted relative L2 of the pressure (``rel_l2_area_pMeanTrim``) is the figure checked.
So a draw that teaches something else than what prediction feeds (a flipped normal, shuffled or
mis-scaled targets) shows as a held-out error well above the threshold, near the baseline's:
every cell predicted as the training runs' area-weighted mean pressure, scored the same way. A
change made alike to the training draws and to prediction's inputs (both built by
``loading.items.build_item``) may teach as well and is not this test's to catch.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import yaml_config

RUNS = 8  # 6 train, 2 held out (train.val_fraction)
PRESSURE = "pMeanTrim"  # the drivaerml profile's pressure: predict.py's column rel_l2_area_pMeanTrim
SEED = 42
# Measured on this config (targets scaled by mean and std, seeds 42, 1, 2, 3, 4, 5): 0.046 to 0.058
# on each held-out run (min-max, seed 42: 0.052 / 0.054); the training mean 0.28. Broken: the
# draw's own normals flipped 0.16 / 0.18 (seed 42) and 0.11 / 0.11 (seed 1), all its normals
# flipped 0.21, its targets shuffled 0.28 (seed 42); min-max with the offset's sign wrong 0.44.
THRESHOLD = 0.08

# A tiny grid, draw and model: 180 steps (6 runs x 30 epochs) of about 0.1 s on one core.
TINY = [
    "model_type=surface", "process.parts=surface", "process.num_processes=1", "data.quality.enabled=false",
    "geometry.interp_res=[16,8,8]", "geometry.num_neighbors_surface=3", "geometry.device=cpu",
    "sampling.surface_points=256", "sampling.geometry_points=400",
    "model.geometry_encoding_type=stl", "model.geometry_rep.geo_processor.processor_type=conv",
    "model.geometry_rep.geo_conv.base_neurons=8", "model.geometry_rep.geo_conv.surface_radii=[0.05]",
    "model.geometry_rep.geo_conv.surface_neighbors_in_radius=[8]", "model.geometry_local.surface_radii=[0.25]",
    "model.geometry_local.surface_neighbors_in_radius=[8]", "model.geometry_local.base_layer=16",
    "model.nn_basis_functions.base_layer=16", "model.aggregation_model.base_layer=16",
    "model.position_encoder.base_neurons=16",
    "train.epochs=30", "train.lr=1e-2", "train.val_fraction=0.25", "train.split_seed=0",
    "train.device=cpu", "train.cpu_threads=1", "train.num_workers=0", "train.val_num_workers=0",
    "train.checkpoint_every=1000", "train.val_every=1000",
    "predict.split=val", "predict.device=cpu", "predict.plot=false",
]


def overrides(work: Path, seed: int) -> list[str]:
    """The stages' config: TINY over conf/cached.yaml, with this test's folders and seed."""
    return [*TINY, f"seed={seed}", f"data.raw_dir={work / 'raw'}", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", f"output_dir={work / f'train_{seed}'}"]


def prepare(work: Path) -> None:
    """RUNS tiny synthetic runs, processed and cached by process_data.py and cache_data.py."""
    import cache_data
    import process_data
    from synthetic_data import generate_runs

    generate_runs(work / "raw", RUNS, preset="tiny", seed=0)
    process_data.main(yaml_config(*overrides(work, SEED), name="cached"))
    cache_data.main(yaml_config(*overrides(work, SEED), name="cached"))


def train_and_predict(work: Path, seed: int) -> dict[str, float]:
    """train.py then predict.py on the held-out runs: {run: rel_l2_area of the pressure}. Torch's
    thread count (train.cpu_threads sets it) is put back after."""
    import predict
    import train

    threads = torch.get_num_threads()
    try:
        train.main(yaml_config(*overrides(work, seed), name="cached"))
        predict.main(yaml_config(*overrides(work, seed), name="cached"))
    finally:
        torch.set_num_threads(threads)
    with open(work / f"train_{seed}" / "predictions" / "predictions.csv", newline="") as f:
        return {row["run"]: float(row[f"rel_l2_area_{PRESSURE}"]) for row in csv.DictReader(f)}


def training_mean_errors(work: Path, seed: int) -> dict[str, float]:
    """{held-out run: rel_l2_area of the pressure} when every cell is predicted as the training
    runs' area-weighted mean pressure; the runs read and scored as predict.py reads and scores them."""
    from domino_pipeline.config import load_config
    from domino_pipeline.inference.report import relative_l2
    from domino_pipeline.inference.run_inputs import Physics, load_prediction_run
    from domino_pipeline.variables import column_names

    config = load_config(yaml_config(*overrides(work, seed), name="cached"))
    physics = Physics(config.physics.stream_velocity, config.physics.air_density, config.physics.reference_length)
    split = json.loads((work / f"train_{seed}" / "split.json").read_text())
    column = column_names(config.variables.surface).index(PRESSURE)

    def pressure_and_areas(name: str) -> tuple[np.ndarray, np.ndarray]:
        run = load_prediction_run(work / "raw" / name.removesuffix(".zarr"), dataset=config.dataset, physics=physics,
                       volume=False)
        return run.true_surface[:, column:column + 1], np.linalg.norm(run.cell_vector_areas, axis=1)

    trained = [pressure_and_areas(name) for name in split["train"]]
    areas = np.concatenate([a for _, a in trained])
    mean = areas @ np.concatenate([p for p, _ in trained])[:, 0] / areas.sum()
    errors = {}
    for name in split["val"]:
        pressure, areas = pressure_and_areas(name)
        errors[name.removesuffix(".zarr")] = float(relative_l2(np.full_like(pressure, mean), pressure, areas)[0])
    return errors


@pytest.mark.slow
def test_a_tiny_model_trained_on_the_cache_predicts_held_out_pressure(tmp_path):
    prepare(tmp_path)
    errors = train_and_predict(tmp_path, SEED)
    baseline = training_mean_errors(tmp_path, SEED)
    assert sorted(errors) == sorted(baseline) and len(errors) == 2, (errors, baseline)
    for run, error in errors.items():
        # the threshold means something only where the training mean is far from the truth
        assert baseline[run] > 3 * THRESHOLD, f"{run}: the training mean's error is only {baseline[run]:.4f}"
        assert error < THRESHOLD, (f"{run}: held-out pressure L2 {error:.4f} (area-weighted) is not below "
                                   f"{THRESHOLD}; the training mean's: {baseline[run]:.4f}")
