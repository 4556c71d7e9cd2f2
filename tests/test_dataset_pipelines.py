"""Each dataset end to end in its own published layout, read through its profile alone:
``synthetic_data.py --dataset X`` writes tiny runs, then process_data.py, cache_data.py, train.py
(one epoch; AhmedML's model predicts the volume too) and predict.py, their entry points run in
this process, on the raw validation run, whose true drag and lift are the published ones and
whose predictions land on the surface rows the dataset has (cells, or WindsorML's points)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import typed_config, yaml_config
from test_predict import COMBINED
from test_train import TINY, run

from domino_pipeline.processed.runs import load_run, open_run

PYTHON = sys.executable
CASES = [("drivaerml", "surface"), ("ahmedml", "combined"), ("windsorml", "surface")]


def _overrides(name: str, model_type: str, work: Path) -> list[str]:
    return [f"dataset={name}", f"data.raw_dir={work / 'raw'}", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", f"output_dir={work / 'train'}", *TINY,
            *(COMBINED if model_type == "combined" else [f"model_type={model_type}"]), "process.num_processes=1",
            "train.epochs=1", "train.val_fraction=0.5"]


@pytest.mark.slow
@pytest.mark.parametrize("name,model_type", CASES)
def test_a_dataset_runs_through_the_pipeline_in_its_own_layout(tmp_path: Path, name: str, model_type: str) -> None:
    import cache_data
    import predict
    import process_data
    import train

    profile = typed_config(f"dataset={name}").dataset
    common = _overrides(name, model_type, tmp_path)
    run([PYTHON, "synthetic_data.py", "--dataset", name, "--preset", "tiny", "--runs", "2", "--seed", "0",
         "--out", str(tmp_path / "raw"), "--volume-points", "3000"])
    process_data.main(yaml_config(*common))
    for processed in sorted((tmp_path / "processed").glob("run_*.zarr")):
        attrs = open_run(processed).attrs
        assert attrs["dataset"] == name and attrs["surface_variables"] == profile.variables("surface")
        assert load_run(processed, ["volume_fields"])["volume_fields"].shape[1] == \
            sum({"scalar": 1, "vector": 3}[k] for k in profile.variables("volume").values())
    for stage in (cache_data, train):
        stage.main(yaml_config(*common, name="cached"))
    [epoch] = [r for r in map(json.loads, (tmp_path / "train" / "epochs.jsonl").read_text().splitlines())
               if r["kind"] == "epoch"]
    assert np.isfinite(epoch["train_loss"]) and np.isfinite(epoch["val_loss"])
    volume = ["predict.volume=true"] if model_type == "combined" else []
    out = tmp_path / "predictions"
    predict.main(yaml_config(*common, "predict.split=val", f"predict.out_dir={out}", "predict.plot=false", *volume,
                             name="cached"))
    _check_predictions(out, tmp_path / "raw", profile, bool(volume))


def _check_predictions(out: Path, raw: Path, profile, volume: bool) -> None:
    """The raw validation run's true drag and lift are its published ones (over the constant
    references where it publishes no own ones); the predicted arrays lie on its surface rows."""
    with open(out / "predictions.csv") as file:
        [row] = list(csv.DictReader(file))
    for key in ("cd", "cl"):
        assert float(row[f"{key}_true"]) == pytest.approx(float(row[f"{key}_published"]), rel=1e-3)
        assert np.isfinite(float(row[f"{key}_pred"]))
    index = row["run"].removeprefix("run_")
    source = pv.read(raw / row["run"] / profile.files.surface.replace("{index}", index))
    written = pv.read(out / f"{row['run']}_surface.vtp")
    where, count = ((written.cell_data, source.n_cells) if profile.surface_rows.location == "cells"
                    else (written.point_data, source.n_points))
    for name, kind in profile.variables("surface").items():
        values = np.asarray(where[f"{name}_pred"])
        assert values.reshape(count, -1).shape == (count, 3 if kind == "vector" else 1), name
        assert np.isfinite(values).all()
    assert int(row["cells"]) == count
    if volume:
        grid = pv.read(out / f"{row['run']}_volume.vtu")
        assert grid.point_data[f"{profile.field('volume', 'velocity')}_pred"].shape == (grid.n_points, 3)
