"""The files of one synthetic run, in its dataset's layout (the profile's names and conventions,
layouts.py for the rest): the STL, the boundary surface (a VTP, or a VTU of polygon cells) with
its fields as cell and/or point data and its published areas, the volume VTU (in pieces where
the dataset publishes it so), and the published coefficient and reference files.

Everything is generated in the body frame (z up) and written in the dataset's frame
(``layouts.Frame``). OpenFOAM datasets (``dataset.flow.normals: into_body``, ``wall_shear:
on_fluid``) get boundary cells wound into the body and the wall shear on the fluid, as
foamToVTK writes them; the published forces are summed from the rows as written, with the
generator's own face geometry (faces.py), OpenFOAM's definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyvista as pv
from tqdm import tqdm

from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.raw_files.concat_bytes import file_pieces, piece_path
from synthetic.body import BoundaryMesh, CarShape
from synthetic.faces import point_weights, ragged_face_geometry
from synthetic.fields import surface_fields, volume_fields
from synthetic.forces import Directions, ForceReferences, coefficients, force_terms, moment_about
from synthetic.layouts import Frame, Layout
from synthetic.volume_points import volume_blocks
from synthetic.vtk_xml_writer import ArraySpec, Encoding, VtkBlockWriter

CELL_BLOCK = 1 << 20  # boundary cells handled at a time
PROGRESS_MIN_POINTS = 500_000  # show progress bars from this volume size on
SHEAR_ROLES = ("wall_shear_stress", "skin_friction_coefficient")
VTK_TYPES = {3: pv.CellType.TRIANGLE, 4: pv.CellType.QUAD}  # any other vertex count: a polygon
NORMALS_INFORMATION = ('<InformationKey name="L2_NORM_RANGE" location="vtkDataArray" length="2">'
                       '<Value index="0">1</Value><Value index="1">1</Value></InformationKey>')


@dataclass(frozen=True)
class RunLayout:
    """One run's dataset: its profile, layout, frame and file encoding."""

    profile: DatasetConfig
    layout: Layout
    frame: Frame
    encoding: Encoding

    @property
    def directions(self) -> Directions:
        flow = self.profile.flow
        unit = [np.asarray(v, np.float64) / np.linalg.norm(v) for v in
                (flow.drag_direction, flow.side_direction, flow.lift_direction)]
        return Directions(*unit)

    @property
    def q(self) -> float:
        """The dynamic pressure of the kinematic fields: 0.5 U^2."""
        return 0.5 * float(self.profile.flow.velocity) ** 2


def write_ascii_stl(path: Path, vertices: np.ndarray, faces: np.ndarray, name: str) -> None:
    """Write a single-solid ASCII STL with facet normals, in blocks to bound memory."""
    facet = (
        "facet normal {:e} {:e} {:e}\n outer loop\n"
        "  vertex {:e} {:e} {:e}\n  vertex {:e} {:e} {:e}\n  vertex {:e} {:e} {:e}\n"
        " endloop\nendfacet\n"
    )
    with open(path, "w", encoding="ascii") as out:
        out.write(f"solid {name}\n")
        for start in range(0, len(faces), 50_000):
            tri = vertices[faces[start : start + 50_000]]
            normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
            normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-30)
            rows = np.concatenate([normal, tri.reshape(-1, 9)], axis=1)
            out.write((facet * len(rows)).format(*rows.ravel().tolist()))
        out.write(f"endsolid {name}\n")


# ----------------------------------------------------------------------------- fields by name


def _width(values: np.ndarray) -> int:
    return 1 if values.ndim == 1 else values.shape[1]


def named_arrays(values: dict[str, np.ndarray], names: dict[str, str | list[str]]) -> dict[str, np.ndarray]:
    """Fields by role -> arrays by the profile's names; a field the profile names by components
    becomes one scalar array per component (roles the profile does not name are left out)."""
    out = {}
    for role, name in names.items():
        if role not in values:
            raise ValueError(f"the synthetic generator writes no field of role {role} ({name})")
        if isinstance(name, str):
            out[name] = values[role]
        else:
            out |= {component: values[role][:, k] for k, component in enumerate(name)}
    return out


