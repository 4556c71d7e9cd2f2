"""predict.py on processed runs on object storage (an S3 server on 127.0.0.1, moto): the same
inputs and predictions as from the local folder, given as URLs or through ``predict.split`` with
``data.processed_dir`` a URL; a missing bucket or run refused in one line naming it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
import torch
from test_object_store_inputs import s3_processed  # noqa: F401  (the fixture)
from test_predict import model_and_factors, tiny_model_config  # noqa: F401
from conftest import DEFAULTS
from test_train import TINY

import predict
from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.inference.run_inputs import load_processed, load_prediction_run, run_kind, split_runs_of
from domino_pipeline.storage.object_store import ObjectStoreError

pytestmark = pytest.mark.slow


def test_a_run_on_s3_predicts_as_the_same_run_from_the_folder(model_and_factors, s3_processed, tiny_processed_dir):
    from domino_pipeline.compute.scaling import load_scaling_factors
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.inference.predict_runs import predict_run
    from domino_pipeline.inference.trained_model import load_trained_model

    config = load_config(tiny_model_config())
    settings = settings_from_config(config.geometry, config.variables)
    model, _ = load_trained_model(model_and_factors["model"], torch.device("cpu"))
    common = dict(scaling_factors=load_scaling_factors(model_and_factors["factors"]), geometry_points=400,
                  batch_points=1100, device=torch.device("cpu"), seed=3)
    remote = load_processed(f"{s3_processed}/run_1.zarr", volume=True)
    local = load_processed(tiny_processed_dir / "run_1.zarr", volume=True)
    assert (remote.name, remote.kind) == (local.name, local.kind) == ("run_1", "processed")
    assert list(remote.arrays) == list(local.arrays)
    for name, array in local.arrays.items():
        assert remote.arrays[name].dtype == array.dtype, name
        np.testing.assert_array_equal(remote.arrays[name], array, err_msg=name)
    for part in ("surface", "volume"):
        np.testing.assert_array_equal(remote.divisors[part], local.divisors[part])
    there, here = (predict_run(model, run, settings, **common).surface for run in (remote, local))
    assert here.shape == (len(local.arrays["surface_areas"]), 4) and np.isfinite(here).all()
    np.testing.assert_array_equal(there, here)


def _write_split(train_dir: Path, val: list[str]) -> None:
    train_dir.mkdir(parents=True, exist_ok=True)
    (train_dir / "split.json").write_text(json.dumps({"train": ["run_1.zarr"], "val": val}))


def test_a_split_names_the_runs_under_a_url_processed_dir(s3_processed, tiny_raw_dir, tmp_path):
    _write_split(tmp_path / "train", ["run_2.zarr", "run_1.zarr"])
    found = split_runs_of(tmp_path / "train", "val", tmp_path / "no_raw", s3_processed)
    assert found == [f"{s3_processed}/run_2.zarr", f"{s3_processed}/run_1.zarr"]
    assert [run_kind(run) for run in found] == ["processed", "processed"]
    # a local raw folder of the run still wins, as with a local processed_dir
    assert split_runs_of(tmp_path / "train", "val", tiny_raw_dir, s3_processed) == [
        tiny_raw_dir / "run_2", tiny_raw_dir / "run_1"]


def test_predict_py_on_the_val_split_on_s3_writes_what_the_local_runs_give(
        model_and_factors, s3_processed, tiny_processed_dir, tmp_path):
    from conftest import yaml_config

    _write_split(tmp_path / "train", ["run_2.zarr"])
    common = [*TINY, f"sampling.scaling_factors={model_and_factors['factors']}",
              f"predict.checkpoint={model_and_factors['model']}", "predict.device=cpu", "predict.plot=false",
              f"data.raw_dir={tmp_path / 'no_raw'}"]
    predict.main(yaml_config(*common, f"data.processed_dir={s3_processed}", f"predict.train_dir={tmp_path / 'train'}",
                             "predict.split=val", f"predict.out_dir={tmp_path / 'remote'}"))
    predict.main(yaml_config(*common, f"predict.runs=[{tiny_processed_dir / 'run_2.zarr'}]",
                             f"predict.out_dir={tmp_path / 'local'}"))
    remote, local = (_csv_rows(tmp_path / side / "predictions.csv") for side in ("remote", "local"))
    assert list(remote) == list(local) == ["run_2"]
    skip = {"seconds"}
    assert {k: v for k, v in remote["run_2"].items() if k not in skip} == {
        k: v for k, v in local["run_2"].items() if k not in skip}
    there, here = (pv.read(str(tmp_path / side / "run_2_surface.vtp")) for side in ("remote", "local"))
    assert "pMeanTrim_pred" in here.cell_data and list(there.cell_data) == list(here.cell_data)
    for name in here.cell_data:
        np.testing.assert_array_equal(there.cell_data[name], here.cell_data[name], err_msg=name)
    np.testing.assert_array_equal(there.points, here.points)


def _csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path) as file:
        return {row["run"]: row for row in csv.DictReader(file)}


def test_a_missing_bucket_or_run_is_named_in_one_line(s3_processed):
    options = dict(dataset=DEFAULTS.dataset, physics=None, volume=False)
    with pytest.raises(ObjectStoreError) as raised:
        load_prediction_run("s3://no-such-bucket-4c1/processed/run_1.zarr", **options)
    assert one_line(raised.value).startswith("s3://no-such-bucket-4c1/processed/run_1.zarr") and \
        "NoSuchBucket" in one_line(raised.value)
    missing = f"{s3_processed}/run_9.zarr"
    with pytest.raises(FileNotFoundError, match="run_9.zarr: no processed run there") as raised:
        load_prediction_run(missing, **options)
    assert one_line(raised.value) == f"{missing}: no processed run there"
    with pytest.raises(ValueError, match="STL file on object storage"):
        load_prediction_run(f"{s3_processed}/car.stl", **options)
