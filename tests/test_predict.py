"""predict.py on tiny runs: the VTP it writes, drag against an independent integration of the raw
VTP, STL-only runs, batching that does not change the result; the force integration itself."""

from __future__ import annotations

import csv
import json
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
import torch
from conftest import import_benchmark
from omegaconf import OmegaConf
from test_train import TINY

from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.training.domino_model import build_model
from domino_pipeline.compute.scaling import (
    compute_scaling_factors,
    save_scaling_factors,
)
from domino_pipeline.inference.forces import ForceConvention, force_coefficients
from domino_pipeline.inputs.meshes.cell_geometry import polygon_vector_areas
from domino_pipeline.processed.runs import list_runs

ROOT = Path(__file__).resolve().parents[1]
# the orientation of synthetic_data.py's DrivAerML runs: the profile's (OpenFOAM's, as published)
PROFILE_FLOW = compose_files(ROOT / "conf", "demo").dataset.flow
# a tiny combined model: its volume ball queries sized for the tiny runs
COMBINED = ("model_type=combined", "model.geometry_rep.geo_conv.volume_neighbors_in_radius=[8,8,16,16]",
            "model.geometry_local.volume_neighbors_in_radius=[8,16]")


def tiny_model_config(*extra: str):
    base = compose_files(ROOT / "conf", "config")
    return OmegaConf.merge(base, OmegaConf.from_dotlist([*TINY, *extra]))


@pytest.fixture(scope="module")
def model_and_factors(tiny_processed_dir: Path, tmp_path_factory) -> dict[str, Path]:
    """An untrained tiny surface DoMINO saved with physicsnemo's Module.save, and scaling factors:
    prediction needs a model, not a good one."""
    work = tmp_path_factory.mktemp("predict")
    factors = save_scaling_factors(work / "scaling_factors.json", compute_scaling_factors(list_runs(tiny_processed_dir)))
    torch.manual_seed(0)
    model = build_model("surface", OmegaConf.to_container(tiny_model_config().model, resolve=True), torch.device("cpu"))
    model.save(str(work / "model.mdlus"))
    return {"model": work / "model.mdlus", "factors": factors, "work": work}


def predict_command(paths: dict[str, Path], runs: list[Path], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "predict.py", *TINY, f"sampling.scaling_factors={paths['factors']}",
            f"predict.checkpoint={paths['model']}", f"predict.runs=[{','.join(map(str, runs))}]",
            f"predict.out_dir={out}", *extra]


def own_area(run_dir: Path) -> float:
    """The run's own reference area, aRef of its geo_ref_<i>.csv."""
    with open(run_dir / f"geo_ref_{run_dir.name.removeprefix('run_')}.csv") as file:
        return float(next(csv.DictReader(file, skipinitialspace=True))["aRef"])


def independent_drag(vtp: Path, free_stream_velocity: float, reference_area: float) -> float:
    """C_d of a raw VTP: each cell's vector area as a sum over a fan of triangles, one cell at a
    time; kinematic pressure and shear over 0.5 U^2; normals and shear as PROFILE_FLOW says."""
    outward = 1.0 if PROFILE_FLOW.normals == "out_of_body" else -1.0
    on_body = 1.0 if PROFILE_FLOW.wall_shear == "on_body" else -1.0
    mesh = pv.read(str(vtp))
    pressure = np.asarray(mesh.cell_data["pMeanTrim"], dtype=np.float64)
    shear_x = np.asarray(mesh.cell_data["wallShearStressMeanTrim"], dtype=np.float64)[:, 0]
    force_x = 0.0
    for i in range(mesh.n_cells):
        corners = np.asarray(mesh.get_cell(i).points, dtype=np.float64)
        vector_area = sum(0.5 * np.cross(corners[k] - corners[0], corners[k + 1] - corners[0])
                          for k in range(1, len(corners) - 1))
        force_x += -pressure[i] * outward * vector_area[0] + on_body * shear_x[i] * np.linalg.norm(vector_area)
    return force_x / (0.5 * free_stream_velocity**2) / reference_area


@pytest.fixture(scope="module")
def predicted(model_and_factors, tiny_raw_dir: Path) -> dict[str, Path]:
    out = model_and_factors["work"] / "out"
    runs = [tiny_raw_dir / "run_1", tiny_raw_dir / "run_2" / "drivaer_2.stl"]
    result = subprocess.run(predict_command(model_and_factors, runs, out, "predict.batch_points=700"),
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"out": out, "text": result.stdout}


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path) as file:
        return {row["run"]: row for row in csv.DictReader(file)}


