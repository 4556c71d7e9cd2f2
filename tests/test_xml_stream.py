"""The streaming VTK XML reader against VTK's own reader, for every encoding VTK writes:
appended raw or base64, inline binary, inline ascii (not streamable), no compression or zlib,
lz4 and lzma blocks, UInt32 and UInt64 headers, and files split into ``.part`` pieces."""

from __future__ import annotations

import base64
import itertools
import re
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import parametrize_tiered
from vtkmodules.vtkIOXML import (
    vtkXMLPolyDataReader,
    vtkXMLPolyDataWriter,
    vtkXMLUnstructuredGridReader,
    vtkXMLUnstructuredGridWriter,
)

from domino_pipeline.inputs.raw_files.concat_bytes import PieceError, file_pieces, piece_path, present_among
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlError, VtkXmlFile
from synthetic_data import split_into_pieces

MODES = ["appended-raw", "appended-base64", "binary"]
COMPRESSORS = ["none", "zlib", "lz4", "lzma"]
HEADERS = [32, 64]


def file_present(path: Path) -> bool:
    """Whether the run folder's check (present_among, by name) finds ``path`` in its folder."""
    return present_among(path.name, [p.name for p in path.parent.iterdir()] if path.parent.is_dir() else [])


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


@parametrize_tiered("mode,compressor,header", list(itertools.product(MODES, COMPRESSORS, HEADERS)),
                    fast_if=lambda case: case[1] != "lzma")  # lzma: ~0.3 s a case
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


# ---------------------------------------------------------------------- header syntax

_VTK_TAG = re.compile(rb'<(/?)([A-Za-z]+)((?:\s+[A-Za-z_]+="[^"]*")*)\s*(/?)>')
_COMMENT = b'<!-- <DataArray type="Float32" Name="fake" format="appended" offset="0"/> a > b < c -->'


def _restyled_tag(match: re.Match) -> bytes:
    """One tag as another XML writer may write it: attributes in single quotes, in reverse
    order, with spaces and line breaks around '=', after a comment holding tags, '<' and '>'."""
    closing, name, attrs, empty = match.groups()
    if closing:
        return _COMMENT + b"</" + name + b"  >"
    pairs = re.findall(rb'([A-Za-z_]+)="([^"]*)"', attrs)
    body = b"".join(b"\n\t " + key + b" =\n '" + value + b"'" for key, value in reversed(pairs))
    return _COMMENT + b"<" + name + body + b" " + empty + b">"


def restyle(data: bytes) -> bytes:
    """``data`` (a file VTK wrote) with its header restyled (``_restyled_tag``), the XML
    declaration in single quotes and a comment before the root; its data bytes untouched."""
    marker = data.find(b"<AppendedData")
    head_end = data.find(b">", marker) + 1 if marker >= 0 else len(data)
    head, rest = data[:head_end], data[head_end:]
    head = head.replace(b'<?xml version="1.0"?>', b"<?xml version='1.0' encoding='UTF-8'?>\n<!-- patch='body' -->")
    head = _VTK_TAG.sub(_restyled_tag, head)
    return head + rest.replace(b"</AppendedData>", b"</AppendedData >")


@pytest.mark.parametrize("mode,compressor", [("appended-raw", "none"), ("appended-base64", "zlib"),
                                             ("binary", "none"), ("binary", "lz4")])
def test_headers_in_any_xml_style_read_as_vtk_reads_them(tmp_path: Path, mode: str, compressor: str) -> None:
    grid = mixed_grid(np.random.default_rng(7))
    grid.field_data["TimeValue"] = np.array([79.9998], dtype=np.float32)
    original = write(grid, tmp_path / "vtk.vtu", mode, compressor, 64)
    path = tmp_path / "volume_1.vtu"
    path.write_bytes(restyle(original.read_bytes()))
    assert b"'Float32'" in path.read_bytes() and b'"Float32"' in path.read_bytes()  # only the comments keep "
    mesh = vtk_read(path)
    assert mesh.n_points == grid.n_points and mesh.n_cells == grid.n_cells  # VTK reads the restyled file
    source = VtkXmlFile.open(path)
    assert ("PointData", "fake") not in source.arrays
    assert_same_as_vtk(source, mesh)
    assert_same_as_vtk(source, vtk_read(original))
    np.testing.assert_array_equal(source.read("FieldData", "TimeValue", 0, 1)[:, 0], [np.float32(79.9998)])


