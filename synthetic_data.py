"""Synthetic DrivAerML runs: car-like bodies with smooth, plausible flow fields, in the real files.

Each run folder holds what a DrivAerML run holds, with the real names, arrays and conventions:

    run_<i>/drivaer_<i>.stl     watertight triangulated body, ASCII STL
    run_<i>/boundary_<i>.vtp    a finer tessellation of the same body, mixed quads and triangles,
                                cell data pMeanTrim, CpMeanTrim, pPrime2MeanTrim,
                                wallShearStressMeanTrim (float32, kinematic)
    run_<i>/volume_<i>.vtu      points filling the tunnel outside the body (VTK_VERTEX cells), with
                                UMeanTrim, pMeanTrim, nutMeanTrim, CpMeanTrim, magUMeanNormTrim as
                                point data and as cell data
    run_<i>/force_mom_<i>.csv   Cd, Cl, Cs of the boundary fields (free stream 38.89 m/s, kinematic,
                                the variant's aRef), integrated here over the boundary cells
    run_<i>/geo_ref_<i>.csv     lRef (here the car's length; DrivAerML's is the wheelbase), aRef
                                (the body's projection on the y-z plane)

The body is a closed parametric surface: stations s in [0, 1] along x, each a superellipse cross
section whose half width and height follow a nose / cabin / tail profile; both ends close in a
single pole vertex. Length, width, height, ride height, nose and tail bluntness, cross-section
squareness and the roof line vary per run. Fields are potential-flow-like: stagnation at the nose,
suction over the roof, wall shear along the flow, and a wake deficit behind the car.

    python synthetic_data.py --preset demo --runs 6 --seed 0 --out outputs/demo/raw
    python synthetic_data.py --preset bench --runs 1 --out /tmp/bench --surface-cells 500000
    python synthetic_data.py --preset full --runs 1 --volume-points 150000000 --out /tmp/full
    python synthetic_data.py --preset tiny --runs 1 --data-mode appended-raw --compressor none --header-bits 64 --out /tmp/z
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyvista as pv
from tqdm import tqdm

from domino_pipeline.dataset_profile import DatasetConfig, profile_from_file
from domino_pipeline.entry_point import refusals_in_one_line
from domino_pipeline.inputs.concat_bytes import piece_path
from domino_pipeline.inputs.vtk_xml_writer import (
    COMPRESSORS,
    DATA_MODES,
    Encoding,
    VtkBlockWriter,
    polydata_arrays,
    unstructured_grid_arrays,
)

PROFILES = Path(__file__).resolve().parent / "conf" / "dataset"
GROUND_Z = -0.318469  # the synthetic ground plane, m (DrivAerML's lies within 1 mm of it)
STREAM_VELOCITY = 38.889  # DrivAerML's free stream along +x, m/s
VOLUME_BOX = ((-3.5, -2.25, GROUND_Z), (8.5, 2.25, 3.0))
# Volume points keep this distance from the smooth body, so that none falls inside the faceted STL.
WALL_MARGIN = 0.04

PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"stl_triangles": 1_500, "surface_cells": 3_000, "volume_points": 8_000},
    "demo": {"stl_triangles": 16_000, "surface_cells": 50_000, "volume_points": 200_000},
    # bench: 600,740 triangles and 300,372 STL vertices, so 300,000 geometry points need no replacement
    "bench": {"stl_triangles": 600_400, "surface_cells": 1_000_000, "volume_points": 2_000_000},
    # full: DrivAerML's surface (8.8M mixed quads and triangles) and STL sizes; 20M volume points
    # of DrivAerML's ~150M, as many as a 2-core machine processes and caches in minutes
    "full": {"stl_triangles": 600_400, "surface_cells": 8_800_000, "volume_points": 20_000_000},
}
_SECTORS_PER_STATION = 0.8  # sectors around a cross section per station along the body
_SPLIT_FRACTION = 0.2  # share of boundary quads split into two triangles
_PROGRESS_MIN_POINTS = 500_000  # show progress bars from this volume size on
VOLUME_BLOCK_POINTS = 1 << 20  # volume points generated and written at a time
CELL_BLOCK = 1 << 20  # boundary cells handled at a time


@dataclass(frozen=True)
class CarShape:
    """Parameters of one car-like body; lengths in metres."""

    x_nose: float
    length: float
    width: float
    height: float
    ride_height: float
    nose_exponent: float  # longitudinal superellipse exponent at the front: larger is blunter
    tail_exponent: float
    section_exponent: float  # cross-section superellipse exponent: larger is boxier
    hood_fraction: float  # hood height as a fraction of the roof height
    windshield_s: float  # where the cabin starts, as a fraction of the length
    rear_s: float  # where the cabin ends

    @property
    def x_tail(self) -> float:
        return self.x_nose + self.length


def random_shape(rng: np.random.Generator) -> CarShape:
    """Draw a body that stays inside the default DrivAerML surface bounding box."""
    return CarShape(
        x_nose=float(rng.uniform(-1.05, -0.85)),
        length=float(rng.uniform(4.2, 4.8)),
        width=float(rng.uniform(1.7, 1.95)),
        height=float(rng.uniform(1.25, 1.45)),
        ride_height=float(rng.uniform(0.08, 0.16)),
        nose_exponent=float(rng.uniform(2.0, 3.5)),
        tail_exponent=float(rng.uniform(2.5, 5.0)),
        section_exponent=float(rng.uniform(2.5, 4.5)),
        hood_fraction=float(rng.uniform(0.45, 0.65)),
        windshield_s=float(rng.uniform(0.25, 0.35)),
        rear_s=float(rng.uniform(0.75, 0.88)),
    )


# ----------------------------------------------------------------------------- body geometry


def _longitudinal(shape: CarShape, s: np.ndarray) -> np.ndarray:
    """Superellipse envelope along the body: 0 at both poles, 1 in the middle."""
    u = np.abs(2.0 * np.clip(s, 0.0, 1.0) - 1.0)
    m = np.where(s < 0.5, shape.nose_exponent, shape.tail_exponent)
    return np.clip(1.0 - u**m, 0.0, 1.0) ** (1.0 / m)


def _roof_line(shape: CarShape, s: np.ndarray) -> np.ndarray:
    """Fraction of the full height at station s: hood in front, cabin in the middle."""
    rise = 1.0 / (1.0 + np.exp(-(s - shape.windshield_s) / 0.035))
    fall = 1.0 / (1.0 + np.exp(-(shape.rear_s - s) / 0.05))
    return shape.hood_fraction + (1.0 - shape.hood_fraction) * rise * fall


def section(shape: CarShape, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half width, centre height and half height of the cross section at stations s."""
    f = _longitudinal(shape, s)
    bottom = GROUND_Z + shape.ride_height + 0.15 * (1.0 - f)
    top = bottom + shape.height * _roof_line(shape, s) * f
    half_width = 0.5 * shape.width * f**0.7
    return half_width, 0.5 * (top + bottom), 0.5 * (top - bottom)


