"""The streaming VTK XML reader against VTK's own reader, for every encoding VTK writes:
appended raw or base64, inline binary, inline ascii (not streamable), no compression or zlib,
lz4 and lzma blocks, UInt32 and UInt64 headers, and files split into ``.part`` pieces."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from vtkmodules.vtkIOXML import (
    vtkXMLPolyDataReader,
    vtkXMLPolyDataWriter,
    vtkXMLUnstructuredGridReader,
    vtkXMLUnstructuredGridWriter,
)

from domino_pipeline.inputs.vtk_xml_stream import VtkXmlError, VtkXmlFile

MODES = ["appended-raw", "appended-base64", "binary"]
COMPRESSORS = ["none", "zlib", "lz4", "lzma"]
HEADERS = [32, 64]


def mixed_grid(rng: np.random.Generator) -> pv.UnstructuredGrid:
    """Tetras, hexahedra, wedges, pyramids and vertices over random points, with point and
    cell data of one and three components."""
    points = rng.normal(size=(900, 3)).astype(np.float32)
    sizes = {pv.CellType.TETRA: 4, pv.CellType.HEXAHEDRON: 8, pv.CellType.WEDGE: 6,
             pv.CellType.PYRAMID: 5, pv.CellType.VERTEX: 1}
    cells = {kind: rng.integers(0, len(points), (150, n)) for kind, n in sizes.items()}
    grid = pv.UnstructuredGrid(cells, points)
    grid.point_data["p"] = rng.normal(size=grid.n_points).astype(np.float32)
    grid.point_data["U"] = rng.normal(size=(grid.n_points, 3)).astype(np.float32)
    grid.cell_data["p"] = rng.normal(size=grid.n_cells).astype(np.float32)
    grid.cell_data["U"] = rng.normal(size=(grid.n_cells, 3)).astype(np.float64)
    return grid


def write(mesh, path: Path, mode: str, compressor: str, header: int) -> Path:
    """Write ``mesh`` with VTK's XML writer in one encoding, with small compression blocks so
    that every array spans many of them."""
    writer = vtkXMLPolyDataWriter() if isinstance(mesh, pv.PolyData) else vtkXMLUnstructuredGridWriter()
    writer.SetFileName(str(path))
    writer.SetInputData(mesh)
    if mode == "binary":
        writer.SetDataModeToBinary()
    elif mode == "ascii":
        writer.SetDataModeToAscii()
    else:
        writer.SetDataModeToAppended()
        writer.SetEncodeAppendedData(mode == "appended-base64")
    getattr(writer, {"none": "SetCompressorTypeToNone", "zlib": "SetCompressorTypeToZLib",
                     "lz4": "SetCompressorTypeToLZ4", "lzma": "SetCompressorTypeToLZMA"}[compressor])()
    writer.SetHeaderType(writer.UInt32 if header == 32 else writer.UInt64)
    writer.SetBlockSize(1000)
    assert writer.Write()
    return path


def vtk_read(path: Path):
    reader = vtkXMLPolyDataReader() if path.suffix == ".vtp" else vtkXMLUnstructuredGridReader()
    reader.SetFileName(str(path))
    reader.Update()
    return pv.wrap(reader.GetOutput())


def read_in_blocks(source: VtkXmlFile, section: str, name: str, rows: int, block: int) -> np.ndarray:
    parts = [source.read(section, name, s, min(s + block, rows)) for s in range(0, rows, block)]
    return np.concatenate(parts)


def assert_same_as_vtk(source: VtkXmlFile, mesh, block: int = 97) -> None:
    np.testing.assert_array_equal(read_in_blocks(source, "Points", "Points", mesh.n_points, block),
                                  mesh.points)
    for section, data, rows in (("PointData", mesh.point_data, mesh.n_points),
                                ("CellData", mesh.cell_data, mesh.n_cells)):
        assert sorted(source.names(section)) == sorted(data.keys())
        for name in data.keys():
            got = read_in_blocks(source, section, name, rows, block)
            want = np.asarray(data[name]).reshape(rows, -1)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode,compressor,header", list(itertools.product(MODES, COMPRESSORS, HEADERS)))
def test_volume_rows_equal_vtk_reader(tmp_path: Path, mode: str, compressor: str, header: int) -> None:
    path = write(mixed_grid(np.random.default_rng(0)), tmp_path / "volume_1.vtu", mode, compressor, header)
    source = VtkXmlFile.open(path)
    assert source.streamable and source.kind == "UnstructuredGrid"
    mesh = vtk_read(path)
    assert_same_as_vtk(source, mesh)
    for name in ("connectivity", "offsets", "types"):
        vtk_cells = {"connectivity": mesh.cell_connectivity, "offsets": mesh.cell_offsets[1:],
                     "types": mesh.celltypes}[name]
        got = source.read("Cells", name, 0, source.rows("Cells", name))[:, 0]
        np.testing.assert_array_equal(got, vtk_cells)


@pytest.mark.parametrize("mode,compressor", list(itertools.product(MODES, ["none", "zlib"])))
def test_boundary_rows_equal_vtk_reader(tmp_path: Path, mode: str, compressor: str) -> None:
    rng = np.random.default_rng(1)
    points = rng.normal(size=(400, 3)).astype(np.float32)
    faces = np.concatenate([np.column_stack([np.full(200, 4), rng.integers(0, 400, (200, 4))]).ravel(),
                            np.column_stack([np.full(100, 3), rng.integers(0, 400, (100, 3))]).ravel()])
    mesh = pv.PolyData(points, faces=faces)
    mesh.cell_data["pMeanTrim"] = rng.normal(size=mesh.n_cells).astype(np.float32)
    mesh.cell_data["wallShearStressMeanTrim"] = rng.normal(size=(mesh.n_cells, 3)).astype(np.float32)
    path = write(mesh, tmp_path / "boundary_1.vtp", mode, compressor, 64)
    source = VtkXmlFile.open(path)
    assert source.kind == "PolyData" and source.n_cells == mesh.n_cells
    assert_same_as_vtk(source, vtk_read(path), block=31)


@pytest.mark.parametrize("mode", ["appended-raw", "appended-base64", "binary"])
def test_part_pieces_read_as_one_stream(tmp_path: Path, mode: str) -> None:
    whole = write(mixed_grid(np.random.default_rng(2)), tmp_path / "whole.vtu", mode, "zlib", 64)
    data = whole.read_bytes()
    run = tmp_path / "run_1"
    run.mkdir()
    cuts = [0, 700, len(data) // 3, len(data) // 3 + 5, 2 * len(data) // 3, len(data)]
    for k in range(len(cuts) - 1):  # part10 after part9: pieces are ordered by number
        (run / f"volume_1.vtu.part{[1, 2, 3, 9, 10][k]}").write_bytes(data[cuts[k]:cuts[k + 1]])
    source = VtkXmlFile.open(run / "volume_1.vtu")
    assert len(source.source.paths) == 5
    assert_same_as_vtk(source, vtk_read(whole), block=41)


def test_ascii_is_reported_not_streamable(tmp_path: Path) -> None:
    path = write(mixed_grid(np.random.default_rng(3)), tmp_path / "volume_1.vtu", "ascii", "none", 32)
    source = VtkXmlFile.open(path)
    assert not source.streamable
    assert source.whole_file_bytes() > path.stat().st_size
    with pytest.raises(VtkXmlError, match="ascii"):
        source.read("PointData", "p", 0, 10)


def test_corrupt_block_and_missing_array_are_one_line_errors(tmp_path: Path) -> None:
    path = write(mixed_grid(np.random.default_rng(4)), tmp_path / "volume_1.vtu", "appended-raw", "zlib", 64)
    source = VtkXmlFile.open(path)
    with pytest.raises(VtkXmlError, match="no PointData array nope"):
        source.read("PointData", "nope", 0, 1)
    start = source._decoder(source.entry("CellData", "U")).data_at
    data = bytearray(path.read_bytes())
    data[start + 10:start + 60] = b"\x00" * 50
    path.write_bytes(bytes(data))
    source = VtkXmlFile.open(path)
    with pytest.raises(VtkXmlError, match="corrupt|holds"):
        read_in_blocks(source, "CellData", "U", source.n_cells, 100)


@pytest.mark.parametrize("mode", ["binary", "appended-base64"])
def test_attributes_in_single_quotes_are_read(tmp_path: Path, mode: str) -> None:
    """foamToVTK writes its XML attributes in single quotes (base64 data holds no quote)."""
    path = write(mixed_grid(np.random.default_rng(2)), tmp_path / "volume_1.vtu", mode, "zlib", 64)
    single = tmp_path / "single.vtu"
    single.write_bytes(path.read_bytes().replace(b'"', b"'"))
    assert b'"' not in single.read_bytes()
    assert_same_as_vtk(VtkXmlFile.open(single), vtk_read(path))
