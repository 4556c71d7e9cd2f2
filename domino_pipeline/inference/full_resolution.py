"""DoMINO over every surface cell (and volume point) of a run in bounded batches, through the training path's own
preprocessing and item builder (docs/predict.md, "Inputs"). The geometry points are the first ``geometry_points`` STL
vertices in stored order (a uniform subset); ``EncodedDoMINO`` encodes the geometry once per run. A model with both
heads gets one row of the other part in every batch, its prediction dropped."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from domino_pipeline.compute.preprocessing import all_surface_neighbors, grid_sdf, volume_mesh, volume_sdf
from domino_pipeline.compute.rows import PreparedRun, drawn_surface, prepare_rows
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.loading.items import build_item, grid_recipes, item_grids
from domino_pipeline.training.epochs import predictions_by_target


def model_parts(model: torch.nn.Module) -> tuple[str, ...]:
    """The parts ("surface", "volume") a DoMINO predicts."""
    parts = tuple(part for part, width in (("surface", model.output_features_surf),
                                           ("volume", model.output_features_vol)) if width is not None)
    if not parts:
        raise ValueError("the model predicts neither surface nor volume fields")
    return parts


def prepare_run(arrays: dict[str, np.ndarray], settings: PreprocessSettings, *, parts: tuple[str, ...],
                source: str) -> PreparedRun:
    """The training path's cheap preprocessing of the whole run (``prepare_rows``); for a volume part, one far volume
    point when the run has none: a volume head needs one to predict the surface."""
    if "volume" in parts and "volume_mesh_centers" not in arrays:
        lo, hi = (np.asarray(b, dtype=np.float32) for b in settings.bounding_box_volume)
        arrays = arrays | {"volume_mesh_centers": (lo + 0.95 * (hi - lo))[None],
                           "volume_fields": np.zeros((1, settings.width("volume")), dtype=np.float32)}
    return prepare_rows(arrays, settings, parts=parts, source=source)


class BatchItems:
    """Builds DoMINO's input for any rows of a prepared run, its expensive per-run geometry computed once."""

    def __init__(self, prepared: PreparedRun, settings: PreprocessSettings, *, parts: tuple[str, ...],
                 geometry_points: int) -> None:
        self.prepared, self.settings, self.parts = prepared, settings, parts
        self.fingerprinted = settings.fingerprinted()
        self.geometry_coordinates = prepared.geometry_coordinates[:geometry_points]
        self.grids = item_grids(grid_recipes(self.fingerprinted), parts,
                                lambda part: grid_sdf(prepared, settings, part))
        # searched a block of cells at a time, as a cache build does: bounded memory at DrivAerML's 8.8M cells
        self.neighbors = all_surface_neighbors(prepared, settings) if "surface" in parts else None
        self.mesh = volume_mesh(prepared, settings) if "volume" in parts else None

    def surface(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return drawn_surface(self.prepared, rows, self.neighbors[rows])

    def volume(self, window: tuple[int, int]) -> dict[str, np.ndarray]:
        sdf, closest = volume_sdf(self.prepared, self.settings, np.arange(*window), self.mesh)
        span = slice(*window)
        return {"coordinates": self.prepared.volume_coordinates[span], "fields": self.prepared.volume_fields[span],
                "sdf": sdf, "closest": closest}

    def item(self, surface_rows: np.ndarray | None, volume_window: tuple[int, int] | None) -> dict[str, torch.Tensor]:
        """The model's input (batch of one) for these surface rows and this window of volume rows."""
        item = build_item(settings=self.fingerprinted, scalars=self.prepared.scalars,
                          geometry_coordinates=self.geometry_coordinates, grids=self.grids,
                          surface=None if surface_rows is None else self.surface(surface_rows),
                          volume=None if volume_window is None else self.volume(volume_window), scaling_factors=None)
        return {key: value.unsqueeze(0) for key, value in item.items()}


class EncodedDoMINO:
    """DoMINO's forward in two steps, the geometry encoded once per run; mirrors ``DoMINO.forward`` (tested)."""

    SUPPORTED_PHYSICSNEMO = ("2.2.2",)

    @classmethod
    def supports(cls, model: torch.nn.Module) -> bool:
        import physicsnemo

        return type(model).__name__ == "DoMINO" and physicsnemo.__version__ in cls.SUPPORTED_PHYSICSNEMO

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.encodings: dict[str, torch.Tensor] | None = None

    def _encodings(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        model, geometry = self.model, batch["geometry_coordinates"]
        encodings = {}
        if model.output_features_vol is not None:
            encodings["volume"] = model.geo_rep_volume(_in_box(geometry, batch.get("volume_min_max")),
                                                       batch["grid"], batch["sdf_grid"])
        if model.output_features_surf is not None:
            encodings["surface"] = model.geo_rep_surface(_in_box(geometry, batch.get("surface_min_max")),
                                                         batch["surf_grid"], batch["sdf_surf_grid"])
        if len(encodings) == 2 and model.combined_vol_surf:
            both = torch.cat((encodings["volume"], encodings["surface"]), axis=1)
            encodings = {"surface": model.combined_unet_surf(both), "volume": model.combined_unet_vol(both)}
        return encodings

    def encoding(self, batch: dict[str, torch.Tensor], part: str) -> torch.Tensor:
        """The run's geometry encoding for ``part``, computed from the first batch and reused."""
        if self.encodings is None:
            self.encodings = self._encodings(batch)
        return self.encodings[part]

    def surface(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The surface output (B, N, C) of ``batch``."""
        model = self.model
        node_encoding = model.fc_p_surf(batch["pos_surface_center_of_mass"])
        centers = batch["surface_mesh_centers"]
        local_encoding = model.surface_local_geo_encodings(0.5 * self.encoding(batch, "surface"), centers,
                                                           batch["surf_grid"])
        return model.solution_calculator_surf(
            centers, local_encoding, node_encoding, batch["surface_mesh_neighbors"], batch["surface_normals"],
            batch["surface_neighbors_normals"], batch["surface_areas"].unsqueeze(-1),
            batch["surface_neighbors_areas"].unsqueeze(-1), batch["global_params_values"],
            batch["global_params_reference"])

    def volume(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The volume output (B, N, C) of ``batch``."""
        model = self.model
        encoding = self.encoding(batch, "volume")
        node_encoding = model.fc_p_vol(self._volume_node_features(batch))
        centers = batch["volume_mesh_centers"]
        local_encoding = model.volume_local_geo_encodings(0.5 * encoding, centers, batch["grid"])
        return model.solution_calculator_vol(centers, local_encoding, node_encoding, batch["global_params_values"],
                                             batch["global_params_reference"])

    def _volume_node_features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from physicsnemo.models.domino.geometry_rep import scale_sdf

        if not self.model.use_sdf_in_basis_func:
            return batch["pos_volume_center_of_mass"]
        sdf = batch["sdf_nodes"]
        scaled = [scale_sdf(sdf, scaling) for scaling in self.model.sdf_scaling_factor]
        return torch.cat((sdf, *scaled, batch["pos_volume_closest"], batch["pos_volume_center_of_mass"]), dim=-1)


def _in_box(points: torch.Tensor, min_max: torch.Tensor | None) -> torch.Tensor:
    """``points`` mapped to [-1, 1] in the box ``min_max`` (B, 2, 3), as DoMINO maps them; unchanged without."""
    if min_max is None:
        return points
    low, high = min_max[:, 0].unsqueeze(1), min_max[:, 1].unsqueeze(1)
    return 2.0 * (points - low) / (high - low) - 1


def row_batches(count: int, batch_points: int) -> list[tuple[int, int]]:
    """[start, stop) windows of at most ``batch_points`` rows covering ``count`` rows."""
    if batch_points < 1:
        raise ValueError(f"predict.batch_points must be at least 1, not {batch_points}")
    return [(start, min(start + batch_points, count)) for start in range(0, count, batch_points)]


Forward = Callable[[dict[str, torch.Tensor], str], torch.Tensor]


def part_forward(model: torch.nn.Module, *, encode_once: bool = True) -> Forward:
    """``forward(batch, part)``: the model's ``part`` output, through ``EncodedDoMINO`` where it can; one per run."""
    if encode_once and EncodedDoMINO.supports(model):
        encoded = EncodedDoMINO(model)
        return lambda batch, part: encoded.surface(batch) if part == "surface" else encoded.volume(batch)
    return lambda batch, part: predictions_by_target(model(batch))[f"{part}_fields"]


@torch.no_grad()
def predict_part(forward: Forward, items: BatchItems, *, part: str, batch_points: int,
                 device: torch.device, progress: Callable[[int, int], None]) -> np.ndarray:
    """The model's output (scaled) for every kept row of ``part``, in prepared order, through ``forward``."""
    prepared = items.prepared
    count = len(prepared.surface_areas) if part == "surface" else len(prepared.volume_coordinates)
    outputs = []
    for index, (start, stop) in enumerate(row_batches(count, batch_points)):
        surface_rows = np.arange(start, stop) if part == "surface" else (np.arange(1) if "surface" in items.parts else None)
        volume_window = (start, stop) if part == "volume" else ((0, 1) if "volume" in items.parts else None)
        batch = {key: value.to(device) for key, value in items.item(surface_rows, volume_window).items()}
        outputs.append(forward(batch, part)[0].float().cpu().numpy())
        progress(index + 1, stop)
    return np.concatenate(outputs).astype(np.float32)


def rows_to_mesh(values: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    """The kept rows' values placed at their mesh rows (``count``); NaN where none was predicted."""
    placed = np.full((count, values.shape[1]), np.nan, dtype=np.float32)
    placed[rows] = values
    return placed
