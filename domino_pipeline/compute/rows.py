"""The cheap preprocessing steps, O(rows) and free of Warp: filter, permute, normalise. ``prepare_rows`` drops surface
cells with area <= 0 or outside the volume box and volume points outside it (DoMINO's rules), puts the rows in their
stored order (docs/cache_format.md, "Arrays of a run"), normalises coordinates to [-1, 1] (surface box for surface
quantities, volume box for volume ones) and computes the area-weighted centre of mass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domino_pipeline.compute.settings import NEIGHBOR_FEATURES, PARTS, PreprocessSettings
from domino_pipeline.compute.volume_order import volume_order


def normalize(points: np.ndarray, box) -> np.ndarray:
    """Map coordinates in ``box`` = (min, max) to [-1, 1], float32."""
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    return (2.0 * (points.astype(np.float32) - lo) / (hi - lo) - 1.0).astype(np.float32)


def make_grid(box, interp_res) -> np.ndarray:
    """The regular grid over ``box`` of ``interp_res`` points per axis in [-1, 1], (Nx, Ny, Nz, 3); never stored."""
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    axes = [np.linspace(lo[i], hi[i], int(interp_res[i]), dtype=np.float32) for i in range(3)]
    return normalize(np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1), box)


@dataclass
class PreparedRun:
    """A processed run after the cheap steps; row arrays are in their stored (permuted) order."""

    stl_vertices: np.ndarray  # (Np, 3) physical, original order (the mesh for SDFs)
    stl_faces: np.ndarray  # (3 Ntri,) int32
    geometry_coordinates: np.ndarray  # (Np, 3) physical, permuted
    center_of_mass: np.ndarray  # (3,) physical
    global_params_values: np.ndarray  # (P,)
    global_params_reference: np.ndarray  # (P,)
    surface_points: np.ndarray | None = None  # (Ns, 3) physical (for the kNN)
    surface_coordinates: np.ndarray | None = None  # (Ns, 3) normalised with the surface box
    surface_normals: np.ndarray | None = None
    surface_areas: np.ndarray | None = None
    surface_fields: np.ndarray | None = None
    volume_coordinates: np.ndarray | None = None  # (Nv, 3) normalised with the volume box
    volume_fields: np.ndarray | None = None
    surface_rows: np.ndarray | None = None  # (Ns,) the input row (mesh cell) of each kept surface row
    volume_rows: np.ndarray | None = None  # (Nv,) the input row of each kept volume row

    @property
    def scalars(self) -> dict[str, np.ndarray]:
        """The per-run values of an item (``build_item``'s ``scalars``)."""
        return {"center_of_mass": self.center_of_mass, "global_params_values": self.global_params_values,
                "global_params_reference": self.global_params_reference}


def require_inside(count: int, what: str, box, source: str) -> None:
    """ValueError naming ``source`` and ``box`` when none of its ``what`` lies inside the box."""
    if count == 0:
        lo, hi = box
        raise ValueError(f"{source}: no {what} lies inside the volume box min {list(lo)} max "
                         f"{list(hi)}: is the body where the box expects it?")


def inside_box(points: np.ndarray, box) -> np.ndarray:
    """Which of ``points`` lie strictly inside ``box`` (DoMINO's filter)."""
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    return np.all((points > lo) & (points < hi), axis=1)


def _permutation(n: int, seed: int, stream: int) -> np.ndarray:
    return np.random.default_rng([seed, stream]).permutation(n)


def _check_fields(fields: np.ndarray, width: int, name: str, source: str) -> None:
    if fields.ndim != 2 or fields.shape[1] != width:
        raise ValueError(f"{source}: {name} has shape {fields.shape}; the configured variables need {width} columns")


def _prepare_surface(arrays: dict, settings: PreprocessSettings, source: str) -> dict:
    centers = arrays["surface_mesh_centers"]
    areas = arrays["surface_areas"]
    _check_fields(arrays["surface_fields"], settings.width("surface"), "surface_fields", source)
    inside = inside_box(centers, settings.bounding_box_volume)
    require_inside(int(inside.sum()), "surface cell", settings.bounding_box_volume, source)
    keep = np.flatnonzero((areas > 0) & inside)
    if len(keep) < settings.num_neighbors_surface:
        raise ValueError(f"{source}: {len(keep)} surface cells inside the volume box with area > 0, "
                         f"fewer than num_neighbors_surface={settings.num_neighbors_surface}")
    rows = keep[_permutation(len(keep), settings.permutation_seed, 1)]
    points = np.ascontiguousarray(centers[rows], dtype=np.float32)
    return {"surface_points": points, "surface_coordinates": normalize(points, settings.bounding_box_surface),
            "surface_normals": np.ascontiguousarray(arrays["surface_normals"][rows], dtype=np.float32),
            "surface_areas": np.ascontiguousarray(areas[rows], dtype=np.float32),
            "surface_fields": np.ascontiguousarray(arrays["surface_fields"][rows], dtype=np.float32),
            "surface_rows": rows}


def _prepare_volume(arrays: dict, settings: PreprocessSettings, source: str) -> dict:
    centers = arrays["volume_mesh_centers"]
    _check_fields(arrays["volume_fields"], settings.width("volume"), "volume_fields", source)
    inside = inside_box(centers, settings.bounding_box_volume)
    require_inside(int(inside.sum()), "volume point", settings.bounding_box_volume, source)
    rows = volume_order(inside, settings.permutation_seed)
    return {"volume_coordinates": normalize(centers[rows], settings.bounding_box_volume),
            "volume_fields": np.ascontiguousarray(arrays["volume_fields"][rows], dtype=np.float32), "volume_rows": rows}


def center_of_mass(stl_centers: np.ndarray, stl_areas: np.ndarray) -> np.ndarray:
    """Area-weighted mean of the STL triangle centres, float32 (3,)."""
    weights = stl_areas.astype(np.float64)
    return (weights @ stl_centers.astype(np.float64) / weights.sum()).astype(np.float32)


def prepare_rows(arrays: dict[str, np.ndarray], settings: PreprocessSettings, *,
                 parts=PARTS, source: str = "run") -> PreparedRun:
    """The cheap steps (filter, permute, normalise, centre of mass) for the ``parts`` asked."""
    faces = np.asarray(arrays["stl_faces"]).reshape(-1)
    vertices = np.ascontiguousarray(arrays["stl_coordinates"], dtype=np.float32)
    order = _permutation(len(vertices), settings.permutation_seed, 0)
    prepared = PreparedRun(stl_vertices=vertices, stl_faces=faces.astype(np.int32),
                           geometry_coordinates=vertices[order],
                           center_of_mass=center_of_mass(arrays["stl_centers"], arrays["stl_areas"]),
                           global_params_values=np.asarray(arrays["global_params_values"], dtype=np.float32),
                           global_params_reference=np.asarray(arrays["global_params_reference"], dtype=np.float32))
    if "surface" in parts:
        vars(prepared).update(_prepare_surface(arrays, settings, source))
    if "volume" in parts:
        vars(prepared).update(_prepare_volume(arrays, settings, source))
    return prepared


def drop_self(indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Each query's own row (or, among duplicates, its farthest) removed from its neighbours: (Q, k) -> (Q, k - 1)."""
    mine = indices == rows[:, None]
    mine[~mine.any(axis=1), -1] = True
    first = np.argmax(mine, axis=1)
    mine[:] = False
    mine[np.arange(len(rows)), first] = True
    return indices[~mine].reshape(len(rows), indices.shape[1] - 1)


def gather_neighbors(prepared: PreparedRun, neighbors: np.ndarray) -> dict[str, np.ndarray]:
    """The coordinates, normals and areas (``NEIGHBOR_FEATURES``) of the surface rows ``neighbors`` (Q, K-1)."""
    return {name: getattr(prepared, f"surface_{name}")[neighbors] for name in NEIGHBOR_FEATURES}


def drawn_surface(prepared: PreparedRun, rows: np.ndarray, neighbors: np.ndarray) -> dict[str, np.ndarray]:
    """``build_item``'s ``surface`` of the surface ``rows``, their ``neighbors`` (Q, K-1) gathered."""
    return {"coordinates": prepared.surface_coordinates[rows], "normals": prepared.surface_normals[rows],
            "areas": prepared.surface_areas[rows], "fields": prepared.surface_fields[rows],
            **{f"neighbor_{name}": values for name, values in gather_neighbors(prepared, neighbors).items()}}
