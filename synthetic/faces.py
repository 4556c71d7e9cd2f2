"""The generator's own face geometry, written apart from the pipeline's (domino_pipeline/inputs/
cell_geometry.py), so that tests compare two implementations: OpenFOAM's (v1912) face centre
and area vector, and per point the barycentric dual area and the normal of a surface.

    centres, area_vectors = ragged_face_geometry(vertices, offsets, connectivity)
    normals, dual_areas = point_weights(vertices, offsets, connectivity)
"""

from __future__ import annotations

import numpy as np


def face_geometry(vertices: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centres and area vectors (area times unit normal) of same-size polygons (C, k), float64,
    as OpenFOAM (v1912) defines a face's: triangles from each edge to the vertex mean, the area
    vector their sum, the centre their centroids weighted by their areas (a triangle: its own)."""
    p = vertices[cells].astype(np.float64)
    if cells.shape[1] == 3:
        return p.mean(axis=1), 0.5 * np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    estimate = p.mean(axis=1, keepdims=True)
    triangles = 0.5 * np.cross(p - estimate, np.roll(p, -1, axis=1) - estimate)
    area_vector = triangles.sum(axis=1)
    weights = np.linalg.norm(triangles, axis=2)
    centroids = (p + np.roll(p, -1, axis=1) + estimate) / 3.0
    centres = np.einsum("ck,ckd->cd", weights, centroids) / weights.sum(axis=1, keepdims=True)
    return centres, area_vector


def by_size(offsets: np.ndarray, connectivity: np.ndarray):
    """(rows, cells (m, k)) of ragged polygons, one vertex count k at a time."""
    sizes = np.diff(offsets)
    for k in np.unique(sizes):
        rows = np.flatnonzero(sizes == k)
        yield rows, connectivity[offsets[rows][:, None] + np.arange(k)]


def ragged_face_geometry(vertices: np.ndarray, offsets: np.ndarray,
                         connectivity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``face_geometry`` of polygons of any vertex counts (``connectivity[offsets[i]:offsets[i+1]]``)."""
    n = len(offsets) - 1
    centres, vectors = np.empty((n, 3)), np.empty((n, 3))
    for rows, cells in by_size(offsets, connectivity):
        centres[rows], vectors[rows] = face_geometry(vertices, cells)
    return centres, vectors


def point_weights(vertices: np.ndarray, offsets: np.ndarray,
                  connectivity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per vertex: the unit normal of the surface there (the normalised sum of its polygons'
    area vectors) and its barycentric dual area: of each polygon around it, the quadrilateral
    (vertex, midpoint of the next edge, vertex mean, midpoint of the previous edge), as two
    triangles."""
    vector_sums = np.zeros((len(vertices), 3))
    areas = np.zeros(len(vertices))
    for _, cells in by_size(offsets, connectivity):
        p = vertices[cells].astype(np.float64)
        _, vector = face_geometry(vertices, cells)
        mean = p.mean(axis=1, keepdims=True)
        after, before = 0.5 * (p + np.roll(p, -1, axis=1)), 0.5 * (p + np.roll(p, 1, axis=1))
        kite = (_triangle_area(p, after, mean) + _triangle_area(p, mean, before))
        np.add.at(areas, cells.ravel(), kite.ravel())
        for d in range(3):
            np.add.at(vector_sums[:, d], cells.ravel(), np.repeat(vector[:, d], cells.shape[1]))
    norms = np.linalg.norm(vector_sums, axis=1, keepdims=True)
    return vector_sums / np.maximum(norms, 1e-30), areas


def _triangle_area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=-1)
