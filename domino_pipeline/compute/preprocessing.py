"""The one preprocessing function of both paths: processed run -> DoMINO-ready arrays, unsampled.

``cache_data.py`` runs ``preprocess_run`` once per run and stores its result; the uncached
``DoMINODataPipe`` runs the same steps on every draw, but computes the expensive geometry (kNN of
surface cells, signed distance of volume points) only for the rows the draw samples:

1. ``prepare_rows`` (cheap, O(rows)): drop surface cells with area <= 0 and those outside the
   volume box, drop volume points outside the volume box (DoMINO's rules), put STL vertices,
   surface rows and volume rows in a fixed random permutation (so that sampling can read
   contiguous windows, see sampling.py), normalise coordinates to [-1, 1] (surface box for
   surface quantities, volume box for volume quantities), and the area-weighted centre of mass.
2. The expensive geometry: signed distance of both grids to the STL, the
   ``num_neighbors_surface - 1`` nearest kept surface cells of the requested surface rows
   (exact kNN in physical coordinates, the cell itself dropped) and the signed distance and
   closest STL point of the requested volume rows (in normalised coordinates, as DoMINO does).
   ``gather_neighbors`` turns neighbour rows into their coordinates, normals and areas: per draw
   in the uncached path, once per run for a cache in the ``features`` neighbour layout.

Targets stay unscaled here; scaling happens per draw (scaling.py).
"""

from __future__ import annotations

import numpy as np

from domino_pipeline.compute import geometry
from domino_pipeline.compute.rows import (
    PreparedRun,
    drop_self,
    gather_neighbors,
    make_grid,
    normalize,
    prepare_rows,
)
from domino_pipeline.compute.settings import PreprocessSettings


def surface_neighbors(prepared: PreparedRun, settings: PreprocessSettings,
                      rows: np.ndarray | None = None) -> np.ndarray:
    """int32 (Q, K-1): the nearest kept surface cells of ``rows`` (all when None), self dropped."""
    k = settings.num_neighbors_surface
    points = prepared.surface_points
    queries = None if rows is None else points[rows]
    indices, _ = geometry.knn(points, k, queries=queries, device=settings.device)
    rows = np.arange(len(points)) if rows is None else np.asarray(rows)
    return drop_self(indices, rows).astype(np.int32)


def grid_sdf(prepared: PreparedRun, settings: PreprocessSettings, part: str) -> np.ndarray:
    """Signed distance (Nx, Ny, Nz) of the ``part`` grid to the STL, in that box's normalised
    coordinates."""
    box = settings.bounding_box_surface if part == "surface" else settings.bounding_box_volume
    grid = make_grid(box, settings.interp_res)
    sdf, _ = geometry.signed_distance(normalize(prepared.stl_vertices, box), prepared.stl_faces,
                                      grid.reshape(-1, 3), device=settings.device)
    return sdf.reshape(grid.shape[:3])


def volume_sdf(prepared: PreparedRun, settings: PreprocessSettings,
               rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Signed distance (Q,) and closest STL point (Q, 3) of the kept volume ``rows`` (all when
    None), in volume-box normalised coordinates."""
    box = settings.bounding_box_volume
    queries = prepared.volume_coordinates
    if rows is not None:
        queries = np.ascontiguousarray(queries[rows])
    return geometry.signed_distance(normalize(prepared.stl_vertices, box), prepared.stl_faces,
                                    queries, device=settings.device)


def preprocess_run(arrays: dict[str, np.ndarray], settings: PreprocessSettings, *,
                   source: str = "run") -> dict[str, np.ndarray | dict]:
    """Everything but sampling, for every kept row: the contents of one cache run. In the
    ``features`` neighbour layout also every cell's neighbours' coordinates, normals and areas
    (``surface_neighbor_<feature>``), so that a cached draw reads them with its own rows."""
    p = prepare_rows(arrays, settings, source=source)
    sdf, closest = volume_sdf(p, settings)
    neighbors = surface_neighbors(p, settings)
    contents = {
        "geometry_coordinates": p.geometry_coordinates,
        "surface_grid_sdf": grid_sdf(p, settings, "surface"),
        "volume_grid_sdf": grid_sdf(p, settings, "volume"),
        "surface_coordinates": p.surface_coordinates,
        "surface_normals": p.surface_normals,
        "surface_areas": p.surface_areas,
        "surface_fields": p.surface_fields,
        "surface_neighbors": neighbors,
        "volume_coordinates": p.volume_coordinates,
        "volume_fields": p.volume_fields,
        "volume_sdf": sdf,
        "volume_closest": closest,
        "scalars": {
            "center_of_mass": p.center_of_mass.tolist(),
            "global_params_values": p.global_params_values.tolist(),
            "global_params_reference": p.global_params_reference.tolist(),
        },
    }
    if settings.neighbor_layout == "features":
        contents |= {f"surface_neighbor_{name}": values
                     for name, values in gather_neighbors(p, neighbors).items()}
    return contents
