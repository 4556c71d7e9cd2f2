"""The committed OpenFOAM v1912 fixture (tests/data/openfoam, tools/openfoam_fixture/README.md) read
as foamToVTK wrote it, through the ``openfoam`` profile (``dataset=openfoam``): its files found by
extension, its forceCoeffs file read as the published coefficients and references, every
coefficient integrated from the processed run and from the raw files equal to OpenFOAM's, its
face areas and cell centres equal to OpenFOAM's, its memory flat in the volume size, and the
whole pipeline (process, cache, train, predict) on it."""

from __future__ import annotations

import csv
import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from cell_references import openfoam_face
from conftest import ROOT, import_benchmark, typed_config
from test_forces import coefficients_agree
from test_train import TINY

from domino_pipeline.compute.box_coverage import box_notes
from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.configuration.dataset_profile import COEFFICIENTS
from domino_pipeline.inference.forces import ForceSettings
from domino_pipeline.inference.predict_runs import RunPrediction, coefficient_columns, run_record
from domino_pipeline.inference.run_inputs import Physics, load_processed, load_raw_run
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.inputs.processing.process_runs import process_all, process_run
from domino_pipeline.processed.runs import load_run
from domino_pipeline.inputs.processing.published_forces import read_published
from domino_pipeline.inputs.raw_files.run_folder import run_files

FIXTURE = ROOT / "tests" / "data" / "openfoam"
RUNS = ("run_1", "run_2")
CONFIG = typed_config("dataset=openfoam", "process.volume_source=cells")
PROFILE = CONFIG.dataset
FORCES = ForceSettings.from_config(CONFIG.forces, PROFILE)
VARIABLES = {part: PROFILE.variables(part) for part in ("surface", "volume")}
# forceCoeffs' column of each coefficient (the fixture's coefficient.dat names them so)
OPENFOAM_NAMES = {"cd": "Cd", "cs": "Cs", "cl": "Cl", "cm_roll": "CmRoll", "cm_pitch": "CmPitch",
                  "cm_yaw": "CmYaw", "clf": "Cl(f)", "clr": "Cl(r)"}


# ---- OpenFOAM's own output, read here apart from the pipeline's readers ----

def openfoam_coefficients(run: str) -> tuple[dict[str, float], dict[str, np.ndarray | float]]:
    """The last line of the run's coefficient.dat by column name (np.loadtxt), and its header."""
    text = (FIXTURE / run / "coefficient.dat").read_text()
    names = re.search(r"^# (Time\s.*)$", text, re.M).group(1).split()
    last = np.loadtxt(FIXTURE / run / "coefficient.dat", comments="#")[-1]
    header = {m.group(1): np.array(m.group(2).strip("()").split(), dtype=float)
              for m in re.finditer(r"^# (\w+)\s*: (.*)$", text, re.M)}
    return dict(zip(names, last.tolist())), {k: v if v.size > 1 else float(v[0]) for k, v in header.items()}


def openfoam_printed(run: str) -> dict[str, np.ndarray | float]:
    """What OpenFOAM printed (reference/openfoam_reference.txt): the body's patch areas summed,
    and the forces function object's total force and moment (about CofR)."""
    text = (FIXTURE / run / "reference" / "openfoam_reference.txt").read_text()
    vector = r"Total\s*: \(([^)]*)\)"
    force = re.search(r"Sum of forces\s*\n\s*" + vector, text).group(1)
    moment = re.search(r"Sum of moments\s*\n\s*" + vector, text).group(1)
    areas = [float(a) for a in re.findall(r"total area\s+=\s+(\S+)\n\s+total area", text)]
    return {"area": sum(areas), "patches": len(areas), "force": np.array(force.split(), dtype=float),
            "moment": np.array(moment.split(), dtype=float)}


def polygons(mesh: pv.PolyData) -> list[np.ndarray]:
    """The point ids of each polygon of a PolyData, in cell order."""
    faces, out, i = np.asarray(mesh.faces), [], 0
    while i < len(faces):
        out.append(faces[i + 1:i + 1 + faces[i]])
        i += faces[i] + 1
    return out


