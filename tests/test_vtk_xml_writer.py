"""The block-by-block VTU writer read back by VTK's own reader (and the streaming reader), in
every encoding it writes, with arrays spanning many blocks and many compression blocks."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import parametrize_tiered
from test_xml_stream import vtk_read

from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from synthetic.vtk_xml_writer import (
    COMPRESSORS,
    DATA_MODES,
    Encoding,
    VtkBlockWriter,
    unstructured_grid_arrays,
)
from synthetic_data import generate_runs, join_pieces

FIELDS = {"UMeanTrim": 3, "pMeanTrim": 1}


@parametrize_tiered("mode,compressor,bits", list(itertools.product(DATA_MODES, sorted(COMPRESSORS), (32, 64))),
                    fast_if=lambda case: case[1] != "lzma")  # lzma: ~0.2 s a case
def test_block_writer_is_read_by_vtk(tmp_path: Path, mode: str, compressor: str, bits: int) -> None:
    rng = np.random.default_rng(0)
    n, block = 1000, 77
    points = rng.normal(size=(n, 3)).astype(np.float32)
    fields = {name: rng.normal(size=(n, w)).astype(np.float32) for name, w in FIELDS.items()}
    path = tmp_path / "volume_1.vtu"
    with VtkBlockWriter(path, "UnstructuredGrid", {"NumberOfPoints": n, "NumberOfCells": n},
                        unstructured_grid_arrays(n, n, n, FIELDS, FIELDS),
                        Encoding(mode, compressor, bits, block_bytes=500)) as vtu:
        for s in range(0, n, block):
            rows = slice(s, min(s + block, n))
            for name, values in fields.items():
                vtu.append("PointData", name, values[rows])
                vtu.append("CellData", name, 2 * values[rows])
            ids = np.arange(rows.start, rows.stop)
            vtu.append("Points", "Points", points[rows])
            vtu.append("Cells", "connectivity", ids)
            vtu.append("Cells", "offsets", ids + 1)
            vtu.append("Cells", "types", np.ones(len(ids), np.uint8))
    assert not list(tmp_path.glob(".*")), "spools and temporaries are removed"
    mesh = vtk_read(path)
    np.testing.assert_array_equal(mesh.points, points)
    assert (mesh.celltypes == pv.CellType.VERTEX).all() and mesh.n_cells == n
    streamed = VtkXmlFile.open(path)
    for name, values in fields.items():
        np.testing.assert_array_equal(np.asarray(mesh.point_data[name]).reshape(n, -1), values)
        np.testing.assert_array_equal(np.asarray(mesh.cell_data[name]).reshape(n, -1), 2 * values)
        np.testing.assert_array_equal(streamed.read("PointData", name, 0, n), values)


def test_short_array_is_an_error_and_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "volume_1.vtu"
    with pytest.raises(ValueError, match="bytes written, expected"):
        with VtkBlockWriter(path, "UnstructuredGrid", {"NumberOfPoints": 10, "NumberOfCells": 10},
                            unstructured_grid_arrays(10, 10, 10, {}, {}), Encoding()) as vtu:
            vtu.append("Points", "Points", np.zeros((5, 3)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mode,compressor", [("appended-raw", "none"), ("binary", "lz4")])
def test_synthetic_run_in_another_encoding_holds_the_same_values(
    tiny_raw_dir: Path, tmp_path: Path, mode: str, compressor: str
) -> None:
    generate_runs(tmp_path / "other", 1, preset="tiny", seed=0, encoding=Encoding(mode, compressor))
    for name in ("boundary_1.vtp", "volume_1.vtu"):
        default, other = (join_pieces(raw / "run_1" / name, tmp_path / f"{label}_{name}")
                          for label, raw in (("default", tiny_raw_dir), ("other", tmp_path / "other")))
        default, other = vtk_read(default), vtk_read(other)
        np.testing.assert_array_equal(default.points, other.points)
        for key in default.cell_data.keys():
            np.testing.assert_array_equal(default.cell_data[key], other.cell_data[key])


def test_default_encoding_is_vtks_xml_writer_default(tiny_raw_dir: Path) -> None:
    from vtkmodules.vtkIOXML import vtkXMLUnstructuredGridWriter

    writer = vtkXMLUnstructuredGridWriter()
    default = Encoding()
    assert (default.mode, default.header_bits, default.block_bytes, default.level) == (
        "appended-base64" if writer.GetEncodeAppendedData() else "appended-raw",
        {writer.UInt32: 32, writer.UInt64: 64}[writer.GetHeaderType()], writer.GetBlockSize(),
        writer.GetCompressionLevel())
    assert COMPRESSORS[default.compressor] == type(writer.GetCompressor()).__name__
    assert writer.GetDataMode() == writer.Appended
    head = (tiny_raw_dir / "run_1" / "volume_1.vtu.00.part").read_bytes()[:300]  # written in the default encoding
    assert b'header_type="UInt32" compressor="vtkZLibDataCompressor"' in head
