"""Each dataset's published layout read through its profile alone: the true coefficients of the
raw files, integrated here independently of the pipeline, equal the published CSVs (DrivAerML over its own and
its constant references, AhmedML and WindsorML over the constant ones), and so do the pipeline's;
a volume in pieces processes bit for bit as the whole file; WindsorML's point-data surface VTU
becomes point rows with the published dual areas and normals, or computed ones equal to an
independent computation; a surface VTU of polygon cells reads as the same VTP."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import typed_config
from vtkmodules.util.numpy_support import vtk_to_numpy

import domino_pipeline.inputs.meshes.surface_stream as surface_stream
from domino_pipeline.inference.forces import ForceSettings
from domino_pipeline.inference.predict_runs import RunPrediction, coefficient_columns, run_record
from domino_pipeline.inference.run_inputs import Physics, load_raw_run
from domino_pipeline.inputs.meshes.mesh_rows import field_columns
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.mesh_stream import WholeFileFallback
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.processed.runs import load_run, open_run
from domino_pipeline.inputs.processing.published_forces import read_published
from domino_pipeline.inputs.processing.process_runs import process_run
from synthetic_data import join_pieces

DATASETS = ("drivaerml", "ahmedml", "windsorml")
FIRST = {"drivaerml": 1, "ahmedml": 1, "windsorml": 0}
TOLERANCE = 1e-3  # the datasets' published coefficients against integrated ones: 0.1%
SURFACE = ("surface_mesh_centers", "surface_normals", "surface_areas", "surface_fields")


def config(name: str, *overrides: str):
    return typed_config(f"dataset={name}", *overrides)


def options_of(name: str, *overrides: str) -> ProcessOptions:
    c = config(name, *overrides)
    return ProcessOptions.from_config(c.dataset, c.physics, c.process)


def _surface(path: Path) -> pv.PolyData:
    """A boundary file as PolyData, its points and cells in file order."""
    mesh = pv.read(path)
    return mesh if isinstance(mesh, pv.PolyData) else pv.PolyData(mesh.points, faces=mesh.cells)


def _polygons(mesh: pv.PolyData) -> list[np.ndarray]:
    offsets = vtk_to_numpy(mesh.GetPolys().GetOffsetsArray())
    ids = vtk_to_numpy(mesh.GetPolys().GetConnectivityArray())
    return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _by_count(mesh: pv.PolyData):
    """(polygon indices, point ids (m, k)) of the polygons of each vertex count k."""
    offsets = vtk_to_numpy(mesh.GetPolys().GetOffsetsArray()).astype(np.int64)
    ids = vtk_to_numpy(mesh.GetPolys().GetConnectivityArray()).astype(np.int64)
    counts = np.diff(offsets)
    for k in np.unique(counts):
        rows = np.flatnonzero(counts == k)
        yield rows, ids[offsets[rows][:, None] + np.arange(k)]


def _openfoam_faces(mesh: pv.PolyData) -> tuple[np.ndarray, np.ndarray]:
    """Every polygon's centre and area vector by OpenFOAM's definition: a triangle's own; else
    the triangles (p_k, p_k+1, m) about the vertex mean m, summed; the centre their centroids
    weighted by their areas."""
    points = np.asarray(mesh.points, dtype=np.float64)
    centres, vectors = np.zeros((mesh.n_cells, 3)), np.zeros((mesh.n_cells, 3))
    for rows, ids in _by_count(mesh):
        corners = points[ids]
        if ids.shape[1] == 3:
            centres[rows] = corners.mean(axis=1)
            vectors[rows] = 0.5 * np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
            continue
        mean = corners.mean(axis=1, keepdims=True)
        following = np.roll(corners, -1, axis=1)
        triangles = 0.5 * np.cross(following - corners, mean - corners)
        weights = np.linalg.norm(triangles, axis=2)
        vectors[rows] = triangles.sum(axis=1)
        centres[rows] = np.einsum("mk,mkd->md", weights, (corners + following + mean) / 3.0) / weights.sum(1)[:, None]
    return centres, vectors


def _dual_areas(mesh: pv.PolyData) -> np.ndarray:
    """Each point's barycentric dual area: of each polygon around it, the quadrilateral (point,
    next edge's midpoint, vertex mean, previous edge's midpoint)."""
    points = np.asarray(mesh.points, dtype=np.float64)
    areas = np.zeros(len(points))
    for _, ids in _by_count(mesh):
        corners = points[ids]
        mean = corners.mean(axis=1, keepdims=True)
        after, before = 0.5 * (corners + np.roll(corners, -1, axis=1)), 0.5 * (corners + np.roll(corners, 1, axis=1))
        quad = 0.5 * (np.linalg.norm(np.cross(after - corners, mean - corners), axis=2)
                      + np.linalg.norm(np.cross(mean - corners, before - corners), axis=2))
        np.add.at(areas, ids.ravel(), quad.ravel())
    return areas


def _rows(run_dir: Path, profile) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The boundary's rows computed here: positions, area vectors out of the body, pressure and
    shear on the body over q (coefficient units), from the raw file and the profile alone."""
    index = run_dir.name.removeprefix("run_")
    mesh = pv.read(run_dir / profile.files.surface.replace("{index}", index))
    surface = _surface(run_dir / profile.files.surface.replace("{index}", index))
    stress = profile.has_field("surface", "pressure")
    if stress:
        pressure_name, shear_name = profile.fields.surface["pressure"], profile.fields.surface["wall_shear_stress"]
        q = 0.5 * profile.flow.velocity**2 * (1.0 if profile.flow.kinematic else profile.flow.density)
    else:
        pressure_name, shear_name = profile.fields.surface["pressure_coefficient"], \
            profile.fields.surface["skin_friction_coefficient"]
        q = 1.0
    data = mesh.cell_data if profile.surface_rows.location == "cells" else mesh.point_data
    pressure = np.asarray(data[pressure_name], np.float64) / q
    shear = (np.column_stack([data[n] for n in shear_name]) if isinstance(shear_name, list)
             else np.asarray(data[shear_name])).astype(np.float64) / q
    shear *= -1.0 if profile.flow.wall_shear == "on_fluid" else 1.0
    outward = -1.0 if profile.flow.normals == "into_body" else 1.0
    if profile.surface_rows.location == "cells":
        positions, vectors = _openfoam_faces(surface)
        vectors = outward * vectors
    else:
        normals = np.asarray(mesh.point_data[profile.surface_rows.normals], np.float64)
        positions = np.asarray(mesh.points, np.float64)
        vectors = outward * normals / np.linalg.norm(normals, axis=1, keepdims=True) * _dual_areas(surface)[:, None]
    return positions, vectors, pressure, shear


