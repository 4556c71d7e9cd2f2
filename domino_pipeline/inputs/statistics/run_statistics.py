"""A run's statistics, gathered from the blocks process_data.py streams (no second pass) and stored
as the processed run's ``statistics`` attribute; the schema and every definition are
docs/data_quality.md's "The statistics attribute and how it is computed"."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from domino_pipeline.configuration.dataset_profile import FlowProfile
from domino_pipeline.configuration.force_integration import ForceConvention, force_sums
from domino_pipeline.inputs.statistics.cell_quality import CellQuality
from domino_pipeline.inputs.statistics.column_moments import ColumnBounds, ColumnMoments
from domino_pipeline.inputs.statistics.column_quantiles import ColumnQuantiles
from domino_pipeline.inputs.meshes.vtk_reader import stl_defect_counts
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.inputs.processing.published_forces import Published
from domino_pipeline.processed.run_quality import integrated_coefficients
from domino_pipeline.processed.statistics_table import AXES
from domino_pipeline.configuration.variables import FIELD_ROLES, VARIABLE_WIDTH, FieldName, column_names, variables_of

STATISTICS_VERSION = 2  # 2: the quantiles and trimmed moments that run_quality.py scores
# the role of each streamed array in a part's block (run_layout.py's names)
ARRAY_ROLES = {"surface_mesh_centers": "positions", "surface_normals": "normals", "surface_areas": "areas",
               "surface_fields": "fields", "volume_mesh_centers": "positions", "volume_fields": "fields"}


def field_columns(fields: Mapping[str, str]) -> dict[str, int | slice]:
    """role -> its column or columns (a vector) in a part's fields, from role -> name in column order."""
    columns, start = {}, 0
    for role in fields:
        width = VARIABLE_WIDTH[FIELD_ROLES[role][0]]
        columns[role] = start if width == 1 else slice(start, start + width)
        start += width
    return columns


class PartStatistics:
    """One part's statistics over its blocks (``divisors``: back to physical fields for force sums)."""

    def __init__(self, columns: list[str], *, surface: bool, divisors: np.ndarray | None = None,
                 roles: Mapping[str, int | slice] | None = None) -> None:
        self.columns, self.surface = list(columns), surface
        self.positions, self.fields = ColumnBounds(3), ColumnMoments(len(columns))
        self.quantiles = ColumnQuantiles(len(columns))
        self.divisors = None if divisors is None else np.asarray(divisors, np.float64)
        roles = roles or {}
        self.force_columns = (roles["pressure"], roles["wall_shear_stress"]) \
            if surface and {"pressure", "wall_shear_stress"} <= set(roles) and self.divisors is not None else None
        self.areas, self.cells = ColumnMoments(1), CellQuality()
        self.enclosed = 0.0
        self.pressure_sum, self.shear_sum = np.zeros(3), np.zeros(3)
        self._pending: dict[str, np.ndarray] = {}

    @property
    def count(self) -> int:
        return self.positions.count

    def observe(self, name: str, rows: np.ndarray) -> None:
        """Take in one array of a block (a StreamedRows observer); the block counts once its fields arrive."""
        self._pending[ARRAY_ROLES[name]] = rows
        if ARRAY_ROLES[name] == "fields":
            self.add_block(**self._pending)
            self._pending = {}

    def add_block(self, positions: np.ndarray, fields: np.ndarray, normals: np.ndarray | None = None,
                  areas: np.ndarray | None = None) -> None:
        """Take in a block: positions, stored fields and, for a surface, unit normals and areas."""
        self.positions.add(positions)
        self.fields.add(fields)
        self.quantiles.add(fields)
        if not self.surface or normals is None or areas is None:
            return
        areas64 = np.asarray(areas, np.float64)
        vector_areas = np.array(np.asarray(normals).T, np.float64) * areas64  # (3, n): each component contiguous
        self.areas.add(areas64)
        self.enclosed += float(np.einsum("ij,ij->", np.array(np.asarray(positions).T, np.float64), vector_areas)) / 3.0
        if self.force_columns is not None:
            pressure, shear = self.force_columns
            pressure_sum, shear_sum = force_sums(
                np.asarray(fields)[:, pressure].astype(np.float64) * self.divisors[pressure],
                np.asarray(fields)[:, shear].astype(np.float64) * self.divisors[shear], vector_areas.T, areas64)
            self.pressure_sum += pressure_sum
            self.shear_sum += shear_sum

    def summary(self) -> dict[str, Any]:
        """The part's statistics (docs/data_quality.md)."""
        quantiles = self.quantiles.summary(self.columns)
        fields = {name: {**moments, **quantiles[name]} for name, moments in self.fields.summary(self.columns).items()}
        found: dict[str, Any] = {"count": self.count, "positions": self.positions.summary(AXES), "fields": fields}
        if self.surface and self.areas.count[0]:
            area = self.areas.summary(["area"])["area"]
            found["area"] = {"min": area["min"], "max": area["max"], "mean": area["mean"],
                             "total": area["mean"] * int(self.areas.count[0])}
            found["enclosed_volume"] = self.enclosed
            if self.cells.cells:
                found["cells"] = self.cells.summary()
            if self.force_columns is not None:
                found["force_sums"] = {"pressure": self.pressure_sum.tolist(), "shear": self.shear_sum.tolist()}
        return found


