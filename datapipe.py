"""DoMINO datasets: ``DoMINODataPipe`` preprocesses every draw, ``CachedDoMINODataset`` reads the
cache that ``cache_data.py`` wrote. Both return the same dict for the same (seed, epoch, index):
they share the preprocessing (preprocessing.py), the sampling (sampling.py) and the assembly of the
item (``build_item``).

An item is a dict of float32 tensors without batch dimension, DoMINO's input names:

- always: ``geometry_coordinates`` (G, 3), ``surf_grid`` (Nx, Ny, Nz, 3), ``sdf_surf_grid``
  (Nx, Ny, Nz), ``global_params_values`` / ``global_params_reference`` (P, 1),
  ``surface_min_max`` (2, 3);
- surface / combined: ``surface_mesh_centers``, ``surface_normals``, ``pos_surface_center_of_mass``
  (Ns, 3), ``surface_areas`` (Ns,), ``surface_mesh_neighbors``, ``surface_neighbors_normals``
  (Ns, K-1, 3), ``surface_neighbors_areas`` (Ns, K-1), target ``surface_fields`` (Ns, 4);
- volume / combined: ``grid`` (Nx, Ny, Nz, 3), ``sdf_grid`` (Nx, Ny, Nz), ``volume_mesh_centers``,
  ``pos_volume_closest``, ``pos_volume_center_of_mass`` (Nv, 3), ``sdf_nodes`` (Nv, 1),
  ``volume_min_max`` (2, 3), target ``volume_fields`` (Nv, 5).

Targets are scaled with the given factors (unscaled when none are given).

    ds = CachedDoMINODataset("outputs/demo/cache", model_type="surface", surface_points=1024,
                             geometry_points=4096, scaling_factors="outputs/demo/processed/scaling_factors.json")
    ds.set_epoch(3); item = ds[0]
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate, get_worker_info

from domino_pipeline.compute import geometry
from domino_pipeline.loading.batch_transfer import mark_constant, output_array, pack
from domino_pipeline.store.cache_format import CacheRun, StaleCacheError, diff_settings, read_manifest
from domino_pipeline.compute.preprocessing import (
    NEIGHBOR_FEATURES, PreparedRun, PreprocessSettings, gather_neighbors, grid_sdf, make_grid,
    neighbor_layout_of, normalize, parse_box, prepare_rows, settings_from_config, surface_neighbors,
    volume_sdf,
)
from domino_pipeline.compute.sampling import Draw, TooFewPointsError, sample_draw
from domino_pipeline.compute.scaling import load_scaling_factors, scale_fields

MODEL_TYPES = ("surface", "volume", "combined")


def parts_of(model_type: str) -> tuple[str, ...]:
    """The parts ("surface", "volume") a model type needs."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model_type {model_type!r}; expected one of {MODEL_TYPES}")
    return {"surface": ("surface",), "volume": ("volume",), "combined": ("surface", "volume")}[model_type]


def _run_name(run: str | os.PathLike) -> str:
    name = Path(run).name
    return name[:-5] if name.endswith(".zarr") else name


def _as_factors(scaling_factors: dict | str | os.PathLike | None) -> dict | None:
    if scaling_factors is None or isinstance(scaling_factors, dict):
        return scaling_factors
    return load_scaling_factors(scaling_factors)


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def _scaled(fields: np.ndarray, scaling_factors: dict | None, kind: str) -> np.ndarray:
    return fields if scaling_factors is None else scale_fields(fields, scaling_factors, kind)


