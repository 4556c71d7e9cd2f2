"""DoMINO datasets, by the names users import:

    from datapipe import CachedDoMINODataset, collate_items      # reads the cache; no Warp
    from datapipe import DoMINODataPipe                          # preprocesses every draw (Warp)

``CachedDoMINODataset`` reads the cache that ``cache_data.py`` wrote; ``DoMINODataPipe`` runs the
same preprocessing on every draw. Both return the same dict of float32 tensors (DoMINO's input
names, domino_pipeline/loading/items.py) for the same (seed, epoch, index). ``DoMINODataPipe`` is
imported on first use, so that importing this module (in a DataLoader worker, say) loads no Warp.
``dataset_from_config`` builds either from the config (typed, or as Hydra composed it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig
from torch.utils.data import Dataset

from domino_pipeline.compute.sampling import sampling_law
from domino_pipeline.compute.scaling import load_scaling_factors
from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.configuration.config import CacheConfig, DataConfig, PipelineConfig, load_config
from domino_pipeline.processed.runs import (
    list_runs,
    read_options_from_config,
    run_name,
    stat_fingerprint,
)
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.loading.collate import collate_items
from domino_pipeline.loading.items import (
    MODEL_TYPES,
    build_item,
    constant_grid,
    parts_of,
)
from domino_pipeline.storage.object_store import as_location, exists, is_url, join
from domino_pipeline.configuration.source_configs import uses_sources
from domino_pipeline.store.manifest import manifest_scaling_factors

__all__ = [
    "CachedDoMINODataset", "MODEL_TYPES", "build_item", "collate_items", "constant_grid",
    "dataset_from_config", "parts_of", "scaling_factors_of", "scaling_factors_path",
    "DoMINODataPipe",  # noqa: F822 (from __getattr__, on first use)
]


def __getattr__(name: str):
    if name == "DoMINODataPipe":  # imports Warp: only when asked for
        from domino_pipeline.loading.uncached import DoMINODataPipe
        return DoMINODataPipe
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def scaling_factors_path(config: PipelineConfig | DictConfig) -> Path | str:
    """Where the target scaling factors are: ``sampling.scaling_factors`` when given; else, over
    sources, ``<output_dir>/scaling_factors.json`` (train.py writes it); else, reading the cache,
    the file cache_data.py wrote beside it; else (uncached) ``<output_dir>/scaling_factors.json``,
    which train.py computes from the training runs."""
    config = _typed(config)
    if config.sampling.scaling_factors is not None:
        return Path(config.sampling.scaling_factors)
    if uses_sources(config):  # over sources: train.py's, over every source's training runs
        return Path(config.output_dir) / "scaling_factors.json"
    if config.cache.enabled:
        from domino_pipeline.store.manifest import read_manifest
        record = read_manifest(config.cache.dir).get("scaling_factors") or {"path": "scaling_factors.json"}
        return join(config.cache.dir, record["path"])  # a URL for a cache on object storage
    return Path(config.output_dir) / "scaling_factors.json"


def _typed(config: PipelineConfig | DictConfig) -> PipelineConfig:
    """The typed config (a Hydra config is built into one)."""
    return config if isinstance(config, PipelineConfig) else load_config(config)


def scaling_factors_of(config: PipelineConfig | DictConfig) -> dict:
    """The scaling factors the config asks for, read and checked: ``sampling.scaling_factors``
    when given, else the cache's own (local or on object storage) checked against its manifest,
    else train.py's ``<output_dir>/scaling_factors.json``."""
    config = _typed(config)
    sampling = config.sampling
    if sampling.scaling_factors is None and config.cache.enabled and not uses_sources(config):
        return manifest_scaling_factors(config.cache.dir, normalization=sampling.normalization)
    return load_scaling_factors(scaling_factors_path(config), sampling.normalization,
                                allow_pickle=config.data.allow_pickle)


def dataset_from_config(config: PipelineConfig | DictConfig, runs: Sequence[str | os.PathLike] | None, *,
                        train: bool, scaled: bool = True) -> Dataset:
    """The dataset the config asks for: cached (``cache.enabled``) or uncached, same items.

    Training draws use ``seed``, validation draws ``seed + 1`` (so they differ from the training
    draws of the same run), by the exact law when ``sampling.val_exact``. Scaling factors:
    ``scaling_factors_path``; ``scaled=False``: none, targets as stored (a mixture scales them).
    """
    config = _typed(config)
    settings = settings_from_config(config.geometry, config.variables)
    sampling = config.sampling
    law = sampling_law(sampling, validation=not train)
    common = dict(runs=runs, model_type=config.model_type, surface_points=sampling.surface_points,
                  volume_points=sampling.volume_points, geometry_points=sampling.geometry_points,
                  scaling_factors=scaling_factors_of(config) if scaled else None, seed=config.seed + (0 if train else 1),
                  surface_window_factor=law.surface_window_factor,
                  volume_window_factor=law.volume_window_factor, exact=law.exact)
    if config.cache.enabled:
        return CachedDoMINODataset(config.cache.dir, expected=settings.fingerprinted(),
                                   sources=_sources(config.cache, config.data, runs),
                                   max_open_runs=config.cache.max_open_runs, **common)
    from domino_pipeline.loading.uncached import DoMINODataPipe
    return DoMINODataPipe(
        config.data.processed_dir, bounding_box_volume=settings.bounding_box_volume,
        bounding_box_surface=settings.bounding_box_surface, interp_res=settings.interp_res,
        num_neighbors_surface=settings.num_neighbors_surface,
        surface_variables=settings.surface_variables, volume_variables=settings.volume_variables,
        permutation_seed=settings.permutation_seed, device=settings.device,
        read_options=read_options_from_config(config.data, config.physics), **common)


def _sources(cache: CacheConfig, data: DataConfig, runs: Sequence[str | os.PathLike] | None) -> dict[str, str] | None:
    """The stat fingerprints (file names, sizes, times) of the processed runs a cached dataset
    draws from, so that runs written again since the cache was built are refused; None when
    ``cache.check_sources`` is false or there are no processed runs here (a machine that holds
    only the cache). Processed runs on object storage are fingerprinted from their listing."""
    processed = as_location(data.processed_dir)
    if not cache.check_sources or not (exists(processed) if is_url(processed) else processed.is_dir()):
        return None
    wanted = None if runs is None else {run_name(r) for r in runs}
    return {run_name(p): stat_fingerprint(p) for p in list_runs(processed)
            if wanted is None or run_name(p) in wanted}