def part_statistics(fields: Mapping[str, FieldName], divisors: np.ndarray, surface: bool) -> PartStatistics:
    """The statistics of a part of these role -> name fields (column order), with their divisors."""
    return PartStatistics(column_names(variables_of(fields)), surface=surface, divisors=divisors,
                          roles=field_columns(fields))


class RunStatistics:
    """The statistics of one run: its STL, parts (None: not read), what it publishes, and the flow."""

    def __init__(self, flow: FlowProfile, surface: PartStatistics | None, volume: PartStatistics | None) -> None:
        self.flow, self.surface, self.volume = flow, surface, volume
        self.stl: dict[str, Any] = {}
        self.published: dict[str, Any] = {}

    def add_stl(self, stl: Mapping[str, np.ndarray], dropped: int = 0) -> None:
        """Take in the STL's arrays, ``dropped`` zero-area triangles dropped."""
        vertices = np.asarray(stl["stl_coordinates"], np.float64)
        triangles = np.asarray(stl["stl_faces"]).reshape(-1, 3)
        positions = ColumnBounds(3)
        positions.add(vertices)
        self.stl = {"points": len(vertices), "triangles": len(triangles), "dropped_triangles": int(dropped),
                    **stl_defect_counts(np.asarray(stl["stl_faces"]), np.asarray(stl["stl_areas"])),
                    "area": float(np.sum(stl["stl_areas"], dtype=np.float64)),
                    "enclosed_volume": enclosed_volume(vertices, triangles),
                    "positions": positions.summary(AXES)}

    def add_published(self, published: Published | None, error: str | None = None) -> None:
        """Take in what the run publishes (None: nothing), or the error reading it gave."""
        if error is not None:
            self.published = {"error": error}
        elif published is not None:
            self.published = {"own": published.own, "constant": published.constant,
                              "own_area": None if published.own_references is None else published.own_references.area,
                              "constant_area": published.constant_references.area, "velocity": published.velocity}

    def summary(self) -> dict[str, Any]:
        """The run's statistics (docs/data_quality.md), as plain JSON values."""
        found: dict[str, Any] = {"version": STATISTICS_VERSION, "stl": self.stl}
        for key, part in (("surface", self.surface), ("volume", self.volume)):
            if part is not None:
                found[key] = part.summary()
        found["consistency"] = consistency(found)
        found["published"] = self.published
        found["forces"] = integrated_coefficients(found, self.flow, ForceConvention(self.flow.normals,
                                                                                    self.flow.wall_shear))
        return plain(found)


def enclosed_volume(vertices: np.ndarray, triangles: np.ndarray) -> float:
    """The volume a closed triangle surface encloses, positive when wound outward (docs/data_quality.md)."""
    if not len(triangles):
        return 0.0
    vertices = np.asarray(vertices, np.float32)
    origin = 0.5 * (vertices.min(axis=0) + vertices.max(axis=0))
    corners = np.ascontiguousarray((vertices - origin).T)  # (3, V): each coordinate contiguous
    a, b, c = (corners[:, triangles[:, k]] for k in range(3))
    triple = (a[0] * (b[1] * c[2] - b[2] * c[1]) + a[1] * (b[2] * c[0] - b[0] * c[2])
              + a[2] * (b[0] * c[1] - b[1] * c[0]))
    return float(np.sum(triple, dtype=np.float64)) / 6.0


def consistency(statistics: Mapping[str, Any]) -> dict[str, float | None]:
    """{surface_to_stl_volume, surface_stl_bounds_gap} of a run's statistics; empty without both meshes."""
    stl, surface = statistics.get("stl") or {}, statistics.get("surface") or {}
    if not stl or "enclosed_volume" not in surface:
        return {}
    low = np.array([[stl["positions"][a]["min"], surface["positions"][a]["min"]] for a in AXES])
    high = np.array([[stl["positions"][a]["max"], surface["positions"][a]["max"]] for a in AXES])
    extent = float(np.max(high[:, 0] - low[:, 0]))
    gap = float(max(np.abs(low[:, 0] - low[:, 1]).max(), np.abs(high[:, 0] - high[:, 1]).max()))
    ratio = surface["enclosed_volume"] / stl["enclosed_volume"] if stl["enclosed_volume"] else None
    return {"surface_to_stl_volume": ratio, "surface_stl_bounds_gap": gap / extent if extent > 0 else None}


def plain(value: Any) -> Any:
    """``value`` with numpy numbers as Python ones and non-finite floats as None (JSON null)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, (np.integer, bool, np.bool_)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def start_run_statistics(options: ProcessOptions, stl: Mapping[str, np.ndarray], dropped: int,
                         published: Published, surface_divisors: np.ndarray | None,
                         volume_divisors: np.ndarray | None) -> RunStatistics:
    """The statistics of a run about to be streamed (a part's divisors None: not read), with its STL
    and publications taken in."""
    statistics = RunStatistics(
        options.dataset.flow,
        None if surface_divisors is None else part_statistics(options.surface_fields, surface_divisors, True),
        None if volume_divisors is None else part_statistics(options.volume_fields, volume_divisors, False))
    statistics.add_stl(stl, dropped)
    statistics.add_published(published)
    return statistics
