"""Volume cell centres read by the block reader from VTUs with polyhedra, in both layouts VTK XML
files store their faces (VTK 9.4's, written here by VTK's own writer from a pyvista grid, and the
older faces/faceoffsets one of foamToVTK, written with the block writer), across block
boundaries: against the volume centroids of the convex cells (scipy Delaunay, tests/
cell_references.py), against VTK's whole-file reading, and read out of order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from cell_references import convex_centroid
from scipy.spatial import ConvexHull
from test_cell_geometry import planar_cells
from test_xml_stream import write

import domino_pipeline.inputs.meshes.cell_geometry as cell_geometry
import domino_pipeline.inputs.meshes.polyhedron_faces as polyhedron_faces
import domino_pipeline.inputs.meshes.volume_stream as volume_stream
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_volume
from domino_pipeline.inputs.meshes.polyhedron_faces import PolyhedronFaces
from domino_pipeline.inputs.meshes.volume_stream import open_volume
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from synthetic.vtk_xml_writer import ArraySpec, Encoding, VtkBlockWriter

VARIABLES = {"p": "scalar"}


def hull_polyhedron(rng: np.random.Generator) -> tuple[np.ndarray, list[list[int]]]:
    """The convex hull of random points: its vertices and its triangles wound outward."""
    hull = ConvexHull(rng.normal(size=(int(rng.integers(8, 15)), 3)) * rng.uniform(0.2, 1.5, 3))
    used = np.unique(hull.simplices)
    local = {int(v): i for i, v in enumerate(used)}
    faces = []
    for simplex, plane in zip(hull.simplices, hull.equations):
        a, b, c = hull.points[simplex]
        face = [local[int(v)] for v in simplex]
        faces.append(face if np.dot(np.cross(b - a, c - a), plane[:3]) > 0 else face[::-1])
    return hull.points[used], faces


def prism_polyhedron(rng: np.random.Generator) -> tuple[np.ndarray, list[list[int]]]:
    """A frustum of a hexagonal prism (planar faces: two hexagons and six quads), wound outward."""
    angles = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    bottom = np.column_stack([np.cos(angles), np.sin(angles), np.zeros(6)])
    top = bottom * [0.6, 0.6, 0] + [0.1, -0.1, rng.uniform(0.5, 1.5)]
    faces = [[5, 4, 3, 2, 1, 0], [6, 7, 8, 9, 10, 11]] + [[i, (i + 1) % 6, 6 + (i + 1) % 6, 6 + i] for i in range(6)]
    return np.vstack([bottom, top]), faces


def mixed_cells(rng: np.random.Generator, n: int = 80):
    """Points (float32) and cells (VTK type, point ids, faces or None) of polyhedra, fixed-size
    3-D cells and vertices in random order, and each cell's reference centre."""
    points, cells, centres = [], [], []
    start = 0
    for _ in range(n):
        kind = rng.choice(["hull", "prism", 10, 12, 13, 14, 1])
        faces = None
        if kind in ("hull", "prism"):
            vertices, faces = (hull_polyhedron if kind == "hull" else prism_polyhedron)(rng)
            cell_type = 42
        elif kind == "1":
            vertices, cell_type = rng.normal(size=(1, 3)), 1
        else:
            cell_type = int(kind)
            vertices = planar_cells(rng, cell_type, 1)[0]
        vertices = (vertices + rng.uniform(-20, 20, 3)).astype(np.float32)
        ids = start + np.arange(len(vertices))
        cells.append((cell_type, ids, None if faces is None else [list(start + np.array(f)) for f in faces]))
        centres.append(vertices[0] if cell_type == 1 else convex_centroid(vertices.astype(np.float64)))
        points.append(vertices)
        start += len(vertices)
    return np.concatenate(points), cells, np.array(centres)


def pyvista_grid(points: np.ndarray, cells) -> pv.UnstructuredGrid:
    stream = []
    for cell_type, ids, faces in cells:
        if faces is None:
            stream += [len(ids), *ids]
        else:
            record = [len(faces)] + [x for face in faces for x in (len(face), *face)]
            stream += [len(record), *record]
    grid = pv.UnstructuredGrid(np.array(stream), np.array([c[0] for c in cells], np.uint8), points)
    grid.cell_data["p"] = np.arange(grid.n_cells, dtype=np.float32)
    return grid


def write_legacy(path: Path, points: np.ndarray, cells, encoding: Encoding, faces_arrays: bool = True) -> Path:
    """A VTU with polyhedron faces in the faces / faceoffsets layout (-1 for other cells)."""
    connectivity = np.concatenate([ids for _, ids, _ in cells])
    offsets = np.cumsum([len(ids) for _, ids, _ in cells])
    records, ends, at = [], [], 0
    for _, _, faces in cells:
        if faces is None:
            ends.append(-1)
            continue
        record = [len(faces)] + [x for face in faces for x in (len(face), *face)]
        records += record
        at += len(record)
        ends.append(at)
    arrays = {("CellData", "p"): np.arange(len(cells), dtype=np.float32), ("Points", "Points"): points,
              ("Cells", "connectivity"): connectivity, ("Cells", "offsets"): offsets,
              ("Cells", "types"): np.array([c[0] for c in cells])}
    if faces_arrays:
        arrays |= {("Cells", "faces"): np.array(records), ("Cells", "faceoffsets"): np.array(ends)}
    dtypes = {"p": "f4", "Points": "f4", "types": "u1"}
    specs = [ArraySpec(section, name, dtypes.get(name, "i8"), len(values), 3 if name == "Points" else 1)
             for (section, name), values in arrays.items()]
    with VtkBlockWriter(path, "UnstructuredGrid", {"NumberOfPoints": len(points), "NumberOfCells": len(cells)},
                        specs, encoding) as vtu:
        for (section, name), values in arrays.items():
            vtu.append(section, name, values)
    return path


