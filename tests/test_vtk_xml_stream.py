"""The streaming VTK XML reader against VTK's own reader, for every encoding VTK writes:
appended raw or base64, inline binary, inline ascii (not streamable), no compression or zlib,
lz4 and lzma blocks, UInt32 and UInt64 headers, and files split into ``.part`` pieces."""

from __future__ import annotations

import itertools
import shutil
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

from domino_pipeline.inputs.concat_bytes import PieceError, file_pieces, file_present, piece_path
from domino_pipeline.inputs.vtk_xml_stream import VtkXmlError, VtkXmlFile
from synthetic_data import split_into_pieces

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
@pytest.mark.parametrize("naming,pieces", [("00.part", 2), ("00.part", 3), ("part1", 11)])
def test_pieces_read_as_one_stream(tmp_path: Path, mode: str, naming: str, pieces: int) -> None:
    whole = write(mixed_grid(np.random.default_rng(2)), tmp_path / "whole.vtu", mode, "zlib", 64)
    run = tmp_path / "run_1"
    run.mkdir()
    size = whole.stat().st_size
    cuts = [700] + [size * k // pieces + 5 * k for k in range(1, pieces - 1)]  # part10 after part9
    shutil.copy(whole, run / "volume_1.vtu")
    split_into_pieces(run / "volume_1.vtu", cuts, naming)
    source = VtkXmlFile.open(run / "volume_1.vtu")
    assert [p.name for p in source.source.paths] == [piece_path(Path("volume_1.vtu"), k, naming).name
                                                     for k in range(pieces)]
    assert_same_as_vtk(source, vtk_read(whole), block=41)


def test_pieces_of_any_width_in_numeric_order(tmp_path: Path) -> None:
    whole = write(mixed_grid(np.random.default_rng(2)), tmp_path / "whole.vtu", "appended-raw", "none", 64)
    data = whole.read_bytes()
    cuts = [0, 900, 2000, 3100, len(data)]
    for k in range(4):  # 3-digit numbers: .000.part ... .003.part
        (tmp_path / f"volume_1.vtu.{k:03d}.part").write_bytes(data[cuts[k]:cuts[k + 1]])
    source = VtkXmlFile.open(tmp_path / "volume_1.vtu")
    assert len(source.source.paths) == 4 and file_present(tmp_path / "volume_1.vtu")
    assert_same_as_vtk(source, vtk_read(whole), block=53)


@pytest.mark.parametrize("names,message", [
    ([".00.part", ".02.part"], r"volume_1\.vtu\.01\.part: missing piece \(the next piece present is volume_1\.vtu\.02\.part\)"),
    ([".01.part", ".02.part"], r"volume_1\.vtu\.00\.part: missing piece"),
    ([".part2"], r"volume_1\.vtu\.part1: missing piece \(the next piece present is volume_1\.vtu\.part2\)"),
    ([".part1", ".part3"], r"volume_1\.vtu\.part2: missing piece"),
    ([".00.part", ".part1"], r"volume_1\.vtu: pieces in two namings \(volume_1\.vtu\.00\.part and volume_1\.vtu\.part1\)"),
    (["", ".00.part", ".01.part"], r"volume_1\.vtu: both the whole file and pieces of it \(volume_1\.vtu\.00\.part, \.\.\.\)"),
    ([".00.part", ".1.part", ".01.part"], r"volume_1\.vtu\.1\.part: the same piece number as volume_1\.vtu\.01\.part"),
])
def test_pieces_that_do_not_make_one_file_are_named(tmp_path: Path, names: list[str], message: str) -> None:
    for suffix in names:
        (tmp_path / f"volume_1.vtu{suffix}").write_bytes(b"x")
    assert file_present(tmp_path / "volume_1.vtu")
    with pytest.raises(PieceError, match=message):
        file_pieces(tmp_path / "volume_1.vtu")
    with pytest.raises(PieceError, match=message):
        VtkXmlFile.open(tmp_path / "volume_1.vtu")


def test_presence_by_name_without_opening(tmp_path: Path) -> None:
    path = tmp_path / "volume_1.vtu"
    assert not file_present(path) and not file_present(tmp_path / "nowhere" / "volume_1.vtu")
    (tmp_path / "volume_1.vtu.part").write_bytes(b"")  # no number: not a piece
    (tmp_path / "volume_1.vtu.00.part.tmp").write_bytes(b"")
    assert not file_present(path)
    with pytest.raises(FileNotFoundError, match=r"volume_1\.vtu: missing file"):
        file_pieces(path)
    (tmp_path / "volume_1.vtu.part1").write_bytes(b"")
    assert file_present(path) and file_pieces(path) == [tmp_path / "volume_1.vtu.part1"]
    (tmp_path / "volume_1.vtu.part1").unlink()
    path.write_bytes(b"")
    assert file_present(path) and file_pieces(path) == [path]


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
    start = source._array(source.entry("CellData", "U")).data_at
    data = bytearray(path.read_bytes())
    data[start + 10:start + 60] = b"\x00" * 50
    path.write_bytes(bytes(data))
    source = VtkXmlFile.open(path)
    with pytest.raises(VtkXmlError, match="corrupt|holds"):
        read_in_blocks(source, "CellData", "U", source.n_cells, 100)
