"""The target scaling factors of a training run: made sure of before the datasets open them (an
uncached run's computed by every rank in parts, merged in run order: docs/gpu.md), and turned
into the function that brings the model's scaled outputs back to physical units.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from domino_pipeline.compute.scaling import (
    load_scaling_factors,
    merge_statistics,
    processed_run_statistics,
    save_scaling_factors,
    unscale_fields,
)
from domino_pipeline.configuration.config import SamplingConfig, VariablesConfig
from domino_pipeline.processed.runs import ReadOptions, run_name
from domino_pipeline.training import distributed
from domino_pipeline.training.distributed import DistInfo

Gather = Callable[[Any], list[Any]]


def ensure_scaling_factors(path: Path, train_runs: Sequence[Path], *, sampling: SamplingConfig, cached: bool,
                           variables: VariablesConfig, options: ReadOptions, info: DistInfo,
                           work_timeout_s: float) -> None:
    """The factors at ``path``, computed by all ranks in parts when any lacks them; those of another
    split refused unless ``sampling.allow_other_split``; a cache's missing ones an error."""
    if not path.exists() and cached and sampling.scaling_factors is None:
        raise FileNotFoundError(f"{path}: the cache has no scaling factors; rerun cache_data.py, which writes them")
    group = distributed.work_group(work_timeout_s)

    def gather(obj: Any) -> list[Any]:
        return distributed.gather_objects(obj, group)

    if any(gather(not path.exists())):
        if info.rank == 0:
            print(f"computing {sampling.normalization} scaling factors from {len(train_runs)} training runs "
                  f"({info.world_size} ranks in parts) -> {path}", flush=True)
        save_scaling_factors(path, factors_in_parts(
            train_runs, rank=info.rank, world_size=info.world_size, gather=gather,
            normalization=sampling.normalization, options=options,
            variables={"surface": list(variables.surface.items()), "volume": list(variables.volume.items())}))
        return
    names = [run_name(r) for r in train_runs]
    if load_scaling_factors(path, allow_pickle=options.allow_pickle).get("runs", names) != names:
        if not sampling.allow_other_split:
            raise ValueError(f"{path}: the scaling factors were computed from other runs than this "
                             "training split (see its 'runs'); recompute them (delete the file, or "
                             "rerun cache_data.py with this train.val_fraction and train.split_seed), "
                             "or set sampling.allow_other_split=true to use them anyway")
        if info.rank == 0:
            print(f"note: {path} was computed from other runs than this training split (allowed)", flush=True)


def factors_in_parts(train_runs: Sequence[Path], *, rank: int, world_size: int, gather: Gather,
                     normalization: str, options: ReadOptions, variables: dict) -> dict:
    """Scaling factors over ``train_runs``: this rank's share read here, the others' by ``gather``."""
    mine = {i: processed_run_statistics(path, options=options)
            for i, path in enumerate(train_runs) if i % world_size == rank}
    per_run: dict[int, dict] = {}
    for part in gather(mine):
        per_run.update(part)
    return merge_statistics([per_run[i] for i in range(len(train_runs))],
                            [run_name(p) for p in train_runs], normalization=normalization,
                            variables=variables)


def unscaler(factors: dict) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """A function (target key, scaled tensor) -> tensor in the targets' units, from ``factors``."""

    def unscale(key: str, values: torch.Tensor) -> torch.Tensor:
        return unscale_fields(values, factors, key.removesuffix("_fields"))

    return unscale
