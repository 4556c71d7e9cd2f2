"""What a run's bounding boxes leave out, measured for the cache build's summary: the volume box drops the surface cells
and volume rows outside it; surface cells outside the surface box get coordinates beyond [-1, 1]."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from domino_pipeline.compute.rows import inside_box
from domino_pipeline.compute.settings import PreprocessSettings


def _percent(part: float, whole: float) -> str:
    share = 100.0 * part / whole if whole else 0.0
    return f"{share:.2g}%" if share < 1 else f"{share:.1f}%"


def _cell_notes(centres: np.ndarray, areas: np.ndarray, settings: PreprocessSettings) -> list[str]:
    """The share of the boundary cells (and of their area) each box leaves out."""
    total = float(np.asarray(areas, dtype=np.float64).sum())
    notes = []
    for box, cells in ((settings.bounding_box_volume, "the volume box drops {} of the boundary cells ({} of the area)"),
                       (settings.bounding_box_surface, "{} of the boundary cells ({} of the area) lie outside the "
                                                       "surface box, beyond the surface grid")):
        outside = ~inside_box(centres, box)  # not strictly inside
        if outside.any():
            area = float(np.asarray(areas, dtype=np.float64)[outside].sum())
            notes.append(cells.format(_percent(int(outside.sum()), len(centres)), _percent(area, total)))
    return notes


def box_notes(arrays: Mapping[str, np.ndarray], settings: PreprocessSettings) -> list[str]:
    """Notes on what each box leaves out of the boundary cells, their area and the STL's vertices."""
    vertices = arrays["stl_coordinates"]
    notes = []
    if "surface_mesh_centers" in arrays:  # a run of the volume part alone has no boundary cells
        notes += _cell_notes(arrays["surface_mesh_centers"], arrays["surface_areas"], settings)
    for box, name in ((settings.bounding_box_volume, "volume"), (settings.bounding_box_surface, "surface")):
        lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
        outside = int(len(vertices) - np.all((vertices >= lo) & (vertices <= hi), axis=1).sum())  # on a face: inside
        if outside:
            notes.append(f"the {name} box cuts the STL: {_percent(outside, len(vertices))} of its vertices lie outside")
    return notes