def integrated_coefficients(rows, flow, area: float, length: float, centre) -> dict[str, float]:
    """Every coefficient the datasets publish, of ``_rows`` integrated."""
    positions, vectors, pressure, shear = rows
    forces = -pressure[:, None] * vectors + shear * np.linalg.norm(vectors, axis=1)[:, None]
    force = forces.sum(axis=0) / area
    moment = np.cross(positions - np.asarray(centre), forces).sum(axis=0) / (area * length)
    drag, side, lift = (np.asarray(d, float) / np.linalg.norm(d)
                        for d in (flow.drag_direction, flow.side_direction, flow.lift_direction))
    cl, pitch = force @ lift, moment @ side
    return {"cd": force @ drag, "cl": cl, "cs": force @ side, "cm_roll": moment @ drag, "cm_pitch": pitch,
            "cm_yaw": moment @ lift, "clf": 0.5 * cl + pitch, "clr": 0.5 * cl - pitch}


@pytest.mark.parametrize("name", DATASETS)
def test_the_integrated_coefficients_are_the_published_ones(tiny_dataset_dir, name: str) -> None:
    """DrivAerML: Cd, Cl, Cs, Clf, Clr over its own (geo_ref) and its constant references;
    AhmedML cd, cl and WindsorML cd, cs, cl, cmy over the constant ones (no own references are
    published there)."""
    profile = config(name).dataset
    for i in (FIRST[name], FIRST[name] + 1):
        run_dir = tiny_dataset_dir(name) / f"run_{i}"
        published = read_published(run_dir, str(i), profile)
        pairs = [("constant", published.constant, published.constant_references)]
        if published.own_references is not None:
            pairs.append(("own", published.own, published.own_references))
        assert (published.own_references is not None) == (profile.references.file is not None)
        rows = _rows(run_dir, profile)
        for which, values, refs in pairs:
            got = integrated_coefficients(rows, profile.flow, refs.area, refs.length, refs.centre)
            assert set(values) == set(profile.coefficients.columns)
            for key, value in values.items():
                assert got[key] == pytest.approx(value, rel=TOLERANCE, abs=1e-6), (name, i, which, key)
        assert published.constant["cd"] > 0.05


