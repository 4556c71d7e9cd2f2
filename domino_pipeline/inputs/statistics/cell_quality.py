"""The shape quality of a boundary surface's polygon cells (non-planarity and aspect ratio,
defined in docs/data_quality.md), a block of cells at a time, from the geometry the block
already has."""

from __future__ import annotations

import numpy as np


def polygon_quality(points: np.ndarray, begins: np.ndarray, ends: np.ndarray, ids: np.ndarray,
                    centres: np.ndarray, normals: np.ndarray, areas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(non-planarity, aspect ratio) of polygons ``ids[begins[i]:ends[i]]`` with their geometry."""
    begins = np.asarray(begins)
    counts = np.asarray(ends) - begins
    non_planarity, aspect = np.zeros(len(counts), np.float32), np.zeros(len(counts), np.float32)
    present = np.flatnonzero(np.bincount(counts)) if len(counts) else []
    for count in present.tolist():
        rows = slice(None) if len(present) == 1 else np.flatnonzero(counts == count)
        # (3, k, m): each coordinate of each vertex contiguous over the polygons
        gathered = np.asarray(points)[ids[begins[rows][None, :] + np.arange(count)[:, None]]]  # (k, m, 3)
        corners = np.ascontiguousarray(gathered.transpose(2, 0, 1), dtype=np.float32)
        longest, shortest = np.zeros(corners.shape[2], np.float32), np.full(corners.shape[2], np.inf, np.float32)
        for i in range(count):
            edge = corners[:, (i + 1) % count] - corners[:, i]
            squared = edge[0] * edge[0] + edge[1] * edge[1] + edge[2] * edge[2]
            np.maximum(longest, squared, out=longest)
            np.minimum(shortest, squared, out=shortest)
        with np.errstate(divide="ignore", invalid="ignore"):
            aspect[rows] = np.sqrt(longest / shortest)
        if count > 3:
            non_planarity[rows] = _warp(corners, np.asarray(centres).T[:, rows], np.asarray(normals).T[:, rows],
                                        np.asarray(areas)[rows])
    return non_planarity, aspect


def _warp(corners: np.ndarray, centres: np.ndarray, normals: np.ndarray, areas: np.ndarray) -> np.ndarray:
    """Each polygon's non-planarity: corners (3, k, m), centres and normals (3, m), areas (m,)."""
    height = np.zeros(corners.shape[2], np.float32)
    for i in range(corners.shape[1]):
        offset = corners[:, i] - centres
        np.maximum(height, np.abs(offset[0] * normals[0] + offset[1] * normals[1] + offset[2] * normals[2]),
                   out=height)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(areas > 0, height / np.sqrt(np.maximum(areas, 0)), 0.0).astype(np.float32)


class CellQuality:
    """Maximum and mean non-planarity and aspect ratio over polygon blocks, and the zero-edge cells apart."""

    def __init__(self) -> None:
        self.cells = self.sized = self.zero_edge = 0
        self.non_planarity_sum = self.aspect_sum = 0.0
        self.non_planarity_max = self.aspect_max = 0.0

    def add(self, points: np.ndarray, begins: np.ndarray, ends: np.ndarray, ids: np.ndarray,
            centres: np.ndarray, normals: np.ndarray, areas: np.ndarray) -> None:
        """Take in one block of polygons (``polygon_quality``'s arguments)."""
        if not len(begins):
            return
        non_planarity, aspect = polygon_quality(points, begins, ends, ids, centres, normals, areas)
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
        """{non_planarity_max, _mean, aspect_ratio_max, _mean, zero_edge_cells}; None for no cells."""
        if not self.cells:
            return {}
        return {"non_planarity_max": self.non_planarity_max,
                "non_planarity_mean": self.non_planarity_sum / self.cells,
                "aspect_ratio_max": self.aspect_max if self.sized else None,
                "aspect_ratio_mean": self.aspect_sum / self.sized if self.sized else None,
                "zero_edge_cells": self.zero_edge}
