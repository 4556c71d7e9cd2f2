"""The shape quality of a boundary surface's polygon cells, a block of cells at a time.

Two measures per polygon, each dimensionless:

- non-planarity: ``1 - flatness``, with OpenFOAM's face flatness (checkMesh's
  ``primitiveMeshTools::faceFlatness``): the magnitude of the face's area vector over the sum of
  the magnitudes of the triangles (p_i, p_i+1, c) about its centre c. 0 for a flat convex polygon
  (and for every triangle); it grows as the polygon warps out of its plane or folds over itself.
  checkMesh warns about faces of flatness below 0.8, i.e. non-planarity above 0.2.
- aspect ratio: the longest edge over the shortest (Verdict's edge ratio): 1 for a square or an
  equilateral triangle, large for a sliver. A polygon with an edge of zero length has none (inf),
  and is counted apart.

``CellQuality`` gathers their maximum and mean over a run's blocks; the centres and areas are the
ones the block's geometry already has (cell_geometry.surface_geometry), so only the triangle fans
and the edges are computed here.

    quality = CellQuality()
    quality.add(points, begins, ends, ids, centres, areas)   # per block
    quality.summary()   # {"non_planarity_max": .., "non_planarity_mean": .., "aspect_ratio_max": .., ...}
"""

from __future__ import annotations

import numpy as np


def polygon_quality(points: np.ndarray, begins: np.ndarray, ends: np.ndarray, ids: np.ndarray,
                    centres: np.ndarray, areas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-planarity (n,), aspect ratio (n,)) of the polygons whose point ids are
    ``ids[begins[i]:ends[i]]`` in ``points``, with their ``centres`` (n, 3) and ``areas`` (n,)
    (the magnitudes of their area vectors), computed a vertex count at a time in float64."""
    counts = np.asarray(ends) - np.asarray(begins)
    non_planarity, aspect = np.zeros(len(counts)), np.zeros(len(counts))
    for count in np.unique(counts):
        rows = np.flatnonzero(counts == count)
        corners = np.asarray(points[ids[np.asarray(begins)[rows][:, None] + np.arange(count)]], dtype=np.float64)
        following = np.roll(corners, -1, axis=1)
        edges = np.linalg.norm(following - corners, axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            aspect[rows] = edges.max(axis=1) / edges.min(axis=1)
        if count > 3:
            apex = np.asarray(centres[rows], dtype=np.float64)[:, None, :]
            fans = 0.5 * np.linalg.norm(np.cross(following - corners, apex - corners), axis=2).sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                flatness = np.where(fans > 0, np.asarray(areas[rows], np.float64) / fans, 1.0)
            non_planarity[rows] = np.clip(1.0 - flatness, 0.0, 1.0)
    return non_planarity, aspect


class CellQuality:
    """The maximum and mean non-planarity and aspect ratio over a stream of polygon blocks, and
    the count of polygons with an edge of zero length (left out of the aspect ratio's)."""

    def __init__(self) -> None:
        self.cells = self.sized = self.zero_edge = 0
        self.non_planarity_sum = self.aspect_sum = 0.0
        self.non_planarity_max = self.aspect_max = 0.0

    def add(self, points: np.ndarray, begins: np.ndarray, ends: np.ndarray, ids: np.ndarray,
            centres: np.ndarray, areas: np.ndarray) -> None:
        """Take in one block of polygons (``polygon_quality``'s arguments)."""
        if not len(begins):
            return
        non_planarity, aspect = polygon_quality(points, begins, ends, ids, centres, areas)
        finite = np.isfinite(aspect)
        self.cells += len(begins)
        self.sized += int(finite.sum())
        self.zero_edge += int((~finite).sum())
        self.non_planarity_sum += float(non_planarity.sum())
        self.non_planarity_max = max(self.non_planarity_max, float(non_planarity.max()))
        if finite.any():
            self.aspect_sum += float(aspect[finite].sum())
            self.aspect_max = max(self.aspect_max, float(aspect[finite].max()))

    def summary(self) -> dict[str, float | int | None]:
        """{non_planarity_max, non_planarity_mean, aspect_ratio_max, aspect_ratio_mean,
        zero_edge_cells}; None for the measures of no cells."""
        if not self.cells:
            return {}
        return {"non_planarity_max": self.non_planarity_max,
                "non_planarity_mean": self.non_planarity_sum / self.cells,
                "aspect_ratio_max": self.aspect_max if self.sized else None,
                "aspect_ratio_mean": self.aspect_sum / self.sized if self.sized else None,
                "zero_edge_cells": self.zero_edge}
