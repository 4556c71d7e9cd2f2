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

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from domino_pipeline.compute import geometry

FORMAT_VERSION = 1
PARTS = ("surface", "volume")
VARIABLE_WIDTH = {"scalar": 1, "vector": 3}
# What a cache stores of each surface cell's neighbours: their rows only, or also their features
# (docs/cache_format.md). The uncached path computes them per draw either way.
NEIGHBOR_LAYOUTS = ("indices", "features")
NEIGHBOR_FEATURES = ("coordinates", "normals", "areas")
# Settings that fingerprinted() leaves out at these values, so caches built before the setting
# existed keep their fingerprint; where absent, a cache's settings have these values.
IMPLICIT_DEFAULTS = {"neighbor_layout": "indices"}


@dataclass(frozen=True)
class PreprocessSettings:
    """Every setting that changes the preprocessed arrays (all fingerprinted except ``device``)."""

    bounding_box_volume: tuple[tuple[float, ...], tuple[float, ...]]  # (min xyz, max xyz)
    bounding_box_surface: tuple[tuple[float, ...], tuple[float, ...]]
    interp_res: tuple[int, int, int]
    num_neighbors_surface: int
    surface_variables: tuple[tuple[str, str], ...]  # (name, scalar | vector), in column order
    volume_variables: tuple[tuple[str, str], ...]
    permutation_seed: int = 0
    neighbor_layout: str = "indices"  # one of NEIGHBOR_LAYOUTS
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("bounding_box_volume", "bounding_box_surface"):
            lo, hi = (np.asarray(b, dtype=np.float64) for b in getattr(self, name))
            if lo.shape != (3,) or hi.shape != (3,) or not np.all(hi > lo):
                raise ValueError(f"{name} needs min and max of 3 values with max > min; "
                                 f"got {getattr(self, name)}")
        if len(self.interp_res) != 3 or min(self.interp_res) < 2:
            raise ValueError(f"interp_res needs 3 values >= 2; got {self.interp_res}")
        if self.num_neighbors_surface < 1:
            raise ValueError(f"num_neighbors_surface must be >= 1; got {self.num_neighbors_surface}")
        for kind, variables in (("surface", self.surface_variables), ("volume", self.volume_variables)):
            bad = [v for v in variables if v[1] not in VARIABLE_WIDTH]
            if bad:
                raise ValueError(f"{kind} variables {bad}: kind must be one of {list(VARIABLE_WIDTH)}")
        if self.neighbor_layout not in NEIGHBOR_LAYOUTS:
            raise ValueError(f"neighbor_layout must be one of {list(NEIGHBOR_LAYOUTS)}; "
                             f"got {self.neighbor_layout!r}")

    def width(self, part: str) -> int:
        """Number of target columns of ``part``."""
        variables = self.surface_variables if part == "surface" else self.volume_variables
        return sum(VARIABLE_WIDTH[kind] for _, kind in variables)

    def fingerprinted(self) -> dict:
        """The JSON form of the settings that a cache's contents depend on, without those at
        their ``IMPLICIT_DEFAULTS`` value."""
        settings = asdict(self)
        del settings["device"]
        for key, value in IMPLICIT_DEFAULTS.items():
            if settings[key] == value:
                del settings[key]
        settings["format_version"] = FORMAT_VERSION
        return json.loads(json.dumps(settings))  # tuples -> lists, as stored in JSON

    def fingerprint(self) -> str:
        """A SHA-256 of ``fingerprinted()``."""
        text = json.dumps(self.fingerprinted(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def neighbor_layout_of(fingerprinted: dict) -> str:
    """The neighbour layout of settings in their ``PreprocessSettings.fingerprinted()`` form
    (a cache's settings)."""
    return (IMPLICIT_DEFAULTS | fingerprinted)["neighbor_layout"]


def parse_box(box) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(min, max) from a {"min", "max"} mapping (a Hydra box) or a (min, max) pair."""
    if hasattr(box, "keys"):
        box = (box["min"], box["max"])
    lo, hi = box
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def settings_from_config(geometry_cfg, variables_cfg, *, device: str | None = None) -> PreprocessSettings:
    """Build the settings from the ``geometry`` and ``variables`` sections of the Hydra config."""
    return PreprocessSettings(
        bounding_box_volume=parse_box(geometry_cfg["bounding_box_volume"]),
        bounding_box_surface=parse_box(geometry_cfg["bounding_box_surface"]),
        interp_res=tuple(int(v) for v in geometry_cfg["interp_res"]),
        num_neighbors_surface=int(geometry_cfg["num_neighbors_surface"]),
        surface_variables=tuple((str(k), str(v)) for k, v in variables_cfg["surface"].items()),
        volume_variables=tuple((str(k), str(v)) for k, v in variables_cfg["volume"].items()),
        permutation_seed=int(geometry_cfg.get("permutation_seed", 0)),
        neighbor_layout=str(geometry_cfg.get("neighbor_layout", IMPLICIT_DEFAULTS["neighbor_layout"])),
        device=str(device if device is not None else geometry_cfg.get("device", "auto")),
    )


def normalize(points: np.ndarray, box) -> np.ndarray:
    """Map coordinates in ``box`` = (min, max) to [-1, 1], float32."""
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    return (2.0 * (points.astype(np.float32) - lo) / (hi - lo) - 1.0).astype(np.float32)


def make_grid(box, interp_res) -> np.ndarray:
    """The regular grid over ``box`` with ``interp_res`` points per axis, normalised to [-1, 1],
    shape (Nx, Ny, Nz, 3). Derived, never stored."""
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    axes = [np.linspace(lo[i], hi[i], int(interp_res[i]), dtype=np.float32) for i in range(3)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    return normalize(grid, box)


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


def _inside(points: np.ndarray, box) -> np.ndarray:
    lo, hi = (np.asarray(b, dtype=np.float32) for b in box)
    return np.all((points > lo) & (points < hi), axis=1)


def _permutation(n: int, seed: int, stream: int) -> np.ndarray:
    return np.random.default_rng([seed, stream]).permutation(n)


def _check_fields(fields: np.ndarray, width: int, name: str, source: str) -> None:
    if fields.ndim != 2 or fields.shape[1] != width:
        raise ValueError(f"{source}: {name} has shape {fields.shape}; the configured variables "
                         f"need {width} columns")


def _prepare_surface(arrays: dict, s: PreprocessSettings, source: str) -> dict:
    centers = arrays["surface_mesh_centers"]
    areas = arrays["surface_areas"]
    _check_fields(arrays["surface_fields"], s.width("surface"), "surface_fields", source)
    keep = np.flatnonzero((areas > 0) & _inside(centers, s.bounding_box_volume))
    if len(keep) < s.num_neighbors_surface:
        raise ValueError(f"{source}: {len(keep)} surface cells inside the volume box with area > 0, "
                         f"fewer than num_neighbors_surface={s.num_neighbors_surface}")
    rows = keep[_permutation(len(keep), s.permutation_seed, 1)]
    points = np.ascontiguousarray(centers[rows], dtype=np.float32)
    return {
        "surface_points": points,
        "surface_coordinates": normalize(points, s.bounding_box_surface),
        "surface_normals": np.ascontiguousarray(arrays["surface_normals"][rows], dtype=np.float32),
        "surface_areas": np.ascontiguousarray(areas[rows], dtype=np.float32),
        "surface_fields": np.ascontiguousarray(arrays["surface_fields"][rows], dtype=np.float32),
    }


def _prepare_volume(arrays: dict, s: PreprocessSettings, source: str) -> dict:
    centers = arrays["volume_mesh_centers"]
    _check_fields(arrays["volume_fields"], s.width("volume"), "volume_fields", source)
    keep = np.flatnonzero(_inside(centers, s.bounding_box_volume))
    if len(keep) == 0:
        raise ValueError(f"{source}: no volume point lies inside the volume box")
    rows = keep[_permutation(len(keep), s.permutation_seed, 2)]
    return {
        "volume_coordinates": normalize(centers[rows], s.bounding_box_volume),
        "volume_fields": np.ascontiguousarray(arrays["volume_fields"][rows], dtype=np.float32),
    }


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
    prepared = PreparedRun(
        stl_vertices=vertices,
        stl_faces=faces.astype(np.int32),
        geometry_coordinates=vertices[order],
        center_of_mass=center_of_mass(arrays["stl_centers"], arrays["stl_areas"]),
        global_params_values=np.asarray(arrays["global_params_values"], dtype=np.float32),
        global_params_reference=np.asarray(arrays["global_params_reference"], dtype=np.float32),
    )
    if "surface" in parts:
        vars(prepared).update(_prepare_surface(arrays, settings, source))
    if "volume" in parts:
        vars(prepared).update(_prepare_volume(arrays, settings, source))
    return prepared


def drop_self(indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Remove each query's own row from its k neighbours (or the farthest one if, among many
    duplicates, it is not listed): (Q, k) -> (Q, k - 1)."""
    mine = indices == rows[:, None]
    mine[~mine.any(axis=1), -1] = True
    first = np.argmax(mine, axis=1)
    mine[:] = False
    mine[np.arange(len(rows)), first] = True
    return indices[~mine].reshape(len(rows), indices.shape[1] - 1)


def surface_neighbors(prepared: PreparedRun, settings: PreprocessSettings,
                      rows: np.ndarray | None = None) -> np.ndarray:
    """int32 (Q, K-1): the nearest kept surface cells of ``rows`` (all when None), self dropped."""
    k = settings.num_neighbors_surface
    points = prepared.surface_points
    queries = None if rows is None else points[rows]
    indices, _ = geometry.knn(points, k, queries=queries, device=settings.device)
    rows = np.arange(len(points)) if rows is None else np.asarray(rows)
    return drop_self(indices, rows).astype(np.int32)


def gather_neighbors(prepared: PreparedRun, neighbors: np.ndarray) -> dict[str, np.ndarray]:
    """The coordinates (Q, K-1, 3), normals (Q, K-1, 3) and areas (Q, K-1) of the surface rows
    ``neighbors`` (Q, K-1), keyed by ``NEIGHBOR_FEATURES``: what an item holds of its cells'
    neighbours, gathered in one place for the uncached path and the ``features`` cache."""
    return {name: getattr(prepared, f"surface_{name}")[neighbors] for name in NEIGHBOR_FEATURES}


def grid_sdf(prepared: PreparedRun, settings: PreprocessSettings, part: str) -> np.ndarray:
    """Signed distance (Nx, Ny, Nz) of the ``part`` grid to the STL, in that box's normalised
    coordinates."""
    box = settings.bounding_box_surface if part == "surface" else settings.bounding_box_volume
    grid = make_grid(box, settings.interp_res)
    sdf, _ = geometry.signed_distance(normalize(prepared.stl_vertices, box), prepared.stl_faces,
                                      grid.reshape(-1, 3), device=settings.device)
    return sdf.reshape(grid.shape[:3])


def volume_sdf(prepared: PreparedRun, settings: PreprocessSettings,
               window: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Signed distance (Q,) and closest STL point (Q, 3) of the kept volume rows in ``window``
    (all when None), in volume-box normalised coordinates."""
    box = settings.bounding_box_volume
    queries = prepared.volume_coordinates
    if window is not None:
        queries = queries[window[0]:window[1]]
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
