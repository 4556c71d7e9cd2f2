"""Runs of one part (``process.parts=surface``, or ``volume``) through every stage: processed
without the other part's arrays (no byte of its file read), cached without its arrays and work,
scaling factors of the part alone, drawn and predicted; a model that needs the missing part is
refused before its first step, naming what is missing. Each stage's output is checked against
the same stage run on the whole runs (the established path), array by array."""

from __future__ import annotations

import builtins
import csv
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from cache_fixtures import SAMPLES, build_tiny_cache, read_cache_arrays, tiny_settings
from conftest import PROCESS_OPTIONS, VARIABLES, typed_config, yaml_config
from curator_fixtures import write_curator_zarr
from omegaconf import OmegaConf

from domino_pipeline.compute.scaling import check_factors_match, compute_scaling_factors, scale_fields
from domino_pipeline.inputs.meshes import surface_stream, volume_stream, vtk_reader
from domino_pipeline.inputs.raw_files import concat_bytes
from domino_pipeline.inputs.processing.process_runs import process_all, process_run
from domino_pipeline.processed.run_layout import (
    ProcessedRunError,
    arrays_for,
    write_processed_run,
)
from domino_pipeline.processed.runs import list_runs, load_run, open_run, require_parts, run_parts
from domino_pipeline.store.cache_format import CacheError, layout_arrays
from domino_pipeline.store.manifest import manifest_scaling_factors, read_manifest
from domino_pipeline.store.validate import validate_cache

SURFACE = replace(PROCESS_OPTIONS, parts="surface")
VOLUME = replace(PROCESS_OPTIONS, parts="volume")
BOXES = {"bounding_box_volume": tiny_settings().bounding_box_volume,
         "bounding_box_surface": tiny_settings().bounding_box_surface}


def _without(raw_dir: Path, out: Path, pattern: str) -> Path:
    """A copy of the synthetic runs of ``raw_dir`` with the files matching ``pattern`` deleted:
    runs published without a volume (or a surface)."""
    shutil.copytree(raw_dir, out)
    for path in out.glob(f"run_*/{pattern}"):
        path.unlink()
    return out


@pytest.fixture(scope="module")
def surface_raw(tiny_raw_dir: Path, tmp_path_factory) -> Path:
    """The tiny runs without their volume files."""
    return _without(tiny_raw_dir, tmp_path_factory.mktemp("surface") / "raw", "volume_*.vtu*")  # its pieces


@pytest.fixture(scope="module")
def surface_processed(surface_raw: Path) -> Path:
    out = surface_raw.parent / "processed"
    results = process_all(surface_raw, out, SURFACE)
    assert [r.status for r in results] == ["processed", "processed"], results
    return out


@pytest.fixture(scope="module")
def surface_cache(surface_processed: Path) -> Path:
    return build_tiny_cache(surface_processed, surface_processed.parent / "cache", tiny_settings(parts=("surface",)))


# ---- processing ----

def test_a_run_without_a_volume_is_processed_with_the_surface_arrays_of_the_whole_run(
        surface_processed: Path, tiny_processed_dir: Path) -> None:
    for name in ("run_1", "run_2"):
        run = open_run(surface_processed / f"{name}.zarr")
        assert run_parts(run) == ("surface",) and run.attrs["parts"] == "surface"
        assert not any(array.startswith("volume_") for array in run.arrays)
        assert set(run.attrs["sources"]) == {"stl", "surface"} and "volume_points" not in run.attrs["counts"]
        got = load_run(surface_processed / f"{name}.zarr")  # every array the run's parts have
        want = load_run(tiny_processed_dir / f"{name}.zarr", arrays_for(("surface",)))
        assert sorted(got) == sorted(want)
        for array in want:
            np.testing.assert_array_equal(got[array], want[array], err_msg=array)
        assert run.attrs["bounds"]["surface"] == open_run(tiny_processed_dir / f"{name}.zarr").attrs["bounds"]["surface"]
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: missing arrays \['volume_fields'\] \(processed with "
                                                 r"process.parts=surface, without volume arrays"):
        load_run(surface_processed / "run_1.zarr", ["volume_fields"])


