"""Reference face and cell geometry for the tests, one polygon or cell at a time in plain Python
loops over float vertices, written apart from domino_pipeline.inputs.meshes.cell_geometry (which is
vectorised over blocks): OpenFOAM's face and cell definitions, Newell's vector area, the
shoelace area and centroid of a planar polygon, and the centroid of a convex body by a Delaunay
tetrahedralisation of its vertices."""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import Delaunay


def _sub(a, b):
    return [a[0] - b[0], a[1] - b[1], a[2] - b[2]]


def _cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def openfoam_face(corners) -> tuple[np.ndarray, np.ndarray]:
    """(centre, area vector) of one polygon as OpenFOAM defines them: a triangle directly; else
    the triangles (p_i, p_i+1, vertex mean), their area vectors summed, their centroids averaged
    with the magnitudes of their areas as weights."""
    p = [[float(x) for x in corner] for corner in corners]
    n = len(p)
    if n == 3:
        centre = [(p[0][d] + p[1][d] + p[2][d]) / 3.0 for d in range(3)]
        return np.array(centre), 0.5 * np.array(_cross(_sub(p[1], p[0]), _sub(p[2], p[0])))
    mean = [sum(q[d] for q in p) / n for d in range(3)]
    total_vector, total_weight, moment = [0.0] * 3, 0.0, [0.0] * 3
    for i in range(n):
        a, b = p[i], p[(i + 1) % n]
        doubled = _cross(_sub(b, a), _sub(mean, a))
        weight = math.sqrt(_dot(doubled, doubled))
        for d in range(3):
            total_vector[d] += doubled[d]
            moment[d] += weight * (a[d] + b[d] + mean[d]) / 3.0
        total_weight += weight
    if total_weight == 0.0:
        return np.array(mean), np.zeros(3)
    return np.array(moment) / total_weight, 0.5 * np.array(total_vector)


def newell(corners) -> np.ndarray:
    """A polygon's vector area by Newell's formula about the origin, 0.5 sum p_i x p_i+1."""
    p = [[float(x) for x in corner] for corner in corners]
    total = [0.0] * 3
    for i in range(len(p)):
        step = _cross(p[i], p[(i + 1) % len(p)])
        total = [total[d] + 0.5 * step[d] for d in range(3)]
    return np.array(total)


def shoelace(xy) -> tuple[float, np.ndarray]:
    """(signed area, centroid) of a simple planar polygon given by its 2-D vertices."""
    area, cx, cy = 0.0, 0.0, 0.0
    for i in range(len(xy)):
        (x0, y0), (x1, y1) = xy[i], xy[(i + 1) % len(xy)]
        step = x0 * y1 - x1 * y0
        area += 0.5 * step
        cx += (x0 + x1) * step / 6.0
        cy += (y0 + y1) * step / 6.0
    return area, np.array([cx / area, cy / area])


def openfoam_cell(faces) -> np.ndarray:
    """OpenFOAM's centre of one cell given as its faces (lists of vertices, wound outward):
    pyramids from each face to the mean of the face centres, their centroids averaged with
    their volumes as weights."""
    geometry = [openfoam_face(face) for face in faces]
    estimate = sum(centre for centre, _ in geometry) / len(geometry)
    volume, moment = 0.0, np.zeros(3)
    for centre, vector in geometry:
        pyramid = float(np.dot(vector, centre - estimate)) / 3.0
        volume += pyramid
        moment += pyramid * (0.75 * centre + 0.25 * estimate)
    return moment / volume if abs(volume) > 1e-300 else estimate


def convex_centroid(vertices: np.ndarray) -> np.ndarray:
    """The centroid of the convex hull of ``vertices``: a Delaunay tetrahedralisation, each tet's
    centroid weighted by its volume."""
    vertices = np.asarray(vertices, dtype=np.float64)
    tets = vertices[Delaunay(vertices).simplices]
    volumes = np.abs(np.einsum("ij,ij->i", np.cross(tets[:, 1] - tets[:, 0], tets[:, 2] - tets[:, 0]),
                               tets[:, 3] - tets[:, 0])) / 6.0
    return (volumes[:, None] * tets.mean(axis=1)).sum(axis=0) / volumes.sum()