def true_record(run) -> dict:
    """run_record of a prediction equal to the truth: the integrated true coefficients."""
    return run_record(run, RunPrediction(surface=run.true_surface, volume=None, seconds=0.0), variables=VARIABLES,
                      forces=FORCES)


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> Path:
    """The fixture's runs processed with the profile, volume rows at the cell centres."""
    out = tmp_path_factory.mktemp("openfoam_processed")
    results = process_all(FIXTURE, out, ProcessOptions.from_config(PROFILE, CONFIG.physics, CONFIG.process))
    assert [(r.name, r.status, r.notes) for r in results] == [(run, "processed", []) for run in RUNS]
    return out


# ---- the run folder and the forceCoeffs file ----

def test_the_profile_finds_what_foamtovtk_wrote_by_extension_not_below(tmp_path: Path) -> None:
    run = tmp_path / "run_2"
    shutil.copytree(FIXTURE / "run_2", run)
    for name in ("other.vtp", "other.stl", "other.vtu"):
        (run / "reference" / name).write_bytes(b"x")  # patterns are not recursive
    files = run_files(run, PROFILE)
    assert (files.stl.name, files.surface.name, files.volume.name, files.surface_areas) == \
        ("body.stl", "boundary.vtp", "internal.vtu", None)
    (run / "copy.vtp").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"expected one file matching dataset.files.surface, found "
                                                r"\['boundary.vtp', 'copy.vtp'\]"):
        run_files(run, PROFILE)
    folder = run / "postProcessing" / "forceCoeffs1" / "0"  # the file where forceCoeffs writes it
    folder.mkdir(parents=True)
    (run / "coefficient.dat").rename(folder / "coefficient.dat")
    assert read_published(run, "2", PROFILE) == read_published(FIXTURE / "run_2", "2", PROFILE)
    (folder.parent / "300").mkdir()
    shutil.copy(folder / "coefficient.dat", folder.parent / "300" / "coefficient.dat")  # a restarted case
    with pytest.raises(ValueError, match=r"run_2: dataset.coefficients.own \(\*\*/coefficient.dat\) matches 2 files"):
        read_published(run, "2", PROFILE)


@pytest.mark.parametrize("name", RUNS)
def test_the_forcecoeffs_file_gives_the_last_times_coefficients_and_references(name: str) -> None:
    values, header = openfoam_coefficients(name)
    published = read_published(FIXTURE / name, name.removeprefix("run_"), PROFILE)
    assert published.own == {key: values[column] for key, column in OPENFOAM_NAMES.items()}
    assert published.constant is None and values["Time"] == 300
    own = published.own_references
    assert (own.area, own.length, own.centre) == (header["Aref"], header["lRef"], tuple(header["CofR"]))
    assert published.velocity == header["magUInf"] == 38.889
    assert published.constant_references.area == PROFILE.references.area


def test_a_cut_or_empty_forcecoeffs_file_is_refused_by_name(tmp_path: Path) -> None:
    run = tmp_path / "run_1"
    run.mkdir()
    text = (FIXTURE / "run_1" / "coefficient.dat").read_text()
    (run / "coefficient.dat").write_text(text.rsplit("\t", 8)[0])  # the last line cut short, as by a running case
    with pytest.raises(ValueError, match=r"run_1/coefficient.dat: the last line has 5 values for the 13 columns"):
        read_published(run, "1", PROFILE)
    (run / "coefficient.dat").write_text("".join(line + "\n" for line in text.splitlines() if line.startswith("#")))
    with pytest.raises(ValueError, match=r"coefficient.dat: no values under a comment line naming the columns"):
        read_published(run, "1", PROFILE)
    (run / "coefficient.dat").write_text(text.replace("magUInf           : 3.888900000000e+01", "magUInf : 0"))
    with pytest.raises(ValueError, match=r"coefficient.dat: the free-stream speed \(magUInf\) must be positive"):
        read_published(run, "1", PROFILE)