def oriented(values: dict[str, np.ndarray], run: RunLayout) -> dict[str, np.ndarray]:
    """Body-frame wall fields (shear on the body) in the dataset's frame and convention."""
    sign = -1.0 if run.profile.flow.wall_shear == "on_fluid" else 1.0
    out = dict(values)
    for role in SHEAR_ROLES:
        out[role] = (sign * run.frame.vectors(values[role])).astype(np.float32)
    return out


def _force_fields(values: dict[str, np.ndarray], run: RunLayout) -> tuple[np.ndarray, np.ndarray]:
    """The pressure and the shear on the body over q, from the arrays (``oriented``: dataset
    frame and convention, float32) that the profile's forces integrate: the pressure and wall
    shear over 0.5 U^2, or the coefficients."""
    stress = run.profile.has_field("surface", "pressure") and run.profile.has_field("surface", "wall_shear_stress")
    pressure, shear = ("pressure", "wall_shear_stress") if stress else ("pressure_coefficient", "skin_friction_coefficient")
    scale = run.q if stress else 1.0
    sign = -1.0 if run.profile.flow.wall_shear == "on_fluid" else 1.0
    return values[pressure].astype(np.float64) / scale, sign * values[shear].astype(np.float64) / scale


# ----------------------------------------------------------------------------- the boundary


@dataclass(frozen=True)
class SurfaceTotals:
    """What the boundary rows add up to: ``force_terms`` over q (6) and the frontal area."""

    terms: np.ndarray
    frontal_area: float


def write_boundary(path: Path, mesh: BoundaryMesh, shape: CarShape, run: RunLayout,
                   areas_path: Path | None = None) -> SurfaceTotals:
    """Write the boundary surface of ``mesh`` (body frame, wound outward) in the run's layout: a
    VTP, or a VTU of polygon cells (by the file's suffix), cells wound as the profile's normals
    point, the wall fields at the cells and/or points (``dataset.field_data.surface``), a point
    normals array (``dataset.surface_rows.normals``), and each row's area to ``areas_path`` (.npy
    float32). Returns the force over q and the frontal area of the rows the profile reads."""
    profile = run.profile
    vertices = run.frame.vectors(mesh.vertices).astype(np.float32).astype(np.float64)  # as written
    where, location = profile.field_data.surface, profile.surface_rows.location
    point_values, normals, dual = (_point_values(mesh, vertices, shape, run) if "points" in where
                                   else (None, None, None))
    names = profile.file_fields("surface")
    cell_names = {r: n for r, n in names.items() if "cells" in where or r == "patch_id"}
    point_names = {r: n for r, n in names.items() if "points" in where and r != "patch_id"}
    specs = _boundary_specs(path, mesh, cell_names, point_names, profile.surface_rows.normals)
    sums = np.zeros(7)  # force terms over q (6) and the frontal area
    areas = None if areas_path is None else np.lib.format.open_memmap(
        areas_path, "w+", np.float32, (mesh.n_cells if location == "cells" else len(vertices),))
    with VtkBlockWriter(path, _kind(path), _counts(path, mesh), specs, run.encoding) as out:
        if point_values is not None:
            for name, column in named_arrays(point_values, point_names).items():
                out.append("PointData", name, column)
            if profile.surface_rows.normals:
                sign = -1.0 if profile.flow.normals == "into_body" else 1.0
                out.append("PointData", profile.surface_rows.normals, sign * normals)
        out.append("Points", "Points", vertices)
        _write_cells(out, path, mesh, vertices, shape, run, cell_names, sums if location == "cells" else None, areas)
    if location == "points":
        pressure, shear = _force_fields(point_values, run)
        vector_areas = normals * dual[:, None]
        sums += _row_sums(vertices, vector_areas, pressure, shear, run)
        if areas is not None:
            areas[:] = dual
    if areas is not None:
        areas.flush()
    return SurfaceTotals(sums[:6], float(sums[6]))


