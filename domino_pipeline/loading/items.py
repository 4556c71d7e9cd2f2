"""What both DoMINO datasets share: the item they return (``build_item``; its keys and shapes: docs/cache_format.md,
"The item a draw returns"), the epoch counter and draws (``EpochDataset``) and the constant grids. Both datasets return
the same dict for the same (seed, epoch, index)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from domino_pipeline.compute.rows import make_grid, normalize
from domino_pipeline.compute.sampling import Draw, SamplingLaw, sample_draw
from domino_pipeline.compute.scaling import load_scaling_factors, scale_fields, unscale_fields
from domino_pipeline.configuration.config import MODEL_TYPES
from domino_pipeline.loading.batch_transfer import mark_constant
from domino_pipeline.storage.object_store import is_url


def parts_of(model_type: str) -> tuple[str, ...]:
    """The parts ("surface", "volume") a model type needs."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model_type {model_type!r}; expected one of {MODEL_TYPES}")
    return {"surface": ("surface",), "volume": ("volume",), "combined": ("surface", "volume")}[model_type]


def as_tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def _scaled(fields: np.ndarray, scaling_factors: dict | None, kind: str) -> np.ndarray:
    return fields if scaling_factors is None else scale_fields(fields, scaling_factors, kind)


def build_item(*, settings: dict, scalars: dict, geometry_coordinates: np.ndarray,
               grids: dict[str, np.ndarray], surface: dict | None, volume: dict | None,
               scaling_factors: dict | None) -> dict[str, torch.Tensor]:
    """DoMINO's input dict from the drawn rows (numpy, normalised): ``grids`` (surf_grid, sdf_surf_grid, with a volume
    grid, sdf_grid), ``surface`` (coordinates, normals, areas, fields, their neighbor_ ones), ``volume`` (coordinates,
    fields, sdf, closest)."""
    com = np.asarray(scalars["center_of_mass"], dtype=np.float32)
    item = {
        "geometry_coordinates": as_tensor(geometry_coordinates),
        "surf_grid": grids["surf_grid"],
        "sdf_surf_grid": as_tensor(grids["sdf_surf_grid"]),
        "global_params_values": as_tensor(np.asarray(scalars["global_params_values"])[:, None]),
        "global_params_reference": as_tensor(np.asarray(scalars["global_params_reference"])[:, None]),
        "surface_min_max": as_tensor(np.asarray(settings["bounding_box_surface"])),
    }
    if surface is not None:
        com_s = normalize(com[None], settings["bounding_box_surface"])[0]
        item.update({
            "surface_mesh_centers": as_tensor(surface["coordinates"]),
            "surface_normals": as_tensor(surface["normals"]),
            "surface_areas": as_tensor(surface["areas"]),
            "pos_surface_center_of_mass": as_tensor(surface["coordinates"] - com_s),
            "surface_mesh_neighbors": as_tensor(surface["neighbor_coordinates"]),
            "surface_neighbors_normals": as_tensor(surface["neighbor_normals"]),
            "surface_neighbors_areas": as_tensor(surface["neighbor_areas"]),
            "surface_fields": as_tensor(_scaled(surface["fields"], scaling_factors, "surface")),
        })
    if volume is not None:
        com_v = normalize(com[None], settings["bounding_box_volume"])[0]
        item.update({
            "grid": grids["grid"], "sdf_grid": as_tensor(grids["sdf_grid"]),
            "volume_mesh_centers": as_tensor(volume["coordinates"]),
            "sdf_nodes": as_tensor(volume["sdf"][:, None]),
            "pos_volume_closest": as_tensor(volume["coordinates"] - volume["closest"]),
            "pos_volume_center_of_mass": as_tensor(volume["coordinates"] - com_v),
            "volume_min_max": as_tensor(np.asarray(settings["bounding_box_volume"])),
            "volume_fields": as_tensor(_scaled(volume["fields"], scaling_factors, "volume")),
        })
    return item