def build_item(*, settings: dict, scalars: dict, geometry_coordinates: np.ndarray,
               grids: dict[str, np.ndarray], surface: dict | None, volume: dict | None,
               scaling_factors: dict | None) -> dict[str, torch.Tensor]:
    """Assemble DoMINO's input dict from the drawn rows (numpy, coordinates normalised).

    ``grids``: "surf_grid" and, for a volume part, "grid" (the per-process tensors of
    ``_EpochDataset._derived_grids``, put in the item as they are), "sdf_surf_grid" and "sdf_grid".
    ``surface``: coordinates, normals, areas, fields, neighbor_coordinates, neighbor_normals,
    neighbor_areas. ``volume``: coordinates, fields, sdf, closest.
    """
    com = np.asarray(scalars["center_of_mass"], dtype=np.float32)
    item = {
        "geometry_coordinates": _t(geometry_coordinates),
        "surf_grid": grids["surf_grid"],
        "sdf_surf_grid": _t(grids["sdf_surf_grid"]),
        "global_params_values": _t(np.asarray(scalars["global_params_values"])[:, None]),
        "global_params_reference": _t(np.asarray(scalars["global_params_reference"])[:, None]),
        "surface_min_max": _t(np.asarray(settings["bounding_box_surface"])),
    }
    if surface is not None:
        com_s = normalize(com[None], settings["bounding_box_surface"])[0]
        fields = _scaled(surface["fields"], scaling_factors, "surface")
        item.update({
            "surface_mesh_centers": _t(surface["coordinates"]),
            "surface_normals": _t(surface["normals"]),
            "surface_areas": _t(surface["areas"]),
            "pos_surface_center_of_mass": _t(surface["coordinates"] - com_s),
            "surface_mesh_neighbors": _t(surface["neighbor_coordinates"]),
            "surface_neighbors_normals": _t(surface["neighbor_normals"]),
            "surface_neighbors_areas": _t(surface["neighbor_areas"]),
            "surface_fields": _t(fields),
        })
    if volume is not None:
        com_v = normalize(com[None], settings["bounding_box_volume"])[0]
        fields = _scaled(volume["fields"], scaling_factors, "volume")
        item.update({
            "grid": grids["grid"], "sdf_grid": _t(grids["sdf_grid"]),
            "volume_mesh_centers": _t(volume["coordinates"]),
            "sdf_nodes": _t(volume["sdf"][:, None]),
            "pos_volume_closest": _t(volume["coordinates"] - volume["closest"]),
            "pos_volume_center_of_mass": _t(volume["coordinates"] - com_v),
            "volume_min_max": _t(np.asarray(settings["bounding_box_volume"])),
            "volume_fields": _t(fields),
        })
    return item


class _EpochDataset(Dataset):
    """Shared plumbing: the epoch counter that reaches persistent workers, draws and grids."""

    def __init__(self, *, model_type: str, surface_points: int, volume_points: int,
                 geometry_points: int, surface_window_factor: int | None, seed: int,
                 scaling_factors) -> None:
        self.parts = parts_of(model_type)
        self.model_type = model_type
        self.surface_points, self.volume_points = int(surface_points), int(volume_points)
        self.geometry_points = int(geometry_points)
        self.surface_window_factor = surface_window_factor
        self.seed = int(seed)
        self.scaling_factors = _as_factors(scaling_factors)
        # Shared memory: a worker forked or spawned once (persistent_workers) sees later updates.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        """Draw the points of ``epoch`` from now on, in this process and in every worker."""
        self._epoch.fill_(int(epoch))

    @property
    def epoch(self) -> int:
        return int(self._epoch.item())

    def _draw(self, index: int, counts: dict, read_areas) -> Draw:
        return sample_draw(
            self.seed, self.epoch, index, counts=counts, geometry_points=self.geometry_points,
            surface_points=self.surface_points if "surface" in self.parts else None,
            volume_points=self.volume_points if "volume" in self.parts else None,
            read_surface_areas=read_areas, surface_window_factor=self.surface_window_factor)

    def _derived_grids(self) -> dict[str, torch.Tensor]:
        """The normalised grids of ``self.settings`` (``constant_grid``: one tensor per process)."""
        return {name: constant_grid(*recipe) for name, recipe in self._grid_recipes.items()}

    @functools.cached_property
    def _grid_recipes(self) -> dict[str, tuple]:
        """``constant_grid``'s arguments per grid, derived once from the settings."""
        res = tuple(int(n) for n in self.settings["interp_res"])
        return {name: (_box_key(self.settings[box]), res)
                for name, box in (("surf_grid", "bounding_box_surface"), ("grid", "bounding_box_volume"))}