def _point_values(mesh: BoundaryMesh, vertices: np.ndarray, shape: CarShape,
                  run: RunLayout) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The wall fields at the boundary's points (the fields at each point with its normal), its
    outward unit normals and dual areas (dataset frame)."""
    normals, dual = (a.astype(np.float32).astype(np.float64) for a in  # as written
                     point_weights(vertices, mesh.offsets, mesh.connectivity))
    values = surface_fields(shape, mesh.vertices, run.frame.to_body(normals), float(run.profile.flow.velocity))
    return oriented(values, run), normals, dual


def _row_sums(centres: np.ndarray, vector_areas: np.ndarray, pressure: np.ndarray, shear: np.ndarray,
              run: RunLayout) -> np.ndarray:
    """``force_terms`` (6) of rows (area vectors out of the body, shear on it) and their frontal
    area (a closed body covers its projection twice: half the sum of |A . drag|)."""
    frontal = 0.5 * float(np.abs(vector_areas @ run.directions.drag).sum())
    return np.append(force_terms(centres, vector_areas, pressure, shear), frontal)


def _write_cells(out: VtkBlockWriter, path: Path, mesh: BoundaryMesh, vertices: np.ndarray, shape: CarShape,
                 run: RunLayout, cell_names: dict, sums: np.ndarray | None, areas: np.ndarray | None) -> None:
    """The cells a block at a time: their fields (cell data), connectivity wound as the profile
    says, and, when the rows are cells (``sums`` given), their force sums and areas."""
    section = "Polys" if _kind(path) == "PolyData" else "Cells"
    into_body = run.profile.flow.normals == "into_body"
    for start in range(0, mesh.n_cells, CELL_BLOCK):
        stop = min(start + CELL_BLOCK, mesh.n_cells)
        offsets, connectivity = mesh.cells(start, stop)
        centres, vectors = ragged_face_geometry(vertices, offsets, connectivity)
        sizes = np.diff(offsets)
        if cell_names:
            body_normals = run.frame.to_body(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
            values = oriented(surface_fields(shape, run.frame.to_body(centres), body_normals,
                                             float(run.profile.flow.velocity)), run)
            for name, column in named_arrays(values, cell_names).items():
                out.append("CellData", name, column)
            if sums is not None:
                sums += _row_sums(centres, vectors, *_force_fields(values, run), run)
                if areas is not None:
                    areas[start:stop] = np.linalg.norm(vectors, axis=1)
        out.append(section, "connectivity", _wound(offsets, connectivity) if into_body else connectivity)
        out.append(section, "offsets", mesh.offsets[start + 1:stop + 1])
        if section == "Cells":
            out.append(section, "types", np.array([VTK_TYPES.get(int(k), pv.CellType.POLYGON) for k in sizes],
                                                   dtype=np.uint8))


def _wound(offsets: np.ndarray, connectivity: np.ndarray) -> np.ndarray:
    """Each polygon's point ids in reverse order (its normal the other way)."""
    sizes = np.diff(offsets)
    reverse = np.repeat(offsets[1:] + offsets[:-1] - 1, sizes) - np.arange(offsets[-1])
    return connectivity[reverse]


def _kind(path: Path) -> str:
    return "PolyData" if Path(path).suffix.lower() == ".vtp" else "UnstructuredGrid"


def _counts(path: Path, mesh: BoundaryMesh) -> dict[str, int]:
    if _kind(path) == "PolyData":
        return {"NumberOfPoints": len(mesh.vertices), "NumberOfVerts": 0, "NumberOfLines": 0,
                "NumberOfStrips": 0, "NumberOfPolys": mesh.n_cells}
    return {"NumberOfPoints": len(mesh.vertices), "NumberOfCells": mesh.n_cells}


