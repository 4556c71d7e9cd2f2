"""The one preprocessing function of both paths: processed run -> DoMINO-ready arrays, unsampled. ``cache_data.py``
writes the pieces ``plan_run`` yields, the volume a bucket at a time (volume_order.py); the uncached ``DoMINODataPipe``
runs the same steps per draw, the expensive geometry for the drawn rows only. Targets stay unscaled (scaling.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.compute import geometry
from domino_pipeline.compute.rows import (PreparedRun, drop_self, gather_neighbors, inside_box, make_grid, normalize,
                                          prepare_rows, require_inside)
from domino_pipeline.compute.settings import NEIGHBOR_FEATURES, PreprocessSettings
from domino_pipeline.compute.volume_order import (VOLUME_BLOCK_ROWS, bucket_permutation, bucket_sizes, deal_block,
                                                  labels_rng)

VOLUME_ARRAYS = ("volume_mesh_centers", "volume_fields")
FEATURE_BLOCK_ROWS = 1 << 20  # surface rows per block of gathered neighbour features
KNN_BLOCK_ROWS = 1 << 20  # surface rows whose neighbours are searched at a time


def surface_index(prepared: PreparedRun, settings: PreprocessSettings) -> geometry.KnnIndex:
    """The kNN index of the kept surface cells, whose host preparation every neighbour query shares."""
    return geometry.KnnIndex(prepared.surface_points, device=settings.device)


def surface_neighbors(prepared: PreparedRun, settings: PreprocessSettings,
                      rows: np.ndarray | None = None, index: geometry.KnnIndex | None = None) -> np.ndarray:
    """int32 (Q, K-1): the nearest kept surface cells of ``rows`` (None: all), self dropped; ``index`` reused."""
    index = surface_index(prepared, settings) if index is None else index
    points = prepared.surface_points
    queries = None if rows is None else points[rows]
    indices, _ = index.query(settings.num_neighbors_surface, queries)
    rows = np.arange(len(points)) if rows is None else np.asarray(rows)
    return drop_self(indices, rows).astype(np.int32)


def all_surface_neighbors(prepared: PreparedRun, settings: PreprocessSettings,
                          block_rows: int = KNN_BLOCK_ROWS) -> np.ndarray:
    """``surface_neighbors`` of every kept cell, ``block_rows`` at a time against one index: bounded memory."""
    n = len(prepared.surface_points)
    index = surface_index(prepared, settings)
    out = np.empty((n, settings.num_neighbors_surface - 1), dtype=np.int32)
    for start in range(0, n, block_rows):
        rows = np.arange(start, min(start + block_rows, n))
        out[start:start + len(rows)] = surface_neighbors(prepared, settings, rows, index)
    return out


def grid_sdf(prepared: PreparedRun, settings: PreprocessSettings, part: str) -> np.ndarray:
    """Signed distance (Nx, Ny, Nz) of the ``part`` grid to the STL, in that box's normalised coordinates."""
    box = settings.bounding_box_surface if part == "surface" else settings.bounding_box_volume
    grid = make_grid(box, settings.interp_res)
    sdf, _ = geometry.signed_distance(normalize(prepared.stl_vertices, box), prepared.stl_faces,
                                      grid.reshape(-1, 3), device=settings.device)
    return sdf.reshape(grid.shape[:3])


def volume_mesh(prepared: PreparedRun, settings: PreprocessSettings) -> geometry.SdfMesh:
    """The STL in volume-box normalised coordinates on the device, shared by a run's volume SDF queries."""
    return geometry.SdfMesh(normalize(prepared.stl_vertices, settings.bounding_box_volume),
                            prepared.stl_faces, device=settings.device)