def body_points(shape: CarShape, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Points on the body at stations s and angles t (t = 0 is the +y side, pi/2 the roof)."""
    half_width, centre, half_height = section(shape, s)
    e = 2.0 / shape.section_exponent
    c, sn = np.cos(t), np.sin(t)
    y = half_width * np.sign(c) * np.abs(c) ** e
    z = centre + half_height * np.sign(sn) * np.abs(sn) ** e
    x = shape.x_nose + shape.length * s
    return np.stack(np.broadcast_arrays(x, y, z), axis=-1).astype(np.float64)


def inside_body(shape: CarShape, points: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """True for points inside the body inflated by ``margin`` metres (exact for the smooth body)."""
    s = (points[:, 0] - shape.x_nose) / shape.length
    half_width, centre, half_height = section(shape, s)
    n = shape.section_exponent
    dy = np.abs(points[:, 1]) / np.maximum(half_width + margin, 1e-12)
    dz = np.abs(points[:, 2] - centre) / np.maximum(half_height + margin, 1e-12)
    pad = margin / shape.length
    return (s > -pad) & (s < 1.0 + pad) & (dy**n + dz**n < 1.0)


def _stations(n_stations: int) -> np.ndarray:
    """Station positions clustered towards the poles, where the body curves most."""
    return 0.5 * (1.0 - np.cos(np.pi * np.arange(n_stations + 1) / n_stations))


def _grid_size(n_cells: float) -> tuple[int, int]:
    """Stations and sectors of a (u, v) grid with about ``n_cells`` quads."""
    sectors = max(8, int(round(np.sqrt(n_cells * _SECTORS_PER_STATION))))
    stations = max(4, int(round(n_cells / sectors)) + 1)
    return stations, sectors


def body_grid(shape: CarShape, n_stations: int, n_sectors: int) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the (u, v) grid: nose pole, rings of ``n_sectors`` vertices, tail pole.

    Returns the vertices (2 + (n_stations - 1) * n_sectors, 3) and the ring vertex ids
    (n_stations - 1, n_sectors); vertex 0 is the nose pole and the last vertex the tail pole.
    """
    s = _stations(n_stations)
    t = 2.0 * np.pi * np.arange(n_sectors) / n_sectors
    rings = body_points(shape, s[1:-1, None], t[None, :]).reshape(-1, 3)
    poles = body_points(shape, s[[0, -1]], np.zeros(2))
    vertices = np.concatenate([poles[:1], rings, poles[1:]])
    ring_ids = 1 + np.arange(rings.shape[0]).reshape(n_stations - 1, n_sectors)
    return vertices, ring_ids


def _grid_cells(ring_ids: np.ndarray, n_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """Quads between neighbouring rings and triangle fans at both poles, wound outward."""
    nxt = np.roll(ring_ids, -1, axis=1)
    quads = np.stack([ring_ids[:-1], ring_ids[1:], nxt[1:], nxt[:-1]], axis=-1).reshape(-1, 4)
    nose = np.stack([np.zeros_like(ring_ids[0]), ring_ids[0], nxt[0]], axis=-1)
    tail = np.full_like(ring_ids[-1], n_vertices - 1)
    tail = np.stack([tail, nxt[-1], ring_ids[-1]], axis=-1)
    return quads, np.concatenate([nose, tail])


def _split_quads(quads: np.ndarray) -> np.ndarray:
    """Two triangles per quad, same winding."""
    return np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])