def _boundary_specs(path: Path, mesh: BoundaryMesh, cell_names: dict, point_names: dict,
                    normals: str | None) -> list[ArraySpec]:
    """The boundary file's arrays in VTK's order: point data, cell data, points, cells."""
    sample = surface_fields(_SAMPLE_SHAPE, np.zeros((1, 3)), np.array([[1.0, 0.0, 0.0]]), 1.0)
    n_points, n_cells = len(mesh.vertices), mesh.n_cells
    specs = [ArraySpec("PointData", name, "f4", n_points, _width(column))
             for name, column in named_arrays(sample, point_names).items()]
    if normals:
        specs.append(ArraySpec("PointData", normals, "f4", n_points, 3, information=NORMALS_INFORMATION))
    specs += [ArraySpec("CellData", name, "i4" if column.dtype == np.int32 else "f4", n_cells, _width(column))
              for name, column in named_arrays(sample, cell_names).items()]
    section = "Polys" if _kind(path) == "PolyData" else "Cells"
    specs += [ArraySpec("Points", "Points", "f4", n_points, 3),
              ArraySpec(section, "connectivity", "i8", len(mesh.connectivity)),
              ArraySpec(section, "offsets", "i8", n_cells)]
    if section == "Cells":
        specs.append(ArraySpec(section, "types", "u1", n_cells))
    return specs


_SAMPLE_SHAPE = CarShape(0.0, 1.0, 1.0, 1.0, 0.1, 2.0, 2.0, 2.0, 0.5, 0.3, 0.8)


# ----------------------------------------------------------------------------- the volume