def test_a_missing_volume_stays_an_error_under_the_default_setting(surface_raw: Path, tmp_path: Path) -> None:
    results = process_all(surface_raw, tmp_path / "processed", PROCESS_OPTIONS)
    assert [r.status for r in results] == ["failed", "failed"]
    assert results[0].message == (f"{surface_raw / 'run_1' / 'volume_1.vtu'}: missing file (dataset.files.volume; "
                                  "process.parts=surface leaves the volume out)")
    again = process_all(surface_raw, tmp_path / "surface", SURFACE)
    assert [r.status for r in again] == ["processed", "processed"]
    rerun = process_all(surface_raw, tmp_path / "surface", PROCESS_OPTIONS)  # the settings changed
    assert "parts: stored 'surface', configured 'all'" in rerun[0].message


class Opened:
    """Every path opened while installed: by Python (os.open: the byte source's pread reader;
    builtins.open: numpy's files and the rest), by VTK's readers (through
    vtk_reader.open_reader) and by the byte source itself (ConcatBytes)."""

    def __init__(self, monkeypatch) -> None:
        self.paths: list[str] = []
        for module, name in ((os, "open"), (builtins, "open"), (vtk_reader, "open_reader")):
            monkeypatch.setattr(module, name, self._recording(getattr(module, name)))
        original = concat_bytes.ConcatBytes.__init__

        def concat(stream, paths):
            self.paths += [str(p) for p in paths]
            original(stream, paths)
        monkeypatch.setattr(concat_bytes.ConcatBytes, "__init__", concat)

    def _recording(self, function):
        def recorded(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                self.paths.append(os.fspath(path))
            return function(path, *args, **kwargs)
        return recorded

    def under(self, path: Path) -> list[str]:
        return [p for p in self.paths if Path(p).resolve().as_posix().startswith(path.resolve().as_posix())]


def test_surface_parts_read_no_byte_of_the_volume(tiny_raw_dir: Path, tmp_path: Path, monkeypatch) -> None:
    volume = tiny_raw_dir / "run_1" / "volume_1.vtu"
    opened = Opened(monkeypatch)
    process_run(tiny_raw_dir / "run_1", tmp_path / "surface.zarr", SURFACE)
    assert opened.under(tiny_raw_dir / "run_1" / "boundary_1.vtp")  # the recording sees the files read
    assert opened.under(volume) == []
    process_run(tiny_raw_dir / "run_1", tmp_path / "all.zarr", PROCESS_OPTIONS)  # the control: it sees a volume read
    assert opened.under(volume)


def test_the_layout_accepts_runs_of_one_part_and_refuses_arrays_of_another(surface_processed, tmp_path) -> None:
    arrays = load_run(surface_processed / "run_1.zarr")
    with pytest.raises(ProcessedRunError, match=r"run_9.zarr: missing arrays \['volume_mesh_centers', 'volume_fields'\]"):
        write_processed_run(tmp_path / "run_9.zarr", arrays, {})  # "all" by default: the volume is required
    volume = {"volume_mesh_centers": np.zeros((3, 3), np.float32), "volume_fields": np.zeros((3, 5), np.float32)}
    with pytest.raises(ProcessedRunError, match=r"arrays \['volume_mesh_centers', 'volume_fields'\] given, but the "
                                                r"run records parts='surface'"):
        write_processed_run(tmp_path / "run_9.zarr", arrays | volume, {"parts": "surface"})
    curator = write_curator_zarr(tmp_path / "run_1.zarr", arrays, zarr_format=3)  # a curator run without volume
    opened = open_run(curator)
    assert opened.format == "curator-zarr-v3" and run_parts(opened) == ("surface",)
    assert sorted(load_run(curator)) == sorted(arrays)
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: a curator-zarr-v3 run, without volume arrays; "
                                                r"model_type=combined needs volume_mesh_centers, volume_fields"):
        require_parts(curator, ("surface", "volume"), "model_type=combined")


# ---- the cache, its factors, the datasets ----

