"""The target scaling factors of a training run: made sure of before the datasets open them, and
turned into the function that brings the model's scaled outputs back to physical units."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from domino_pipeline.compute.scaling import (
    compute_scaling_factors,
    load_scaling_factors,
    save_scaling_factors,
    unscale_fields,
)
from domino_pipeline.config import SamplingConfig, VariablesConfig
from domino_pipeline.inputs.runs import ReadOptions, run_name
from domino_pipeline.training import distributed
from domino_pipeline.training.distributed import DistInfo


def ensure_scaling_factors(path: Path, train_runs: list[Path], *, sampling: SamplingConfig, cached: bool,
                           variables: VariablesConfig, options: ReadOptions, info: DistInfo) -> None:
    """Rank 0 computes the factors at ``path`` from the training runs once, if the file is
    missing; factors computed from other runs are refused unless ``sampling.allow_other_split``;
    the other ranks wait. A cache's own factors (``cached`` without ``sampling.scaling_factors``)
    are cache_data.py's to write: missing, they are an error."""
    if not path.exists() and cached and sampling.scaling_factors is None:
        raise FileNotFoundError(f"{path}: the cache has no scaling factors; rerun cache_data.py, which writes them")
    names = [run_name(r) for r in train_runs]
    if info.is_main and not path.exists():
        print(f"computing {sampling.normalization} scaling factors from {len(train_runs)} training runs -> {path}")
        parts = {"surface": list(variables.surface.items()), "volume": list(variables.volume.items())}
        save_scaling_factors(path, compute_scaling_factors(
            train_runs, normalization=sampling.normalization, options=options, variables=parts))
    elif load_scaling_factors(path).get("runs", names) != names:
        if not sampling.allow_other_split:
            raise ValueError(f"{path}: the scaling factors were computed from other runs than this "
                             "training split (see its 'runs'); recompute them (delete the file, or "
                             "rerun cache_data.py with this train.val_fraction and train.split_seed), "
                             "or set sampling.allow_other_split=true to use them anyway")
        if info.is_main:
            print(f"note: {path} was computed from other runs than this training split (allowed)")
    distributed.barrier()


def make_unscaler(path: Path, normalization: str) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """A function (target key, scaled tensor) -> tensor in physical units, from the saved factors."""
    factors = load_scaling_factors(path, normalization)

    def unscale(key: str, values: torch.Tensor) -> torch.Tensor:
        return unscale_fields(values, factors, key.removesuffix("_fields"))

    return unscale
