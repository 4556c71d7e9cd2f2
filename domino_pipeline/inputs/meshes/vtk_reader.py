"""Read a raw run's meshes whole with VTK (STL, boundary VTP, volume VTU to numpy arrays), only the
named arrays, every read error one RunError line naming the file."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import pyvista as pv
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkCommonCore import vtkLogger
from vtkmodules.vtkIOGeometry import vtkSTLReader
from vtkmodules.vtkIOXML import vtkXMLPolyDataReader, vtkXMLUnstructuredGridReader

from domino_pipeline.configuration.config import VOLUME_SOURCES
from domino_pipeline.inputs.meshes.cell_geometry import (
    CellGeometryError,
    grid_cell_centres,
    polydata_geometry,
    polygon_vertex_shares,
    surface_geometry,
)
from domino_pipeline.inputs.meshes.mesh_rows import (
    SURFACE_ARRAYS,
    SurfaceRows,
    field_columns,
    nonfinite,
    published_areas,
    require_finite_points,
    require_names,
    require_polygon_types,
    source_arrays,
    unit_rows,
)
from domino_pipeline.inputs.meshes.run_errors import MissingFieldError, RunError


_READERS = {".stl": vtkSTLReader, ".vtp": vtkXMLPolyDataReader,
            ".vtu": vtkXMLUnstructuredGridReader}


def _run_reader(reader, path: Path, step: str) -> None:
    """Run a VTK reader ``step``, VTK's logging off; its first error is one RunError line."""
    vtkLogger.SetStderrVerbosity(vtkLogger.VERBOSITY_OFF)
    with pv.VtkErrorCatcher(raise_errors=False, send_to_logging=False) as catcher:
        getattr(reader, step)()
    errors = [event.alert.splitlines()[0] for event in catcher.events if event.kind == "ERROR"]
    if errors:
        raise RunError(f"{path}: unreadable ({errors[0]})")


def open_reader(path: Path):
    """A VTK reader for an STL, VTP or VTU file, with its header read."""
    if path.suffix.lower() not in _READERS:
        raise RunError(f"{path}: unsupported file type, expected one of {sorted(_READERS)}")
    reader = _READERS[path.suffix.lower()]()
    reader.SetFileName(str(path))
    _run_reader(reader, path, "UpdateInformation")
    return reader


def array_names(reader) -> dict[str, list[str]]:
    """Names of the point and cell data arrays an XML reader's file holds."""
    names = {}
    for where, selection in (("points", reader.GetPointDataArraySelection()),
                             ("cells", reader.GetCellDataArraySelection())):
        names[where] = [selection.GetArrayName(i) for i in range(selection.GetNumberOfArrays())]
    return names


def read_arrays(
    reader, path: Path, point_arrays: Collection[str] | None, cell_arrays: Collection[str] | None
) -> pv.DataSet:
    """Read the mesh of an opened reader with only the named point and cell arrays (None: all)."""
    if path.suffix.lower() != ".stl":
        for wanted, selection in ((point_arrays, reader.GetPointDataArraySelection()),
                                  (cell_arrays, reader.GetCellDataArraySelection())):
            if wanted is not None:
                selection.DisableAllArrays()
                for name in wanted:
                    selection.EnableArray(name)
    _run_reader(reader, path, "Update")
    mesh = pv.wrap(reader.GetOutput())
    if mesh.n_points == 0 or mesh.n_cells == 0:
        raise RunError(f"{path}: empty ({mesh.n_points} points, {mesh.n_cells} cells)")
    require_finite_points(nonfinite(mesh.points), path)
    return mesh


def read_mesh(path: Path) -> pv.DataSet:
    """Read an STL, VTP or VTU file with all its arrays; read errors and empty results become RunError."""
    return read_arrays(open_reader(path), path, None, None)


ZERO_HEIGHT = 1e-6  # triangle height / longest edge below which a triangle has no area (float32: 1.2e-7)


def read_stl(path: Path) -> dict[str, np.ndarray]:
    """The STL's vertices, flattened triangles, centres and areas, zero-area triangles dropped."""
    return drop_zero_area(read_stl_triangles(path))[0]