def test_a_surface_only_cache_is_the_whole_cache_without_its_volume(surface_cache: Path, cache_dir: Path) -> None:
    got, want = read_cache_arrays(surface_cache), read_cache_arrays(cache_dir)
    names = set(layout_arrays("indices", ("surface",)))
    assert names == {n for n in layout_arrays("indices") if not n.startswith("volume_")}
    for run in ("run_1", "run_2"):
        assert set(got[run]) == names
        assert not [p for p in (surface_cache / run).glob("g*.zarr/volume_*")]
        for name in names:
            np.testing.assert_array_equal(got[run][name], want[run][name], err_msg=f"{run}/{name}")
    manifest = read_manifest(surface_cache)
    assert manifest["parts"] == ["surface"] and manifest["settings"]["parts"] == ["surface"]
    assert set(manifest["arrays"]) == names and "volume" not in manifest["runs"]["run_1"]["counts"]
    factors, whole = manifest_scaling_factors(surface_cache), manifest_scaling_factors(cache_dir)
    assert "volume" not in factors and list(factors["variables"]) == ["surface"]
    assert factors["surface"] == whole["surface"]
    assert [r.status for r in validate_cache(list_runs(surface_cache.parent / "processed"), surface_cache,
                                             tiny_settings(parts=("surface",)))] == ["ok", "ok"]


def test_a_surface_only_cache_of_whole_runs_reads_none_of_their_volume(tiny_processed_dir, surface_cache, tmp_path,
                                                                       monkeypatch) -> None:
    from domino_pipeline.processed import runs

    def refuse(self, selection):
        raise AssertionError(f"read {self.name}")
    monkeypatch.setattr(runs.NamedArray, "__getitem__", refuse)  # how a build reads volume rows
    built = build_tiny_cache(tiny_processed_dir, tmp_path / "cache", tiny_settings(parts=("surface",)))
    got, want = read_cache_arrays(built), read_cache_arrays(surface_cache)
    for run in want:
        for name in want[run]:
            np.testing.assert_array_equal(got[run][name], want[run][name], err_msg=f"{run}/{name}")


def _items(dataset, n: int = 2) -> list[dict[str, torch.Tensor]]:
    dataset.set_epoch(1)
    return [dataset[i] for i in range(n)]


def _assert_same_items(left: list[dict], right: list[dict]) -> None:
    for a, b in zip(left, right):
        assert sorted(a) == sorted(b)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


def test_a_surface_model_draws_the_same_items_from_either_cache(surface_cache: Path, cache_dir: Path) -> None:
    from datapipe import CachedDoMINODataset

    got = _items(CachedDoMINODataset(surface_cache, model_type="surface", **SAMPLES))
    want = _items(CachedDoMINODataset(cache_dir, model_type="surface", **SAMPLES))
    assert "surface_fields" in got[0] and "volume_fields" not in got[0]
    _assert_same_items(got, want)


@pytest.mark.parametrize("model_type", ["volume", "combined"])
def test_a_cache_without_volume_refuses_a_model_that_needs_it(surface_cache: Path, model_type: str) -> None:
    from datapipe import CachedDoMINODataset

    with pytest.raises(CacheError, match=rf"cache {surface_cache}: built without volume parts \(process.parts="
                                         rf"surface\); model_type={model_type} needs volume_grid_sdf, "
                                         r"volume_coordinates, volume_fields, volume_sdf, volume_closest"):
        CachedDoMINODataset(surface_cache, model_type=model_type, **SAMPLES)


def _datapipe(processed: Path, model_type: str, **changes):
    from datapipe import DoMINODataPipe

    return DoMINODataPipe(processed, model_type=model_type, **SAMPLES, **BOXES, interp_res=(16, 8, 8),
                          device="cpu", **VARIABLES, **changes)


def test_the_uncached_datapipe_draws_surface_only_runs_and_refuses_a_volume_model(surface_processed,
                                                                                 tiny_processed_dir) -> None:
    _assert_same_items(_items(_datapipe(surface_processed, "surface")), _items(_datapipe(tiny_processed_dir, "surface")))
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: processed with process.parts=surface, without volume "
                                                r"arrays; model_type=combined needs volume_mesh_centers, volume_fields"):
        _datapipe(surface_processed, "combined")


