"""The datasets a config asks for: one dataset's (cached or uncached), and a training run's over its sources
(``data.sources``, docs/mixtures.md): one source's own dataset, else the mixture of every source in the run's form."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig
from torch.utils.data import Dataset

from domino_pipeline.compute.nondimensional_form import RunForm, form_variables, stored_run_form
from domino_pipeline.compute.sampling import sampling_law
from domino_pipeline.compute.scaling import load_scaling_factors
from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.configuration.config import CacheConfig, DataConfig, PipelineConfig, SourceConfig, load_config
from domino_pipeline.configuration.run_selection import select_items
from domino_pipeline.configuration.source_configs import mixture, nondimensional, sources_of
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.loading.mixture import MixtureDataset, MixturePart, check_parts_agree, check_settings_agree
from domino_pipeline.processed.run_quality import quality_selection
from domino_pipeline.processed.runs import (list_runs, read_options_from_config, run_name, run_split_from_config,
                                            stat_fingerprint)
from domino_pipeline.storage.object_store import as_location, exists, is_url, join, name_of
from domino_pipeline.store.manifest import manifest_scaling_factors, read_manifest


def typed(config: PipelineConfig | DictConfig) -> PipelineConfig:
    """The typed config (a Hydra config is built into one)."""
    return config if isinstance(config, PipelineConfig) else load_config(config)


def scaling_factors_path(config: PipelineConfig | DictConfig) -> Path | str:
    """Where a training run records its scaling factors: ``sampling.scaling_factors``; one cached dataset's, the file
    beside the cache (a URL on object storage); else ``<output_dir>/scaling_factors.json``."""
    config = typed(config)
    if config.sampling.scaling_factors is not None:
        return Path(config.sampling.scaling_factors)
    if config.cache.enabled and not mixture(config):
        [(_, own)] = sources_of(config)
        record = read_manifest(own.cache.dir).get("scaling_factors") or {"path": "scaling_factors.json"}
        return join(own.cache.dir, record["path"])
    return Path(config.output_dir) / "scaling_factors.json"


def scaling_factors_of(config: PipelineConfig | DictConfig) -> dict:
    """The scaling factors at ``scaling_factors_path``, read and checked (the cache's against its manifest)."""
    config = typed(config)
    sampling = config.sampling
    if sampling.scaling_factors is None and config.cache.enabled and not mixture(config):
        [(_, own)] = sources_of(config)
        return manifest_scaling_factors(own.cache.dir, normalization=sampling.normalization)
    return load_scaling_factors(scaling_factors_path(config), sampling.normalization,
                                allow_pickle=config.data.allow_pickle)


def dataset_from_config(config: PipelineConfig | DictConfig, runs: Sequence[str | os.PathLike] | None, *,
                        train: bool, scaled: bool | dict = True) -> Dataset:
    """The dataset the config asks for, cached (``cache.enabled``) or uncached, same items. Validation draws use ``seed
    + 1`` (by the exact law when ``sampling.val_exact``), training draws ``seed``. ``scaled``: True,
    ``scaling_factors_of``; a dict, those; False, targets as stored (a mixture scales them)."""
    config = typed(config)
    settings = settings_from_config(config.geometry, config.variables)
    sampling = config.sampling
    law = sampling_law(sampling, validation=not train)
    factors = scaled if isinstance(scaled, dict) else scaling_factors_of(config) if scaled else None
    common = dict(runs=runs, model_type=config.model_type, surface_points=sampling.surface_points,
                  volume_points=sampling.volume_points, geometry_points=sampling.geometry_points,
                  scaling_factors=factors, seed=config.seed + (0 if train else 1),
                  surface_window_factor=law.surface_window_factor,
                  volume_window_factor=law.volume_window_factor, exact=law.exact)
    if config.cache.enabled:
        return CachedDoMINODataset(config.cache.dir, expected=settings.fingerprinted(),
                                   processed_stats=_fingerprints(config.cache, config.data, runs),
                                   max_open_runs=config.cache.max_open_runs, **common)
    from domino_pipeline.loading.uncached import DoMINODataPipe
    return DoMINODataPipe(config.data.processed_dir, bounding_box_volume=settings.bounding_box_volume,
                          bounding_box_surface=settings.bounding_box_surface, interp_res=settings.interp_res,
                          num_neighbors_surface=settings.num_neighbors_surface,
                          surface_variables=settings.surface_variables, volume_variables=settings.volume_variables,
                          permutation_seed=settings.permutation_seed, device=settings.device,
                          read_options=read_options_from_config(config.data, config.physics), **common)


def _fingerprints(cache: CacheConfig, data: DataConfig, runs: Sequence[str | os.PathLike] | None) -> dict[str, str] | None:
    """The stat fingerprints of the processed runs a cached dataset draws from, so that runs written again since the
    cache was built are refused; None when ``cache.check_processed_stats`` is false or the processed runs are not here."""
    processed = as_location(data.processed_dir)
    if not cache.check_processed_stats or not (exists(processed) if is_url(processed) else processed.is_dir()):
        return None
    wanted = None if runs is None else {run_name(r) for r in runs}
    return {run_name(p): stat_fingerprint(p) for p in list_runs(processed) if wanted is None or run_name(p) in wanted}


# ---- a training run's sets, over its sources


@dataclass(frozen=True)
class SourceSplit:
    """One source, its one-dataset config, and its training, validation and test runs."""

    source: SourceConfig
    config: PipelineConfig
    train_runs: list[Path | str]
    val_runs: list[Path | str]
    test_runs: list[Path | str] = field(default_factory=list)

    def names(self, which: str) -> list[str]:
        """``<source>/<run>`` of the ``which`` ("train", "val", "test") runs."""
        return [f"{self.source.name}/{run_name(r)}" for r in getattr(self, f"{which}_runs")]


def split_sources(config: PipelineConfig, say: Callable[[str], None]) -> list[SourceSplit]:
    """Each source's runs less quality rejects, split into training, validation and test runs."""
    mixed = mixture(config)
    if mixed and not config.cache.enabled:
        raise ValueError("data.sources and data.nondimensional read caches: set cache.enabled=true "
                         "(--config-name=cached) and build each source's cache with cache_data.py")
    splits = []
    for source, own in sources_of(config):
        selection = quality_selection(list_runs(own.data.processed_dir), own.data, own.dataset)
        say(f"source {source.name}: {selection.summary()}" if mixed else selection.summary())
        runs = select_items(selection.require_some(own.data.processed_dir), run_name, source.runs, None,
                            source=f"source {source.name}'s runs")
        split = run_split_from_config(runs, config.train, config.seed)
        train_runs, val_runs = split.train, split.val
        if source.val_runs is not None:
            val_runs = select_items(runs, run_name, source.val_runs, None, source=f"source {source.name}'s val_runs")
            both = [run_name(r) for r in val_runs if r in split.test]
            if both:
                raise ValueError(f"source {source.name}: runs {both} are both validation runs (val_runs) and test "
                                 "runs (train.test_fraction or train.test_runs)")
            train_runs = [r for r in runs if r not in val_runs and r not in split.test]
        if not train_runs:
            raise ValueError(f"source {source.name}: no training runs left of {[run_name(r) for r in runs]}")
        splits.append(SourceSplit(source, own, train_runs, val_runs, split.test))
    return splits


def split_record(splits: list[SourceSplit], mixed: bool) -> dict:
    """split.json: the train, val and test runs; over a mixture every run as ``<source>/<run>``, and per source."""
    roles = ("train", "val", "test")
    if not mixed:
        return {role: [name_of(r) for r in getattr(splits[0], f"{role}_runs")] for role in roles}
    return {**{role: [n for s in splits for n in s.names(role)] for role in roles},
            "sources": {s.source.name: {"dataset": s.config.dataset.name,
                                        **{role: [run_name(r) for r in getattr(s, f"{role}_runs")] for role in roles}}
                        for s in splits}}


def target_variables(config: PipelineConfig, form: bool) -> dict[str, list[list[str]]]:
    """Per part, [name, kind] of the targets: the form's names, or the profile's own."""
    if form:
        return {part: form_variables(config.dataset, part) for part in ("surface", "volume")}
    return {part: [[n, k] for n, k in config.dataset.variables(part).items()] for part in ("surface", "volume")}


def run_forms(dataset: CachedDoMINODataset, config: PipelineConfig, form: bool) -> tuple[list[RunForm], list[dict]]:
    """Each run's form (identities in the stored form) and its field statistics in that form."""
    forms, statistics = [], []
    for index, (name, _) in enumerate(dataset.run_origins):
        scalars = dataset.run(index).attrs["scalars"]
        forms.append(stored_run_form(config.dataset, scalars["global_params_values"],
                                     scalars.get("published_velocity"), f"{dataset.cache_dir}/{name}", form))
        statistics.append({part: forms[-1].statistics(part, scalars["field_statistics"][part])
                           for part in dataset.parts})
    return forms, statistics


def source_datasets(splits: list[SourceSplit], config: PipelineConfig, *, train: bool) -> list[MixturePart]:
    """Each source's cached runs of the split (unscaled), with forms; sources without runs left out."""
    form = nondimensional(config)
    sources = []
    for split in splits:
        runs = split.train_runs if train else split.val_runs
        if not runs:
            continue
        dataset = dataset_from_config(split.config, runs, train=train, scaled=False)
        forms, statistics = run_forms(dataset, split.config, form)
        sources.append(MixturePart(name=split.source.name, dataset=dataset, forms=forms, statistics=statistics,
                                   weight=split.source.weight, variables=target_variables(split.config, form)))
    if sources:
        check_parts_agree(sources)
    return sources


@dataclass(frozen=True)
class TrainingSources:
    """A training run's sources: each one's split and, over a mixture, its cached datasets; None: one dataset."""

    config: PipelineConfig   # one dataset's own config, or the mixture's
    splits: list[SourceSplit]
    mixture: tuple[list[MixturePart], list[MixturePart]] | None

    def datasets(self, factors: dict) -> tuple[Dataset, Dataset | None]:
        """The training and validation sets (None: no validation runs), scaled by ``factors``."""
        if self.mixture is None:
            [split] = self.splits
            return tuple(dataset_from_config(self.config, runs, train=train, scaled=factors) if runs else None
                         for runs, train in ((split.train_runs, True), (split.val_runs, False)))
        return tuple(MixtureDataset(sources, scaling_factors=factors) if sources else None for sources in self.mixture)


def training_sources(config: PipelineConfig, say: Callable[[str], None]) -> TrainingSources:
    """Every source's split and, over a mixture, its cached datasets (caches that cannot share a model refused)."""
    splits = split_sources(config, say)
    if not mixture(config):
        return TrainingSources(splits[0].config, splits, None)
    check_settings_agree([(s.source.name, s.config.cache.dir, read_manifest(s.config.cache.dir)["settings"])
                          for s in splits])  # before any source's own check against the config
    return TrainingSources(config, splits, (source_datasets(splits, config, train=True),
                                            source_datasets(splits, config, train=False)))
