"""The parametric car-like body of the synthetic runs, in its own frame (x downstream, z up, the
ground at ``CarShape.ground``), and the meshes of it: a watertight STL and a finer boundary
surface of mixed polygons.

The body is a closed parametric surface: stations s in [0, 1] along x, each a superellipse cross
section whose half width and height follow a nose / cabin / tail profile; both ends close in a
single pole vertex. The boundary surface is a (station, sector) grid of quads, a share of them
split into triangles, and a share of the edges along the body split by a midpoint raised off
the surface, which turns the quads beside them into warped pentagons and hexagons: polygons
that are not planar, whose area VTK's triangulation and OpenFOAM's face definition measure
differently, as on a real CFD mesh.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SECTORS_PER_STATION = 0.8  # sectors around a cross section per station along the body
SPLIT_FRACTION = 0.2  # share of boundary quads split into two triangles
WARP_FRACTION = 0.06  # share of the edges along the body split by a raised midpoint
WARP_HEIGHT = 0.25  # how far the midpoint is raised off the surface, in edge lengths
CELL_BLOCK = 1 << 20  # cells handled at a time


@dataclass(frozen=True)
class CarShape:
    """Parameters of one car-like body; lengths in metres, in the body frame (z up)."""

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
    ground: float = 0.0  # the ground plane's height

    @property
    def x_tail(self) -> float:
        return self.x_nose + self.length


@dataclass(frozen=True)
class ShapeRanges:
    """The uniform ranges (low, high) a dataset's bodies are drawn from, and its ground height;
    ``x_nose`` None: the body ends at x = 0 (its nose at minus its length)."""

    x_nose: tuple[float, float] | None
    length: tuple[float, float]
    width: tuple[float, float]
    height: tuple[float, float]
    ride_height: tuple[float, float]
    nose_exponent: tuple[float, float]
    tail_exponent: tuple[float, float]
    section_exponent: tuple[float, float]
    hood_fraction: tuple[float, float]
    windshield_s: tuple[float, float]
    rear_s: tuple[float, float]
    ground: float


def random_shape(rng: np.random.Generator, ranges: ShapeRanges) -> CarShape:
    """Draw a body from ``ranges``, its parameters in CarShape's order."""
    draw = {name: float(rng.uniform(*getattr(ranges, name))) for name in
            ("length", "width", "height", "ride_height", "nose_exponent", "tail_exponent", "section_exponent",
             "hood_fraction", "windshield_s", "rear_s")}
    x_nose = -draw["length"] if ranges.x_nose is None else float(rng.uniform(*ranges.x_nose))
    return CarShape(x_nose=x_nose, ground=ranges.ground, **draw)


# ----------------------------------------------------------------------------- the smooth body


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
    bottom = shape.ground + shape.ride_height + 0.11 * shape.height * (1.0 - f)
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