def test_scaling_factors_of_surface_only_runs_are_the_surface_ones(surface_processed, tiny_processed_dir) -> None:
    variables = {"surface": VARIABLES["surface_variables"], "volume": VARIABLES["volume_variables"]}
    factors = compute_scaling_factors(list_runs(surface_processed), variables=variables)
    whole = compute_scaling_factors(list_runs(tiny_processed_dir), variables=variables)
    assert "volume" not in factors and factors["surface"] == whole["surface"]
    assert factors["variables"] == {"surface": whole["variables"]["surface"]}
    check_factors_match(factors, variables["surface"], variables["volume"], "here", ("surface",))
    with pytest.raises(ValueError, match=r"here: the scaling factors have no volume part"):
        check_factors_match(factors, variables["surface"], variables["volume"], "here", ("surface", "volume"))
    with pytest.raises(ValueError, match=r"the scaling factors have no volume part \(they hold \['surface'\]\)"):
        scale_fields(np.zeros((1, 5)), factors, "volume")


@pytest.mark.slow
def test_volume_parts_fall_out_the_same_way(tiny_raw_dir: Path, cache_dir: Path, tmp_path: Path) -> None:
    from datapipe import CachedDoMINODataset

    raw = _without(tiny_raw_dir, tmp_path / "raw", "boundary_*.vtp")
    assert [r.status for r in process_all(raw, tmp_path / "processed", VOLUME)] == ["processed", "processed"]
    assert not any(n.startswith("surface_") for n in open_run(tmp_path / "processed" / "run_1.zarr").arrays)
    cache = build_tiny_cache(tmp_path / "processed", tmp_path / "cache", tiny_settings(parts=("volume",)))
    got, want = read_cache_arrays(cache), read_cache_arrays(cache_dir)
    for run in want:
        assert set(got[run]) == set(layout_arrays("indices", ("volume",)))
        for name in got[run]:
            np.testing.assert_array_equal(got[run][name], want[run][name], err_msg=f"{run}/{name}")
    _assert_same_items(_items(CachedDoMINODataset(cache, model_type="volume", **SAMPLES)),
                       _items(CachedDoMINODataset(cache_dir, model_type="volume", **SAMPLES)))
    with pytest.raises(CacheError, match=r"built without surface parts \(process.parts=volume\); model_type=surface"):
        CachedDoMINODataset(cache, model_type="surface", **SAMPLES)


# ---- prediction: a raw run is read as process_data.py reads it ----

def _predict(run, model, factors) -> np.ndarray:
    from domino_pipeline.inference.predict_runs import predict_run

    settings = tiny_settings()
    return predict_run(model, run, settings, scaling_factors=factors, geometry_points=400, batch_points=2000,
                       device=torch.device("cpu")).surface


