"""process_data's volume, read and written block by block, against VTK's whole-file reading of
the same VTU: points with point data and cell centres with cell data, in several encodings, and
the whole-file fallback for what cannot be streamed."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import PROCESS_OPTIONS
from test_vtk_xml_stream import write

from domino_pipeline.inputs.drivaerml_reader import read_volume
from domino_pipeline.inputs.nondimensional import car_length, field_divisors
from domino_pipeline.inputs.processed_run import load_processed_run, open_processed_run
from domino_pipeline.inputs.volume_stream import WholeFileFallback
from process_data import process_run

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
    from domino_pipeline.inputs.drivaerml_reader import read_stl
    return read_stl(run / "drivaer_1.stl")["stl_coordinates"]


@pytest.mark.parametrize("source", ["points", "cells"])
@pytest.mark.parametrize("mode,compressor", [("appended-raw", "none"), ("appended-base64", "zlib"),
                                             ("binary", "lz4"), ("appended-raw", "lzma")])
def test_streamed_volume_equals_vtk_whole_file(tiny_raw_dir: Path, tmp_path: Path, source: str,
                                               mode: str, compressor: str) -> None:
    grid = cfd_like_grid(np.random.default_rng(5))
    run = _run_with_volume(tiny_raw_dir, tmp_path / "raw", grid, mode, compressor)
    out = tmp_path / "run_1.zarr"
    process_run(run, out, replace(PROCESS_OPTIONS, volume_source=source), block_rows=97)
    got = load_processed_run(out, ["volume_mesh_centers", "volume_fields"])
    want = _expected_volume(run, source)
    np.testing.assert_allclose(got["volume_mesh_centers"], want["volume_mesh_centers"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["volume_fields"], want["volume_fields"])
    attrs = open_processed_run(out).attrs
    centres = want["volume_mesh_centers"]
    np.testing.assert_allclose(attrs["bounds"]["volume"], [centres.min(0), centres.max(0)], rtol=1e-6)
    assert attrs["counts"]["volume_points"] == len(centres) == (grid.n_points if source == "points" else grid.n_cells)


@pytest.mark.parametrize("mode,polygons,reason", [("ascii", False, "inline ascii"),
                                                  ("appended-raw", True, "cell types \\[7\\]")])
def test_unstreamable_volume_falls_back_to_vtk_with_a_warning(
    tiny_raw_dir: Path, tmp_path: Path, mode: str, polygons: bool, reason: str
) -> None:
    run = _run_with_volume(tiny_raw_dir, tmp_path / "raw", cfd_like_grid(np.random.default_rng(6), polygons),
                           mode, "none")
    out = tmp_path / "run_1.zarr"
    with pytest.warns(WholeFileFallback, match=f"{reason}.*reading it whole with VTK.*GiB of memory"):
        process_run(run, out, replace(PROCESS_OPTIONS, volume_source="cells"))
    got = load_processed_run(out, ["volume_mesh_centers", "volume_fields"])
    want = _expected_volume(run, "cells")
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