def outward_normals(shape: CarShape, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Unit normals of the smooth body at (s, t), out of it (finite differences of body_points)."""
    p = body_points(shape, s, t)
    step = 1e-4
    normal = np.cross(body_points(shape, s + step, t) - p, body_points(shape, s, t + step) - p)
    normal /= np.maximum(np.linalg.norm(normal, axis=-1, keepdims=True), 1e-30)
    centre = np.stack(np.broadcast_arrays(p[..., 0], 0.0 * p[..., 1], section(shape, s)[1]), axis=-1)
    return normal * np.sign(np.sum(normal * (p - centre), axis=-1, keepdims=True))


def inside_body(shape: CarShape, points: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """True for points inside the body inflated by ``margin`` metres (exact for the smooth body)."""
    s = (points[:, 0] - shape.x_nose) / shape.length
    half_width, centre, half_height = section(shape, s)
    n = shape.section_exponent
    dy = np.abs(points[:, 1]) / np.maximum(half_width + margin, 1e-12)
    dz = np.abs(points[:, 2] - centre) / np.maximum(half_height + margin, 1e-12)
    pad = margin / shape.length
    return (s > -pad) & (s < 1.0 + pad) & (dy**n + dz**n < 1.0)


# ----------------------------------------------------------------------------- grids and meshes


def _stations(n_stations: int) -> np.ndarray:
    """Station positions clustered towards the poles, where the body curves most."""
    return 0.5 * (1.0 - np.cos(np.pi * np.arange(n_stations + 1) / n_stations))


def _grid_size(n_cells: float) -> tuple[int, int]:
    """Stations and sectors of a (u, v) grid with about ``n_cells`` quads."""
    sectors = max(8, int(round(np.sqrt(n_cells * SECTORS_PER_STATION))))
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
    """Quads between neighbouring rings (ring i, sector j: corners (i, j), (i+1, j), (i+1, j+1),
    (i, j+1)) and triangle fans at both poles, all wound alike."""
    nxt = np.roll(ring_ids, -1, axis=1)
    quads = np.stack([ring_ids[:-1], ring_ids[1:], nxt[1:], nxt[:-1]], axis=-1).reshape(-1, 4)
    nose = np.stack([np.zeros_like(ring_ids[0]), ring_ids[0], nxt[0]], axis=-1)
    tail = np.full_like(ring_ids[-1], n_vertices - 1)
    tail = np.stack([tail, nxt[-1], ring_ids[-1]], axis=-1)
    return quads, np.concatenate([nose, tail])


def split_quads(quads: np.ndarray) -> np.ndarray:
    """Two triangles per quad, same winding."""
    return np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])


def enclosed_volume(vertices: np.ndarray, groups: list[np.ndarray]) -> float:
    """The signed volume the closed surface of same-size polygon ``groups`` encloses (positive:
    wound outward), summed over fans of triangles a block of cells at a time."""
    volume = 0.0
    for group in groups:
        for start in range(0, len(group), CELL_BLOCK):
            block = group[start:start + CELL_BLOCK]
            a = vertices[block[:, 0]]
            for k in range(1, block.shape[1] - 1):
                b, c = vertices[block[:, k]], vertices[block[:, k + 1]]
                volume += np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0
    return volume


def orient_outward(vertices: np.ndarray, groups: list[np.ndarray]) -> list[np.ndarray]:
    """Reverse every cell if the closed surface they form has negative signed volume."""
    if enclosed_volume(vertices, groups) > 0:
        return groups
    return [group[:, ::-1].copy() for group in groups]


def stl_mesh(shape: CarShape, n_triangles: int) -> tuple[np.ndarray, np.ndarray]:
    """Watertight triangle mesh of the body: vertices (V, 3) and outward-wound faces (F, 3)."""
    stations, sectors = _grid_size(n_triangles / 2)
    vertices, ring_ids = body_grid(shape, stations, sectors)
    quads, fans = _grid_cells(ring_ids, len(vertices))
    quads, fans = orient_outward(vertices, [quads, fans])
    return vertices, np.concatenate([split_quads(quads), fans]).astype(np.int64)


@dataclass(frozen=True)
class BoundaryMesh:
    """The boundary surface: vertices (V, 3) and its polygons, wound outward, as ``offsets``
    (C + 1,) into ``connectivity``; cells run along the body (nose to tail), vertex counts mixed."""

    vertices: np.ndarray
    offsets: np.ndarray
    connectivity: np.ndarray

    @property
    def n_cells(self) -> int:
        return len(self.offsets) - 1

    def cells(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets from 0, connectivity) of cells ``start:stop``."""
        first, last = self.offsets[start], self.offsets[stop]
        return self.offsets[start:stop + 1] - first, self.connectivity[first:last]


def boundary_mesh(shape: CarShape, n_cells: int, rng: np.random.Generator,
                  warp_fraction: float = WARP_FRACTION) -> BoundaryMesh:
    """The finer boundary surface of about ``n_cells`` cells: quads, triangles (a random share of
    the quads split), and warped pentagons and hexagons beside ``warp_fraction`` of the edges
    along the body, split by a raised midpoint (module docstring); watertight and wound outward."""
    stations, sectors = _grid_size(n_cells / (1.0 + SPLIT_FRACTION))
    vertices, ring_ids = body_grid(shape, stations, sectors)
    quads, fans = _grid_cells(ring_ids, len(vertices))
    rings = len(ring_ids) - 1
    split = rng.random(len(quads)) < SPLIT_FRACTION
    warped = _warped_edges(split.reshape(rings, sectors), rng, warp_fraction)
    midpoints = _raised_midpoints(shape, vertices, ring_ids, warped, stations)
    mid_ids = np.full(warped.shape, -1, dtype=np.int64)
    mid_ids[warped] = len(vertices) + np.arange(int(warped.sum()))
    groups, keys = _polygons(quads, split, mid_ids, rings, sectors)
    groups += [fans]
    keys += [np.r_[np.full(sectors, -1), np.full(sectors, rings)]]
    vertices = np.concatenate([vertices, midpoints])
    if enclosed_volume(vertices, groups) < 0:
        groups = [group[:, ::-1].copy() for group in groups]
    return _ragged(vertices, groups, keys)


def _warped_edges(split: np.ndarray, rng: np.random.Generator, fraction: float) -> np.ndarray:
    """(rings, sectors) True where the edge along the body at (ring, sector) gets a raised
    midpoint: a random share ``fraction`` of the edges whose two quads (sectors j - 1 and j) are
    not split."""
    both = ~split & ~np.roll(split, 1, axis=1)
    return both & (rng.random(split.shape) < fraction)


def _raised_midpoints(shape: CarShape, vertices: np.ndarray, ring_ids: np.ndarray, warped: np.ndarray,
                      stations: int) -> np.ndarray:
    """The midpoints of the warped edges, on the smooth body half-way between their rings and
    raised off it along its normal by WARP_HEIGHT edge lengths."""
    ring, sector = np.nonzero(warped)
    s = _stations(stations)
    s_mid = 0.5 * (s[1:-1][ring] + s[1:-1][ring + 1])
    t = 2.0 * np.pi * sector / ring_ids.shape[1]
    edge = np.linalg.norm(vertices[ring_ids[ring + 1, sector]] - vertices[ring_ids[ring, sector]], axis=1)
    return body_points(shape, s_mid, t) + WARP_HEIGHT * edge[:, None] * outward_normals(shape, s_mid, t)


def _polygons(quads: np.ndarray, split: np.ndarray, mid_ids: np.ndarray, rings: int,
              sectors: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Cell groups of one vertex count each, and each cell's ring (its place along the body):
    split quads as triangles, the others with the raised midpoints of their two edges along the
    body inserted (quad (i, j): [a, m_left, b, c, m_right, d], m_left on edge (i, j), m_right on
    edge (i, j + 1))."""
    ring = np.repeat(np.arange(rings), sectors)
    left = mid_ids.ravel()
    right = np.roll(mid_ids, -1, axis=1).ravel()
    groups, keys = [split_quads(quads[split])], [np.tile(ring[split], 2)]
    a, b, c, d = quads.T
    for has_left in (False, True):
        for has_right in (False, True):
            rows = ~split & ((left >= 0) == has_left) & ((right >= 0) == has_right)
            columns = [a, *([left] if has_left else []), b, c, *([right] if has_right else []), d]
            groups.append(np.stack([column[rows] for column in columns], axis=1))
            keys.append(ring[rows])
    return groups, keys


def _ragged(vertices: np.ndarray, groups: list[np.ndarray], keys: list[np.ndarray]) -> BoundaryMesh:
    """The cells of ``groups`` in one ragged list ordered by ``keys`` (stable: along the body)."""
    sizes = np.concatenate([np.full(len(g), g.shape[1]) for g in groups])
    order = np.argsort(np.concatenate(keys), kind="stable")
    flat = [g.ravel() for g in groups]
    starts = np.concatenate([[0], np.cumsum(sizes)])[:-1]
    connectivity_all = np.concatenate(flat)
    sizes = sizes[order]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    gather = np.repeat(starts[order] - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
    return BoundaryMesh(vertices, offsets, connectivity_all[gather].astype(np.int64))
