"""Synthetic runs of each dataset read back with pyvista: its file names and arrays where the
profile says they live, a watertight outward STL in the profile's surface box, boundary cells
wound as the dataset's solver winds them, warped polygons whose VTK areas differ from OpenFOAM's,
the volume outside the body in the profile's box (DrivAerML's in two pieces cut inside an
array), plausible fields, determinism and size overrides."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import ROOT
from vtkmodules.util.numpy_support import vtk_to_numpy

from domino_pipeline.configuration.dataset_profile import profile_from_file
from domino_pipeline.inputs.raw_files.concat_bytes import file_pieces
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from synthetic_data import GROUND_Z, STREAM_VELOCITY, VOLUME_BOX, generate_runs, join_pieces

DATASETS = ("drivaerml", "ahmedml", "windsorml")
PROFILES = {name: profile_from_file(ROOT / "conf" / "dataset" / f"{name}.yaml") for name in DATASETS}
FIRST = {"drivaerml": 1, "ahmedml": 1, "windsorml": 0}


def _file(raw_dir: Path, name: str, i: int, key: str) -> Path:
    pattern = getattr(PROFILES[name].files, key)
    return raw_dir / f"run_{i}" / pattern.replace("{index}", str(i))


def _surface(raw_dir: Path, name: str, i: int) -> pv.PolyData:
    """The boundary as PolyData with its point order (a VTU of polygons converted as it is)."""
    mesh = pv.read(_file(raw_dir, name, i, "surface"))
    if isinstance(mesh, pv.PolyData):
        return mesh
    poly = pv.PolyData(mesh.points, faces=mesh.cells)
    for key in mesh.point_data.keys():
        poly.point_data[key] = mesh.point_data[key]
    for key in mesh.cell_data.keys():
        poly.cell_data[key] = mesh.cell_data[key]
    return poly


def _enclosed(points: np.ndarray, surface: pv.PolyData) -> np.ndarray:
    """True for points inside the closed ``surface`` (VTK ray casting)."""
    selection = pv.PolyData(points).select_interior_points(surface, check_surface=True)
    return selection.point_data["selected_points"].astype(bool)


def _fan_triangulated(mesh: pv.PolyData, reverse: bool = False) -> pv.PolyData:
    """The closed surface of ``mesh``'s polygons as triangles about each polygon's vertex mean
    (VTK's own triangulation of a warped polygon need not keep the surface closed), each
    reversed if ``reverse`` (VTK's enclosed-points test wants an outward surface)."""
    offsets = vtk_to_numpy(mesh.GetPolys().GetOffsetsArray())
    ids = vtk_to_numpy(mesh.GetPolys().GetConnectivityArray())
    points, triangles = [np.asarray(mesh.points, dtype=np.float64)], []
    for begin, end in zip(offsets[:-1], offsets[1:]):
        corners = ids[begin:end]
        if len(corners) == 3:
            triangles.append(corners)
            continue
        centre = sum(len(p) for p in points)
        points.append(np.asarray(mesh.points)[corners].mean(axis=0, keepdims=True))
        triangles += [[corners[k], corners[(k + 1) % len(corners)], centre] for k in range(len(corners))]
    triangles = np.array(triangles)[:, ::-1] if reverse else np.array(triangles)
    faces = np.column_stack([np.full(len(triangles), 3), triangles]).ravel()
    return pv.PolyData(np.concatenate(points), faces=faces)


def _cell_sizes(mesh: pv.PolyData) -> np.ndarray:
    return np.diff(vtk_to_numpy(mesh.GetPolys().GetOffsetsArray()))


def _names(fields: dict) -> dict[str, int]:
    """Array name -> components of a profile's role -> name mapping (components: one each)."""
    from domino_pipeline.configuration.variables import FIELD_ROLES, VARIABLE_WIDTH

    out = {}
    for role, name in fields.items():
        width = VARIABLE_WIDTH[FIELD_ROLES[role][0]]
        out |= {name: width} if isinstance(name, str) else dict.fromkeys(name, 1)
    return out


@pytest.mark.parametrize("name", DATASETS)
def test_stl_is_a_watertight_outward_body_in_the_surface_box(tiny_dataset_dir, name: str) -> None:
    i = FIRST[name]
    stl_path = _file(tiny_dataset_dir(name), name, i, "stl")
    assert stl_path.read_text()[:6] == "solid "  # ASCII, like DrivAerML's
    stl = pv.read(stl_path)
    assert stl.is_all_triangles and 1_000 <= stl.n_cells <= 2_000
    assert stl.n_open_edges == 0 and stl.is_manifold
    assert stl.volume > 0.0  # wound outward
    low, high = np.array(stl.bounds).reshape(3, 2).T
    box = PROFILES[name].bounding_boxes.surface
    assert np.all(low >= box["min"]) and np.all(high <= box["max"])
    up = int(np.argmax(PROFILES[name].flow.lift_direction))
    assert low[up] > (GROUND_Z if name == "drivaerml" else 0.0)  # above the ground plane


@pytest.mark.parametrize("name", DATASETS)
def test_boundary_is_finer_mixed_polygons_with_the_profiles_arrays(tiny_dataset_dir, name: str) -> None:
    raw, i, profile = tiny_dataset_dir(name), FIRST[name], PROFILES[name]
    surface = _surface(raw, name, i)
    assert surface.n_cells > pv.read(_file(raw, name, i, "stl")).n_cells
    assert set(np.unique(_cell_sizes(surface))) == {3, 4, 5, 6}
    assert surface.n_open_edges == 0
    arrays = _names(profile.file_fields("surface"))
    for where, data, count in (("cells", surface.cell_data, surface.n_cells), ("points", surface.point_data,
                                                                                surface.n_points)):
        expected = {n: w for n, w in arrays.items() if where in profile.field_data.surface or n == "faceid"}
        if where == "points" and profile.surface_rows.normals:
            expected[profile.surface_rows.normals] = 3
        if where == "points" and "points" in profile.field_data.surface:
            expected.pop("faceid", None)
        assert set(data.keys()) == set(expected), (where, sorted(data.keys()))
        for array, width in expected.items():
            values = np.asarray(data[array])
            assert values.dtype in (np.float32, np.int32) and np.isfinite(values).all()
            assert values.reshape(count, -1).shape[1] == width


@pytest.mark.parametrize("name", DATASETS)
def test_boundary_cells_are_wound_as_the_profile_says(tiny_dataset_dir, name: str) -> None:
    """OpenFOAM's boundary faces point out of the fluid, into the body; WindsorML's the other way,
    as its Normals array does."""
    profile = PROFILES[name]
    surface = _surface(tiny_dataset_dir(name), name, FIRST[name])
    normals = surface.compute_normals(cell_normals=True, point_normals=False, consistent_normals=False,
                                      auto_orient_normals=False).cell_data["Normals"]
    centres = surface.cell_centers().points
    step = 0.3 * np.sqrt(surface.compute_cell_sizes().cell_data["Area"])[:, None]
    inward = 1.0 if profile.flow.normals == "into_body" else -1.0
    closed = _fan_triangulated(surface, reverse=inward > 0)
    assert not _enclosed(centres - inward * step * normals, closed).any()
    assert _enclosed(centres + inward * step * normals, closed).mean() > 0.98  # thin ends may miss
    if profile.surface_rows.normals:
        shipped = surface.point_data[profile.surface_rows.normals]
        np.testing.assert_allclose(np.linalg.norm(shipped, axis=1), 1.0, rtol=1e-5)
        lengths = 0.02 * np.ptp(surface.points, axis=0).max()
        assert not _enclosed(surface.points + lengths * shipped, closed).any()


def test_warped_polygons_have_other_areas_in_vtk_than_in_openfoam(tiny_raw_dir: Path) -> None:
    """The published areas are OpenFOAM's (the fan about the vertex mean); VTK's cell sizes
    triangulate a warped pentagon or hexagon otherwise, so a reader taking VTK's would be caught."""
    surface = pv.read(tiny_raw_dir / "run_1" / "boundary_1.vtp")
    published = np.load(tiny_raw_dir / "run_1" / "boundary_cell_area_1.npy")
    vtk_area = surface.compute_cell_sizes().cell_data["Area"]
    sizes = _cell_sizes(surface)
    flat, warped = sizes <= 4, sizes >= 5
    np.testing.assert_allclose(vtk_area[flat], published[flat], rtol=2e-5)
    assert np.mean(np.abs(vtk_area[warped] - published[warped]) / published[warped]) > 0.05
    assert warped.sum() > 50


def test_the_drivaerml_volume_is_two_pieces_cut_inside_an_array(tiny_raw_dir: Path) -> None:
    pieces = file_pieces(tiny_raw_dir / "run_1" / "volume_1.vtu")
    assert [p.name for p in pieces] == ["volume_1.vtu.00.part", "volume_1.vtu.01.part"]
    assert not (tiny_raw_dir / "run_1" / "volume_1.vtu").exists()
    cut = pieces[0].stat().st_size
    file = VtkXmlFile.open(tiny_raw_dir / "run_1" / "volume_1.vtu")
    spans = {entry.label: file._array(entry) for entry in file.arrays.values()}
    inside = [label for label, data in spans.items() if data.data_at < cut < data.end]
    assert len(inside) == 1, inside


@pytest.mark.parametrize("name", DATASETS)
def test_volume_points_fill_the_box_outside_the_body(tiny_dataset_dir, name: str, tmp_path: Path) -> None:
    raw, i, profile = tiny_dataset_dir(name), FIRST[name], PROFILES[name]
    volume = pv.read(join_pieces(_file(raw, name, i, "volume"), tmp_path / "volume.vtu"))
    assert isinstance(volume, pv.UnstructuredGrid) and volume.n_points == volume.n_cells == 8_000
    arrays = _names(profile.file_fields("volume"))
    for where, data in (("points", volume.point_data), ("cells", volume.cell_data)):
        assert set(data.keys()) == (set(arrays) if where in profile.field_data.volume else set())
        for array, width in arrays.items() if where in profile.field_data.volume else ():
            assert data[array].dtype == np.float32 and data[array].reshape(volume.n_points, -1).shape[1] == width
    points = np.asarray(volume.points)
    box = profile.bounding_boxes.volume
    assert np.all(points >= np.array(box["min"]) - 1e-6) and np.all(points <= np.array(box["max"]) + 1e-6)
    assert not _enclosed(points, pv.read(_file(raw, name, i, "stl"))).any()


def test_surface_fields_show_stagnation_suction_and_wall_shear(tiny_raw_dir: Path) -> None:
    surface = pv.read(tiny_raw_dir / "run_1" / "boundary_1.vtp")
    normals = -surface.compute_normals(cell_normals=True, point_normals=False).cell_data["Normals"]  # out of the car
    cp = surface.cell_data["CpMeanTrim"]
    nose = normals[:, 0] < -0.95
    roof = normals[:, 2] > 0.95
    assert cp[nose].mean() > 0.8 and cp[roof].mean() < -0.3
    np.testing.assert_allclose(surface.cell_data["pMeanTrim"], 0.5 * STREAM_VELOCITY**2 * cp, rtol=1e-5, atol=1e-3)
    shear_on_fluid = surface.cell_data["wallShearStressMeanTrim"]
    assert np.all(shear_on_fluid[:, 0] <= 0.0)  # the stress on the fluid: the wall holds it back (-x)
    np.testing.assert_allclose(np.einsum("ij,ij->i", shear_on_fluid, normals), 0.0, atol=1e-3)
    assert np.all(surface.cell_data["pPrime2MeanTrim"] > 0.0)


def test_windsorml_is_y_up_with_coefficient_fields(tiny_dataset_dir) -> None:
    raw = tiny_dataset_dir("windsorml")
    surface = _surface(raw, "windsorml", 0)
    normals = surface.point_data["Normals"]
    cp = surface.point_data["cpavg"]
    assert cp[normals[:, 0] < -0.95].mean() > 0.8 and cp[normals[:, 1] > 0.95].mean() < -0.3  # the roof is +y
    cf = np.column_stack([surface.point_data[n] for n in ("cfxavg", "cfyavg", "cfzavg")])
    assert np.all(cf[:, 0] >= 0.0) and np.abs(cf).max() < 0.05  # skin friction on the body, dimensionless
    assert np.asarray(surface.points)[:, 1].min() > 0.0  # above the ground y = 0
    volume = pv.read(raw / "run_0" / "volume_0.vtu")
    far = np.asarray(volume.cell_centers().points)[:, 0] < -1.0
    assert abs(np.median(volume.cell_data["velocityxavg"][far]) - 40.0) < 4.0
    np.testing.assert_allclose(np.median(volume.cell_data["pressureavg"][far]), 37330.4, atol=100.0)


def test_volume_fields_show_free_stream_and_wake(tiny_raw_dir: Path, tmp_path: Path) -> None:
    volume = pv.read(join_pieces(tiny_raw_dir / "run_1" / "volume_1.vtu", tmp_path / "volume_1.vtu"))
    tail = pv.read(tiny_raw_dir / "run_1" / "drivaer_1.stl").bounds[1]
    x, y, z = np.asarray(volume.points).T
    ux = volume.point_data["UMeanTrim"][:, 0] / STREAM_VELOCITY
    far = (x < -3.0) | (np.abs(y) > 2.0)
    wake = (x > tail + 0.3) & (x < tail + 2.0) & (np.abs(y) < 0.4) & (z < 1.0)
    assert far.sum() > 50 and wake.sum() > 10
    assert abs(np.median(ux[far]) - 1.0) < 0.1
    assert np.mean(ux[wake]) < 0.8
    speed = np.linalg.norm(volume.point_data["UMeanTrim"], axis=1) / STREAM_VELOCITY
    np.testing.assert_allclose(volume.point_data["magUMeanNormTrim"], speed, rtol=1e-5)
    assert np.all(np.asarray(volume.points) >= np.array(VOLUME_BOX[0]) - 1e-6)


def test_runs_differ_in_shape_and_repeat_per_seed(tiny_raw_dir: Path, tmp_path: Path) -> None:
    bounds = [pv.read(tiny_raw_dir / f"run_{i}" / f"drivaer_{i}.stl").bounds for i in (1, 2)]
    assert not np.allclose(bounds[0], bounds[1])
    generate_runs(tmp_path, 1, preset="tiny", seed=0)
    for original in sorted((tiny_raw_dir / "run_1").iterdir()):
        assert filecmp.cmp(original, tmp_path / "run_1" / original.name, shallow=False), original.name
    assert len(list((tmp_path / "run_1").iterdir())) == len(list((tiny_raw_dir / "run_1").iterdir()))


def test_sizes_can_be_overridden(tmp_path: Path) -> None:
    [run] = generate_runs(tmp_path, 1, preset="tiny", seed=3, stl_triangles=400,
                          surface_cells=800, volume_points=500, dataset="ahmedml")
    assert 300 <= pv.read(run / "ahmed_1.stl").n_cells <= 500
    assert 650 <= pv.read(run / "boundary_1.vtp").n_cells <= 950
    assert pv.read(run / "volume_1.vtu").n_points == 500


def test_unknown_preset_size_and_dataset_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        generate_runs(tmp_path, 1, preset="huge")
    with pytest.raises(ValueError, match="unknown size overrides.*volume_cells"):
        generate_runs(tmp_path, 1, preset="tiny", volume_cells=10)
    with pytest.raises(ValueError, match=r"unknown dataset 'drivaer'; the generator writes \['drivaerml', 'ahmedml', "):
        generate_runs(tmp_path, 1, preset="tiny", dataset="drivaer")


@pytest.mark.slow
def test_command_line_writes_the_run_folders(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "synthetic_data.py", "--dataset", "windsorml", "--preset", "tiny", "--runs", "2",
         "--seed", "5", "--out", str(tmp_path), "--volume-points", "300"],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_0", "run_1"]
    for key in ("stl", "surface", "volume", "surface_areas"):
        assert _file(tmp_path, "windsorml", 1, key).is_file(), key
    assert pv.read(_file(tmp_path, "windsorml", 1, "volume")).n_points == 300
    head = _file(tmp_path, "windsorml", 1, "surface").read_bytes()[:200]
    assert b'type="UnstructuredGrid"' in head and b'header_type="UInt64"' in head  # as WindsorML publishes