def drop_zero_area(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """The STL without zero-area triangles (they would count as open edges), and how many were dropped."""
    triangles = arrays["stl_faces"].reshape(-1, 3)
    corners = arrays["stl_coordinates"].astype(np.float64)[triangles]
    longest = np.max([np.sum((corners[:, i] - corners[:, i - 1]) ** 2, axis=1) for i in range(3)], axis=0)
    doubled = np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    keep = (doubled > ZERO_HEIGHT * longest) & (arrays["stl_areas"] > 0)  # height/edge = doubled/edge**2
    dropped = int(len(keep) - np.count_nonzero(keep))
    if not dropped:
        return arrays, 0
    return arrays | {"stl_faces": np.ascontiguousarray(triangles[keep]).ravel(),
                     "stl_centers": arrays["stl_centers"][keep], "stl_areas": arrays["stl_areas"][keep]}, dropped


def read_stl_triangles(path: Path) -> dict[str, np.ndarray]:
    """STL vertices, flattened triangle indices, triangle centres and areas, as the file has them."""
    mesh = read_mesh(path)
    if not isinstance(mesh, pv.PolyData):
        mesh = mesh.extract_surface()
    if not mesh.is_all_triangles:
        mesh = mesh.triangulate()
    faces = mesh.faces.reshape(-1, 4)[:, 1:]
    areas = mesh.compute_cell_sizes(length=False, area=True, volume=False).cell_data["Area"]
    return {
        "stl_coordinates": np.asarray(mesh.points, dtype=np.float32),
        "stl_faces": faces.astype(np.int32).ravel(),
        "stl_centers": np.asarray(mesh.cell_centers().points, dtype=np.float32),
        "stl_areas": np.asarray(areas, dtype=np.float32),
    }


def stl_defect_counts(faces: np.ndarray, areas: np.ndarray) -> dict[str, int]:
    """{open_edges, non_manifold_edges, degenerate_triangles} of an STL's triangles."""
    triangles = faces.reshape(-1, 3).astype(np.int64)
    if not len(triangles):
        return {"open_edges": 0, "non_manifold_edges": 0, "degenerate_triangles": 0}
    edges = np.sort(np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]), axis=1)
    _, uses = np.unique(edges[:, 0] * (int(triangles.max()) + 1) + edges[:, 1], return_counts=True)
    return {"open_edges": int((uses == 1).sum()), "non_manifold_edges": int((uses > 2).sum()),
            "degenerate_triangles": int((np.asarray(areas) <= 0).sum())}


_DEFECTS = {"open_edges": "open edges (the surface has holes: the SDF sign near them is unreliable)",
            "non_manifold_edges": "non-manifold edges (shared by more than two triangles)",
            "degenerate_triangles": "degenerate triangles (zero area)"}


def stl_defects(faces: np.ndarray, areas: np.ndarray, path: Path, dropped: int = 0,
                counts: dict[str, int] | None = None) -> list[str]:
    """Warnings about an STL's defects and dropped triangles (an open edge misleads the SDF's sign)."""
    counts = stl_defect_counts(faces, areas) if counts is None else counts
    notes = [f"warning: {path}: {counts[key]} {what}" for key, what in _DEFECTS.items() if counts[key]]
    return ([f"note: {path}: dropped {dropped} zero-area triangles"] if dropped else []) + notes


def read_surface(path: Path, variables: Mapping[str, str], arrays: Mapping[str, list[str]] | None = None,
                 rows: SurfaceRows = SurfaceRows()) -> dict[str, np.ndarray]:
    """Boundary rows (SURFACE_ARRAYS) of ``rows`` kind, the whole file read with VTK."""
    reader = open_reader(path)
    where = "cell" if rows.location == "cells" else "point"
    wanted = source_arrays(variables, arrays)
    require_names(array_names(reader)[f"{where}s"], wanted + ([rows.normals] if rows.normals else []), path, where)
    if rows.location == "cells":
        mesh = read_arrays(reader, path, point_arrays=[], cell_arrays=wanted)
        fields = field_columns(mesh.cell_data, variables, path, "cell", arrays)
        geometry = (polydata_geometry(mesh, path) if isinstance(mesh, pv.PolyData)
                    else _on_polygons(surface_geometry, mesh, path))
        return dict(zip(SURFACE_ARRAYS, (*geometry, fields)))
    mesh = read_arrays(reader, path, point_arrays=wanted + ([rows.normals] if rows.normals else []), cell_arrays=[])
    fields = field_columns(mesh.point_data, variables, path, "point", arrays)
    vectors, areas = _point_weights(mesh, path) if rows.normals is None or rows.areas is None else (None, None)
    if rows.normals is not None:
        vectors = field_columns(mesh.point_data, {rows.normals: "vector"}, path, "point")
    if rows.areas is not None:
        areas = np.asarray(published_areas(rows.areas, mesh.n_points))
    return dict(zip(SURFACE_ARRAYS, (np.asarray(mesh.points, np.float32), unit_rows(vectors),
                                     np.asarray(areas, np.float32), fields)))