def volume_sdf(prepared: PreparedRun, settings: PreprocessSettings,
               rows: np.ndarray | None = None, mesh: geometry.SdfMesh | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Signed distance (Q,) and closest STL point (Q, 3) of kept volume ``rows`` (None: all), normalised."""
    queries = prepared.volume_coordinates
    if rows is not None:
        queries = np.ascontiguousarray(queries[rows])
    mesh = volume_mesh(prepared, settings) if mesh is None else mesh
    return mesh.query(queries)


@dataclass
class RunPlan:
    """A cache run in pieces: array shapes, scalars, row counts, ``pieces`` yielding (array, first row, rows)."""

    shapes: dict[str, tuple[int, ...]]
    counts: dict[str, int]
    scalars: dict
    pieces: Iterator[tuple[str, int, np.ndarray]]


Check = Callable[[str, np.ndarray], np.ndarray]


def plan_run(arrays: Mapping[str, np.ndarray], volume: Mapping, settings: PreprocessSettings, *,
             source: str = "run", scratch_dir: str | os.PathLike | None = None,
             check: Check = lambda name, block: np.asarray(block, dtype=np.float32),
             block_rows: int = VOLUME_BLOCK_ROWS) -> RunPlan:
    """Plan a cache run of ``settings.parts`` from ``arrays`` and ``volume`` (read a block at a time)."""
    parts = settings.parts
    prepared = prepare_rows(arrays, settings, parts=("surface",) if "surface" in parts else (), source=source)
    prepared.surface_rows = None  # the input row of each kept cell: for predictions, not for a cache
    counts = {"geometry": len(prepared.geometry_coordinates)}
    if "surface" in parts:
        counts["surface"] = len(prepared.surface_areas)
    if "volume" in parts:
        counts["volume"] = _count_inside(volume["volume_mesh_centers"], settings, check, block_rows, source)
        if volume["volume_fields"].shape[1] != settings.width("volume"):
            raise ValueError(f"{source}: volume_fields has {volume['volume_fields'].shape[1]} columns; the "
                             f"configured variables need {settings.width('volume')}")
    scalars = {name: value.tolist() for name, value in prepared.scalars.items()}
    pieces = _pieces(prepared, volume, settings, counts.get("volume", 0), check, scratch_dir, block_rows)
    return RunPlan(shapes=_shapes(prepared, counts, settings), counts=counts, scalars=scalars, pieces=pieces)


def _shapes(prepared: PreparedRun, counts: dict[str, int], settings: PreprocessSettings) -> dict[str, tuple[int, ...]]:
    """The shape of every array of the run (those of the parts in ``counts``)."""
    shapes = {"geometry_coordinates": prepared.geometry_coordinates.shape,
              "surface_grid_sdf": tuple(settings.interp_res)}
    if "surface" in counts:
        ns, k = counts["surface"], settings.num_neighbors_surface - 1
        shapes |= {"surface_coordinates": (ns, 3), "surface_normals": (ns, 3), "surface_areas": (ns,),
                   "surface_fields": prepared.surface_fields.shape, "surface_neighbors": (ns, k)}
        if settings.neighbor_layout == "features":
            shapes |= {"surface_neighbor_coordinates": (ns, k, 3), "surface_neighbor_normals": (ns, k, 3),
                       "surface_neighbor_areas": (ns, k)}
    if "volume" in counts:
        nv = counts["volume"]
        shapes |= {"volume_grid_sdf": tuple(settings.interp_res), "volume_coordinates": (nv, 3),
                   "volume_fields": (nv, settings.width("volume")), "volume_sdf": (nv,), "volume_closest": (nv, 3)}
    return shapes


def _pieces(prepared: PreparedRun, volume: Mapping, settings: PreprocessSettings, n_volume: int,
            check: Check, scratch_dir, block_rows: int) -> Iterator[tuple[str, int, np.ndarray]]:
    """Every piece of the run's parts: the grids first, then the surface's, then the volume's."""
    yield "geometry_coordinates", 0, prepared.geometry_coordinates
    yield "surface_grid_sdf", 0, grid_sdf(prepared, settings, "surface")
    if "volume" in settings.parts:
        yield "volume_grid_sdf", 0, grid_sdf(prepared, settings, "volume")
    if "surface" in settings.parts:
        yield from _surface_pieces(prepared, settings)
    if "volume" in settings.parts:
        yield from _volume_pieces(prepared, volume, settings, n_volume, check, scratch_dir, block_rows)


def _surface_pieces(prepared: PreparedRun, settings: PreprocessSettings) -> Iterator[tuple[str, int, np.ndarray]]:
    """The surface rows, their neighbours (and features in ``features``); the rows are let go once written."""
    for name in ("coordinates", "normals", "areas", "fields"):
        yield f"surface_{name}", 0, getattr(prepared, f"surface_{name}")
    neighbors = all_surface_neighbors(prepared, settings)
    yield "surface_neighbors", 0, neighbors
    if settings.neighbor_layout == "features":
        for start in range(0, len(neighbors), FEATURE_BLOCK_ROWS):
            gathered = gather_neighbors(prepared, neighbors[start:start + FEATURE_BLOCK_ROWS])
            for name in NEIGHBOR_FEATURES:
                yield f"surface_neighbor_{name}", start, gathered[name]
    neighbors = gathered = None  # the surface is written: its rows need not stay for the volume
    for name in ("points", "coordinates", "normals", "areas", "fields"):
        setattr(prepared, f"surface_{name}", None)


def _volume_pieces(prepared: PreparedRun, volume: Mapping, settings: PreprocessSettings, n_volume: int,
                   check: Check, scratch_dir, block_rows: int) -> Iterator[tuple[str, int, np.ndarray]]:
    """The volume rows in stored order, bucket by bucket, with their SDF and closest STL point."""
    mesh = volume_mesh(prepared, settings)
    for start, coordinates, fields in _volume_buckets(volume, settings, n_volume, check,
                                                      scratch_dir, block_rows):
        sdf, closest = mesh.query(coordinates)
        yield "volume_coordinates", start, coordinates
        yield "volume_fields", start, fields
        yield "volume_sdf", start, sdf
        yield "volume_closest", start, closest


def _source_blocks(volume: Mapping, check: Check, block_rows: int, names=VOLUME_ARRAYS):
    """(first row, {name: rows}) of the source volume, ``block_rows`` raw rows at a time."""
    n = volume["volume_mesh_centers"].shape[0]
    for start in range(0, n, block_rows):
        yield start, {name: check(name, volume[name][start:start + block_rows]) for name in names}


def _count_inside(centers, settings: PreprocessSettings, check: Check, block_rows: int, source: str) -> int:
    count = sum(int(inside_box(block["volume_mesh_centers"], settings.bounding_box_volume).sum())
                for _, block in _source_blocks({"volume_mesh_centers": centers}, check, block_rows,
                                               names=("volume_mesh_centers",)))
    require_inside(count, "volume point", settings.bounding_box_volume, source)
    return count


def _volume_buckets(volume: Mapping, settings: PreprocessSettings, n_volume: int, check: Check,
                    scratch_dir, block_rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first stored row, coordinates, fields) of each bucket in stored order: rows dealt, then shuffled."""
    sizes = bucket_sizes(n_volume, block_rows)
    remaining, rng = sizes.copy(), labels_rng(settings.permutation_seed)
    box = settings.bounding_box_volume
    with _Buckets(scratch_dir) as buckets:
        for _, block in _source_blocks(volume, check, block_rows):
            inside = inside_box(block["volume_mesh_centers"], box)
            labels = deal_block(rng, remaining, int(inside.sum()))
            coordinates = normalize(block["volume_mesh_centers"][inside], box)
            fields = block["volume_fields"][inside]
            for bucket in np.unique(labels):
                mine = labels == bucket
                buckets.append(int(bucket), coordinates[mine], fields[mine])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        for bucket, (start, size) in enumerate(zip(starts, sizes)):
            coordinates, fields = buckets.load(bucket, fields_width=volume["volume_fields"].shape[1])
            order = bucket_permutation(settings.permutation_seed, bucket, size)
            yield int(start), coordinates[order], fields[order]


class _Buckets:
    """Rows dealt to each bucket, in memory or in scratch files (removed on exit): one block held."""

    def __init__(self, scratch_dir) -> None:
        self.scratch_dir = scratch_dir
        self.memory: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    def __enter__(self) -> _Buckets:
        if self.scratch_dir is not None:
            Path(self.scratch_dir).mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(dir=self.scratch_dir, prefix=f".scratch.tmp-{os.getpid()}-"))
        return self

    def __exit__(self, *exc) -> None:
        if self.scratch_dir is not None:
            shutil.rmtree(self.folder)

    def append(self, bucket: int, coordinates: np.ndarray, fields: np.ndarray) -> None:
        if self.scratch_dir is None:
            self.memory.setdefault(bucket, []).append((coordinates, fields))
            return
        for name, rows in (("coordinates", coordinates), ("fields", fields)):
            with open(self.folder / f"{bucket}.{name}", "ab") as f:
                np.ascontiguousarray(rows, dtype=np.float32).tofile(f)

    def load(self, bucket: int, fields_width: int) -> tuple[np.ndarray, np.ndarray]:
        if self.scratch_dir is None:
            parts = self.memory.pop(bucket, [])
            return (np.concatenate([c for c, _ in parts]) if parts else np.zeros((0, 3), np.float32),
                    np.concatenate([f for _, f in parts]) if parts else np.zeros((0, fields_width), np.float32))
        loaded = []
        for name, width in (("coordinates", 3), ("fields", fields_width)):
            path = self.folder / f"{bucket}.{name}"
            loaded.append(np.fromfile(path, dtype=np.float32).reshape(-1, width))
            path.unlink()
        return loaded[0], loaded[1]


def preprocess_run(arrays: dict[str, np.ndarray], settings: PreprocessSettings, *,
                   source: str = "run", block_rows: int = VOLUME_BLOCK_ROWS) -> dict[str, np.ndarray | dict]:
    """``plan_run``'s pieces assembled in memory into the arrays of one cache run (and its ``scalars``)."""
    volume = {name: arrays[name] for name in VOLUME_ARRAYS} if "volume" in settings.parts else {}
    plan = plan_run(arrays, volume, settings, source=source, block_rows=block_rows)
    contents = {name: None for name in plan.shapes}
    for name, start, rows in plan.pieces:
        if contents[name] is None:
            contents[name] = np.empty(plan.shapes[name], dtype=rows.dtype)
        contents[name][start:start + len(rows)] = rows
    return contents | {"scalars": plan.scalars}