def _orient_outward(vertices: np.ndarray, cells: list[np.ndarray]) -> list[np.ndarray]:
    """Reverse every cell if the closed surface they form has negative signed volume (summed
    over blocks of cells, to bound memory)."""
    volume = 0.0
    for group in cells:
        for start in range(0, len(group), CELL_BLOCK):
            block = group[start:start + CELL_BLOCK]
            tris = block[:, [0, 1, 2]] if block.shape[1] == 3 else _split_quads(block)
            a, b, c = (vertices[tris[:, k]] for k in range(3))
            volume += np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0
    return cells if volume > 0 else [cell[:, ::-1].copy() for cell in cells]


def stl_mesh(shape: CarShape, n_triangles: int) -> tuple[np.ndarray, np.ndarray]:
    """Watertight triangle mesh of the body: vertices (V, 3) and outward-wound faces (F, 3)."""
    stations, sectors = _grid_size(n_triangles / 2)
    vertices, ring_ids = body_grid(shape, stations, sectors)
    quads, fans = _grid_cells(ring_ids, len(vertices))
    quads, fans = _orient_outward(vertices, [quads, fans])
    return vertices, np.concatenate([_split_quads(quads), fans]).astype(np.int64)


def boundary_mesh(
    shape: CarShape, n_cells: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The finer boundary surface: vertices, quads (Q, 4) and triangles (T, 3), wound outward.

    A random share of the quads is split into triangles, so cells have mixed vertex counts.
    """
    stations, sectors = _grid_size(n_cells / (1.0 + _SPLIT_FRACTION))
    vertices, ring_ids = body_grid(shape, stations, sectors)
    quads, fans = _grid_cells(ring_ids, len(vertices))
    quads, fans = _orient_outward(vertices, [quads, fans])
    split = rng.random(len(quads)) < _SPLIT_FRACTION
    triangles = np.concatenate([fans, _split_quads(quads[split])])
    return vertices, quads[~split], triangles


def face_geometry(vertices: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and area vectors (area times unit normal) of same-size polygons (C, k), float64,
    as OpenFOAM (v1912) defines a face's: triangles from each edge to the vertex mean, the area
    vector their sum, the centre their centroids weighted by their areas."""
    p = vertices[cells].astype(np.float64)
    estimate = p.mean(axis=1, keepdims=True)
    triangles = 0.5 * np.cross(p - estimate, np.roll(p, -1, axis=1) - estimate)
    area_vector = triangles.sum(axis=1)
    weights = np.linalg.norm(triangles, axis=2)
    centroids = (p + np.roll(p, -1, axis=1) + estimate) / 3.0
    centres = np.einsum("ck,ckd->cd", weights, centroids) / weights.sum(axis=1, keepdims=True)
    return centres, area_vector


def polygon_geometry(vertices: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres (face_geometry's) and unit normals of same-size polygons (C, k)."""
    centres, area_vector = face_geometry(vertices, cells)
    norm = np.linalg.norm(area_vector, axis=1, keepdims=True)
    return centres, area_vector / np.maximum(norm, 1e-30)


@dataclass(frozen=True)
class ForceReferences:
    """The references a published coefficient uses: area (m^2), length (m), moment centre (m)."""

    area: float
    length: float
    centre: tuple[float, float, float]


def run_references(shape: CarShape, frontal_area: float) -> ForceReferences:
    """A body's own references, as DrivAerML states a variant's: its frontal area, its
    wheelbase (here 0.6 of the length, front axle at 0.2) and the centre between the axles on
    the ground."""
    wheelbase = 0.6 * shape.length
    return ForceReferences(frontal_area, wheelbase, (shape.x_nose + 0.5 * shape.length, 0.0, GROUND_Z))


def force_terms(vertices: np.ndarray, cells: np.ndarray, fields: dict[str, np.ndarray]) -> np.ndarray:
    """The force on the body (3), its moment about the origin (3) and the sum of |n_x| A (1) of
    same-size ``cells`` with their wall fields (by role: normals out of the body, shear on it):
    sums over any split of the cells add up to the body's."""
    centres, area_vectors = face_geometry(vertices, cells)
    areas = np.linalg.norm(area_vectors, axis=1)
    pressure = fields["pressure"].astype(np.float64)
    shear = fields["wall_shear_stress"].astype(np.float64)
    forces = -pressure[:, None] * area_vectors + shear * areas[:, None]
    moments = np.cross(centres, forces)
    return np.concatenate([forces.sum(axis=0), moments.sum(axis=0), [np.abs(area_vectors[:, 0]).sum()]])


def moment_about(terms: np.ndarray, centre: tuple[float, float, float]) -> np.ndarray:
    """``force_terms`` with the moment taken about ``centre`` instead: M_c = M_0 - c x F."""
    moved = terms.copy()
    moved[3:6] -= np.cross(np.asarray(centre, dtype=np.float64), terms[:3])
    return moved


def coefficients(terms: np.ndarray, references: ForceReferences, u_inf: float = STREAM_VELOCITY) -> dict[str, float]:
    """The coefficients OpenFOAM's forceCoeffs writes of a kinematic force and moment (drag +x,
    side +y, lift +z, pitch about +y): Cd, Cl, Cs, the moments, and the front and rear lift
    Clf = Cl/2 + CmPitch, Clr = Cl/2 - CmPitch."""
    q_area = 0.5 * u_inf**2 * references.area
    force, moment = terms[:3] / q_area, terms[3:6] / (q_area * references.length)
    return {"cd": force[0], "cs": force[1], "cl": force[2], "cm_roll": moment[0], "cm_pitch": moment[1],
            "cm_yaw": moment[2], "clf": 0.5 * force[2] + moment[1], "clr": 0.5 * force[2] - moment[1]}


def write_one_row_csv(path: Path, values: dict[str, float | str]) -> None:
    """A header and one row, ``name, name`` / ``value, value`` (a space after each comma)."""
    text = [v if isinstance(v, str) else f"{v:.9g}" for v in values.values()]
    path.write_text(", ".join(values) + "\n" + ", ".join(text) + "\n")


def _vector_text(vector: tuple[float, float, float]) -> str:
    """A vector as the published references write it, OpenFOAM's way: ``(x y z)``."""
    return "(" + " ".join(f"{v:.9g}" for v in vector) + ")"


def write_published(run_dir: Path, index: int, profile: DatasetConfig, terms: np.ndarray, shape: CarShape) -> None:
    """The coefficient and reference files the profile says a run publishes, with its columns,
    over the body's own references and over the profile's constant ones. A closed body covers
    its projection on the y-z plane twice, so its frontal area is 0.5 sum |n_x| A."""
    own = run_references(shape, 0.5 * float(terms[6]))
    constant = ForceReferences(profile.references.area, profile.references.length, tuple(profile.references.centre))
    columns = profile.coefficients.columns
    for pattern, refs in ((profile.coefficients.own, own), (profile.coefficients.constant, constant)):
        if pattern is not None:
            values = coefficients(moment_about(terms, refs.centre), refs)
            write_one_row_csv(run_dir / pattern.replace("{index}", str(index)),
                              {column: values[name] for name, column in columns.items()})
    if profile.references.file is not None:
        row: dict[str, float | str] = {}
        for key, refs in (("columns", own), ("constant_columns", constant)):
            for quantity, column in getattr(profile.references, key).items():
                value = getattr(refs, quantity)
                row[column] = _vector_text(value) if quantity == "centre" else value
        write_one_row_csv(run_dir / profile.references.file.replace("{index}", str(index)), row)


# ----------------------------------------------------------------------------- flow fields


def surface_fields(
    shape: CarShape, centres: np.ndarray, normals: np.ndarray, u_inf: float = STREAM_VELOCITY
) -> dict[str, np.ndarray]:
    """Kinematic wall fields of the boundary cells (normals out of the body), float32, by role."""
    q = 0.5 * u_inf**2
    nx, nz = normals[:, 0], normals[:, 2]
    s = np.clip((centres[:, 0] - shape.x_nose) / shape.length, 0.0, 1.0)
    front = np.where(nx < 0.0, nx**2, 0.0)  # stagnation towards the nose
    base = np.where(nx > 0.0, -0.15 * nx**2, 0.0)  # separated flow: low pressure on the back
    cp = front + base - 1.1 * (1.0 - nx**2)
    cp -= 0.5 * np.maximum(nz, 0.0) * np.exp(-(((s - shape.windshield_s - 0.05) / 0.08) ** 2))
    cp += 0.3 * np.maximum(-nz, 0.0) * (1.0 - nx**2)  # the ground slows the underbody flow
    tangent = np.array([1.0, 0.0, 0.0]) - nx[:, None] * normals
    cf = 0.004 * (1.0 + 1.5 * np.exp(-s / 0.1)) * (1.0 - 0.5 * s)
    wall_shear = q * cf[:, None] * tangent
    fluctuation = (0.03 * q * (1.0 + 4.0 * np.maximum(nx, 0.0) + 2.0 * np.exp(-s / 0.05))) ** 2
    return {
        "pressure": (q * cp).astype(np.float32),
        "pressure_coefficient": cp.astype(np.float32),
        "pressure_fluctuation": fluctuation.astype(np.float32),
        "wall_shear_stress": wall_shear.astype(np.float32),
    }


def _doublet_perturbation(shape: CarShape, points: np.ndarray) -> np.ndarray:
    """Potential flow past the body (an ellipsoidal doublet with its ground image) minus the
    free stream, per U."""
    half = np.array([0.5 * shape.length, 0.5 * shape.width, 0.5 * shape.height])
    centre_z = GROUND_Z + shape.ride_height + 0.5 * shape.height
    centre = np.array([shape.x_nose + half[0], 0.0, centre_z])
    velocity = np.zeros_like(points)
    for mirror in (1.0, -1.0):  # the image below the ground keeps the flow parallel to it
        c = centre.copy()
        c[2] = GROUND_Z + mirror * (centre_z - GROUND_Z)
        r = (points - c) / half
        dist = np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1.0)
        r_hat = r / dist
        velocity += 0.5 / dist**3 * (np.array([1.0, 0.0, 0.0]) - 3.0 * r_hat[:, :1] * r_hat)
    return velocity


def _wake(shape: CarShape, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the wake is (0 outside, 1 on its axis) and its velocity deficit (up to 0.8)."""
    behind = points[:, 0] - shape.x_tail
    grow = np.sqrt(np.maximum(behind, 0.0) + 0.5)
    spread_y = 0.45 * shape.width * grow
    spread_z = 0.45 * shape.height * grow
    centre_z = GROUND_Z + shape.ride_height + 0.4 * shape.height
    across = (points[:, 1] / spread_y) ** 2 + ((points[:, 2] - centre_z) / spread_z) ** 2
    profile = np.exp(-across)
    onset = 1.0 / (1.0 + np.exp(-(behind + 0.3) / 0.15))
    weight = onset * profile
    return weight, 0.8 * weight / (1.0 + np.maximum(behind, 0.0) / shape.length)


def volume_fields(
    shape: CarShape, points: np.ndarray, u_inf: float = STREAM_VELOCITY
) -> dict[str, np.ndarray]:
    """Kinematic flow fields at volume points, float32, by role."""
    perturbation = _doublet_perturbation(shape, points)
    weight, deficit = _wake(shape, points)
    potential_cp = 1.0 - np.sum((perturbation + np.array([1.0, 0.0, 0.0])) ** 2, axis=1)
    velocity = perturbation * (1.0 - weight[:, None])  # the separated wake replaces the
    velocity[:, 0] += 1.0  # potential flow's rear stagnation
    velocity[:, 0] *= 1.0 - deficit
    speed = np.linalg.norm(velocity, axis=1)
    cp = (1.0 - weight) * potential_cp - 0.25 * weight  # Bernoulli outside, base pressure inside
    nut = 1e-5 + 2e-3 * deficit + 1e-4 * np.exp(-np.abs(points[:, 2] - GROUND_Z) / 0.05)
    return {
        "velocity": (u_inf * velocity).astype(np.float32),
        "pressure": (0.5 * u_inf**2 * cp).astype(np.float32),
        "turbulent_viscosity": nut.astype(np.float32),
        "pressure_coefficient": cp.astype(np.float32),
        "total_pressure_coefficient": (cp + speed**2).astype(np.float32),
        "normalised_speed": speed.astype(np.float32),
    }


# ----------------------------------------------------------------------------- volume points


def _near_wall_points(shape: CarShape, n: int, rng: np.random.Generator) -> np.ndarray:
    """Points offset outward from random body points, denser close to the wall."""
    s, t = rng.uniform(0.002, 0.998, n), rng.uniform(0.0, 2.0 * np.pi, n)
    p = body_points(shape, s, t)
    ds, dt = 1e-4, 1e-4
    normal = np.cross(body_points(shape, s + ds, t) - p, body_points(shape, s, t + dt) - p)
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-30)
    outward = np.sign(np.einsum("ij,ij->i", normal, p - p.mean(axis=0)))[:, None]
    offset = WALL_MARGIN + rng.exponential(0.12, (n, 1))
    return p + outward * normal * offset


def volume_block(shape: CarShape, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """``n_points`` points in the volume box above the ground, outside the body with a margin,
    in random order.

    About a third are clustered near the wall, as in a CFD mesh; the rest fill the box uniformly.
    """
    low, high = np.array(VOLUME_BOX[0]), np.array(VOLUME_BOX[1])
    kept: list[np.ndarray] = []
    count = 0
    while count < n_points:
        batch = n_points - count + 64
        near = _near_wall_points(shape, batch // 3, rng)
        uniform = rng.uniform(low, high, (batch - len(near), 3))
        cand = np.concatenate([near, uniform])
        ok = ~inside_body(shape, cand, WALL_MARGIN) & np.all((cand >= low) & (cand <= high), 1)
        cand = cand[ok][: n_points - count]
        kept.append(cand)
        count += len(cand)
    points = np.concatenate(kept)
    return points[rng.permutation(len(points))]


def volume_blocks(
    shape: CarShape, n_points: int, seed: np.random.SeedSequence, block_points: int = VOLUME_BLOCK_POINTS
):
    """The volume points of a run in blocks of ``block_points`` (each from its own random
    stream, spawned from ``seed``), so that a run of any size is generated in bounded memory."""
    n_blocks = -(-n_points // block_points)
    for k, child in enumerate(seed.spawn(n_blocks)):
        size = min(block_points, n_points - k * block_points)
        yield volume_block(shape, size, np.random.default_rng(child))


def volume_points(shape: CarShape, n_points: int, rng: np.random.Generator) -> np.ndarray:
    """All ``n_points`` volume points of a body at once (for small runs and benchmarks)."""
    seed = np.random.SeedSequence(int(rng.integers(2**63)))
    return np.concatenate(list(volume_blocks(shape, n_points, seed)) or [np.zeros((0, 3))])


# ----------------------------------------------------------------------------- writers


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


def _named(values: dict[str, np.ndarray], names: dict[str, str]) -> dict[str, np.ndarray]:
    """Fields by role -> fields by the profile's names (roles it does not name are left out)."""
    return {names[role]: column for role, column in values.items() if role in names}


def _widths(names: dict[str, str], kinds: dict[str, np.ndarray]) -> dict[str, int]:
    """{name: components} of the fields the profile names, in the generator's order."""
    return {names[role]: (1 if column.ndim == 1 else column.shape[1]) for role, column in kinds.items() if role in names}


def write_boundary(path: Path, shape: CarShape, n_cells: int, rng: np.random.Generator, profile: DatasetConfig,
                   encoding: Encoding = Encoding(), areas_path: Path | None = None) -> np.ndarray:
    """Write the boundary VTP (quads first, then triangles) with its wall fields as cell data
    (the profile's names), a block of cells at a time, and each cell's area to ``areas_path``
    (.npy float32) when given; return its ``force_terms``."""
    vertices, quads, triangles = boundary_mesh(shape, n_cells, rng)
    n_cells = len(quads) + len(triangles)
    names = profile.file_fields("surface")
    sample = surface_fields(shape, np.zeros((1, 3)), np.array([[1.0, 0.0, 0.0]]))
    specs = polydata_arrays(len(vertices), n_cells, quads.size + triangles.size, _widths(names, sample))
    counts = {"NumberOfPoints": len(vertices), "NumberOfVerts": 0, "NumberOfLines": 0,
              "NumberOfStrips": 0, "NumberOfPolys": n_cells}
    areas = None if areas_path is None else np.lib.format.open_memmap(areas_path, "w+", np.float32, (n_cells,))
    terms, done = np.zeros(7), 0
    with VtkBlockWriter(path, "PolyData", counts, specs, encoding) as vtp:
        vtp.append("Points", "Points", vertices)
        end = 0
        for group in (quads, triangles):
            for start in range(0, len(group), CELL_BLOCK):
                cells = group[start:start + CELL_BLOCK]
                centres, area_vectors = face_geometry(vertices, cells)
                values = surface_fields(shape, centres, area_vectors / np.linalg.norm(area_vectors, axis=1)[:, None])
                for name, column in _named(values, names).items():
                    vtp.append("CellData", name, column)
                terms += force_terms(vertices, cells, values)
                if areas is not None:
                    areas[done:done + len(cells)] = np.linalg.norm(area_vectors, axis=1)
                done += len(cells)
                vtp.append("Polys", "connectivity", cells)
                offsets = end + cells.shape[1] * np.arange(1, len(cells) + 1)
                vtp.append("Polys", "offsets", offsets)
                end = int(offsets[-1])
    if areas is not None:
        areas.flush()
    return terms


def write_volume(path: Path, shape: CarShape, n_points: int, rng: np.random.Generator, profile: DatasetConfig,
                 encoding: Encoding = Encoding()) -> None:
    """Write the volume VTU block by block: one VTK_VERTEX cell per point, fields (the profile's
    names) as point and cell data. Memory stays at one block of points whatever ``n_points``."""
    names = profile.file_fields("volume")
    fields = _widths(names, volume_fields(shape, np.zeros((1, 3))))
    seed = np.random.SeedSequence(int(rng.integers(2**63)))
    specs = unstructured_grid_arrays(n_points, n_points, n_points, fields, fields)
    progress = n_points >= _PROGRESS_MIN_POINTS
    counts = {"NumberOfPoints": n_points, "NumberOfCells": n_points}
    with (VtkBlockWriter(path, "UnstructuredGrid", counts, specs, encoding) as vtu,
          tqdm(total=n_points, desc="volume points", disable=not progress, leave=False) as bar):
        start = 0
        for block in volume_blocks(shape, n_points, seed):
            points = block.astype(np.float32)
            for name, values in _named(volume_fields(shape, points.astype(np.float64)), names).items():
                vtu.append("PointData", name, values)
                vtu.append("CellData", name, values)
            ids = np.arange(start, start + len(points), dtype=np.int64)
            vtu.append("Points", "Points", points)
            vtu.append("Cells", "connectivity", ids)
            vtu.append("Cells", "offsets", ids + 1)
            vtu.append("Cells", "types", np.full(len(points), pv.CellType.VERTEX, dtype=np.uint8))
            start += len(points)
            bar.update(len(points))


def load_profile(name: str) -> DatasetConfig:
    """The dataset profile conf/dataset/<name>.yaml, whose layout and names the runs are written in."""
    path = PROFILES / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
        raise ValueError(f"unknown dataset {name!r}; the profiles are {known}")
    return profile_from_file(path)


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


def generate_run(
    run_dir: Path,
    index: int,
    seed: int,
    stl_triangles: int,
    surface_cells: int,
    volume_points: int,
    encoding: Encoding = Encoding(),
    profile: DatasetConfig | None = None,
) -> Path:
    """Write the STL, boundary surface, volume VTU and published files of run ``index`` into
    ``run_dir`` in the layout and names of ``profile`` (default: DrivAerML's); return it.

    The VTP and VTU are stored in ``encoding``; the VTU is written block by block.

    The body shape and every random draw come from ``np.random.default_rng([seed, index])``.
    """
    profile = load_profile("drivaerml") if profile is None else profile
    rng = np.random.default_rng([seed, index])
    shape = random_shape(rng)
    run_dir.mkdir(parents=True, exist_ok=True)
    large = max(surface_cells, volume_points) >= _PROGRESS_MIN_POINTS
    name = {key: getattr(profile.files, key) and getattr(profile.files, key).replace("{index}", str(index))
            for key in ("stl", "surface", "volume", "surface_areas")}
    with tqdm(total=3, desc=f"{run_dir.name}", unit="file", disable=not large, leave=False) as bar:
        vertices, faces = stl_mesh(shape, stl_triangles)
        write_ascii_stl(run_dir / name["stl"], vertices, faces, Path(name["stl"]).stem)
        bar.update()
        areas = run_dir / name["surface_areas"] if name["surface_areas"] else None
        terms = write_boundary(run_dir / name["surface"], shape, surface_cells, rng, profile, encoding, areas)
        write_published(run_dir, index, profile, terms, shape)
        bar.update()
        write_volume(run_dir / name["volume"], shape, volume_points, rng, profile, encoding)
        bar.update()
    return run_dir


def generate_runs(
    out_dir: str | Path, n_runs: int, preset: str = "tiny", seed: int = 0,
    encoding: Encoding = Encoding(), **overrides: int,
) -> list[Path]:
    """Write ``run_1`` ... ``run_<n_runs>`` under ``out_dir``; return their folders.

    ``overrides`` replace preset sizes: stl_triangles, surface_cells, volume_points. The same
    (preset, seed, overrides) always writes the same files.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    unknown = set(overrides) - set(PRESETS[preset])
    if unknown:
        raise ValueError(f"unknown size overrides {sorted(unknown)}; use {sorted(PRESETS[preset])}")
    sizes = {**PRESETS[preset], **{k: int(v) for k, v in overrides.items() if v is not None}}
    out_dir = Path(out_dir)
    runs = range(1, n_runs + 1)
    show = n_runs > 1 and sizes["volume_points"] >= 100_000
    return [
        generate_run(out_dir / f"run_{i}", i, seed, **sizes, encoding=encoding)
        for i in tqdm(runs, desc="synthetic runs", disable=not show)
    ]


def main(argv: list[str] | None = None) -> None:
    """Command line: write synthetic runs with a preset's sizes, any of them overridden."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stl-triangles", type=int)
    parser.add_argument("--surface-cells", type=int)
    parser.add_argument("--volume-points", type=int)
    default = Encoding()
    parser.add_argument("--data-mode", default=default.mode, choices=DATA_MODES,
                        help="how the VTP and VTU store arrays (default: as VTK's XML writers, "
                             "appended base64 in zlib blocks with UInt32 headers)")
    parser.add_argument("--compressor", default=default.compressor, choices=sorted(COMPRESSORS))
    parser.add_argument("--header-bits", type=int, default=default.header_bits, choices=(32, 64))
    parser.add_argument("--defects", help="inject known defects into the written runs (synthetic_defects.py): "
                                          "all, or name[:run],... of scaled_fields, foreign_boundary, "
                                          "reversed_boundary, truncated_volume, foreign_forces, offset_field")
    args = parser.parse_args(argv)
    with refusals_in_one_line():  # an output folder that cannot be written, a bad size: one line
        runs = generate_runs(
            args.out,
            args.runs,
            args.preset,
            args.seed,
            Encoding(args.data_mode, args.compressor, args.header_bits),
            stl_triangles=args.stl_triangles,
            surface_cells=args.surface_cells,
            volume_points=args.volume_points,
        )
        if args.defects:
            from synthetic_defects import inject_defects, parse_defects
            injected = inject_defects(args.out, parse_defects(args.defects, args.runs), load_profile("drivaerml"))
            print(f"injected {len(injected)} defects: {injected}")
    print(f"wrote {len(runs)} {args.preset} runs to {args.out}")


if __name__ == "__main__":
    main()
