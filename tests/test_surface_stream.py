"""process_data's boundary surface, read and written a block of cells at a time, against VTK's
whole-file reading of the same VTP (``read_surface``): every encoding VTK writes (appended raw or
base64, inline binary; no compression, zlib, lz4, lzma; UInt32 and UInt64 headers), the
whole-file fallback for inline ascii and for line cells, a truncated file named unreadable, and a
whole processed run from streamed reading against the same run read whole with VTK."""

from __future__ import annotations

import itertools
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import PROCESS_OPTIONS, parametrize_tiered
from test_xml_stream import COMPRESSORS, HEADERS, MODES, write
from vtkmodules.util.numpy_support import vtk_to_numpy

import domino_pipeline.inputs.meshes.surface_stream as surface_stream
import domino_pipeline.inputs.meshes.volume_stream as volume_stream
from domino_pipeline.inputs.meshes.mesh_rows import SURFACE_ARRAYS
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_stl, read_surface
from domino_pipeline.inputs.meshes.mesh_stream import WholeFileFallback
from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors
from domino_pipeline.processed.runs import load_run, open_run
from domino_pipeline.processed.statistics_table import flatten
from domino_pipeline.inputs.meshes.surface_stream import open_surface
from domino_pipeline.inputs.processing.process_runs import process_run
from synthetic_data import join_pieces

SURFACE = PROCESS_OPTIONS.surface_variables


def mixed_surface(rng: np.random.Generator) -> pv.PolyData:
    """A bumpy sheet of quads, triangle pairs and pentagons (a quad with a raised point on one
    edge), in shuffled cell order, with unused points and the DrivAerML wall fields (one of them
    Float64) as cell data."""
    n = 24
    x, y = np.meshgrid(np.linspace(0, 2, n + 1), np.linspace(0, 1, n + 1), indexing="ij")
    z = 0.1 * np.sin(3 * x) * np.cos(4 * y) + rng.normal(0, 0.01, x.shape)
    points = [np.column_stack([x.ravel(), y.ravel(), z.ravel()])]
    faces, extra = [], len(points[0])
    for i, j in itertools.product(range(n), range(n)):
        a, b, c, d = i * (n + 1) + j, (i + 1) * (n + 1) + j, (i + 1) * (n + 1) + j + 1, i * (n + 1) + j + 1
        kind = rng.integers(3)
        if kind == 0:
            faces.append([a, b, c, d])
        elif kind == 1:
            faces += [[a, b, c], [a, c, d]]
        else:
            points.append(((points[0][a] + points[0][b]) / 2 + [0, 0, 0.02])[None])
            faces.append([a, extra, b, c, d])
            extra += 1
    points.append(rng.normal(size=(7, 3)))  # used by no cell
    faces = [faces[k] for k in rng.permutation(len(faces))]
    mesh = pv.PolyData(np.vstack(points).astype(np.float32), faces=np.concatenate([[len(f), *f] for f in faces]))
    mesh.cell_data["pMeanTrim"] = rng.normal(0, 300, mesh.n_cells).astype(np.float32)
    mesh.cell_data["wallShearStressMeanTrim"] = rng.normal(0, 2, (mesh.n_cells, 3))
    return mesh


def _run_with_surface(tiny_raw_dir: Path, tmp: Path, mesh: pv.PolyData, mode: str, compressor: str,
                      header: int) -> Path:
    run = tmp / "run_1"
    run.mkdir(parents=True)
    shutil.copy(tiny_raw_dir / "run_1" / "drivaer_1.stl", run / "drivaer_1.stl")
    join_pieces(tiny_raw_dir / "run_1" / "volume_1.vtu", run / "volume_1.vtu")
    write(mesh, run / "boundary_1.vtp", mode, compressor, header)
    return run


def _expected_surface(run: Path) -> dict[str, np.ndarray]:
    """The surface as VTK reads the whole file, scaled as process_data scales it."""
    whole = read_surface(run / "boundary_1.vtp", SURFACE)
    length = car_length(read_stl(run / "drivaer_1.stl")["stl_coordinates"])
    divisors = field_divisors(PROCESS_OPTIONS.surface_fields, PROCESS_OPTIONS.stream_velocity, PROCESS_OPTIONS.air_density, length)
    return whole | {"surface_fields": whole["surface_fields"] / divisors}


def _assert_surface_equal(run: Path, out: Path) -> None:
    got = load_run(out, list(SURFACE_ARRAYS))
    want = _expected_surface(run)
    for name in SURFACE_ARRAYS:
        np.testing.assert_array_equal(got[name], want[name].astype(np.float32), err_msg=name)
    attrs = open_run(out).attrs
    centres = want["surface_mesh_centers"]
    assert attrs["bounds"]["surface"] == [centres.min(0).tolist(), centres.max(0).tolist()]
    assert attrs["counts"]["surface_cells"] == len(centres)


@parametrize_tiered("mode,compressor,header", list(itertools.product(MODES, COMPRESSORS, HEADERS)),
                    fast=("appended-base64", "zlib", 32))  # VTK's default