@pytest.fixture(scope="module")
def surface_model():
    from test_predict import tiny_model_config

    from domino_pipeline.training.domino_model import build_model

    torch.manual_seed(0)
    config = OmegaConf.to_container(tiny_model_config().model, resolve=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest on a shared machine
    yield build_model("surface", config, torch.device("cpu")).eval()
    torch.set_num_threads(threads)


def _physics():
    from domino_pipeline.inference.run_inputs import Physics

    physics = typed_config().physics
    return Physics(physics.stream_velocity, physics.air_density, physics.reference_length)


def _assert_same_run(got, want) -> None:
    assert sorted(got.arrays) == sorted(want.arrays)
    for name in want.arrays:
        np.testing.assert_array_equal(got.arrays[name], want.arrays[name], err_msg=name)
    for part in ("surface", "volume"):
        np.testing.assert_array_equal(got.divisors[part], want.divisors[part])
    np.testing.assert_array_equal(got.true_surface, want.true_surface)


@pytest.mark.slow
def test_predicting_a_raw_run_equals_predicting_its_processed_run(tiny_raw_dir, tiny_processed_dir, surface_model,
                                                                 monkeypatch) -> None:
    from domino_pipeline.inference.run_inputs import load_prediction_run

    def whole(*args, **kwargs):
        raise AssertionError("a mesh read whole")
    for module, name in ((vtk_reader, "read_volume"), (volume_stream, "read_volume"),
                         (vtk_reader, "read_surface"), (surface_stream, "read_surface")):
        monkeypatch.setattr(module, name, whole)  # a raw run's volume and surface are read in blocks
    profile = typed_config().dataset
    raw = load_prediction_run(tiny_raw_dir / "run_1", dataset=profile, physics=_physics(), volume=True)
    processed = load_prediction_run(tiny_processed_dir / "run_1.zarr", dataset=profile, physics=_physics(), volume=True)
    _assert_same_run(raw, processed)
    assert raw.surface_mesh.n_cells == len(raw.arrays["surface_areas"])  # the run's VTP, for the predictions
    factors = compute_scaling_factors(list_runs(tiny_processed_dir))
    np.testing.assert_array_equal(_predict(raw, surface_model, factors), _predict(processed, surface_model, factors))


@pytest.mark.slow
def test_a_raw_run_without_a_volume_is_predicted_on_its_surface(surface_raw, surface_processed, surface_model) -> None:
    from domino_pipeline.inference.run_inputs import load_prediction_run

    profile = typed_config().dataset
    raw = load_prediction_run(surface_raw / "run_2", dataset=profile, physics=_physics(), volume=False)
    processed = load_prediction_run(surface_processed / "run_2.zarr", dataset=profile, physics=_physics(), volume=False)
    _assert_same_run(raw, processed)
    factors = compute_scaling_factors(list_runs(surface_processed))
    predicted = _predict(raw, surface_model, factors)
    assert np.isfinite(predicted).any()
    np.testing.assert_array_equal(predicted, _predict(processed, surface_model, factors))
    with pytest.raises(ProcessedRunError, match=r"run_2.zarr: processed with process.parts=surface, without volume "
                                                r"arrays; predict.volume=true needs volume_mesh_centers, volume_fields"):
        load_prediction_run(surface_processed / "run_2.zarr", dataset=profile, physics=_physics(), volume=True)


# ---- every stage, through its entry point ----

def _rows(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "predictions.csv") as file:
        return list(csv.DictReader(file))


@pytest.mark.slow
def test_process_cache_train_and_predict_a_dataset_published_without_volumes(surface_raw, tmp_path, capsys) -> None:
    """The README's surface-only commands in this process: process_data.py, cache_data.py and
    train.py with process.parts=surface, then predict.py on the validation run's raw folder (no
    volume) and on its processed run; a combined model is refused before its first step."""
    import cache_data
    import predict
    import process_data
    import train
    from test_train import TINY

    common = [f"data.raw_dir={surface_raw}", f"data.processed_dir={tmp_path / 'processed'}",
              f"cache.dir={tmp_path / 'cache'}", "process.parts=surface", "process.num_processes=1", *TINY,
              f"output_dir={tmp_path / 'train'}", "train.epochs=1", "train.val_fraction=0.5"]
    for stage in (process_data, cache_data, train):
        stage.main(yaml_config(*common, name="cached"))
    assert read_manifest(tmp_path / "cache")["parts"] == ["surface"]
    assert (tmp_path / "train" / "checkpoints" / "model_best.mdlus").is_file()
    predict.main(yaml_config(*common, "predict.split=val", "predict.plot=false", name="cached"))
    (raw_row,) = _rows(tmp_path / "train" / "predictions")
    assert (tmp_path / "train" / "predictions" / f"{raw_row['run']}_surface.vtp").is_file()
    processed = tmp_path / "processed" / f"{raw_row['run']}.zarr"
    predict.main(yaml_config(*common, f"predict.runs=[{processed}]", "predict.plot=false",
                             f"predict.out_dir={tmp_path / 'from_processed'}", name="cached"))
    (processed_row,) = _rows(tmp_path / "from_processed")
    for column in ("cells", "rel_l2_pMeanTrim", "rel_l2_wallShearStressMeanTrim_x"):  # the same predictions
        assert raw_row[column] == processed_row[column], column
    for column in ("cd_pred", "cd_true"):  # the VTP's own face areas, or the processed run's
        assert float(raw_row[column]) == pytest.approx(float(processed_row[column]), rel=1e-5)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        train.main(yaml_config(*common, "model_type=combined", f"output_dir={tmp_path / 'combined'}", name="cached"))
    error = capsys.readouterr().err
    assert "built without volume parts (process.parts=surface); model_type=combined needs" in error
    assert not (tmp_path / "combined" / "steps.jsonl").exists()