@pytest.mark.slow
def test_predict_writes_the_surface_with_predicted_arrays_beside_the_true_ones(predicted, tiny_raw_dir):
    raw = pv.read(str(tiny_raw_dir / "run_1" / "boundary_1.vtp"))
    written = pv.read(str(predicted["out"] / "run_1_surface.vtp"))
    assert written.n_cells == raw.n_cells
    for name, width in (("pMeanTrim", 1), ("wallShearStressMeanTrim", 3)):
        np.testing.assert_array_equal(written.cell_data[name], raw.cell_data[name])
        values = np.asarray(written.cell_data[f"{name}_pred"])
        assert values.reshape(raw.n_cells, -1).shape == (raw.n_cells, width)
        assert np.isfinite(values).all()
    assert (predicted["out"] / "run_1_pressure.png").stat().st_size > 0
    assert "cd_true" in predicted["text"] and "run_1" in predicted["text"]


@pytest.mark.slow
def test_the_true_drag_is_the_integral_of_the_raw_vtp(predicted, tiny_raw_dir):
    flow = compose_files(ROOT / "conf", "config").dataset.flow
    row = read_csv(predicted["out"] / "predictions.csv")["run_1"]
    area = own_area(tiny_raw_dir / "run_1")
    expected = independent_drag(tiny_raw_dir / "run_1" / "boundary_1.vtp", flow.velocity, area)
    assert expected > 0.05  # a car's drag, with the synthetic runs' convention
    assert float(row["cd_true"]) == pytest.approx(expected, rel=1e-6)
    assert int(row["cells"]) == pv.read(str(tiny_raw_dir / "run_1" / "boundary_1.vtp")).n_cells
    assert int(row["cells_not_predicted"]) == 0 and float(row["a_ref"]) == area
    assert float(row["cd_published"]) == pytest.approx(expected, rel=1e-3)  # the run's force_mom_1.csv
    for name in ("pMeanTrim", "wallShearStressMeanTrim_x", "wallShearStressMeanTrim_y", "wallShearStressMeanTrim_z"):
        assert np.isfinite(float(row[f"rel_l2_{name}"]))


@pytest.mark.slow
def test_an_stl_alone_gets_predictions_on_its_triangles(predicted, tiny_raw_dir):
    stl = pv.read(str(tiny_raw_dir / "run_2" / "drivaer_2.stl"))
    written = pv.read(str(predicted["out"] / "drivaer_2_surface.vtp"))
    assert written.n_cells == stl.n_cells and "pMeanTrim" not in written.cell_data
    assert np.isfinite(written.cell_data["pMeanTrim_pred"]).all()
    row = read_csv(predicted["out"] / "predictions.csv")["drivaer_2"]
    assert row["cd_true"] == "" and np.isfinite(float(row["cd_pred"]))


@pytest.mark.slow
def test_batches_do_not_change_the_prediction(model_and_factors, tiny_processed_dir):
    from domino_pipeline.compute.scaling import load_scaling_factors
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.inference.predict_runs import predict_run
    from domino_pipeline.inference.run_inputs import load_processed
    from domino_pipeline.inference.trained_model import load_trained_model

    cfg = tiny_model_config()
    model, _ = load_trained_model(model_and_factors["model"], torch.device("cpu"))
    run = load_processed(tiny_processed_dir / "run_1.zarr", volume=False)
    common = dict(scaling_factors=load_scaling_factors(model_and_factors["factors"]), geometry_points=400,
                  device=torch.device("cpu"))
    settings = settings_from_config(load_config(cfg).geometry, load_config(cfg).variables)
    whole = predict_run(model, run, settings, batch_points=100_000, **common).surface
    batched = predict_run(model, run, settings, batch_points=1100, **common).surface
    assert whole.shape == (len(run.arrays["surface_areas"]), 4) and np.isfinite(whole).all()
    np.testing.assert_allclose(batched, whole, rtol=1e-5, atol=1e-6)


# ---- the force integration ----

def cube(half: float = 0.5):
    """A cube's 6 faces as quads wound out of it, the -x face first."""
    points = np.array([[x, y, z] for x in (-half, half) for y in (-half, half) for z in (-half, half)])
    faces = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]]
    offsets = np.arange(0, 4 * 7, 4)
    return points, offsets, np.array(faces).ravel()