def test_streamed_surface_equals_vtk_whole_file(tiny_raw_dir: Path, tmp_path: Path, mode: str,
                                                compressor: str, header: int) -> None:
    mesh = mixed_surface(np.random.default_rng(11))
    assert set(np.diff(vtk_to_numpy(mesh.GetPolys().GetOffsetsArray())).tolist()) == {3, 4, 5}
    run = _run_with_surface(tiny_raw_dir, tmp_path / "raw", mesh, mode, compressor, header)
    assert open_surface(run / "boundary_1.vtp", SURFACE).file is not None  # read by cells
    process_run(run, tmp_path / "run_1.zarr", PROCESS_OPTIONS, surface_block=97)
    _assert_surface_equal(run, tmp_path / "run_1.zarr")


def _with_a_line(mesh: pv.PolyData) -> pv.PolyData:
    """``mesh`` with a line cell too (before the polygons in VTK's cell order), fields kept."""
    lined = pv.PolyData(mesh.points, faces=mesh.faces, lines=[2, 0, 1])
    for name in SURFACE:
        lined.cell_data[name] = np.concatenate([mesh.cell_data[name][:1], mesh.cell_data[name]])
    return lined


@parametrize_tiered("mode,change,reason", [("ascii", lambda mesh: mesh, "inline ascii"),
                                           ("appended-raw", _with_a_line, "line cells besides polygons")])
def test_unstreamable_surface_falls_back_to_vtk_with_a_warning(tiny_raw_dir: Path, tmp_path: Path, mode: str,
                                                               change, reason: str) -> None:
    run = _run_with_surface(tiny_raw_dir, tmp_path / "raw", change(mixed_surface(np.random.default_rng(12))),
                            mode, "none", 32)
    with pytest.warns(WholeFileFallback, match=f"{reason}.*reading it whole with VTK.*GiB of memory"):
        process_run(run, tmp_path / "run_1.zarr", PROCESS_OPTIONS, surface_block=97)
    _assert_surface_equal(run, tmp_path / "run_1.zarr")


def test_a_non_finite_surface_point_is_named(tiny_raw_dir: Path, tmp_path: Path) -> None:
    mesh = mixed_surface(np.random.default_rng(13))
    mesh.points[[5, 9]] = np.nan
    run = _run_with_surface(tiny_raw_dir, tmp_path / "raw", mesh, "appended-base64", "zlib", 32)
    with pytest.raises(RunError, match=r"boundary_1\.vtp: 6 point coordinates are not finite"):
        process_run(run, tmp_path / "run_1.zarr", PROCESS_OPTIONS, surface_block=97)
    with pytest.raises(RunError, match=r"boundary_1\.vtp: 6 point coordinates are not finite"):
        read_surface(run / "boundary_1.vtp", SURFACE)
    assert not (tmp_path / "run_1.zarr").exists()


def _read_whole_with_vtk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every surface and volume file take the readers' whole-file VTK path."""
    monkeypatch.setattr(surface_stream, "_unstreamable", lambda file: "read whole for this test")
    monkeypatch.setattr(volume_stream, "_unstreamable", lambda file, source: "read whole for this test")


@parametrize_tiered("source", ["points", "cells"], fast="cells")
def test_processed_run_from_streamed_reading_equals_vtk_whole_file_reading(
    tiny_raw_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    options = replace(PROCESS_OPTIONS, volume_source=source)
    streamed, whole = tmp_path / "streamed.zarr", tmp_path / "whole.zarr"
    run = tmp_path / "raw" / "run_2"  # the volume joined: VTK reads one file
    shutil.copytree(tiny_raw_dir / "run_2", run)
    join_pieces(run / "volume_2.vtu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", WholeFileFallback)  # both files read by rows
        process_run(run, streamed, options, block_rows=1000, surface_block=500)
    with monkeypatch.context() as patch:
        _read_whole_with_vtk(patch)
        with pytest.warns(WholeFileFallback, match="read whole for this test") as fallbacks:
            process_run(run, whole, options)
    assert sorted(Path(str(w.message).split(":")[0]).suffix for w in fallbacks) == [".vtp", ".vtu"]
    got, want = load_run(streamed), load_run(whole)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    got_attrs, want_attrs = dict(open_run(streamed).attrs), dict(open_run(whole).attrs)
    assert got_attrs.pop("write_id") != want_attrs.pop("write_id")
    got_statistics, want_statistics = got_attrs.pop("statistics"), want_attrs.pop("statistics")
    assert got_attrs == want_attrs
    # the same statistics, merged over other blocks; the cells' quality needs the file's polygons
    assert "cells" not in want_statistics["surface"] and got_statistics["surface"].pop("cells")
    got_flat, want_flat = flatten(got_statistics), flatten(want_statistics)
    assert {k for k, v in got_flat.items() if v is None} == {k for k, v in want_flat.items() if v is None}
    assert {k: v for k, v in got_flat.items() if v is not None} == pytest.approx(
        {k: v for k, v in want_flat.items() if v is not None}, rel=1e-9, abs=1e-12)


def test_a_truncated_surface_is_named_unreadable(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run = _run_with_surface(tiny_raw_dir, tmp_path / "raw", mixed_surface(np.random.default_rng(14)),
                            "appended-raw", "zlib", 64)
    vtp = run / "boundary_1.vtp"
    vtp.write_bytes(vtp.read_bytes()[: vtp.stat().st_size * 3 // 4])
    with pytest.raises(RunError, match=r"boundary_1\.vtp: unreadable \(the file is truncated: it does not "
                                       r"end with </AppendedData> and </VTKFile>\)"):
        process_run(run, tmp_path / "run_1.zarr", PROCESS_OPTIONS, surface_block=97)
    assert not (tmp_path / "run_1.zarr").exists()