def surface_cells(mesh: pv.DataSet, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(begins, ends, point ids) of a surface's polygons; RunError for a VTU cell that is not a polygon."""
    if isinstance(mesh, pv.PolyData):
        cells = mesh.GetPolys()
    else:
        require_polygon_types(set(np.unique(np.asarray(mesh.celltypes)).tolist()), path)
        cells = mesh.GetCells()
    offsets = vtk_to_numpy(cells.GetOffsetsArray()).astype(np.int64)
    return offsets[:-1], offsets[1:], vtk_to_numpy(cells.GetConnectivityArray()).astype(np.int64)


def _on_polygons(compute, mesh: pv.DataSet, path: Path) -> tuple[np.ndarray, ...]:
    """``compute(points, begins, ends, ids)`` of a surface read whole, in its cell order; errors name ``path``."""
    begins, ends, ids = surface_cells(mesh, path)
    try:
        return compute(np.asarray(mesh.points), begins, ends, ids)
    except CellGeometryError as err:
        raise CellGeometryError(f"{path}: {err}") from err


def _point_weights(mesh: pv.DataSet, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Per point of a surface read whole: the sum of its polygons' area vectors and its dual area."""
    vertex, share, vector = _on_polygons(polygon_vertex_shares, mesh, path)
    areas = np.bincount(vertex, weights=share, minlength=mesh.n_points)
    return np.stack([np.bincount(vertex, weights=vector[:, d], minlength=mesh.n_points) for d in range(3)], 1), areas


def volume_source_used(
    available: Mapping[str, Collection[str]], variables: Collection[str], source: str, path: Path
) -> tuple[str, list[str]]:
    """The source to read ``variables`` from (the other, with a note, if only it has all); else RunError."""
    if source not in VOLUME_SOURCES:
        raise ValueError(f"volume_source {source!r}, expected one of {list(VOLUME_SOURCES)}")
    missing = [name for name in variables if name not in available[source]]
    if not missing:
        return source, []
    other = next(s for s in VOLUME_SOURCES if s != source)
    absent = [name for name in missing if name not in available[other]]
    if absent:
        raise MissingFieldError(path, "point or cell", absent, {*available[source], *available[other]})
    if any(name not in available[other] for name in variables):
        raise RunError(f"{path}: fields {missing} missing as {source} data, and not all of "
                       f"{list(variables)} are {other} data either")
    return other, [f"{path}: fields {missing} missing as {source} data, using {other} data"]


def read_volume(
    path: Path, variables: Mapping[str, str], source: str, arrays: Mapping[str, list[str]] | None = None
) -> tuple[dict[str, np.ndarray], str, list[str]]:
    """(points or cell centres and fields, the source used, notes) of a VTU read whole with VTK."""
    reader = open_reader(path)
    wanted = source_arrays(variables, arrays)
    source, notes = volume_source_used(array_names(reader), wanted, source, path)
    if source == "points":
        mesh = read_arrays(reader, path, point_arrays=wanted, cell_arrays=[])
        fields, centres = field_columns(mesh.point_data, variables, path, "point", arrays), mesh.points
    else:
        mesh = read_arrays(reader, path, point_arrays=[], cell_arrays=wanted)
        fields = field_columns(mesh.cell_data, variables, path, "cell", arrays)
        centres = grid_cell_centres(mesh, path)
    return {"volume_mesh_centers": np.asarray(centres, dtype=np.float32),
            "volume_fields": fields}, source, notes