def test_forces_on_a_cube():
    points, offsets, connectivity = cube()
    vector_areas = polygon_vector_areas(points, offsets, connectivity)
    np.testing.assert_allclose(vector_areas[:2], [[-1, 0, 0], [1, 0, 0]])  # -x face, +x face: area 1, outward
    areas = np.linalg.norm(vector_areas, axis=1)
    outward = ForceConvention(normals="out_of_body", wall_shear="on_body")
    # pressure 1 on the front (-x) face only pushes the cube along +x: F_x = 1, C_d = F_x / (q A_ref)
    pressure = np.array([1.0, 0, 0, 0, 0, 0])
    no_shear = np.zeros((6, 3))
    half = dict(dynamic_pressure=0.5)
    assert force_coefficients(pressure, no_shear, vector_areas, areas, reference_area=4.0, convention=outward,
                              **half) == {"cd": 0.5, "cl": 0.0}
    # a uniform pressure gives no force; shear 0.25 along +x on every face drags with 6 x 0.25
    shear = np.tile([0.25, 0.0, 0.0], (6, 1))
    got = force_coefficients(np.full(6, 3.0), shear, vector_areas, areas, reference_area=1.0, convention=outward, **half)
    assert got["cd"] == pytest.approx(2 * 1.5) and got["cl"] == pytest.approx(0.0)
    # the same physics in OpenFOAM's convention: normals into the car, shear on the fluid
    openfoam = ForceConvention()
    assert force_coefficients(pressure, -shear, -vector_areas, areas, reference_area=1.0, convention=openfoam, **half)["cd"] == \
        pytest.approx(force_coefficients(pressure, shear, vector_areas, areas, reference_area=1.0, convention=outward, **half)["cd"])