def write_volume(path: Path, shape: CarShape, n_points: int, rng: np.random.Generator, run: RunLayout) -> Path:
    """Write the volume VTU block by block: one VTK_VERTEX cell per point, the profile's fields
    as point and/or cell data (``dataset.field_data.volume``); in two pieces where the dataset
    publishes it so (``split_into_pieces``, the cut inside an array's data). Memory stays at one
    block of points whatever ``n_points``. Returns the written path (the whole file's name)."""
    profile, layout = run.profile, run.layout
    names = profile.file_fields("volume")
    roles = frozenset(names)
    box = run.frame.box_to_body(profile.bounding_boxes.volume, shape.ground)
    velocity = float(profile.flow.velocity)

    def fields_at(points: np.ndarray) -> dict[str, np.ndarray]:
        values = volume_fields(shape, points, velocity, layout.pressure_offset, layout.pressure_scale, roles)
        turned = {role: (run.frame.vectors(v) if v.ndim == 2 and v.shape[1] == 3 else
                         run.frame.tensors(v) if v.ndim == 2 else v).astype(np.float32) for role, v in values.items()}
        return named_arrays(turned, names)

    widths = {name: _width(column) for name, column in fields_at(np.zeros((1, 3)) + box[0]).items()}
    where = profile.field_data.volume
    specs = ([ArraySpec("PointData", n, "f4", n_points, w) for n, w in widths.items() if "points" in where]
             + [ArraySpec("CellData", n, "f4", n_points, w) for n, w in widths.items() if "cells" in where]
             + [ArraySpec("Points", "Points", "f4", n_points, 3), ArraySpec("Cells", "connectivity", "i8", n_points),
                ArraySpec("Cells", "offsets", "i8", n_points), ArraySpec("Cells", "types", "u1", n_points)])
    seed = np.random.SeedSequence(int(rng.integers(2**63)))
    counts = {"NumberOfPoints": n_points, "NumberOfCells": n_points}
    with (VtkBlockWriter(path, "UnstructuredGrid", counts, specs, run.encoding) as vtu,
          tqdm(total=n_points, desc="volume points", disable=n_points < PROGRESS_MIN_POINTS, leave=False) as bar):
        start = 0
        for block in volume_blocks(shape, n_points, seed, box):
            for name, values in fields_at(block).items():
                for section in (("PointData",) if "points" in where else ()) + (("CellData",) if "cells" in where else ()):
                    vtu.append(section, name, values)
            ids = np.arange(start, start + len(block), dtype=np.int64)
            vtu.append("Points", "Points", run.frame.vectors(block))
            vtu.append("Cells", "connectivity", ids)
            vtu.append("Cells", "offsets", ids + 1)
            vtu.append("Cells", "types", np.full(len(block), pv.CellType.VERTEX, dtype=np.uint8))
            start += len(block)
            bar.update(len(block))
    if layout.volume_pieces:
        split_into_pieces(path, [path.stat().st_size // 2])
    return path


def split_into_pieces(path: Path, cuts: list[int], naming: str = "00.part") -> list[Path]:
    """Split the written file ``path`` at the byte offsets ``cuts`` into pieces, as DrivAerML
    publishes its volumes (``<name>.00.part``, ``<name>.01.part``, ...; naming "part1":
    ``<name>.part1``, ...), and remove the whole file; return the pieces. A cut may fall
    anywhere, inside an array's data too; the bytes are copied a MiB at a time."""
    path = Path(path)
    size = path.stat().st_size
    bounds = [0, *cuts, size]
    if any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"{path}: cuts {cuts} must rise strictly inside its {size} bytes")
    pieces = [piece_path(path, k, naming) for k in range(len(bounds) - 1)]
    with open(path, "rb") as whole:
        for piece, start, stop in zip(pieces, bounds, bounds[1:]):
            with open(piece, "wb") as out:
                while start < stop:
                    chunk = whole.read(min(1 << 20, stop - start))
                    out.write(chunk)
                    start += len(chunk)
    path.unlink()
    return pieces


def join_pieces(path: Path, out: Path | None = None) -> Path:
    """The file ``path`` published in pieces (or whole) joined into ``out`` (default: ``path``
    itself, the pieces removed), as ``cat`` joins them; returns the joined file."""
    path = Path(path)
    pieces = file_pieces(path)
    target = Path(out) if out is not None else path
    if pieces == [path] and target == path:
        return path
    tmp = target.with_name(f".{target.name}.joining")
    with open(tmp, "wb") as joined:
        for piece in pieces:
            with open(piece, "rb") as part:
                while chunk := part.read(1 << 20):
                    joined.write(chunk)
    if out is None:
        for piece in pieces:
            piece.unlink()
    tmp.replace(target)
    return target


# ----------------------------------------------------------------------------- published files


def write_one_row_csv(path: Path, values: dict[str, float | str], prefix: str = "") -> None:
    """A header and one row, ``name, name`` / ``value, value`` (a space after each comma; the
    value row starting with ``prefix``)."""
    text = [v if isinstance(v, str) else f"{v:.9g}" for v in values.values()]
    path.write_text(", ".join(values) + "\n" + prefix + ", ".join(text) + "\n")


def _vector_text(vector: tuple[float, float, float]) -> str:
    """A vector as the published references write it, OpenFOAM's way: ``(x y z)``."""
    return "(" + " ".join(f"{v:.9g}" for v in vector) + ")"


def own_references(shape: CarShape, frontal_area: float, run: RunLayout) -> ForceReferences:
    """A body's own references, as DrivAerML states a variant's: its frontal area, its wheelbase
    (a share of its length, front axle at a fifth of it) and the centre between the axles on the
    ground; the profile's length and centre where the dataset gives no own ones."""
    refs = run.profile.references
    if run.layout.wheelbase_fraction is None:
        return ForceReferences(frontal_area, refs.length, tuple(refs.centre))
    centre = run.frame.vectors(np.array([[shape.x_nose + 0.5 * shape.length, 0.0, shape.ground]]))[0]
    return ForceReferences(frontal_area, run.layout.wheelbase_fraction * shape.length, tuple(centre.tolist()))


def write_published(run_dir: Path, index: int, run: RunLayout, totals: SurfaceTotals, shape: CarShape) -> None:
    """The coefficient and reference files the profile says a run publishes, with its columns,
    over the body's own references and over the profile's constant ones."""
    profile = run.profile
    own = own_references(shape, totals.frontal_area, run)
    constant = ForceReferences(profile.references.area, profile.references.length, tuple(profile.references.centre))
    columns = profile.coefficients.columns
    for pattern, refs in ((profile.coefficients.own, own), (profile.coefficients.constant, constant)):
        if pattern is not None:
            values = coefficients(moment_about(totals.terms, refs.centre), refs, run.directions)
            write_one_row_csv(run_dir / pattern.replace("{index}", str(index)),
                              {column: values[name] for name, column in columns.items()}, run.layout.value_prefix)
    if profile.references.file is not None:
        row: dict[str, float | str] = {}
        for key, refs in (("columns", own), ("constant_columns", constant)):
            for quantity, column in getattr(profile.references, key).items():
                value = getattr(refs, quantity)
                row[column] = _vector_text(value) if quantity == "centre" else value
        write_one_row_csv(run_dir / profile.references.file.replace("{index}", str(index)), row)