def streamed_centres(path: Path, rows: int) -> np.ndarray:
    volume = open_volume(path, VARIABLES, "cells")
    assert volume.file is not None  # read by rows, not whole
    blocks = list(volume.blocks(rows))
    np.testing.assert_array_equal(np.concatenate([f for _, f in blocks])[:, 0], np.arange(volume.n_rows))
    return np.concatenate([c for c, _ in blocks])


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Geometry read and computed a few cells at a time, so that every boundary is crossed."""
    monkeypatch.setattr(volume_stream, "GEOMETRY_CELLS", 3)
    monkeypatch.setattr(cell_geometry, "CHUNK_CELLS", 4)


@pytest.mark.parametrize("mode,compressor", [("appended-raw", "none"), ("appended-base64", "zlib"), ("binary", "lz4")])
def test_polyhedra_of_vtks_layout_read_by_blocks(tmp_path: Path, small_chunks, mode: str, compressor: str) -> None:
    points, cells, reference = mixed_cells(np.random.default_rng(7))
    path = write(pyvista_grid(points, cells), tmp_path / "volume.vtu", mode, compressor, 64)
    assert "polyhedron_to_faces" in VtkXmlFile.open(path).names("Cells")
    got = streamed_centres(path, rows=7)
    np.testing.assert_allclose(got, reference, rtol=0, atol=2e-5)
    whole, _, _ = read_volume(path, VARIABLES, "cells")
    np.testing.assert_array_equal(got, whole["volume_mesh_centers"])


@pytest.mark.parametrize("mode,compressor", [("appended-raw", "none"), ("binary", "zlib")])
def test_polyhedra_of_the_faceoffsets_layout_read_by_blocks(tmp_path: Path, small_chunks, mode: str,
                                                             compressor: str) -> None:
    points, cells, reference = mixed_cells(np.random.default_rng(8))
    path = write_legacy(tmp_path / "volume.vtu", points, cells, Encoding(mode=mode, compressor=compressor))
    assert "faceoffsets" in VtkXmlFile.open(path).names("Cells")
    got = streamed_centres(path, rows=5)
    np.testing.assert_allclose(got, reference, rtol=0, atol=2e-5)
    whole, _, _ = read_volume(path, VARIABLES, "cells")  # VTK reads this layout too
    np.testing.assert_array_equal(got, whole["volume_mesh_centers"])


@pytest.mark.parametrize("legacy", [True, False])
def test_faces_read_out_of_order_equal_faces_read_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           legacy: bool) -> None:
    monkeypatch.setattr(polyhedron_faces, "_SCAN_ROWS", 2)  # look back over many small reads
    points, cells, _ = mixed_cells(np.random.default_rng(9), 60)
    path = (write_legacy(tmp_path / "v.vtu", points, cells, Encoding()) if legacy
            else write(pyvista_grid(points, cells), tmp_path / "v.vtu", "appended-raw", "none", 32))
    ranges = [(a, min(a + 4, len(cells))) for a in range(0, len(cells), 4)]
    in_order = PolyhedronFaces.open(VtkXmlFile.open(path))
    expected = {r: in_order.read(*r) for r in ranges}
    shuffled = PolyhedronFaces.open(VtkXmlFile.open(path))
    for r in [ranges[i] for i in np.random.default_rng(1).permutation(len(ranges))]:
        got, want = shuffled.read(*r), expected[r]
        if want is None:
            assert got is None
            continue
        np.testing.assert_array_equal(got.cell, want.cell)
        np.testing.assert_array_equal(got.point_ids(), want.point_ids())
        first = r[0]
        polyhedra = [c - first for c in range(*r) if cells[c][2] is not None]
        assert sorted(set(want.cell.tolist())) == polyhedra
        assert want.point_ids().tolist() == [v for c in polyhedra for f in cells[first + c][2] for v in f]


def test_polyhedra_without_faces_or_with_broken_records_are_named(tmp_path: Path) -> None:
    points, cells, _ = mixed_cells(np.random.default_rng(10), 30)
    bare = write_legacy(tmp_path / "bare.vtu", points, cells, Encoding(), faces_arrays=False)
    with pytest.raises(RunError, match=r"bare\.vtu: polyhedron cells but no faces arrays"):
        open_volume(bare, VARIABLES, "cells")
    path = write_legacy(tmp_path / "cut.vtu", points, cells, Encoding(mode="appended-raw", compressor="none"))
    file = VtkXmlFile.open(path)
    ends = file.read("Cells", "faceoffsets", 0, file.n_cells)[:, 0].astype(np.int64)
    first = next(i for i, c in enumerate(cells) if c[2] is not None)
    ends[first] -= 1  # the first record loses its last point id: its face counts overrun it
    data = file.array_data("Cells", "faceoffsets")
    start, size = data.data_at, data.n_bytes
    assert size == 8 * len(ends)
    with open(path, "r+b") as out:
        out.seek(start)
        out.write(ends.astype("<i8").tobytes())
    with pytest.raises(RunError, match=r"cut\.vtu: a polyhedron .* among cells \d+\.\.\d+"):
        list(open_volume(path, VARIABLES, "cells").blocks(8))