class EpochDataset(Dataset):
    """Shared plumbing: the epoch counter that reaches persistent workers, draws and grids."""

    def __init__(self, location, *, model_type: str, surface_points: int, volume_points: int, geometry_points: int,
                 surface_window_factor: int | None, volume_window_factor: int | None, exact: bool, seed: int,
                 scaling_factors) -> None:
        self.location = location  # the folder or URL the runs are read from
        # DataLoader workers: "spawn" for runs on object storage (its client does not survive ``fork``), else None
        self.worker_context = "spawn" if is_url(location) else None
        self.parts = parts_of(model_type)
        self.model_type = model_type
        self.surface_points, self.volume_points = int(surface_points), int(volume_points)
        self.geometry_points = int(geometry_points)
        self.law = SamplingLaw(surface_window_factor=surface_window_factor, volume_window_factor=volume_window_factor,
                               exact=exact)
        self.seed = int(seed)
        self.scaling_factors = (scaling_factors if scaling_factors is None or isinstance(scaling_factors, dict)
                                else load_scaling_factors(scaling_factors))  # a file
        # Shared memory: a worker forked or spawned once (persistent_workers) sees later updates.
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return len(self.run_paths)

    def set_epoch(self, epoch: int) -> None:
        """Draw the points of ``epoch`` from now on, in this process and in every worker."""
        self._epoch.fill_(int(epoch))

    @property
    def epoch(self) -> int:
        return int(self._epoch.item())

    def unscale_model_outputs(self, volume_fields: torch.Tensor | None = None,
                              surface_fields: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(volume, surface) back in stored units, as physicsnemo's ``DoMINODataPipe.unscale_model_outputs``."""
        if self.scaling_factors is None:
            return volume_fields, surface_fields
        return tuple(None if fields is None else unscale_fields(fields, self.scaling_factors, kind)
                     for fields, kind in ((volume_fields, "volume"), (surface_fields, "surface")))

    def _draw(self, index: int, counts: dict, read_areas, epoch: int | None = None) -> Draw:
        return sample_draw(
            self.seed, self.epoch if epoch is None else epoch, index, counts=counts, geometry_points=self.geometry_points,
            surface_points=self.surface_points if "surface" in self.parts else None,
            volume_points=self.volume_points if "volume" in self.parts else None,
            read_surface_areas=read_areas, law=self.law)

    @functools.cached_property
    def _grid_recipes(self) -> dict[str, tuple]:
        """``grid_recipes`` of the settings, derived once, not per draw."""
        return grid_recipes(self.settings)


def grid_recipes(settings: dict) -> dict[str, tuple]:
    """``constant_grid``'s arguments per grid of fingerprinted ``settings``: the box (min and max corners) as a tuple
    of floats, its cache key, and the resolution."""
    res = tuple(int(n) for n in settings["interp_res"])
    boxes = {"surf_grid": "bounding_box_surface", "grid": "bounding_box_volume"}
    return {name: (tuple(tuple(float(v) for v in corner) for corner in np.asarray(settings[box]).tolist()), res)
            for name, box in boxes.items()}


def item_grids(recipes: dict[str, tuple], parts: tuple[str, ...],
               sdf_of: Callable[[str], np.ndarray]) -> dict[str, torch.Tensor | np.ndarray]:
    """The normalised grids of ``recipes`` (``constant_grid``: one tensor per process) and their SDFs, ``sdf_of(part)``:
    the surface's, and the volume's for a volume part."""
    grids = {"surf_grid": constant_grid(*recipes["surf_grid"]), "sdf_surf_grid": sdf_of("surface")}
    if "volume" in parts:
        grids |= {"grid": constant_grid(*recipes["grid"]), "sdf_grid": sdf_of("volume")}
    return grids


@functools.lru_cache(maxsize=16)
def constant_grid(box: tuple, res: tuple[int, int, int]) -> torch.Tensor:
    """The normalised grid of ``res`` points over ``box``, one read-only tensor per process, sent as its recipe."""
    grid = as_tensor(make_grid(np.asarray(box), res))
    mark_constant(grid, constant_grid, (box, res))
    return grid