@pytest.mark.parametrize("name", DATASETS)
def test_the_pipelines_true_coefficients_are_the_published_ones(tiny_dataset_dir, name: str) -> None:
    """predict.py's record of a prediction equal to the truth: every published coefficient, over
    the run's own references where it publishes them and over the constant ones."""
    c = config(name)
    forces = ForceSettings.from_config(c.forces, c.dataset)
    variables = {"surface": c.variables.surface, "volume": c.variables.volume}
    run_dir = tiny_dataset_dir(name) / f"run_{FIRST[name]}"
    run = load_raw_run(run_dir, c.dataset, Physics(c.physics.stream_velocity, c.physics.air_density), volume=False)
    record = run_record(run, RunPrediction(surface=run.true_surface, volume=None, seconds=0.0), variables=variables,
                        forces=forces)
    published = read_published(run_dir, str(FIRST[name]), c.dataset)
    own = published.own_references is not None
    assert record["a_ref"] == (published.own_references if own else published.constant_references).area
    assert record["a_ref_constref"] == c.dataset.references.area
    for which, values in (("own", published.own if own else published.constant), ("constant", published.constant)):
        true, shown = coefficient_columns(which, "true"), coefficient_columns(which, "published")
        assert set(values) == set(c.dataset.coefficients.columns)
        for key, value in values.items():
            assert record[shown[key]] == value
            assert record[true[key]] == pytest.approx(value, rel=TOLERANCE, abs=1e-5 * values["cd"]), (which, key)


def _processed(run_dir: Path, out: Path, options: ProcessOptions, **blocks) -> dict[str, np.ndarray]:
    process_run(run_dir, out, options, **blocks)
    return load_run(out)


def test_a_volume_in_pieces_processes_bit_for_bit_as_the_whole_file(tiny_raw_dir: Path, tmp_path: Path) -> None:
    whole = tmp_path / "raw" / "run_1"
    shutil.copytree(tiny_raw_dir / "run_1", whole)
    join_pieces(whole / "volume_1.vtu")
    assert (whole / "volume_1.vtu").is_file() and not list(whole.glob("*.part"))
    options = options_of("drivaerml")
    pieces = _processed(tiny_raw_dir / "run_1", tmp_path / "pieces.zarr", options, block_rows=1500)
    joined = _processed(whole, tmp_path / "whole.zarr", options, block_rows=1500)
    assert pieces.keys() == joined.keys()
    for key in pieces:
        assert pieces[key].tobytes() == joined[key].tobytes(), key
    attrs = [dict(open_run(tmp_path / f"{n}.zarr").attrs) for n in ("pieces", "whole")]
    assert attrs[0].pop("write_id") != attrs[1].pop("write_id")
    assert attrs[0] == attrs[1]


