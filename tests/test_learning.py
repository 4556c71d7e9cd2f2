"""The learning guard: a tiny DoMINO trained through the pipeline predicts the pressure and the
drag of bodies it never saw, far better than the training mean does.

Eight tiny synthetic runs go through the stages' own entry points, in this process:
process_data.py (surface only), cache_data.py, train.py (a tiny surface model, a fixed number of
steps on the cached draws, seeded, one torch thread) and predict.py on the two test runs of
train.py's split (``train.test_fraction``: held out of training, and nothing validates, so the
last model is the only one). predict.py reads those runs from their raw folders and builds the
model's inputs itself (its full-resolution path, no cache), and compares with the true fields of
the raw files: its area-weighted relative L2 of the pressure (``rel_l2_area_pMeanTrim``) and its
drag coefficient against the one integrated from the true fields are the figures checked. So a
draw that teaches something else than what prediction feeds (a flipped normal, shuffled or
mis-scaled targets) shows as a test error well above a threshold, near or past the baselines':
every cell predicted as the training runs' area-weighted mean pressure, and every run's drag as
the training runs' mean drag (their published Cd). Drag is the sharper check: it is a small
difference of the pressure on the nose and the tail, which a normal the wrong way round upsets.
A change made alike to the training draws and to prediction's inputs (both built by
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

RUNS = 8  # 6 train, 2 test (train.test_fraction)
PRESSURE = "pMeanTrim"  # the drivaerml profile's pressure: predict.py's column rel_l2_area_pMeanTrim
SEED = 42
# Measured on this config (targets scaled by mean and std, seeds 42, 1, 2, 3, 4, 5): pressure L2 0.046
# to 0.058 on each test run (min-max, seed 42: 0.052 / 0.054), the training mean's 0.28; mean |Cd
# error| 17.5, 26.2, 23.1, 30.3, 19.9, 22.1 %, the training mean's 50.7 % (42.4 and 59.0). Broken:
# the draw's own normals flipped, pressure 0.16 / 0.18 and Cd 233 % (seed 42: 3.5x and 13x the
# working draw's), over the other seeds pressure 0.11, 0.19, 0.18, 0.084, 0.15 and Cd 152, 299, 57,
# 71, 108 % (each seed fails at least one check); all its normals flipped 0.21; its targets shuffled
# 0.28 and -81 % (seeds 42 and 1); min-max with the offset's sign wrong 0.44.
THRESHOLD = 0.08
CD_THRESHOLD = 40.0  # mean |Cd error| % over the test runs

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
    "train.epochs=30", "train.lr=1e-2", "train.val_fraction=0", "train.test_fraction=0.25", "train.split_seed=0",
    "train.device=cpu", "train.cpu_threads=1", "train.num_workers=0", "train.val_num_workers=0",
    "train.checkpoint_every=1000", "train.val_every=1000",
    "predict.split=test", "predict.device=cpu", "predict.plot=false",
]


def overrides(work: Path, seed: int) -> list[str]:
    """The stages' config: TINY over conf/cached.yaml, with this test's folders and seed."""
    out = work / f"train_{seed}"
    return [*TINY, f"seed={seed}", f"data.raw_dir={work / 'raw'}", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", f"output_dir={out}",
            f"predict.checkpoint={out / 'checkpoints' / 'model_last.mdlus'}"]


def prepare(work: Path) -> None:
    """RUNS tiny synthetic runs, processed and cached by process_data.py and cache_data.py."""
    import cache_data
    import process_data
    from synthetic_data import generate_runs

    generate_runs(work / "raw", RUNS, preset="tiny", seed=0)
    process_data.main(yaml_config(*overrides(work, SEED), name="cached"))
    cache_data.main(yaml_config(*overrides(work, SEED), name="cached"))


def train_and_predict(work: Path, seed: int) -> dict[str, dict[str, float]]:
    """train.py then predict.py on the test runs: {run: {"p": rel_l2_area of the pressure, "cd": Cd
    error in % of the true Cd, "cd_true": that Cd}}. Torch's thread count (train.cpu_threads sets
    it) is put back after."""
    import predict
    import train

    threads = torch.get_num_threads()
    try:
        train.main(yaml_config(*overrides(work, seed), name="cached"))
        predict.main(yaml_config(*overrides(work, seed), name="cached"))
    finally:
        torch.set_num_threads(threads)
    with open(work / f"train_{seed}" / "predictions" / "predictions.csv", newline="") as f:
        return {row["run"]: {"p": float(row[f"rel_l2_area_{PRESSURE}"]), "cd_true": float(row["cd_true"]),
                             "cd": 100 * (float(row["cd_pred"]) - float(row["cd_true"])) / abs(float(row["cd_true"]))}
                for row in csv.DictReader(f)}


def training_mean_errors(work: Path, seed: int, cd_true: dict[str, float]) -> dict[str, dict[str, float]]:
    """{test run: {"p": rel_l2_area of the pressure, "cd": Cd error %}} when every cell is predicted
    as the training runs' area-weighted mean pressure and every run's drag as the mean of the Cd the
    training runs publish; the runs read and scored as predict.py reads and scores them, against
    ``cd_true`` (predict.py's Cd of the true fields)."""
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.inference.report import relative_l2
    from domino_pipeline.inference.run_inputs import Physics, load_prediction_run
    from domino_pipeline.processed.runs import open_run
    from domino_pipeline.configuration.variables import column_names

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
    mean_cd = np.mean([open_run(work / "processed" / name).attrs["published"]["own"]["cd"] for name in split["train"]])
    errors = {}
    for name in split["test"]:
        pressure, areas = pressure_and_areas(name)
        run = name.removesuffix(".zarr")
        errors[run] = {"p": float(relative_l2(np.full_like(pressure, mean), pressure, areas)[0]),
                       "cd": float(100 * (mean_cd - cd_true[run]) / abs(cd_true[run]))}
    return errors


@pytest.mark.slow
def test_a_tiny_model_trained_on_the_cache_predicts_the_pressure_and_drag_of_test_runs(tmp_path):
    prepare(tmp_path)
    errors = train_and_predict(tmp_path, SEED)
    baseline = training_mean_errors(tmp_path, SEED, {run: e["cd_true"] for run, e in errors.items()})
    assert sorted(errors) == sorted(baseline) and len(errors) == 2, (errors, baseline)
    model_cd = float(np.mean([abs(e["cd"]) for e in errors.values()]))
    mean_cd = float(np.mean([abs(e["cd"]) for e in baseline.values()]))
    figures = "; ".join(f"{run}: pressure L2 {e['p']:.4f} (training mean {baseline[run]['p']:.4f}), Cd error "
                        f"{e['cd']:+.1f}% (training mean {baseline[run]['cd']:+.1f}%)" for run, e in errors.items())
    figures += f"; mean |Cd error| {model_cd:.1f}% (training mean {mean_cd:.1f}%)"
    print(f"learning guard: {figures}")
    # the thresholds mean something only where the training mean is far from the truth
    assert all(b["p"] > 3 * THRESHOLD for b in baseline.values()) and mean_cd > CD_THRESHOLD, figures
    assert all(e["p"] < THRESHOLD for e in errors.values()), f"pressure L2 not below {THRESHOLD}: {figures}"
    assert model_cd < CD_THRESHOLD, f"mean |Cd error| not below {CD_THRESHOLD}%: {figures}"