def test_a_profile_without_a_speed_must_say_where_each_run_states_it() -> None:
    with pytest.raises(ValueError, match=r"dataset.flow.velocity is null \(each run's file gives it\), so "
                                         r"dataset.references.file and dataset.references.columns.velocity"):
        typed_config("dataset=openfoam", "dataset.references.file=null")
    with pytest.raises(ValueError, match=r"dataset.references.constant_columns: the velocity is the run's own"):
        typed_config("dataset=openfoam", "+dataset.references.constant_columns.velocity=magUInf")
    assert typed_config("dataset=openfoam", "dataset.references.file=null", "dataset.flow.velocity=40").dataset


def test_an_unknown_field_name_is_refused_naming_the_profile_key(tmp_path: Path) -> None:
    averaged = typed_config("dataset=openfoam", "dataset.fields.surface.pressure=pMeanTrim").dataset
    assert averaged.fields.surface == {"pressure": "pMeanTrim", "wall_shear_stress": "wallShearStress"}  # one key
    options = ProcessOptions.from_config(averaged, CONFIG.physics, CONFIG.process)
    message = (r"run_1/boundary.vtp: no cell data pMeanTrim \(has \['nut', 'p', 'wallShearStress'\]\); "
               r"set dataset.fields.surface.pressure to one of them")
    with pytest.raises(RunError, match=message):
        process_run(FIXTURE / "run_1", tmp_path / "run_1.zarr", options)
    with pytest.raises(RunError, match=message):
        load_raw_run(FIXTURE / "run_1", averaged, Physics(30.0, 1.205), volume=False)
    velocity = typed_config("dataset=openfoam", "dataset.fields.volume.velocity=UMean").dataset
    with pytest.raises(RunError, match=r"run_2/internal.vtu: no point or cell data UMean \(has \['U', 'nut', 'p'\]\); "
                                       r"set dataset.fields.volume.velocity to one of them"):
        process_run(FIXTURE / "run_2", tmp_path / "run_2.zarr",
                    ProcessOptions.from_config(velocity, CONFIG.physics, CONFIG.process))
    assert not list(tmp_path.iterdir())


# ---- the coefficients ----

def assert_openfoams(record: dict, name: str) -> None:
    """Every coefficient of ``record`` over the run's own references is coefficient.dat's, within
    0.1% (near zero: test_forces.NEAR_ZERO of the drag), beside the published one read."""
    values, _ = openfoam_coefficients(name)
    true, published = coefficient_columns("own", "true"), coefficient_columns("own", "published")
    for key, column in OPENFOAM_NAMES.items():
        assert record[published[key]] == values[column]
        got = record[true[key]]
        assert coefficients_agree(got, values[column], values["Cd"]), (key, got, values[column])


def assert_constant_references(record: dict, name: str) -> None:
    """The coefficients over the profile's constant references are those of OpenFOAM's printed
    total force and moment (forces1, about CofR), moved to the constant centre and divided by the
    constant area and length."""
    printed, (_, header) = openfoam_printed(name), openfoam_coefficients(name)
    refs = PROFILE.references
    q = 0.5 * header["magUInf"] ** 2
    force = printed["force"]
    moment = printed["moment"] - np.cross(np.array(refs.centre) - header["CofR"], force)
    expected = {k: f / (q * refs.area) for k, f in zip(("cd", "cs", "cl"), force)}
    expected |= {k: m / (q * refs.area * refs.length) for k, m in zip(("cm_roll", "cm_pitch", "cm_yaw"), moment)}
    expected |= {"clf": expected["cl"] / 2 + expected["cm_pitch"], "clr": expected["cl"] / 2 - expected["cm_pitch"]}
    true = coefficient_columns("constant", "true")
    assert record["a_ref_constref"] == refs.area and record["l_ref_constref"] == refs.length
    for key in COEFFICIENTS:
        got = record[true[key]]
        assert coefficients_agree(got, expected[key], expected["cd"]), (key, got, expected[key])


@pytest.mark.parametrize("name", RUNS)
def test_every_coefficient_of_the_processed_run_is_openfoams(processed: Path, name: str) -> None:
    run = load_processed(processed / f"{name}.zarr", volume=False)
    assert run.published == read_published(FIXTURE / name, name.removeprefix("run_"), PROFILE)  # kept in the run
    record = true_record(run)
    assert record["u_inf"] == 38.889 and record["a_ref"] == run.published.own_references.area
    assert_openfoams(record, name)
    assert_constant_references(record, name)