def _windsor_expected(run_dir: Path, normals: np.ndarray, areas: np.ndarray) -> dict[str, np.ndarray]:
    mesh = pv.read(run_dir / "boundary_0.vtu")
    fields = np.column_stack([mesh.point_data[n] for n in ("cpavg", "cfxavg", "cfyavg", "cfzavg")])
    unit = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    return {"surface_mesh_centers": np.asarray(mesh.points), "surface_normals": unit, "surface_areas": areas,
            "surface_fields": fields}


def test_windsorml_points_are_the_rows_with_the_published_areas_and_normals(tiny_dataset_dir, tmp_path) -> None:
    run_dir = tiny_dataset_dir("windsorml") / "run_0"
    got = _processed(run_dir, tmp_path / "run_0.zarr", options_of("windsorml"), surface_block=97)
    mesh = pv.read(run_dir / "boundary_0.vtu")
    expected = _windsor_expected(run_dir, np.asarray(mesh.point_data["Normals"], np.float64),
                                 np.load(run_dir / "boundary_dual_area_0.npy"))
    for key in SURFACE:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)
    assert got["surface_fields"].shape == (mesh.n_points, 4)  # cp and the skin friction's 3 components
    assert open_run(tmp_path / "run_0.zarr").attrs["surface_variables"] == {
        "cpavg": "scalar", "skin_friction_coefficient": "vector"}


def test_windsorml_points_without_published_weights_get_dual_areas_and_normals(tiny_dataset_dir, tmp_path) -> None:
    """Computed by blocks of cells (97 at a time) and by VTK's whole-file reading alike, equal to
    the dual areas computed here and to the normalised sums of the cells' area vectors, and to the
    generator's own published areas and normals up to their float32 rounding."""
    run_dir = tiny_dataset_dir("windsorml") / "run_0"
    options = options_of("windsorml", "dataset.surface_rows.normals=null", "dataset.files.surface_areas=null")
    with warnings.catch_warnings():
        warnings.simplefilter("error", WholeFileFallback)
        got = _processed(run_dir, tmp_path / "streamed.zarr", options, surface_block=97)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(surface_stream, "_unstreamable", lambda file: "read whole for this test")
        with pytest.warns(WholeFileFallback, match="read whole for this test"):
            whole = _processed(run_dir, tmp_path / "whole.zarr", options)
    surface = _surface(run_dir / "boundary_0.vtu")
    sums = np.zeros((surface.n_points, 3))
    vectors = _openfoam_faces(surface)[1]
    for rows, ids in _by_count(surface):
        for d in range(3):
            np.add.at(sums[:, d], ids.ravel(), np.repeat(vectors[rows, d], ids.shape[1]))
    expected = _windsor_expected(run_dir, sums, _dual_areas(surface))
    for key in SURFACE:
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5, atol=1e-7, err_msg=key)
        np.testing.assert_array_equal(got[key], whole[key], err_msg=key)
    np.testing.assert_allclose(got["surface_areas"], np.load(run_dir / "boundary_dual_area_0.npy"), rtol=1e-5)
    np.testing.assert_allclose(got["surface_normals"], pv.read(run_dir / "boundary_0.vtu").point_data["Normals"],
                               atol=1e-5)


def test_published_point_areas_of_the_wrong_length_are_named(tiny_dataset_dir, tmp_path) -> None:
    run_dir = tmp_path / "run_0"
    shutil.copytree(tiny_dataset_dir("windsorml") / "run_0", run_dir)
    areas = np.load(run_dir / "boundary_dual_area_0.npy")
    np.save(run_dir / "boundary_dual_area_0.npy", areas[:-1])
    with pytest.raises(RunError, match=rf"boundary_dual_area_0\.npy: {len(areas) - 1} areas, expected one per "
                                       rf"surface point \({len(areas)}\)"):
        process_run(run_dir, tmp_path / "run_0.zarr", options_of("windsorml"))