@functools.lru_cache(maxsize=16)
def constant_grid(box: tuple, res: tuple[int, int, int]) -> torch.Tensor:
    """The grid of ``res`` points over ``box`` in normalised coordinates, built once per process.

    Every item holds this same tensor (read-only by contract). Batches from DataLoader workers
    carry only ``(box, res)`` in its place (batch_transfer.mark_constant), so the two largest
    arrays of an item (12.6 MB at 128 x 64 x 64) are never copied between processes.
    """
    grid = _t(make_grid(np.asarray(box), res))
    mark_constant(grid, constant_grid, (box, res))
    return grid


def _box_key(box) -> tuple:
    return tuple(tuple(float(v) for v in corner) for corner in np.asarray(box).tolist())


class CachedDoMINODataset(_EpochDataset):
    """DoMINO items drawn from a cache written by ``cache_data.py``.

    Holds only paths and the manifest's small metadata; each process opens runs lazily. A draw
    reads windows of the pre-shuffled row arrays (O(sampled points)). The neighbours of the
    sampled surface cells come as the cache's ``neighbor_layout`` stores them: in "features",
    read with the cells' own rows; in "indices", gathered from the rows the indices name (these
    lie all over the surface, so the gather touches most chunks of three small arrays;
    docs/cache_format.md). ``expected``: settings (``PreprocessSettings.fingerprinted()``)
    the cache must have been built with; a mismatch raises StaleCacheError listing every
    difference.
    """

    def __init__(self, cache_dir: str | os.PathLike, *, runs: Sequence[str | os.PathLike] | None = None,
                 model_type: str = "surface", surface_points: int = 8192, volume_points: int = 8192,
                 geometry_points: int = 300_000, scaling_factors: dict | str | os.PathLike | None = None,
                 seed: int = 0, expected: dict | None = None, surface_window_factor: int | None = 8,
                 count_bytes: bool = False) -> None:
        super().__init__(model_type=model_type, surface_points=surface_points,
                         volume_points=volume_points, geometry_points=geometry_points,
                         surface_window_factor=surface_window_factor, seed=seed,
                         scaling_factors=scaling_factors)
        self.cache_dir = Path(cache_dir)
        manifest = read_manifest(self.cache_dir)
        self.settings, self.fingerprint = manifest["settings"], manifest["fingerprint"]
        self.neighbor_layout = neighbor_layout_of(self.settings)
        if expected is not None:
            differences = diff_settings(self.settings, expected)
            if differences:
                raise StaleCacheError(f"{self.cache_dir}: the cache was built with other settings; "
                                      "rebuild it (cache_data.py cache.rebuild=true):\n  "
                                      + "\n  ".join(differences))
        names = list(manifest["runs"]) if runs is None else [_run_name(r) for r in runs]
        missing = [n for n in names if n not in manifest["runs"]]
        if missing:
            raise FileNotFoundError(f"{self.cache_dir}: runs {missing} are not in the cache manifest")
        self.run_paths = [self.cache_dir / manifest["runs"][n]["path"] for n in names]
        self.count_bytes = count_bytes
        self._open: dict[int, CacheRun] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self.run_paths)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_open"] = {}  # open stores stay in their process
        return state

    def run(self, index: int) -> CacheRun:
        """The opened cache run of ``index`` (opened on first use in this process)."""
        if self._pid != os.getpid():  # a forked worker opens its own stores
            self._open, self._pid = {}, os.getpid()
        if index not in self._open:
            run = CacheRun(self.run_paths[index], count_bytes=self.count_bytes)
            if run.attrs.get("settings_fingerprint") != self.fingerprint:
                raise StaleCacheError(
                    f"{run.path}: built with other settings than the manifest records:\n  "
                    + "\n  ".join(diff_settings(run.attrs.get("settings", {}), self.settings)))
            self._open[index] = run
        return self._open[index]

    def bytes_read(self) -> int:
        """Bytes this process has read from the cache (with ``count_bytes=True``)."""
        return sum(run.bytes_read for run in self._open.values())

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        run = self.run(index)
        counts = run.attrs["counts"]
        try:
            draw = self._draw(index, counts, lambda a, b: run.read("surface_areas", slice(a, b)))
        except TooFewPointsError as err:
            raise TooFewPointsError(f"{run.path}: {err}") from err
        grids = self._derived_grids()
        drawn_grids = {"surf_grid": grids["surf_grid"],
                       "sdf_surf_grid": run.read("surface_grid_sdf", empty=output_array)}
        if "volume" in self.parts:
            drawn_grids.update(grid=grids["grid"], sdf_grid=run.read("volume_grid_sdf", empty=output_array))
        return build_item(
            settings=self.settings, scalars=run.attrs["scalars"],
            geometry_coordinates=run.read("geometry_coordinates", slice(*draw.geometry), empty=output_array),
            grids=drawn_grids,
            surface=None if draw.surface_rows is None else _read_surface(run, draw.surface_rows,
                                                                         self.neighbor_layout),
            volume=None if draw.volume is None else _read_volume(run, draw.volume),
            scaling_factors=self.scaling_factors)