@pytest.mark.parametrize("name", RUNS)
def test_every_coefficient_of_the_raw_files_is_openfoams(name: str) -> None:
    record = true_record(load_raw_run(FIXTURE / name, PROFILE, Physics(30.0, 1.205), volume=False))
    assert_openfoams(record, name)
    assert_constant_references(record, name)


# ---- the geometry ----

@pytest.mark.parametrize("name", RUNS)
def test_processed_areas_normals_and_centres_are_openfoams_faces(processed: Path, name: str) -> None:
    """Each face's vector area and centre by OpenFOAM's definitions, one polygon at a time in plain
    Python (cell_references), equal the processed ones to float32 rounding; the areas add up to the
    patch areas OpenFOAM printed; the normals point into the body (its volume comes out negative)."""
    mesh = pv.read(FIXTURE / name / "boundary.vtp")
    faces = [openfoam_face(mesh.points[ids]) for ids in polygons(mesh)]
    centres, vectors = (np.array(column) for column in zip(*faces))
    areas = np.linalg.norm(vectors, axis=1)
    run = load_run(processed / f"{name}.zarr", ["surface_areas", "surface_normals", "surface_mesh_centers"])
    float32 = np.finfo(np.float32).eps
    np.testing.assert_allclose(run["surface_areas"], areas, rtol=float32, atol=0)
    np.testing.assert_allclose(run["surface_normals"], vectors / areas[:, None], rtol=0, atol=float32)
    np.testing.assert_allclose(run["surface_mesh_centers"], centres, rtol=0, atol=float32 * np.abs(centres).max())
    printed = openfoam_printed(name)
    assert printed["patches"] == 2
    assert run["surface_areas"].astype(np.float64).sum() == pytest.approx(printed["area"], rel=1e-4)
    assert np.einsum("ij,ij->", centres, vectors) / 3 < -1.0  # sum Cf . Sf / 3: minus the body's volume


@pytest.mark.parametrize("name", RUNS)
def test_volume_cell_centres_are_openfoams(processed: Path, name: str) -> None:
    """process.volume_source=cells: the volume rows (in file order) are OpenFOAM's cell centres
    (postProcess -func writeCellCentres) to 1e-5 of the cell size, the cube root of the cell's
    volume (VTK's, whose sign foamToVTK's prism ordering flips)."""
    reference = np.load(FIXTURE / name / "reference" / "cell_centers.npy")
    grid = pv.read(FIXTURE / name / "internal.vtu")
    size = np.cbrt(np.abs(grid.compute_cell_sizes(length=False, area=False, volume=True).cell_data["Volume"]))
    centres = load_run(processed / f"{name}.zarr", ["volume_mesh_centers"])["volume_mesh_centers"]
    assert centres.shape == reference.shape == (grid.n_cells, 3) and 42 in grid.celltypes
    assert (np.linalg.norm(centres - reference, axis=1) / size).max() < 1e-5


@pytest.mark.slow
def test_reading_cell_centres_by_blocks_keeps_memory_flat_in_the_volume_size() -> None:
    """benchmarks/cell_centres_memory.py on the fixture's volumes (27,699 and 7,936 cells), each
    read in a fresh process: by blocks of 512 rows the peak RSS is the same for both; read in one
    block the larger one costs some 20 MiB more, which the test would see."""
    benchmark = import_benchmark("cell_centres_memory")
    large, small = (FIXTURE / name / "internal.vtu" for name in RUNS)
    blocks = [benchmark.measure_file(path, 512) for path in (large, small)]
    whole = benchmark.measure_file(large, 1 << 30)
    assert [r["rows"] for r in blocks] == [27699, 7936] and all(r["streamed"] for r in blocks)
    assert abs(blocks[0]["peak_rss_mb"] - blocks[1]["peak_rss_mb"]) < 5
    assert whole["peak_rss_mb"] - blocks[0]["peak_rss_mb"] > 10
    reference = np.load(FIXTURE / "run_1" / "reference" / "cell_centers.npy")
    np.testing.assert_allclose(blocks[0]["mean_centre"], reference.mean(axis=0), rtol=0, atol=1e-6)


