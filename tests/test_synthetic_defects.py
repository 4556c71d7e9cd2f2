"""Each injected defect does to the files what synthetic/defects.py says, checked with VTK on the
files before and after; the command line injects them and records where."""

from __future__ import annotations

import filecmp
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import DEFAULTS

import synthetic_data
from domino_pipeline.inference.forces import mesh_vector_areas
from domino_pipeline.inputs.meshes.vtk_reader import read_surface
from synthetic.defects import DEFECTS, inject_defects, parse_defects
from synthetic.writers import join_pieces

PROFILE = DEFAULTS.dataset


@pytest.fixture()
def raw(tiny_raw_dir: Path, tmp_path: Path) -> Path:
    """A copy of the two tiny runs, to be damaged."""
    shutil.copytree(tiny_raw_dir, tmp_path / "raw")
    return tmp_path / "raw"


def _read(path: Path) -> pv.DataSet:
    """The mesh ``path``, joined from its pieces (into a temporary copy) where it is in pieces."""
    with tempfile.TemporaryDirectory() as tmp:
        mesh = pv.read(join_pieces(path, Path(tmp) / path.name))
        return mesh


def _apply(raw: Path, defect: str) -> tuple[Path, Path]:
    inject_defects(raw, {1: defect}, PROFILE)
    assert json.loads((raw / "defects.json").read_text()) == {"run_1": defect}
    return raw / "run_1", raw / "run_2"


def test_scaled_fields(raw, tiny_raw_dir):
    run, _ = _apply(raw, "scaled_fields")
    for name in ("boundary_1.vtp", "volume_1.vtu"):
        before, after = _read(tiny_raw_dir / "run_1" / name), _read(run / name)
        for data in ("point_data", "cell_data"):
            for field in getattr(before, data):
                np.testing.assert_array_equal(getattr(after, data)[field], 10 * getattr(before, data)[field])
        np.testing.assert_array_equal(after.points, before.points)


def test_foreign_boundary_and_forces_are_the_next_runs_files(raw):
    run, donor = _apply(raw, "foreign_boundary")
    assert filecmp.cmp(run / "boundary_1.vtp", donor / "boundary_2.vtp", shallow=False)
    assert filecmp.cmp(run / "boundary_cell_area_1.npy", donor / "boundary_cell_area_2.npy", shallow=False)
    run, donor = _apply(raw, "foreign_forces")
    for own, other in (("force_mom_1.csv", "force_mom_2.csv"),
                       ("force_mom_constref_1.csv", "force_mom_constref_2.csv")):
        assert filecmp.cmp(run / own, donor / other, shallow=False)


def test_reversed_boundary_flips_every_area_vector_and_keeps_the_fields(raw, tiny_raw_dir):
    run, _ = _apply(raw, "reversed_boundary")
    before, after = pv.read(tiny_raw_dir / "run_1" / "boundary_1.vtp"), pv.read(run / "boundary_1.vtp")
    np.testing.assert_allclose(mesh_vector_areas(after), -mesh_vector_areas(before), atol=1e-12)
    for field in before.cell_data:
        np.testing.assert_array_equal(after.cell_data[field], before.cell_data[field])


def test_truncated_volume_keeps_a_tenth(raw, tiny_raw_dir):
    run, _ = _apply(raw, "truncated_volume")
    before, after = _read(tiny_raw_dir / "run_1" / "volume_1.vtu"), _read(run / "volume_1.vtu")
    assert (after.n_points, after.n_cells) == (before.n_points // 10, before.n_cells // 10)
    np.testing.assert_array_equal(after.points, before.points[: after.n_points])
    np.testing.assert_array_equal(after.point_data["pMeanTrim"], before.point_data["pMeanTrim"][: after.n_points])
    assert "vtkOriginalPointIds" not in after.point_data


def test_offset_field_shifts_the_pressure_by_one_dynamic_pressure(raw, tiny_raw_dir):
    run, _ = _apply(raw, "offset_field")
    variables = {"pMeanTrim": "scalar", "wallShearStressMeanTrim": "vector"}
    before, after = (read_surface(path, variables) for path in (tiny_raw_dir / "run_1" / "boundary_1.vtp",
                                                                   run / "boundary_1.vtp"))
    shift = after["surface_fields"] - before["surface_fields"]
    np.testing.assert_allclose(shift[:, 0], 0.5 * PROFILE.flow.velocity**2, rtol=1e-5)
    np.testing.assert_array_equal(shift[:, 1:], 0.0)


def test_parse_defects():
    assert parse_defects("all", 30) == {3: "scaled_fields", 8: "foreign_boundary", 13: "reversed_boundary",
                                        18: "truncated_volume", 23: "foreign_forces", 28: "offset_field"}
    assert parse_defects("offset_field:2, scaled_fields", 4) == {2: "offset_field", 4: "scaled_fields"}
    assert parse_defects("all", 6) == dict(enumerate(DEFECTS, start=1))
    with pytest.raises(ValueError, match=r"unknown defect 'holes'; the defects are \['scaled_fields'"):
        parse_defects("holes", 4)
    with pytest.raises(ValueError, match=r"defect offset_field:9: run 9 is not one of 1..4 without a defect"):
        parse_defects("offset_field:9", 4)
    with pytest.raises(ValueError, match=r"6 defects for 5 runs: one defect per run"):
        parse_defects("all", 5)


def test_the_command_line_injects_and_says_where(tmp_path, capsys):
    synthetic_data.main(["--preset", "tiny", "--runs", "3", "--out", str(tmp_path), "--defects", "truncated_volume:3",
                         "--volume-points", "2000"])
    assert "injected 1 defects: {'run_3': 'truncated_volume'}" in capsys.readouterr().out
    assert (tmp_path / "run_3" / "volume_3.vtu.01.part").is_file()  # in pieces still, as published
    assert _read(tmp_path / "run_3" / "volume_3.vtu").n_points == 200
