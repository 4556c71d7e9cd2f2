"""What any car's STL tells without a solver, for the learning benchmark's baselines: its length,
width, height, frontal area, wetted area and enclosed volume, and a symmetric distance between two
bodies' surfaces.

Axes as in DrivAerML and the OpenFOAM family: x along the flow, y across it, z up. The frontal area
is the area of the body's shadow on the y-z plane: the union of its triangles' projections,
rasterised on a grid of pixel centres (``FRONTAL_PIXELS`` across the larger of width and height),
so that parts hidden behind others count once (a triangle marks one span of pixels on each pixel
row it crosses). The volume is the divergence theorem's sum over a
closed surface's triangles. The surface distance is the mean, over points drawn uniformly on each
surface, of the distance to the nearest point drawn on the other, averaged over both directions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

DESCRIPTORS = ("length", "width", "height", "frontal_area", "wetted_area", "volume")
FRONTAL_PIXELS = 512


def read_corners(path: Path) -> np.ndarray:
    """The STL's triangles as their corners (T, 3, 3), float64 (zero-area triangles dropped)."""
    from domino_pipeline.inputs.meshes.vtk_reader import read_stl
    stl = read_stl(Path(path))
    return stl["stl_coordinates"].astype(np.float64)[stl["stl_faces"].reshape(-1, 3)]


def triangle_areas(corners: np.ndarray) -> np.ndarray:
    """Each triangle's area."""
    return 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)


def enclosed_volume(corners: np.ndarray) -> float:
    """The volume a closed surface encloses: |sum of v0 . (v1 x v2)| / 6 over its triangles."""
    return float(abs(np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum()) / 6.0)


def frontal_area(corners: np.ndarray, pixels: int = FRONTAL_PIXELS) -> float:
    """The area of the union of the triangles' projections on the y-z plane: the pixel centres of a
    grid of ``pixels`` across the larger extent that some triangle covers, times a pixel's area.
    Each triangle covers, on each pixel row it crosses, one span of pixels (a scanline)."""
    flat = corners[:, :, 1:]  # (T, 3, 2): y, z
    low, high = flat.reshape(-1, 2).min(axis=0), flat.reshape(-1, 2).max(axis=0)
    size = float(np.max(high - low)) / pixels
    shape = np.ceil((high - low) / size).astype(int) + 1
    first = np.ceil((flat[:, :, 1].min(axis=1) - low[1]) / size - 0.5).astype(int)
    last = np.floor((flat[:, :, 1].max(axis=1) - low[1]) / size - 0.5).astype(int)
    rows = np.maximum(last - first + 1, 0)
    triangle = np.repeat(np.arange(len(flat)), rows)
    row = first[triangle] + np.arange(len(triangle)) - np.repeat(np.cumsum(rows) - rows, rows)
    start, stop = _row_span(flat[triangle], low[1] + (row + 0.5) * size)
    begin = np.ceil((start - low[0]) / size - 0.5).astype(int)
    end = np.floor((stop - low[0]) / size - 0.5).astype(int)
    keep = begin <= end
    marks = np.zeros((shape[1], shape[0] + 1), dtype=np.int64)  # per row: +1 where a span begins, -1 after it
    np.add.at(marks, (row[keep], begin[keep]), 1)
    np.add.at(marks, (row[keep], end[keep] + 1), -1)
    return float(np.count_nonzero(np.cumsum(marks, axis=1)[:, :-1] > 0)) * size**2


def _row_span(flat: np.ndarray, height: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each 2-D triangle of ``flat`` (N, 3, 2) meets the line z = ``height``: its lowest and
    highest y, over the edges that cross the line."""
    p, q = flat, np.roll(flat, -1, axis=1)  # the edges p -> q
    dz = q[:, :, 1] - p[:, :, 1]
    crossing = ((np.minimum(p[:, :, 1], q[:, :, 1]) <= height[:, None])
                & (np.maximum(p[:, :, 1], q[:, :, 1]) >= height[:, None]) & (dz != 0))
    fraction = np.where(crossing, (height[:, None] - p[:, :, 1]) / np.where(dz != 0, dz, 1.0), 0.0)
    y = p[:, :, 0] + fraction * (q[:, :, 0] - p[:, :, 0])
    return np.where(crossing, y, np.inf).min(axis=1), np.where(crossing, y, -np.inf).max(axis=1)


def descriptors(corners: np.ndarray) -> dict[str, float]:
    """DESCRIPTORS of a body: its extents along x, y and z, frontal area, wetted area and volume."""
    extent = corners.reshape(-1, 3).max(axis=0) - corners.reshape(-1, 3).min(axis=0)
    return {"length": float(extent[0]), "width": float(extent[1]), "height": float(extent[2]),
            "frontal_area": frontal_area(corners), "wetted_area": float(triangle_areas(corners).sum()),
            "volume": enclosed_volume(corners)}


def sample_surface(corners: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` points drawn uniformly over the surface: a triangle by its area, then a uniform
    point in it."""
    areas = triangle_areas(corners)
    chosen = corners[rng.choice(len(corners), size=count, p=areas / areas.sum())]
    first, second = rng.random(count), rng.random(count)
    root = np.sqrt(first)[:, None]
    return ((1 - root) * chosen[:, 0] + root * (1 - second[:, None]) * chosen[:, 1]
            + root * second[:, None] * chosen[:, 2])


def surface_distance(points_a: np.ndarray, points_b: np.ndarray) -> float:
    """The symmetric mean nearest distance between two point sets drawn on two surfaces: the mean
    over ``points_a`` of the distance to the nearest of ``points_b``, and the reverse, averaged."""
    there = cKDTree(points_b).query(points_a)[0].mean()
    back = cKDTree(points_a).query(points_b)[0].mean()
    return float(0.5 * (there + back))


def distance_matrix(rows: list[np.ndarray], columns: list[np.ndarray]) -> np.ndarray:
    """``surface_distance`` between every point set of ``rows`` and every one of ``columns`` (each
    set's tree built once)."""
    row_trees, column_trees = [cKDTree(p) for p in rows], [cKDTree(p) for p in columns]
    out = np.empty((len(rows), len(columns)))
    for i, (a, tree_a) in enumerate(zip(rows, row_trees)):
        for j, (b, tree_b) in enumerate(zip(columns, column_trees)):
            out[i, j] = 0.5 * (tree_b.query(a)[0].mean() + tree_a.query(b)[0].mean())
    return out