# ---- the boxes ----

def test_the_profiles_boxes_hold_the_fixtures_bodies_and_a_smaller_box_is_reported(processed: Path) -> None:
    settings = settings_from_config(CONFIG.geometry, CONFIG.variables)
    arrays = {name: load_run(processed / f"{name}.zarr", ["stl_coordinates", "surface_mesh_centers",
                                                                    "surface_areas"]) for name in RUNS}
    assert [box_notes(arrays[name], settings) for name in RUNS] == [[], []]
    (low, high), (surface_low, surface_high) = settings.bounding_box_volume, settings.bounding_box_surface
    cut = dataclasses.replace(settings, bounding_box_volume=(low, (2.0, *high[1:])),  # behind x = 2
                              bounding_box_surface=((0.0, *surface_low[1:]), surface_high))  # ahead of x = 0
    run = arrays["run_1"]
    behind, ahead = run["surface_mesh_centers"][:, 0] >= 2.0, run["surface_mesh_centers"][:, 0] <= 0.0
    share = {name: (100 * mask.mean(), 100 * run["surface_areas"][mask].sum() / run["surface_areas"].sum())
             for name, mask in (("volume", behind), ("surface", ahead))}
    vertices = {name: 100 * mask.mean() for name, mask in (("volume", run["stl_coordinates"][:, 0] > 2.0),
                                                           ("surface", run["stl_coordinates"][:, 0] < 0.0))}
    notes = box_notes(run, cut)
    assert notes == [f"the volume box drops {share['volume'][0]:.1f}% of the boundary cells ({share['volume'][1]:.1f}% "
                     "of the area)",
                     f"{share['surface'][0]:.1f}% of the boundary cells ({share['surface'][1]:.1f}% of the area) lie "
                     "outside the surface box, beyond the surface grid",
                     f"the volume box cuts the STL: {vertices['volume']:.1f}% of its vertices lie outside",
                     f"the surface box cuts the STL: {vertices['surface']:.1f}% of its vertices lie outside"]


# ---- the whole pipeline ----

def _run(command: list[str]) -> str:
    result = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_fixture_is_processed_cached_trained_and_predicted(tmp_path: Path) -> None:
    """process_data.py, cache_data.py, train.py (one epoch) and predict.py with dataset=openfoam on
    the files as foamToVTK wrote them; the predictions' table holds every coefficient, the true
    ones OpenFOAM's, for a raw run folder and for a processed run alike."""
    common = ["dataset=openfoam", f"data.raw_dir={FIXTURE}", f"data.processed_dir={tmp_path / 'processed'}",
              f"cache.dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'train'}", *TINY]
    _run(["process_data.py", *common, "process.volume_source=cells"])
    built = _run(["cache_data.py", "--config-name=cached", *common])
    assert "2 built" in built and "note run_" not in built  # the profile's boxes hold the bodies
    _run(["train.py", "--config-name=cached", *common, "train.epochs=1"])
    runs = f"predict.runs=[{FIXTURE / 'run_1'},{tmp_path / 'processed' / 'run_2.zarr'}]"
    printed = _run(["predict.py", "--config-name=cached", *common, runs, "predict.plot=false"])
    assert all(name in printed for name in ("clf_pred", "clr_true", "cd_published"))
    with open(tmp_path / "train" / "predictions" / "predictions.csv") as file:
        rows = {row["run"]: row for row in csv.DictReader(file)}
    for name in RUNS:
        row, (values, _) = rows[name], openfoam_coefficients(name)
        for key, column in OPENFOAM_NAMES.items():
            assert float(row[f"{key}_published"]) == values[column]
            assert coefficients_agree(float(row[f"{key}_true"]), values[column], values["Cd"])
            assert np.isfinite(float(row[f"{key}_pred"])) and np.isfinite(float(row[f"{key}_constref_true"]))