def _as_vtu(vtp: Path, out: Path, extra_cell: bool = False) -> Path:
    """The polygons of a VTP (cell data kept) written as a VTU by VTK, in the same order; with a
    tetrahedron appended when ``extra_cell``."""
    poly = pv.read(vtp)
    cells = [(len(ids), *ids) for ids in _polygons(poly)]
    types = [{3: pv.CellType.TRIANGLE, 4: pv.CellType.QUAD}.get(c[0], pv.CellType.POLYGON) for c in cells]
    if extra_cell:
        cells.append((4, 0, 1, 2, 3))
        types.append(pv.CellType.TETRA)
    grid = pv.UnstructuredGrid(np.concatenate(cells), np.array(types, np.uint8), poly.points)
    for key in poly.cell_data.keys():
        values = np.asarray(poly.cell_data[key])
        grid.cell_data[key] = np.concatenate([values, values[:1]]) if extra_cell else values
    grid.save(out)
    return out


def test_a_surface_vtu_of_polygon_cells_reads_as_the_vtp(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run_1"
    shutil.copytree(tiny_raw_dir / "run_1", run_dir)
    vtu = _as_vtu(run_dir / "boundary_1.vtp", run_dir / "boundary_1.vtu")
    assert set(np.unique(pv.read(vtu).celltypes).tolist()) == {5, 7, 9}
    options = options_of("drivaerml", "dataset.files.surface=boundary_{index}.vtu")
    got = _processed(run_dir, tmp_path / "vtu.zarr", options, surface_block=97)
    want = _processed(run_dir, tmp_path / "vtp.zarr", options_of("drivaerml"), surface_block=97)
    for key in SURFACE:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    _as_vtu(run_dir / "boundary_1.vtp", vtu, extra_cell=True)
    with pytest.raises(RunError, match=r"boundary_1\.vtu: cell types \[10\] on a boundary surface"):
        process_run(run_dir, tmp_path / "bad.zarr", options)


def test_a_vector_of_three_scalar_arrays_is_assembled_in_its_order() -> None:
    data = {"ux": np.array([1.0, 2.0]), "uz": np.array([5.0, 6.0]), "uy": np.array([3.0, 4.0]), "p": np.array([7, 8])}
    arrays = {"velocity": ["ux", "uy", "uz"], "p": ["p"]}
    got = field_columns(data, {"velocity": "vector", "p": "scalar"}, Path("v.vtu"), "cell", arrays)
    np.testing.assert_array_equal(got, [[1, 3, 5, 7], [2, 4, 6, 8]])
    with pytest.raises(RunError, match=r"v\.vtu: no cell data uy \(has \['p', 'ux', 'uz'\]\)"):
        field_columns({k: v for k, v in data.items() if k != "uy"}, {"velocity": "vector"}, Path("v.vtu"), "cell",
                      arrays)


def test_a_composed_field_must_have_one_array_per_component() -> None:
    with pytest.raises(ValueError, match=r"dataset.fields.volume: field names must be non-empty strings, or lists "
                                         r"of one per component"):
        config("windsorml", "dataset.fields.volume.velocity=[a,b]")
    with pytest.raises(ValueError, match=r"dataset.fields.volume: field names must be"):
        config("windsorml", "dataset.fields.volume.pressure=[a,b,c]")
    with pytest.raises(ValueError, match=r"\['cfxavg'\] given more than one role"):
        config("windsorml", "dataset.fields.surface.pressure_coefficient=cfxavg")


def test_the_point_rows_benchmark_compares_both_ways_with_a_reference() -> None:
    from conftest import import_benchmark

    results = import_benchmark("surface_point_rows").main(["--cells", "2000", "--reference-cells", "20000"])
    assert [r["way"] for r in results] == ["points", "cells"]
    for r in results:
        assert 0 < r["relative_error"]["cd"] < 0.05 and r["cd"] > 0
