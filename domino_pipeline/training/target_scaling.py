"""The target scaling factors of a training run, decided in one place from the origin the config names (a file, the
cache's, computed from the training runs by all ranks in parts, or merged over a mixture's sources), and the function
that brings the model's outputs back to physical units."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from domino_pipeline.compute.scaling import (check_factors_match, compute_scaling_factors, load_scaling_factors,
                                             merge_statistics, save_scaling_factors, unscale_fields)
from domino_pipeline.configuration.config import SamplingConfig, VariablesConfig
from domino_pipeline.configuration.source_configs import nondimensional
from domino_pipeline.loading.assembly import TrainingSources, scaling_factors_of, scaling_factors_path
from domino_pipeline.processed.runs import ReadOptions, read_options_from_config, run_name
from domino_pipeline.store.manifest import manifest_scaling_factors
from domino_pipeline.training import distributed
from domino_pipeline.training.distributed import DistInfo


def training_scaling_factors(sources: TrainingSources, info: DistInfo) -> dict:
    """The scaling factors of a training run over ``sources``: ``sampling.scaling_factors`` (a file); over a mixture,
    merged from each source's cached statistics in the mixture's form (saved as <output_dir>/scaling_factors.json); one
    cached dataset's, its cache's (on object storage, a checked copy as <output_dir>/cache_scaling_factors.json); one
    uncached dataset's, <output_dir>/scaling_factors.json, computed when missing. Refused: factors of another split
    (unless ``sampling.allow_other_split``), a mixture's of other variables or parts."""
    config, sampling = sources.config, sources.config.sampling
    given, path = sampling.scaling_factors is not None, scaling_factors_path(sources.config)
    if sources.mixture is not None:
        train_sources = sources.mixture[0]
        if given:
            factors = scaling_factors_of(config)
        else:
            factors = merge_statistics([stats for source in train_sources for stats in source.statistics],
                                       [f"{source.name}/{name}" for source in train_sources
                                        for name, _ in source.dataset.run_origins],
                                       normalization=sampling.normalization, variables=train_sources[0].variables)
            factors["form"] = "nondimensional" if nondimensional(config) else "stored"
        check_factors_match(factors, *(train_sources[0].variables[part] for part in ("surface", "volume")),
                            "sampling.scaling_factors", train_sources[0].dataset.parts)
        if info.is_main and not given:
            save_scaling_factors(path, factors)
        return factors
    if isinstance(path, str):  # a cache on object storage: its factors, checked, kept beside the outputs
        path = save_scaling_factors(Path(config.output_dir) / "cache_scaling_factors.json",
                                    manifest_scaling_factors(config.cache.dir))
    ensure_scaling_factors(path, sources.splits[0].train_runs, sampling=sampling, cached=config.cache.enabled,
                           variables=config.variables, options=read_options_from_config(config.data, config.physics),
                           info=info, work_timeout_s=config.distributed.work_timeout_s)
    return scaling_factors_of(config)


def ensure_scaling_factors(path: Path, train_runs: Sequence[Path], *, sampling: SamplingConfig, cached: bool,
                           variables: VariablesConfig, options: ReadOptions, info: DistInfo,
                           work_timeout_s: float) -> None:
    """The factors at ``path``, computed by all ranks in parts when missing; another split's refused."""
    if not path.exists() and cached and sampling.scaling_factors is None:
        raise FileNotFoundError(f"{path}: the cache has no scaling factors; rerun cache_data.py, which writes them")
    group = distributed.work_group(work_timeout_s)
    names = [run_name(r) for r in train_runs]
    if any(distributed.gather_objects(not path.exists(), group)):
        if info.rank == 0:
            print(f"computing {sampling.normalization} scaling factors from {len(train_runs)} training runs "
                  f"({info.world_size} ranks in parts) -> {path}", flush=True)
        save_scaling_factors(path, compute_scaling_factors(
            train_runs, normalization=sampling.normalization, options=options, rank=info.rank,
            world_size=info.world_size, gather=lambda share: distributed.gather_objects(share, group),
            variables={"surface": list(variables.surface.items()), "volume": list(variables.volume.items())}))
        return
    if load_scaling_factors(path, allow_pickle=options.allow_pickle).get("runs", names) != names:
        if not sampling.allow_other_split:
            raise ValueError(f"{path}: the scaling factors were computed from other runs than this "
                             "training split (see its 'runs'); recompute them (delete the file, or "
                             "rerun cache_data.py with this train.val_fraction and train.split_seed), "
                             "or set sampling.allow_other_split=true to use them anyway")
        if info.rank == 0:
            print(f"note: {path} was computed from other runs than this training split (allowed)", flush=True)


def unscaler(factors: dict) -> Callable[[str, torch.Tensor], torch.Tensor]:
    """A function (target key, scaled tensor) -> tensor in the targets' units, from ``factors``."""
    return lambda key, values: unscale_fields(values, factors, key.removesuffix("_fields"))
