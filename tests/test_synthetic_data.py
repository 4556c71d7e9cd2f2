"""Synthetic runs read back with pyvista: names, shapes, a watertight outward body, the volume
outside it, plausible fields, determinism and size overrides."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from vtkmodules.util.numpy_support import vtk_to_numpy

from synthetic_data import GROUND_Z, STREAM_VELOCITY, VOLUME_BOX, generate_runs

ROOT = Path(__file__).resolve().parents[1]
SURFACE_BOX = (np.array([-1.5, -1.4, -0.32]), np.array([5.0, 1.4, 1.4]))
SURFACE_ARRAYS = {"pMeanTrim": 1, "CpMeanTrim": 1, "pPrime2MeanTrim": 1,
                  "wallShearStressMeanTrim": 3}
VOLUME_ARRAYS = {"UMeanTrim": 3, "pMeanTrim": 1, "nutMeanTrim": 1, "CpMeanTrim": 1,
                 "magUMeanNormTrim": 1}


def _files(raw_dir: Path, i: int) -> tuple[Path, Path, Path]:
    run = raw_dir / f"run_{i}"
    return run / f"drivaer_{i}.stl", run / f"boundary_{i}.vtp", run / f"volume_{i}.vtu"


def _enclosed(points: np.ndarray, surface: pv.PolyData) -> np.ndarray:
    """True for points inside the closed ``surface`` (VTK ray casting)."""
    selection = pv.PolyData(points).select_interior_points(surface, check_surface=True)
    return selection.point_data["selected_points"].astype(bool)


def _cell_sizes(mesh: pv.PolyData) -> np.ndarray:
    return np.diff(vtk_to_numpy(mesh.GetPolys().GetOffsetsArray()))


@pytest.mark.parametrize("i", [1, 2])
def test_stl_is_a_watertight_outward_body_in_the_surface_box(tiny_raw_dir: Path, i: int) -> None:
    stl_path, _, _ = _files(tiny_raw_dir, i)
    assert stl_path.read_text()[:6] == "solid "  # ASCII, like DrivAerML's
    stl = pv.read(stl_path)
    assert stl.is_all_triangles and 1_000 <= stl.n_cells <= 2_000
    assert stl.n_open_edges == 0 and stl.is_manifold
    assert stl.volume > 3.0  # enclosed volume of a car, positive: wound outward
    low, high = np.array(stl.bounds).reshape(3, 2).T
    assert np.all(low >= SURFACE_BOX[0]) and np.all(high <= SURFACE_BOX[1])
    assert low[2] > GROUND_Z  # ride height above the ground plane


@pytest.mark.parametrize("i", [1, 2])
def test_boundary_is_finer_mixed_cells_with_wall_fields(tiny_raw_dir: Path, i: int) -> None:
    stl_path, vtp_path, _ = _files(tiny_raw_dir, i)
    surface = pv.read(vtp_path)
    assert surface.n_cells > pv.read(stl_path).n_cells
    assert set(np.unique(_cell_sizes(surface))) == {3, 4}
    assert surface.n_open_edges == 0
    for name, width in SURFACE_ARRAYS.items():
        values = surface.cell_data[name]
        assert values.dtype == np.float32
        assert values.reshape(surface.n_cells, -1).shape[1] == width
        assert np.all(np.isfinite(values))


def test_boundary_normals_point_out_of_the_body(tiny_raw_dir: Path) -> None:
    _, vtp_path, _ = _files(tiny_raw_dir, 1)
    surface = pv.read(vtp_path)
    normals = surface.compute_normals(
        cell_normals=True, point_normals=False, consistent_normals=False, auto_orient_normals=False
    ).cell_data["Normals"]
    centres = surface.cell_centers().points
    step = 0.3 * np.sqrt(surface.compute_cell_sizes().cell_data["Area"])[:, None]
    closed = surface.triangulate()
    assert not _enclosed(centres + step * normals, closed).any()
    assert _enclosed(centres - step * normals, closed).mean() > 0.98  # thin ends may miss


@pytest.mark.parametrize("i", [1, 2])
def test_volume_points_fill_the_box_outside_the_body(tiny_raw_dir: Path, i: int) -> None:
    stl_path, _, vtu_path = _files(tiny_raw_dir, i)
    volume = pv.read(vtu_path)
    assert isinstance(volume, pv.UnstructuredGrid) and volume.n_points == 8_000
    assert volume.n_cells == volume.n_points
    for data in (volume.point_data, volume.cell_data):
        for name, width in VOLUME_ARRAYS.items():
            assert data[name].dtype == np.float32
            assert data[name].reshape(volume.n_points, -1).shape[1] == width
    points = np.asarray(volume.points)
    assert np.all(points >= np.array(VOLUME_BOX[0]) - 1e-6)
    assert np.all(points <= np.array(VOLUME_BOX[1]) + 1e-6)
    assert not _enclosed(points, pv.read(stl_path)).any()


def test_surface_fields_show_stagnation_suction_and_wall_shear(tiny_raw_dir: Path) -> None:
    _, vtp_path, _ = _files(tiny_raw_dir, 1)
    surface = pv.read(vtp_path)
    normals = surface.compute_normals(cell_normals=True, point_normals=False).cell_data["Normals"]
    cp = surface.cell_data["CpMeanTrim"]
    nose = normals[:, 0] < -0.95
    roof = normals[:, 2] > 0.95
    assert cp[nose].mean() > 0.8 and cp[roof].mean() < -0.3
    np.testing.assert_allclose(surface.cell_data["pMeanTrim"], 0.5 * STREAM_VELOCITY**2 * cp,
                               rtol=1e-5, atol=1e-3)
    shear = surface.cell_data["wallShearStressMeanTrim"]
    assert np.all(shear[:, 0] >= 0.0)
    np.testing.assert_allclose(np.einsum("ij,ij->i", shear, normals), 0.0, atol=1e-3)
    assert np.all(surface.cell_data["pPrime2MeanTrim"] > 0.0)


def test_volume_fields_show_free_stream_and_wake(tiny_raw_dir: Path) -> None:
    stl_path, _, vtu_path = _files(tiny_raw_dir, 1)
    volume = pv.read(vtu_path)
    tail = pv.read(stl_path).bounds[1]
    x, y, z = np.asarray(volume.points).T
    ux = volume.point_data["UMeanTrim"][:, 0] / STREAM_VELOCITY
    far = (x < -3.0) | (np.abs(y) > 2.0)
    wake = (x > tail + 0.3) & (x < tail + 2.0) & (np.abs(y) < 0.4) & (z < 1.0)
    assert far.sum() > 50 and wake.sum() > 10
    assert abs(np.median(ux[far]) - 1.0) < 0.1
    assert np.mean(ux[wake]) < 0.8
    speed = np.linalg.norm(volume.point_data["UMeanTrim"], axis=1) / STREAM_VELOCITY
    np.testing.assert_allclose(volume.point_data["magUMeanNormTrim"], speed, rtol=1e-5)


def test_runs_differ_in_shape_and_repeat_per_seed(tiny_raw_dir: Path, tmp_path: Path) -> None:
    bounds = [pv.read(_files(tiny_raw_dir, i)[0]).bounds for i in (1, 2)]
    assert not np.allclose(bounds[0], bounds[1])
    generate_runs(tmp_path, 1, preset="tiny", seed=0)
    for original, again in zip(_files(tiny_raw_dir, 1), _files(tmp_path, 1)):
        assert filecmp.cmp(original, again, shallow=False), again.name


def test_sizes_can_be_overridden(tmp_path: Path) -> None:
    [run] = generate_runs(tmp_path, 1, preset="tiny", seed=3, stl_triangles=400,
                          surface_cells=800, volume_points=500)
    assert 300 <= pv.read(run / "drivaer_1.stl").n_cells <= 500
    assert 650 <= pv.read(run / "boundary_1.vtp").n_cells <= 950
    assert pv.read(run / "volume_1.vtu").n_points == 500


def test_unknown_preset_and_size_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        generate_runs(tmp_path, 1, preset="huge")
    with pytest.raises(ValueError, match="unknown size overrides.*volume_cells"):
        generate_runs(tmp_path, 1, preset="tiny", volume_cells=10)


def test_command_line_writes_the_run_folders(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "synthetic_data.py", "--preset", "tiny", "--runs", "2", "--seed", "5",
         "--out", str(tmp_path), "--volume-points", "300"],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )
    for i in (1, 2):
        assert all(p.is_file() for p in _files(tmp_path, i))
    assert pv.read(_files(tmp_path, 2)[2]).n_points == 300
