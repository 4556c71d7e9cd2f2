"""What the readers of a raw run's meshes share, whole (vtk_reader.py) or by blocks
(surface_stream.py, volume_stream.py): the checks of their arrays, the fields as float32 columns,
and what a surface row is."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.inputs.meshes.run_errors import MissingFieldError, RunError
from domino_pipeline.configuration.variables import variable_width

SURFACE_ARRAYS = ("surface_mesh_centers", "surface_normals", "surface_areas", "surface_fields")
SURFACE_CELL_TYPES = frozenset({5, 7, 9})  # VTK_TRIANGLE, VTK_POLYGON, VTK_QUAD: a surface VTU's cells


@dataclass(frozen=True)
class SurfaceRows:
    """What a surface row is: a cell or a point (``location``), and a point's normals array and areas."""

    location: str = "cells"
    normals: str | None = None
    areas: Path | None = None


def nonfinite(values: np.ndarray) -> int:
    """How many of ``values`` are NaN or infinite."""
    return int(np.size(values) - np.count_nonzero(np.isfinite(values)))


def require_finite_points(bad: int, path: Path) -> None:
    """RunError naming ``path`` when ``bad`` (of its point coordinates) are not finite."""
    if bad:
        raise RunError(f"{path}: {bad} point coordinates are not finite (NaN or Inf)")


def require_names(available: list[str], names: Collection[str], path: Path, where: str) -> None:
    """MissingFieldError naming ``path`` and the ``names`` missing from its ``where`` (point, cell) arrays."""
    missing = [name for name in names if name not in available]
    if missing:
        raise MissingFieldError(path, where, missing, available)


def require_polygon_types(types: set[int], path: Path) -> None:
    """RunError naming a boundary surface whose cell ``types`` are not all triangles, polygons and quads."""
    other = sorted(types - SURFACE_CELL_TYPES)
    if other:
        raise RunError(f"{path}: cell types {other} on a boundary surface, which holds triangles, polygons "
                       f"and quads (VTK types {sorted(SURFACE_CELL_TYPES)})")


def source_arrays(variables: Mapping[str, str], arrays: Mapping[str, list[str]] | None = None) -> list[str]:
    """The file arrays the ``variables`` are read from, in order (``arrays``' for each, else its own name)."""
    return [array for name in variables for array in (arrays or {}).get(name, [name])]


def field_columns(
    data: Mapping, variables: Mapping[str, str], path: Path, where: str,
    arrays: Mapping[str, list[str]] | None = None,
) -> np.ndarray:
    """The fields ``variables`` of ``data`` as float32 columns, in order (split ones assembled)."""
    columns = []
    for name, kind in variables.items():
        width = variable_width(name, kind)
        sources = (arrays or {}).get(name, [name])
        if len(sources) == 1:
            columns.append(_array_columns(data, sources[0], width, kind, path, where))
        elif len(sources) == width:
            columns += [_array_columns(data, source, 1, f"one component of {kind} {name}", path, where)
                        for source in sources]
        else:
            raise RunError(f"{path}: {kind} {name} needs 1 or {width} arrays, not {sources}")
    return np.concatenate(columns, axis=1)


def _array_columns(data: Mapping, name: str, width: int, what: str, path: Path, where: str) -> np.ndarray:
    """Array ``name`` of ``data`` as float32 (n, width); RunError if missing, of another width, not finite."""
    if name not in data:
        raise MissingFieldError(path, where, [name], data.keys())
    values = np.asarray(data[name], dtype=np.float32)
    values = values.reshape(len(values), -1)
    bad = nonfinite(values)
    if bad:
        raise RunError(f"{path}: {where} data {name} has {bad} non-finite values (NaN or Inf)")
    if values.shape[1] != width:
        raise RunError(f"{path}: {where} data {name} has {values.shape[1]} components, expected {width} ({what})")
    return values


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (n, 3) scaled to unit length in float64, as float32 (a zero vector stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norm = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norm, 1e-30)).astype(np.float32)


def published_areas(path: Path, n_points: int) -> np.ndarray:
    """The published per-point areas (.npy), memory-mapped; RunError unless one positive area per point."""
    try:
        areas = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise RunError(f"{path}: unreadable ({err})") from err
    if areas.shape != (n_points,):
        raise RunError(f"{path}: {areas.shape[0] if areas.ndim == 1 else areas.shape} areas, expected one "
                       f"per surface point ({n_points})")
    step = 1 << 22
    bad = sum(int(np.count_nonzero(~(np.isfinite(areas[s:s + step]) & (areas[s:s + step] > 0))))
              for s in range(0, n_points, step))
    if bad:
        raise RunError(f"{path}: {bad} areas are not finite and positive")
    return areas