def foam_style_vtu(path: Path, grid: pv.UnstructuredGrid, appended: bool) -> Path:
    """``grid`` as OpenFOAM's foamToVTK writes a VTU: attributes in single quotes, UInt64 headers,
    a comment naming the case, the time as FieldData, Int32 cell arrays, and arrays inline in
    base64 (``format='binary'``, header and data one base64 stream) or appended raw."""
    arrays = [("FieldData", "TimeValue", np.array([500.0], dtype=np.float32), " NumberOfTuples='1'"),
              ("Points", "Points", np.asarray(grid.points, dtype=np.float32), ""),
              ("Cells", "connectivity", grid.cell_connectivity.astype(np.int32), ""),
              ("Cells", "offsets", grid.cell_offsets[1:].astype(np.int32), ""),
              ("Cells", "types", grid.celltypes.astype(np.uint8), "")]
    arrays += [("CellData", n, np.asarray(v, dtype=np.float32), "") for n, v in grid.cell_data.items()]
    arrays += [("PointData", n, np.asarray(v, dtype=np.float32), "") for n, v in grid.point_data.items()]
    head = [b"<?xml version='1.0'?>\n<!-- case='motorBike' time='500' index='500' -->\n",
            b"<VTKFile type='UnstructuredGrid' version='1.0' byte_order='LittleEndian' header_type='UInt64'>\n",
            b"<UnstructuredGrid>\n"]
    blobs, offset, section = [], 0, None
    for where, name, values, extra in arrays:
        if where != section:
            head += [f"</{section}>\n".encode()] if section else []
            head += [b"<Piece NumberOfPoints='%d' NumberOfCells='%d'>\n" % (grid.n_points, grid.n_cells)
                     ] if section == "FieldData" else []
            head, section = head + [f"<{where}>\n".encode()], where
        comps = values.shape[1] if values.ndim > 1 else 1
        kind = {"f": "Float32", "i": "Int32", "u": "UInt8"}[values.dtype.kind]
        blob = np.array([values.nbytes], "<u8").tobytes() + values.tobytes()
        tag = f"<DataArray type='{kind}' Name='{name}'" + (f" NumberOfComponents='{comps}'" if comps > 1 else "") + extra
        if appended:
            head.append(f"{tag} format='appended' offset='{offset}'/>\n".encode())
            blobs.append(blob)
            offset += len(blob)
        else:
            head += [f"{tag} format='binary'>\n".encode(), base64.b64encode(blob), b"\n</DataArray>\n"]
    head.append(f"</{section}>\n</Piece>\n</UnstructuredGrid>\n".encode())
    tail = [b"<AppendedData encoding='raw'>\n_", *blobs, b"\n</AppendedData>\n"] if appended else []
    path.write_bytes(b"".join(head + tail + [b"</VTKFile>\n"]))
    return path


@pytest.mark.parametrize("appended", [False, True])
def test_a_foam_to_vtk_style_file_reads_as_vtk_reads_it(tmp_path: Path, appended: bool) -> None:
    rng = np.random.default_rng(8)
    points = rng.normal(size=(500, 3)).astype(np.float32)
    grid = pv.UnstructuredGrid({pv.CellType.HEXAHEDRON: rng.integers(0, 500, (80, 8)),
                                pv.CellType.TETRA: rng.integers(0, 500, (70, 4))}, points)
    grid.cell_data["p"] = rng.normal(size=grid.n_cells).astype(np.float32)
    grid.cell_data["U"] = rng.normal(size=(grid.n_cells, 3)).astype(np.float32)
    grid.point_data["p"] = rng.normal(size=grid.n_points).astype(np.float32)
    path = foam_style_vtu(tmp_path / "internal.vtu", grid, appended)
    mesh = vtk_read(path)
    assert mesh.n_cells == grid.n_cells and "TimeValue" in mesh.field_data
    source = VtkXmlFile.open(path)
    assert source.header_dtype == np.dtype("<u8")
    assert_same_as_vtk(source, mesh, block=37)
    np.testing.assert_array_equal(source.read("Cells", "connectivity", 0, source.rows("Cells", "connectivity"))[:, 0],
                                  mesh.cell_connectivity)
    np.testing.assert_array_equal(source.read("FieldData", "TimeValue", 0, 1)[:, 0], mesh.field_data["TimeValue"])