def _read_surface(run: CacheRun, rows: np.ndarray, neighbor_layout: str) -> dict[str, np.ndarray]:
    """The sampled surface rows (sorted; fields read as one span of the window) with their
    neighbours' coordinates, normals and areas, as ``neighbor_layout`` stores them."""
    span = slice(int(rows[0]), int(rows[-1]) + 1)
    local = rows - span.start
    drawn = {"fields": run.read("surface_fields", span)[local]}
    if neighbor_layout == "features":
        return drawn | _read_neighbor_features(run, rows)
    return drawn | _gather_neighbors(run, rows, run.read("surface_neighbors", span)[local])


def _read_neighbor_features(run: CacheRun, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The rows' coordinates, normals and areas and their neighbours', stored per row: each
    array read from the chunks of the window the sorted rows fall in, each chunk once."""
    drawn = {}
    for name in NEIGHBOR_FEATURES:
        drawn[name] = run.read(f"surface_{name}", rows, empty=output_array)
        drawn[f"neighbor_{name}"] = run.read(f"surface_neighbor_{name}", rows, empty=output_array)
    return drawn


def _gather_neighbors(run: CacheRun, rows: np.ndarray, neighbors: np.ndarray) -> dict[str, np.ndarray]:
    """The rows' coordinates, normals and areas and those of their ``neighbors`` (rows, K-1);
    each neighbour-source array is read in one pass over its chunks for both."""
    drawn = {}
    wanted = np.concatenate([rows, neighbors.ravel()])
    for name in NEIGHBOR_FEATURES:
        both = run.read(f"surface_{name}", wanted, empty=output_array)
        drawn[name] = both[:len(rows)]
        drawn[f"neighbor_{name}"] = both[len(rows):].reshape(*neighbors.shape, *both.shape[1:])
    return drawn


def _read_volume(run: CacheRun, window: tuple[int, int]) -> dict[str, np.ndarray]:
    span = slice(*window)
    return {name: run.read(f"volume_{name}", span) for name in ("coordinates", "fields", "sdf", "closest")}


class DoMINODataPipe(_EpochDataset):
    """DoMINO items preprocessed on every draw from the processed runs (no cache).

    Runs ``preprocessing.prepare_rows`` on the whole run, draws with the shared sampling, and
    computes the expensive geometry only for what the draw needs: both grids' SDFs, the kNN of
    the sampled surface cells among all kept cells, the SDF of the sampled volume points. On CUDA
    (Warp kernels on the GPU) it must run in the main process: DataLoader workers are refused.
    """

    def __init__(self, processed_dir: str | os.PathLike, *, runs: Sequence[str | os.PathLike] | None = None,
                 model_type: str = "surface", surface_points: int = 8192, volume_points: int = 8192,
                 geometry_points: int = 300_000, bounding_box_volume, bounding_box_surface,
                 interp_res: Sequence[int], num_neighbors_surface: int = 7,
                 surface_variables=(("pMeanTrim", "scalar"), ("wallShearStressMeanTrim", "vector")),
                 volume_variables=(("UMeanTrim", "vector"), ("pMeanTrim", "scalar"), ("nutMeanTrim", "scalar")),
                 permutation_seed: int = 0, scaling_factors: dict | str | os.PathLike | None = None,
                 seed: int = 0, device: str = "auto", surface_window_factor: int | None = 8) -> None:
        super().__init__(model_type=model_type, surface_points=surface_points,
                         volume_points=volume_points, geometry_points=geometry_points,
                         surface_window_factor=surface_window_factor, seed=seed,
                         scaling_factors=scaling_factors)
        from domino_pipeline.inputs.processed_run import list_runs
        self.processed_dir = Path(processed_dir)
        all_runs = list_runs(self.processed_dir)
        if runs is None:
            self.run_paths = all_runs
        else:
            by_name = {_run_name(p): p for p in all_runs}
            missing = [r for r in runs if _run_name(r) not in by_name]
            if missing:
                raise FileNotFoundError(f"{self.processed_dir}: no processed runs {missing}")
            self.run_paths = [by_name[_run_name(r)] for r in runs]
        self.preprocess = PreprocessSettings(
            bounding_box_volume=parse_box(bounding_box_volume), bounding_box_surface=parse_box(bounding_box_surface),
            interp_res=tuple(int(v) for v in interp_res), num_neighbors_surface=int(num_neighbors_surface),
            surface_variables=tuple(tuple(v) for v in surface_variables),
            volume_variables=tuple(tuple(v) for v in volume_variables),
            permutation_seed=int(permutation_seed), device=geometry.resolve_device(device))
        self.settings = self.preprocess.fingerprinted()

    def __len__(self) -> int:
        return len(self.run_paths)

    def _arrays_needed(self) -> list[str]:
        names = ["stl_coordinates", "stl_faces", "stl_centers", "stl_areas",
                 "global_params_values", "global_params_reference"]
        if "surface" in self.parts:
            names += ["surface_mesh_centers", "surface_normals", "surface_areas", "surface_fields"]
        if "volume" in self.parts:
            names += ["volume_mesh_centers", "volume_fields"]
        return names

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.preprocess.device.startswith("cuda") and get_worker_info() is not None:
            raise RuntimeError("DoMINODataPipe runs Warp on CUDA and cannot run in DataLoader "
                               "workers; use num_workers=0, or build the cache (cache_data.py) and "
                               "use CachedDoMINODataset, which works with workers")
        from domino_pipeline.inputs.processed_run import load_processed_run
        path = self.run_paths[index]
        prepared = prepare_rows(load_processed_run(path, self._arrays_needed()), self.preprocess,
                                parts=self.parts, source=str(path))
        counts = {"geometry": len(prepared.geometry_coordinates),
                  "surface": 0 if prepared.surface_areas is None else len(prepared.surface_areas),
                  "volume": 0 if prepared.volume_coordinates is None else len(prepared.volume_coordinates)}
        try:
            draw = self._draw(index, counts, lambda a, b: prepared.surface_areas[a:b])
        except TooFewPointsError as err:
            raise TooFewPointsError(f"{path}: {err}") from err
        try:
            return self._item(prepared, draw)
        except ValueError as err:  # the geometry engine's (e.g. an STL with no usable triangle)
            raise ValueError(f"{path}: {err}") from err

    def _item(self, prepared: PreparedRun, draw: Draw) -> dict[str, torch.Tensor]:
        """The geometry work for the drawn rows, then the item."""
        grids = self._derived_grids()
        drawn_grids = {"surf_grid": grids["surf_grid"],
                       "sdf_surf_grid": grid_sdf(prepared, self.preprocess, "surface")}
        if "volume" in self.parts:
            drawn_grids.update(grid=grids["grid"], sdf_grid=grid_sdf(prepared, self.preprocess, "volume"))
        scalars = {"center_of_mass": prepared.center_of_mass,
                   "global_params_values": prepared.global_params_values,
                   "global_params_reference": prepared.global_params_reference}
        g0, g1 = draw.geometry
        return build_item(
            settings=self.settings, scalars=scalars,
            geometry_coordinates=prepared.geometry_coordinates[g0:g1], grids=drawn_grids,
            surface=None if draw.surface_rows is None else self._surface(prepared, draw.surface_rows),
            volume=None if draw.volume is None else self._volume(prepared, draw.volume),
            scaling_factors=self.scaling_factors)

    def _surface(self, p: PreparedRun, rows: np.ndarray) -> dict[str, np.ndarray]:
        neighbors = surface_neighbors(p, self.preprocess, rows)
        gathered = gather_neighbors(p, neighbors)
        return {"coordinates": p.surface_coordinates[rows], "normals": p.surface_normals[rows],
                "areas": p.surface_areas[rows], "fields": p.surface_fields[rows],
                **{f"neighbor_{name}": values for name, values in gathered.items()}}

    def _volume(self, p: PreparedRun, window: tuple[int, int]) -> dict[str, np.ndarray]:
        sdf, closest = volume_sdf(p, self.preprocess, window)
        span = slice(*window)
        return {"coordinates": p.volume_coordinates[span], "fields": p.volume_fields[span],
                "sdf": sdf, "closest": closest}


def collate_items(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Batch items like torch's default collate, cheaper across processes.

    In the main process a batch of one is made of views (no copy). In a DataLoader worker the
    batch goes into a reused shared-memory buffer and reaches the main process as views of it,
    the constant grids by recipe (batch_transfer.py): in the worker the result is a
    ``batch_transfer.PackedBatch``, which the DataLoader's hand-over turns into the batch dict.
    The default collate otherwise.
    """
    if get_worker_info() is not None:
        packed = pack(items)
        if packed is not None:
            return packed
    if len(items) != 1:
        return default_collate(items)
    return {key: value.unsqueeze(0) for key, value in items[0].items()}


def dataset_from_config(cfg, runs: Sequence[str | os.PathLike] | None, *, train: bool) -> Dataset:
    """The dataset the config asks for: cached (``cache.enabled``) or uncached, same items.

    Training draws use ``cfg.seed``, validation draws ``cfg.seed + 1`` (so they differ from the
    training draws of the same run). Scaling factors are read from ``sampling.scaling_factors``.
    """
    settings = settings_from_config(cfg.geometry, cfg.variables)
    s = cfg.sampling
    common = dict(runs=runs, model_type=str(cfg.model_type), surface_points=int(s.surface_points),
                  volume_points=int(s.volume_points), geometry_points=int(s.geometry_points),
                  scaling_factors=load_scaling_factors(s.scaling_factors, s.normalization),
                  seed=int(cfg.seed) + (0 if train else 1),
                  surface_window_factor=_window_factor(s.get("surface_window_factor", 8)))
    if cfg.cache.enabled:
        return CachedDoMINODataset(cfg.cache.dir, expected=settings.fingerprinted(), **common)
    return DoMINODataPipe(
        cfg.data.processed_dir, bounding_box_volume=settings.bounding_box_volume,
        bounding_box_surface=settings.bounding_box_surface, interp_res=settings.interp_res,
        num_neighbors_surface=settings.num_neighbors_surface,
        surface_variables=settings.surface_variables, volume_variables=settings.volume_variables,
        permutation_seed=settings.permutation_seed, device=settings.device, **common)


def _window_factor(value) -> int | None:
    return None if value in (None, 0, "none", "null") else int(value)
