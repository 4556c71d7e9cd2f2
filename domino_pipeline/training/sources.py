"""A training run over sources (``data.sources``, or one dataset in the non-dimensional form;
docs/mixtures.md): each source's split, each run's form, the scaling factors over every source's
training runs in that form, and the mixture datasets and sampler train.py draws from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from domino_pipeline.compute.nondimensional_form import RunForm, form_variables, identity_form, stored_run_form
from domino_pipeline.compute.scaling import check_factors_match, merge_statistics
from domino_pipeline.configuration.config import PipelineConfig, SourceConfig
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.loading.mixture import MixtureDataset, Source, check_settings_agree
from domino_pipeline.processed.run_quality import quality_selection
from domino_pipeline.processed.runs import list_runs, run_name, run_split_from_config
from domino_pipeline.configuration.run_selection import select_items
from domino_pipeline.configuration.source_configs import nondimensional, sources_of
from domino_pipeline.store.manifest import read_manifest


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
    """Each source's runs, less those its quality checks reject, split by its ``val_runs`` or by
    ``train.val_fraction``, less the test runs (``train.test_fraction`` or ``train.test_runs``);
    every refusal names the source."""
    if not config.cache.enabled:
        raise ValueError("data.sources and data.nondimensional read caches: set cache.enabled=true "
                         "(--config-name=cached) and build each source's cache with cache_data.py")
    splits = []
    for source, own in sources_of(config):
        selection = quality_selection(list_runs(own.data.processed_dir), own.data, own.dataset)
        say(f"source {source.name}: {selection.summary()}")
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


def target_variables(config: PipelineConfig, form: bool) -> dict[str, list[list[str]]]:
    """Per part, [name, kind] of the targets: the form's names, or the profile's own."""
    if form:
        return {part: form_variables(config.dataset, part) for part in ("surface", "volume")}
    return {part: [[n, k] for n, k in config.dataset.variables(part).items()] for part in ("surface", "volume")}


def run_forms(dataset: CachedDoMINODataset, config: PipelineConfig, form: bool
              ) -> tuple[list[RunForm], list[dict]]:
    """Each run's form (identities in the stored form) and its field statistics in that form, from
    the references and statistics its cache run records, read once."""
    forms, statistics = [], []
    for index, (name, _) in enumerate(dataset.run_sources):
        scalars = dataset.run(index).attrs["scalars"]
        forms.append(stored_run_form(config.dataset, scalars["global_params_values"],
                                     scalars.get("published_velocity"), f"{dataset.cache_dir}/{name}")
                     if form else identity_form(config.dataset))
        statistics.append({part: forms[-1].statistics(part, scalars["field_statistics"][part])
                           for part in dataset.parts})
    return forms, statistics


MakeDataset = Callable[..., CachedDoMINODataset]  # datapipe.dataset_from_config


def source_datasets(splits: list[SourceSplit], config: PipelineConfig, make_dataset: MakeDataset, *,
                    train: bool) -> list[Source]:
    """Each source's cached runs of the split (``make_dataset``: drawn unscaled), with their forms;
    sources without runs in it left out."""
    form = nondimensional(config)
    sources = []
    for split in splits:
        runs = split.train_runs if train else split.val_runs
        if not runs:
            continue
        dataset = make_dataset(split.config, runs, train=train, scaled=False)
        forms, statistics = run_forms(dataset, split.config, form)
        sources.append(Source(name=split.source.name, dataset=dataset, forms=forms, statistics=statistics,
                              weight=split.source.weight, variables=target_variables(split.config, form)))
    return sources


def mixture_factors(sources: list[Source], normalization: str, form: bool) -> dict:
    """Scaling factors over every run of ``sources`` in the mixture's form, from the statistics each
    cache run records (cache_data.py), converted run by run."""
    per_run = [statistics for source in sources for statistics in source.statistics]
    names = [f"{source.name}/{name}" for source in sources for name, _ in source.dataset.run_sources]
    factors = merge_statistics(per_run, names, normalization=normalization, variables=sources[0].variables)
    factors["form"] = "nondimensional" if form else "stored"
    return factors


def mixtures(config: PipelineConfig, splits: list[SourceSplit], make_dataset: MakeDataset, factors: dict | None
             ) -> tuple[MixtureDataset, MixtureDataset | None, dict]:
    """The training and validation mixtures (None: no validation runs) and their scaling factors:
    ``factors``, or (None) those over every source's training runs in the mixture's form."""
    check_settings_agree([(s.source.name, s.config.cache.dir, read_manifest(s.config.cache.dir)["settings"])
                          for s in splits])  # before any source's own check against the config
    train_sources = source_datasets(splits, config, make_dataset, train=True)
    val_sources = source_datasets(splits, config, make_dataset, train=False)
    if factors is None:
        factors = mixture_factors(train_sources, config.sampling.normalization, nondimensional(config))
    check_factors_match(factors, *(train_sources[0].variables[part] for part in ("surface", "volume")),
                        "sampling.scaling_factors", train_sources[0].dataset.parts)
    train_set = MixtureDataset(train_sources, scaling_factors=factors)
    val_set = MixtureDataset(val_sources, scaling_factors=factors) if val_sources else None
    return train_set, val_set, factors


def split_record(splits: list[SourceSplit]) -> dict:
    """split.json of a training run over sources: every run as ``<source>/<run>``, and per source."""
    return {"train": [n for s in splits for n in s.names("train")],
            "val": [n for s in splits for n in s.names("val")],
            "test": [n for s in splits for n in s.names("test")],
            "sources": {s.source.name: {"dataset": s.config.dataset.name,
                                        "train": [run_name(r) for r in s.train_runs],
                                        "val": [run_name(r) for r in s.val_runs],
                                        "test": [run_name(r) for r in s.test_runs]} for s in splits}}