@pytest.mark.parametrize("points_name", [b"", b'Name="Position" '])
@pytest.mark.parametrize("mode", ["appended-raw", "binary"])
def test_entities_string_arrays_and_any_points_name_read_as_vtk_reads_them(
    tmp_path: Path, points_name: bytes, mode: str
) -> None:
    grid = mixed_grid(np.random.default_rng(9))
    grid.field_data["case"] = np.array(["motorBike", "run 1"])  # a String array
    data = write(grid, tmp_path / "vtk.vtu", mode, "none", 32).read_bytes()
    assert b'type="String"' in data
    data = data.replace(b'Name="Points" ', points_name, 1).replace(b'Name="p"', b'Name="p&amp;&#x71;&lt;"', 1)
    path = tmp_path / "volume_1.vtu"
    path.write_bytes(data)
    mesh = vtk_read(path)
    source = VtkXmlFile.open(path)
    assert "p&q<" in mesh.point_data and "p&q<" in source.names("PointData")
    assert source.names("FieldData") == [] and list(mesh.field_data["case"]) == ["motorBike", "run 1"]
    del mesh.field_data["case"]
    assert_same_as_vtk(source, mesh)


def _foam_grid(rng: np.random.Generator) -> pv.UnstructuredGrid:
    grid = pv.UnstructuredGrid({pv.CellType.HEXAHEDRON: rng.integers(0, 200, (30, 8))},
                               rng.normal(size=(200, 3)).astype(np.float32))
    grid.cell_data["p"] = rng.normal(size=grid.n_cells).astype(np.float32)
    grid.point_data["p"] = rng.normal(size=grid.n_points).astype(np.float32)
    return grid


@pytest.mark.parametrize("old,new,message", [
    (b"<UnstructuredGrid>", b"<UnstructuredGrid><!-- never closed",
     r"the file ends inside <UnstructuredGrid>: it is truncated or corrupt \(unclosed token\)"),
    (b"</PointData>", b"</CellData>", r"not a VTK XML file, or it is corrupt: mismatched tag at byte \d+"),
    (b"<Piece ", b"<Piece NumberOfPoints='1' ", r"not a VTK XML file, or it is corrupt: duplicate attribute at byte \d+"),
    (b"Name='p'", b"Name='p&foo;'", r"not a VTK XML file, or it is corrupt: undefined entity at byte \d+"),
    (b"<?xml version='1.0'?>", b"<?xml version='1.0'?><!DOCTYPE VTKFile [<!ENTITY x 'y'>]>",
     r"not a VTK XML file: it has a DOCTYPE \(VTK writes none\)"),
    (b"<Points>", b"<DataArray type='Float32' Name='x' format='binary'/><Points>",
     r"<DataArray> at byte \d+ inside <Piece>, expected inside <PointData> or <CellData>"),
    (b"<UnstructuredGrid>", b"<ImageData>", r"not a VTK XML UnstructuredGrid or PolyData file \(it holds <ImageData>\)"),
    (b"header_type='UInt64'", b"header_type='UInt64' compressor='vtkFooCompressor'", r"VTKFile compressor vtkFooCompressor, expected one of"),
    (b"header_type='UInt64'", b"header_type='UInt16'", r"VTKFile header_type UInt16, expected UInt32 or UInt64"),
    (b"byte_order='LittleEndian'", b"byte_order='Middle'", r"VTKFile byte_order 'Middle', expected LittleEndian or BigEndian"),
    (b"NumberOfPoints='200'", b"NumberOfPoints='2x'", r"Piece: NumberOfPoints='2x' is not an integer"),
    (b"NumberOfCells='30'", b"NumberOfCells='-1'", r"Piece: NumberOfCells -1 is negative"),
    (b"NumberOfCells='30'", b"", r"Piece has no NumberOfCells"),
    (b"Name='p' format='binary'", b"Name='p' format='zip'", r"a CellData DataArray named p has format 'zip'"),
    (b"\n</DataArray>\n</CellData>", b"AAAA\n</DataArray>\n</CellData>", r"CellData array p: its inline text is \d+ bytes long, its header describes \d+"),
    (b"</Piece>", b"</Piece><Piece NumberOfPoints='0' NumberOfCells='0'></Piece>", r"2 pieces; this reader reads single-piece files"),
    (b"<VTKFile", b"<VTKFilez", r"not a VTK XML file: its first element is <VTKFilez>, not <VTKFile>"),
    (b"</VTKFile>", b"</VTKFile", r"the file ends inside <VTKFile>: it is truncated or corrupt \(unclosed token\)"),
    (b"<VTKFile", b"<!-- <AppendedData>_ --><VTKFile", r"<AppendedData at byte \d+ is not a tag of the header"),
])
def test_malformed_headers_are_named(tmp_path: Path, old: bytes, new: bytes, message: str) -> None:
    path = foam_style_vtu(tmp_path / "volume_1.vtu", _foam_grid(np.random.default_rng(10)), appended=False)
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))
    with pytest.raises(VtkXmlError, match=rf"^{re.escape(str(path))}: {message}"):
        VtkXmlFile.open(path)


