"""``DoMINODataPipe``: DoMINO items preprocessed on every draw from the processed runs (no cache); imports Warp."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

from domino_pipeline.compute import geometry
from domino_pipeline.compute.preprocessing import grid_sdf, surface_index, surface_neighbors, volume_sdf
from domino_pipeline.compute.rows import PreparedRun, drawn_surface, prepare_rows
from domino_pipeline.compute.sampling import TooFewPointsError
from domino_pipeline.compute.scaling import check_factors_match
from domino_pipeline.compute.settings import PreprocessSettings, parse_box
from domino_pipeline.processed.run_layout import arrays_for
from domino_pipeline.processed.runs import DEFAULT_OPTIONS, ReadOptions, list_runs, load_run, require_parts, run_name
from domino_pipeline.loading.items import EpochDataset, build_item, item_grids
from domino_pipeline.storage.object_store import as_location

KNN_INDEXES_KEPT = 4  # runs whose surface kNN index a process keeps between draws


class DoMINODataPipe(EpochDataset):
    """DoMINO items preprocessed per draw, the geometry for the drawn rows; refuses workers on CUDA."""

    def __init__(self, processed_dir: str | os.PathLike, *, runs: Sequence[str | os.PathLike] | None = None,
                 model_type: str = "surface", surface_points: int = 8192, volume_points: int = 8192,
                 geometry_points: int = 300_000, bounding_box_volume, bounding_box_surface,
                 interp_res: Sequence[int], num_neighbors_surface: int = 7,
                 surface_variables: Sequence[tuple[str, str]], volume_variables: Sequence[tuple[str, str]],
                 permutation_seed: int = 0, scaling_factors: dict | str | os.PathLike | None = None,
                 seed: int = 0, device: str = "auto", surface_window_factor: int | None = 8,
                 volume_window_factor: int | None = 8, exact: bool = False,
                 read_options: ReadOptions = DEFAULT_OPTIONS) -> None:
        self.processed_dir = as_location(processed_dir)  # a URL: runs read from object storage
        super().__init__(self.processed_dir, model_type=model_type, surface_points=surface_points,
                         volume_points=volume_points, geometry_points=geometry_points,
                         surface_window_factor=surface_window_factor, volume_window_factor=volume_window_factor,
                         exact=exact, seed=seed, scaling_factors=scaling_factors)
        self.read_options = read_options
        all_runs = list_runs(self.processed_dir)
        if runs is None:
            self.run_paths = all_runs
        else:
            by_name = {run_name(p): p for p in all_runs}
            missing = [r for r in runs if run_name(r) not in by_name]
            if missing:
                raise FileNotFoundError(f"{self.processed_dir}: no processed runs {missing}")
            self.run_paths = [by_name[run_name(r)] for r in runs]
        self.preprocess = PreprocessSettings(
            bounding_box_volume=parse_box(bounding_box_volume), bounding_box_surface=parse_box(bounding_box_surface),
            interp_res=tuple(int(v) for v in interp_res), num_neighbors_surface=int(num_neighbors_surface),
            surface_variables=tuple(tuple(v) for v in surface_variables),
            volume_variables=tuple(tuple(v) for v in volume_variables),
            permutation_seed=int(permutation_seed), device=geometry.resolve_device(device))
        self.settings = self.preprocess.fingerprinted()
        self._knn_indexes: OrderedDict[int, geometry.KnnIndex] = OrderedDict()
        for path in self.run_paths:  # their metadata only: a run without a part the model needs is refused now
            require_parts(path, self.parts, f"model_type={model_type}", read_options)
        check_factors_match(self.scaling_factors, self.preprocess.surface_variables,
                            self.preprocess.volume_variables, str(self.processed_dir), self.parts)

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_knn_indexes": OrderedDict()}  # device arrays stay in their process

    def _surface_index(self, index: int, prepared: PreparedRun) -> geometry.KnnIndex:
        """Run ``index``'s surface kNN index, prepared at its first draw in this process."""
        if index in self._knn_indexes:
            self._knn_indexes.move_to_end(index)
        else:
            self._knn_indexes[index] = surface_index(prepared, self.preprocess)
            while len(self._knn_indexes) > KNN_INDEXES_KEPT:
                self._knn_indexes.popitem(last=False)
        return self._knn_indexes[index]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.preprocess.device.startswith("cuda") and get_worker_info() is not None:
            raise RuntimeError("DoMINODataPipe runs Warp on CUDA and cannot run in DataLoader "
                               "workers; use num_workers=0, or build the cache (cache_data.py) and "
                               "use CachedDoMINODataset, which works with workers")
        path = self.run_paths[index]
        prepared = prepare_rows(load_run(path, arrays_for(self.parts), options=self.read_options), self.preprocess,
                                parts=self.parts, source=str(path))
        counts = {"geometry": len(prepared.geometry_coordinates),
                  "surface": 0 if prepared.surface_areas is None else len(prepared.surface_areas),
                  "volume": 0 if prepared.volume_coordinates is None else len(prepared.volume_coordinates)}
        try:
            draw = self._draw(index, counts, lambda a, b: prepared.surface_areas[a:b])
        except TooFewPointsError as err:
            raise TooFewPointsError(f"{path}: {err}") from err
        try:  # the geometry work for the drawn rows, then the item
            return build_item(
                settings=self.settings, scalars=prepared.scalars,
                geometry_coordinates=prepared.geometry_coordinates[draw.geometry_rows],
                grids=item_grids(self._grid_recipes, self.parts,
                                 lambda part: grid_sdf(prepared, self.preprocess, part)),
                surface=None if draw.surface_rows is None else self._surface(prepared, draw.surface_rows, index),
                volume=None if draw.volume_rows is None else self._volume(prepared, draw.volume_rows),
                scaling_factors=self.scaling_factors)
        except ValueError as err:  # the geometry engine's (e.g. an STL with no usable triangle)
            raise ValueError(f"{path}: {err}") from err

    def _surface(self, prepared: PreparedRun, rows: np.ndarray, index: int) -> dict[str, np.ndarray]:
        neighbors = surface_neighbors(prepared, self.preprocess, rows, self._surface_index(index, prepared))
        return drawn_surface(prepared, rows, neighbors)

    def _volume(self, prepared: PreparedRun, rows: np.ndarray) -> dict[str, np.ndarray]:
        sdf, closest = volume_sdf(prepared, self.preprocess, rows)
        return {"coordinates": prepared.volume_coordinates[rows], "fields": prepared.volume_fields[rows],
                "sdf": sdf, "closest": closest}
