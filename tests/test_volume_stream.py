"""process_data's volume, read and written block by block, against VTK's whole-file reading of
the same VTU: points with point data and cell centres with cell data, in several encodings, the
whole-file fallback for what cannot be streamed, and a volume split into pieces at a byte inside
an array's data (``.00.part``/``.01.part`` and ``.part1``/``.part2``) read bit for bit as the
whole file."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import PROCESS_OPTIONS, import_benchmark, parametrize_tiered
from test_xml_stream import write

from domino_pipeline.inputs.raw_files.concat_bytes import piece_path
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_volume
from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors
from domino_pipeline.processed.runs import load_run, open_run
from domino_pipeline.inputs.meshes.mesh_stream import WholeFileFallback
from domino_pipeline.inputs.meshes.volume_stream import open_volume
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from domino_pipeline.inputs.processing.process_runs import process_run
from synthetic_data import join_pieces, split_into_pieces

crafted = import_benchmark("crafted_faults")

VOLUME = PROCESS_OPTIONS.volume_variables


def cfd_like_grid(rng: np.random.Generator, polygons: bool = False) -> pv.UnstructuredGrid:
    """Hexahedra, tetras, wedges and pyramids (optionally pentagons too) with the DrivAerML
    volume fields as point data and as cell data."""
    points = rng.uniform(-2.0, 2.0, size=(2000, 3)).astype(np.float32)
    sizes = {pv.CellType.HEXAHEDRON: 8, pv.CellType.TETRA: 4, pv.CellType.WEDGE: 6,
             pv.CellType.PYRAMID: 5}
    if polygons:
        sizes[pv.CellType.POLYGON] = 5
    grid = pv.UnstructuredGrid({k: rng.integers(0, len(points), (300, n)) for k, n in sizes.items()},
                               points)
    for data, n in ((grid.point_data, grid.n_points), (grid.cell_data, grid.n_cells)):
        data["UMeanTrim"] = rng.normal(30.0, 5.0, (n, 3)).astype(np.float32)
        for name in ("pMeanTrim", "nutMeanTrim", "CpMeanTrim"):
            data[name] = rng.normal(size=n).astype(np.float32)
    return grid


def _run_with_volume(tiny_raw_dir: Path, tmp: Path, grid, mode: str, compressor: str) -> Path:
    run = tmp / "run_1"
    run.mkdir(parents=True)
    for name in ("drivaer_1.stl", "boundary_1.vtp"):
        shutil.copy(tiny_raw_dir / "run_1" / name, run / name)
    write(grid, run / "volume_1.vtu", mode, compressor, 64)
    return run


def _expected_volume(run: Path, source: str) -> dict[str, np.ndarray]:
    """The volume as VTK reads the whole file, scaled as process_data scales it."""
    whole, _, _ = read_volume(run / "volume_1.vtu", VOLUME, source)
    length = car_length(load_stl_points(run))
    divisors = field_divisors(PROCESS_OPTIONS.volume_fields, PROCESS_OPTIONS.stream_velocity, PROCESS_OPTIONS.air_density, length)
    return {"volume_mesh_centers": whole["volume_mesh_centers"],
            "volume_fields": whole["volume_fields"] / divisors}


def load_stl_points(run: Path) -> np.ndarray:
    from domino_pipeline.inputs.meshes.vtk_reader import read_stl
    return read_stl(run / "drivaer_1.stl")["stl_coordinates"]


@parametrize_tiered("mode,compressor,source", [
    (mode, compressor, source) for mode, compressor in [("appended-raw", "none"), ("appended-base64", "zlib"),
                                                        ("binary", "lz4"), ("appended-raw", "lzma")]
    for source in ("points", "cells")], fast=("appended-base64", "zlib", "points"))
def test_streamed_volume_equals_vtk_whole_file(tiny_raw_dir: Path, tmp_path: Path, source: str,
                                               mode: str, compressor: str) -> None:
    grid = cfd_like_grid(np.random.default_rng(5))
    run = _run_with_volume(tiny_raw_dir, tmp_path / "raw", grid, mode, compressor)
    out = tmp_path / "run_1.zarr"
    process_run(run, out, replace(PROCESS_OPTIONS, volume_source=source), block_rows=97)
    got = load_run(out, ["volume_mesh_centers", "volume_fields"])
    want = _expected_volume(run, source)
    np.testing.assert_allclose(got["volume_mesh_centers"], want["volume_mesh_centers"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["volume_fields"], want["volume_fields"])
    attrs = open_run(out).attrs
    centres = want["volume_mesh_centers"]
    np.testing.assert_allclose(attrs["bounds"]["volume"], [centres.min(0), centres.max(0)], rtol=1e-6)
    assert attrs["counts"]["volume_points"] == len(centres) == (grid.n_points if source == "points" else grid.n_cells)


@parametrize_tiered("mode,polygons,reason", [("ascii", False, "inline ascii"),
                                             ("appended-raw", True, "cell types \\[7\\]")])
def test_unstreamable_volume_falls_back_to_vtk_with_a_warning(
    tiny_raw_dir: Path, tmp_path: Path, mode: str, polygons: bool, reason: str
) -> None:
    run = _run_with_volume(tiny_raw_dir, tmp_path / "raw", cfd_like_grid(np.random.default_rng(6), polygons),
                           mode, "none")
    out = tmp_path / "run_1.zarr"
    with pytest.warns(WholeFileFallback, match=f"{reason}.*reading it whole with VTK.*GiB of memory"):
        process_run(run, out, replace(PROCESS_OPTIONS, volume_source="cells"))
    got = load_run(out, ["volume_mesh_centers", "volume_fields"])
    want = _expected_volume(run, "cells")
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def _cut_inside(path: Path, section: str, name: str) -> int:
    """A byte offset inside the encoded data of an array, off any 4-byte boundary."""
    file = VtkXmlFile.open(path)
    data = file._array(file.entry(section, name))
    return (data.data_at + data.end) // 2 | 1


def _all_blocks(path: Path, source: str, rows: int = 1500) -> list[np.ndarray]:
    volume = open_volume(path, VOLUME, source)
    assert volume.source == source
    return [np.concatenate(parts) for parts in zip(*volume.blocks(rows))]


@parametrize_tiered("section,name,encoding,naming", [
    (section, name, encoding, naming) for section, name in [("Points", "Points"), ("CellData", "pMeanTrim")]
    for encoding in ("synthetic", "appended-raw") for naming in ("00.part", "part1")])
def test_a_volume_split_inside_an_array_reads_bit_for_bit_as_the_whole(
    tiny_raw_dir: Path, tmp_path: Path, naming: str, encoding: str, section: str, name: str
) -> None:
    whole = tmp_path / "whole" / "volume_1.vtu"
    whole.parent.mkdir()
    join_pieces(tiny_raw_dir / "run_1" / "volume_1.vtu", whole)
    if encoding != "synthetic":  # the synthetic default is appended base64 in zlib blocks
        crafted.vtk_rewrite(whole, encoding)
    run = tmp_path / "raw" / "run_1"
    shutil.copytree(tiny_raw_dir / "run_1", run, ignore=shutil.ignore_patterns("volume_1.vtu*"))
    shutil.copy(whole, run / "volume_1.vtu")
    pieces = split_into_pieces(run / "volume_1.vtu", [_cut_inside(whole, section, name)], naming)
    assert [p.name for p in pieces] == [piece_path(Path("volume_1.vtu"), k, naming).name for k in range(2)]
    for source in ("points", "cells"):
        for got, want in zip(_all_blocks(run / "volume_1.vtu", source), _all_blocks(whole, source)):
            assert got.tobytes() == want.tobytes()
    out = tmp_path / "run_1.zarr"
    process_run(run, out, replace(PROCESS_OPTIONS, volume_source="cells"), block_rows=1500)
    got = load_run(out, ["volume_mesh_centers", "volume_fields"])
    want = _expected_volume_of(whole, run, "cells")
    np.testing.assert_array_equal(got["volume_mesh_centers"], want["volume_mesh_centers"])
    np.testing.assert_array_equal(got["volume_fields"], want["volume_fields"])
    assert open_run(out).attrs["sources"]["volume"]["bytes"] == whole.stat().st_size


def _expected_volume_of(whole: Path, run: Path, source: str) -> dict[str, np.ndarray]:
    """The volume of the whole file as VTK reads it (cell centres: VTK's vtkCellCenters),
    scaled as process_data scales it."""
    arrays, _, _ = read_volume(whole, VOLUME, source)
    divisors = field_divisors(PROCESS_OPTIONS.volume_fields, PROCESS_OPTIONS.stream_velocity, PROCESS_OPTIONS.air_density,
                              car_length(load_stl_points(run)))
    return {"volume_mesh_centers": arrays["volume_mesh_centers"], "volume_fields": arrays["volume_fields"] / divisors}


def test_a_missing_second_piece_is_named(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run_1"
    shutil.copytree(tiny_raw_dir / "run_1", run)
    join_pieces(run / "volume_1.vtu")
    first, second = split_into_pieces(run / "volume_1.vtu", [_cut_inside(run / "volume_1.vtu", "Points", "Points")])
    second.unlink()
    with pytest.raises(RunError, match=r"volume_1\.vtu: unreadable \(the file \(or its last piece, "
                                       r"volume_1\.vtu\.00\.part\) is truncated"):
        process_run(run, tmp_path / "run_1.zarr", PROCESS_OPTIONS)
    assert not (tmp_path / "run_1.zarr").exists()
