"""run_statistics.py's statistics of a stored run by one pass over its arrays, for runs that have
none in their attributes (docs/data_quality.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors
from domino_pipeline.inputs.processing.published_forces import Published
from domino_pipeline.inputs.statistics.run_statistics import ARRAY_ROLES, PartStatistics, RunStatistics, part_statistics
from domino_pipeline.processed.runs import GEOMETRY_ARRAYS, NamedArray, OpenedRun, load_run, physics_constants
from domino_pipeline.configuration.variables import column_names

PASS_ROWS = 1 << 20
PART_ARRAYS = {"surface": ("surface_mesh_centers", "surface_fields", "surface_normals", "surface_areas"),
               "volume": ("volume_mesh_centers", "volume_fields")}


def statistics_of_run(run: OpenedRun, profile: DatasetConfig, global_params: Sequence[float],
                      published: Published | None = None, published_error: str | None = None,
                      block_rows: int = PASS_ROWS) -> dict[str, Any]:
    """The statistics of an opened run of any form; ProcessedRunError naming it for an unreadable array."""
    velocity, density = physics_constants(run.attrs) or tuple(global_params)[:2]
    stl = load_run(run.path, list(GEOMETRY_ARRAYS), opened=run) if set(GEOMETRY_ARRAYS) <= set(run.arrays) else None
    length = float(run.attrs.get("nut_length_scale") or (car_length(stl["stl_coordinates"]) if stl else 1.0))
    statistics = RunStatistics(profile.flow, *(_part(run, profile, part, (velocity, density, length))
                                               for part in ("surface", "volume")))
    if stl is not None:
        statistics.add_stl(stl)
    statistics.add_published(published, published_error)
    for part in (statistics.surface, statistics.volume):
        if part is not None:
            _pass(run, part, block_rows)
    return statistics.summary()


def _part(run: OpenedRun, profile: DatasetConfig, part: str, references: tuple[float, float, float]
          ) -> PartStatistics | None:
    """The statistics of ``part`` of ``run`` (None: no arrays), named by the profile's fields."""
    names = PART_ARRAYS[part]
    if not set(names[:2]) <= set(run.arrays):  # positions and fields
        return None
    width = int(np.prod(run.arrays[names[1]].shape[1:], dtype=np.int64))
    fields = getattr(profile.fields, part)
    if width != len(column_names(profile.variables(part))):
        return PartStatistics([f"column_{j}" for j in range(width)], surface=part == "surface")
    return part_statistics(fields, field_divisors(fields, *references, dtype=np.float64), part == "surface")


def _pass(run: OpenedRun, part: PartStatistics, block_rows: int) -> None:
    """Feed ``part`` the run's rows, ``block_rows`` at a time."""
    names = [n for n in PART_ARRAYS["surface" if part.surface else "volume"] if n in run.arrays]
    arrays = {ARRAY_ROLES[name]: NamedArray(run, name) for name in names}
    for start in range(0, arrays["positions"].shape[0], block_rows):
        block = {role: array[start:start + block_rows] for role, array in arrays.items()}
        block["fields"] = block["fields"].reshape(len(block["fields"]), -1)
        part.add_block(**block)