@pytest.mark.slow
def test_a_combined_model_predicts_the_volume_points_too(model_and_factors, tiny_processed_dir):
    from domino_pipeline.compute.scaling import load_scaling_factors
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.inference.forces import ForceSettings
    from domino_pipeline.inputs.processing.published_forces import References
    from domino_pipeline.inference.predict_runs import (
        predict_run,
        run_record,
        write_run_outputs,
    )
    from domino_pipeline.inference.run_inputs import load_processed, point_cloud

    cfg = tiny_model_config(*COMBINED)
    torch.manual_seed(1)
    model = build_model("combined", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu")).eval()
    run = load_processed(tiny_processed_dir / "run_1.zarr", volume=True)
    for name in ("volume_mesh_centers", "volume_fields"):  # a quarter of the volume: one model pass
        run.arrays[name] = run.arrays[name][::4]
    run.volume_mesh = point_cloud(run.arrays["volume_mesh_centers"], "unstructured")
    settings = settings_from_config(load_config(cfg).geometry, load_config(cfg).variables)
    prediction = predict_run(model, run, settings, scaling_factors=load_scaling_factors(model_and_factors["factors"]),
                             geometry_points=400, batch_points=3000, device=torch.device("cpu"), volume=True)
    count = len(run.arrays["volume_mesh_centers"])
    assert prediction.volume.shape == (count, 5) and prediction.surface.shape == (len(run.arrays["surface_areas"]), 4)
    lo, hi = (np.asarray(b) for b in settings.bounding_box_volume)
    inside = np.all((run.arrays["volume_mesh_centers"] > lo) & (run.arrays["volume_mesh_centers"] < hi), axis=1)
    assert np.isfinite(prediction.volume[inside]).all() and np.isnan(prediction.volume[~inside]).all()
    config = load_config(cfg)
    variables = {"surface": config.variables.surface, "volume": config.variables.volume}
    record = run_record(run, prediction, variables=variables,
                        forces=ForceSettings(References(2.0, 2.8, (1.4, 0.0, -0.3)), velocity=38.89,
                                             convention=ForceConvention(),
                                             pressure="pMeanTrim", wall_shear_stress="wallShearStressMeanTrim"))
    assert np.isfinite(record["rel_l2_volume_UMeanTrim_x"]) and np.isfinite(record["cd_true"])
    out = model_and_factors["work"] / "combined"
    write_run_outputs(run, prediction, variables=variables, out_dir=out, plot=False, record=record, pressure="pMeanTrim")
    volume = pv.read(str(out / "run_1_volume.vtu"))
    assert volume.n_points == count
    assert volume.point_data["UMeanTrim_pred"].shape == (count, 3) and "nutMeanTrim" in volume.point_data


def _encoded_against_forward(model: torch.nn.Module, cfg, run, parts: tuple[str, ...], batches) -> None:
    """Each batch's outputs through ``EncodedDoMINO`` (one geometry encoding for the run) equal
    those of ``model(batch)``, the volume's drawn from the same seed."""
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.inference.full_resolution import (
        BatchItems,
        EncodedDoMINO,
        prepare_run,
    )

    assert EncodedDoMINO.supports(model)
    settings = settings_from_config(load_config(cfg).geometry, load_config(cfg).variables)
    items = BatchItems(prepare_run(run.arrays, settings, parts=parts, source="run_1"), settings,
                       parts=parts, geometry_points=400)
    encoded = EncodedDoMINO(model)
    with torch.no_grad():
        for rows, window in batches:  # the second batch reuses the first's encodings
            batch = items.item(rows, window)
            torch.manual_seed(3)
            volume, surface = model(batch)
            if "volume" in parts:
                torch.manual_seed(3)
                torch.testing.assert_close(encoded.volume(batch), volume, rtol=0, atol=1e-6)
            if "surface" in parts:
                torch.testing.assert_close(encoded.surface(batch), surface, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_one_geometry_encoding_per_run_equals_the_forward_pass(model_and_factors, tiny_processed_dir):
    from domino_pipeline.inference.run_inputs import load_processed
    from domino_pipeline.inference.trained_model import load_trained_model

    model, _ = load_trained_model(model_and_factors["model"], torch.device("cpu"))
    run = load_processed(tiny_processed_dir / "run_1.zarr", volume=False)
    _encoded_against_forward(model, tiny_model_config(), run, ("surface",),
                             [(np.arange(0, 500), None), (np.arange(500, 700), None)])


@pytest.mark.parametrize("combine", [False, True])
@pytest.mark.slow
def test_one_geometry_encoding_per_run_equals_the_forward_pass_of_a_combined_model(tiny_processed_dir, combine):
    from domino_pipeline.inference.run_inputs import load_processed

    cfg = tiny_model_config(*COMBINED, f"model.combine_volume_surface={str(combine).lower()}")
    torch.manual_seed(1)
    model = build_model("combined", OmegaConf.to_container(cfg.model, resolve=True), torch.device("cpu")).eval()
    run = load_processed(tiny_processed_dir / "run_1.zarr", volume=True)
    _encoded_against_forward(model, cfg, run, ("surface", "volume"),
                             [(np.arange(0, 500), (0, 300)), (np.arange(500, 700), (300, 400))])


def test_the_full_run_benchmark_reads_the_surface_progress_bar():
    from domino_pipeline.inference.predict_runs import progress_bar

    stream = io.StringIO()
    with progress_bar("run_1", "surface", 8_800_000, file=stream) as bar:
        for done in (8192, 3_700_000):
            bar.update(done - bar.n)
            bar.refresh()
    output = stream.getvalue()
    assert "cells/s" in output
    assert import_benchmark("benchmark_full_run")._cells_done(output.encode()) == (3_700_000, 8_800_000)


def test_relative_l2_per_cell_and_area_weighted():
    from domino_pipeline.inference.report import relative_l2

    true = np.array([[3.0], [4.0], [1.0]])
    predicted = np.array([[3.0], [4.0 + 5.0], [np.nan]])  # the third row was not predicted
    np.testing.assert_allclose(relative_l2(predicted, true), [1.0])
    # weights 4 and 1: sqrt(1 * 25) / sqrt(4 * 9 + 1 * 16)
    np.testing.assert_allclose(relative_l2(predicted, true, weights=np.array([4.0, 1.0, 7.0])), [5.0 / np.sqrt(52.0)])


def test_volume_batches_share_one_warp_mesh_and_match_the_whole_run(tiny_processed_dir, monkeypatch):
    from domino_pipeline.compute import geometry
    from domino_pipeline.compute.preprocessing import volume_sdf
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.inference.full_resolution import BatchItems, prepare_run, row_batches
    from domino_pipeline.inference.run_inputs import load_processed

    from domino_pipeline.configuration.config import load_config

    config = load_config(tiny_model_config())
    settings = settings_from_config(config.geometry, config.variables)
    run = load_processed(tiny_processed_dir / "run_1.zarr", volume=True)
    prepared = prepare_run(run.arrays, settings, parts=("volume",), source="run_1")
    built, original = [], geometry.SdfMesh.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(geometry.SdfMesh, "__init__", counting)
    items = BatchItems(prepared, settings, parts=("volume",), geometry_points=400)
    before = len(built)  # the two grid SDFs and the run's volume mesh
    windows = row_batches(len(prepared.volume_coordinates), len(prepared.volume_coordinates) // 4)
    assert len(windows) >= 4
    sdf = np.concatenate([items.volume(window)["sdf"] for window in windows])
    assert len(built) == before  # no mesh per batch
    np.testing.assert_array_equal(sdf, volume_sdf(prepared, settings)[0])


def test_the_test_split_names_the_runs_held_out_of_training_and_validation(tmp_path):
    from domino_pipeline.inference.run_inputs import split_runs_of
    (tmp_path / "raw" / "run_3").mkdir(parents=True)
    (tmp_path / "split.json").write_text(json.dumps({"train": ["run_1.zarr"], "val": ["run_2.zarr"],
                                                     "test": ["run_3.zarr", "run_4.zarr"]}))
    assert split_runs_of(tmp_path, "test", tmp_path / "raw", tmp_path / "processed") == [
        tmp_path / "raw" / "run_3", tmp_path / "processed" / "run_4.zarr"]
    (tmp_path / "split.json").write_text(json.dumps({"train": ["run_1.zarr"], "val": ["run_2.zarr"]}))
    with pytest.raises(ValueError, match="split.json: the test split is empty \\(train with train.test_fraction"):
        split_runs_of(tmp_path, "test", tmp_path / "raw", tmp_path / "processed")