def _not_vtk_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(file, the message's phrase): random bytes, another XML document, a header cut short."""
    rng = np.random.default_rng(38)
    files = {"random.vtp": rng.bytes(1 << 16),
             "other.vtp": "<?xml version='1.0'?>\n<résumé><name>x</name></résumé>\n".encode(),
             "cut.vtu": write(mixed_grid(rng), tmp_path / "whole.vtu", "appended-raw", "none", 64).read_bytes()[:700]}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return [(tmp_path / "random.vtp", r"not a VTK XML file, or it is corrupt: not well-formed \(invalid token\) at byte 0"),
            (tmp_path / "other.vtp", r"not a VTK XML file: its first element is <r\\xe9sum\\xe9>, not <VTKFile>"),
            (tmp_path / "cut.vtu", r"the file ends inside <\w+>: it is truncated or corrupt \(")]


def test_a_file_that_is_not_vtk_xml_is_one_printable_line(tmp_path: Path) -> None:
    for path, message in _not_vtk_files(tmp_path):
        with pytest.raises(VtkXmlError, match=rf"^{re.escape(str(path))}: {message}") as caught:
            VtkXmlFile.open(path)
        assert all(" " <= c <= "~" for c in str(caught.value)), str(caught.value)


def test_reads_outside_an_array_and_zlib_blocks_that_hold_more_are_refused(tmp_path: Path) -> None:
    path = write(mixed_grid(np.random.default_rng(11)), tmp_path / "volume_1.vtu", "appended-raw", "zlib", 64)
    source = VtkXmlFile.open(path)
    with pytest.raises(VtkXmlError, match=r"rows 890\.\.901 of PointData array p, which has 900"):
        source.read("PointData", "p", 890, 901)
    data = source._array(source.entry("PointData", "p"))
    packed = zlib.compress(bytes(2 * data.block_size))  # a first block holding twice its size
    assert len(packed) < data.blocks[0]
    raw = bytearray(path.read_bytes())
    raw[data.data_at:data.data_at + int(data.blocks[0])] = packed.ljust(int(data.blocks[0]), b"\0")
    path.write_bytes(bytes(raw))
    with pytest.raises(VtkXmlError, match=r"PointData array p: compressed block 0 is corrupt \(it decompresses "
                                          r"to more than 1000 bytes\)"):
        VtkXmlFile.open(path).read("PointData", "p", 0, 10)
