"""The target scaling factors of a training run: made sure of before the datasets open them, and
turned into the function that brings the model's scaled outputs back to physical units."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from domino_pipeline.compute.scaling import load_scaling_factors, unscale_fields
from domino_pipeline.config import SamplingConfig, VariablesConfig
from domino_pipeline.processed.runs import ReadOptions
from domino_pipeline.training import distributed, scaling_factors
from domino_pipeline.training.distributed import DistInfo


def ensure_scaling_factors(path: Path, train_runs: list[Path], *, sampling: SamplingConfig, cached: bool,
                           variables: VariablesConfig, options: ReadOptions, info: DistInfo,
                           work_timeout_s: float) -> None:
    """The factors at ``path``, computed by all ranks in parts when missing (scaling_factors.py,
    exchanged in a group with its own ``work_timeout_s``); factors computed from other runs are
    refused unless ``sampling.allow_other_split``. A cache's own factors (``cached`` without
    ``sampling.scaling_factors``) are cache_data.py's to write: missing, they are an error."""
    if not path.exists() and cached and sampling.scaling_factors is None:
        raise FileNotFoundError(f"{path}: the cache has no scaling factors; rerun cache_data.py, which writes them")
    group = distributed.work_group(work_timeout_s)
    scaling_factors.ensure_scaling_factors(
        train_runs, path, rank=info.rank, world_size=info.world_size,
        gather=lambda obj: distributed.gather_objects(obj, group), normalization=sampling.normalization,
        options=options, variables={"surface": list(variables.surface.items()), "volume": list(variables.volume.items())},
        allow_other_split=sampling.allow_other_split, log=lambda line: print(line, flush=True))


def make_unscaler(path: Path, normalization: str, *,
                  allow_pickle: bool = False) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """A function (target key, scaled tensor) -> tensor in physical units, from the saved factors
    (``allow_pickle``: the DoMINO example's scaling_factors.pkl too)."""
    factors = load_scaling_factors(path, normalization, allow_pickle=allow_pickle)

    def unscale(key: str, values: torch.Tensor) -> torch.Tensor:
        return unscale_fields(values, factors, key.removesuffix("_fields"))

    return unscale
