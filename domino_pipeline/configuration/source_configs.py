"""The sources of a training run (``data.sources``, docs/mixtures.md), each as the one-dataset config
every stage already reads: its own profile, processed runs, cache and bounding boxes, the rest of
the config shared. Without ``data.sources`` the config itself is the one source.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from domino_pipeline.configuration.config import PipelineConfig, SourceConfig
from domino_pipeline.configuration.config_files import CONF
from domino_pipeline.configuration.dataset_profile import DatasetConfig, profile_from_file


@functools.lru_cache(maxsize=32)
def load_profile(dataset: str) -> DatasetConfig:
    """The profile a source names: conf/dataset/<dataset>.yaml, or the YAML file at ``dataset``
    (read once per process: every stage asks for each source's config several times)."""
    path = Path(dataset) if dataset.endswith((".yaml", ".yml")) else CONF / "dataset" / f"{dataset}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (CONF / "dataset").glob("*.yaml"))
        raise ValueError(f"data.sources: dataset {dataset!r}: no profile {path} (the profiles: {known}, "
                         "or a path to a .yaml profile)")
    return profile_from_file(path)


def source_config(config: PipelineConfig, source: SourceConfig) -> PipelineConfig:
    """``config`` for ``source`` alone: its profile, runs, cache and the profile's bounding boxes."""
    profile = load_profile(source.dataset)
    boxes = profile.bounding_boxes
    return dataclasses.replace(
        config, dataset=profile,
        data=dataclasses.replace(config.data, processed_dir=source.processed_dir, runs=source.runs, sources=None,
                                 raw_dir=source.raw_dir if source.raw_dir is not None else config.data.raw_dir),
        geometry=dataclasses.replace(config.geometry, bounding_box_volume=boxes.volume,
                                     bounding_box_surface=boxes.surface),
        cache=dataclasses.replace(config.cache, dir=source.cache_dir))


def sources_of(config: PipelineConfig) -> list[tuple[SourceConfig, PipelineConfig]]:
    """Each source with its one-dataset config; without ``data.sources`` the config itself, its one
    source its dataset and cache with every run it holds (``data.runs`` chooses the runs
    process_data.py and cache_data.py build, not those trained on)."""
    if config.data.sources is None:
        return [(SourceConfig(name=config.dataset.name, dataset=config.dataset.name, weight=1.0,
                              processed_dir=config.data.processed_dir, cache_dir=config.cache.dir,
                              raw_dir=config.data.raw_dir, runs=None, val_runs=None), config)]
    return [(source, source_config(config, source)) for source in config.data.sources]


def mixture(config: PipelineConfig) -> bool:
    """Whether a training run draws a mixture (two or more sources, or one in the non-dimensional form;
    its runs named ``<source>/<run>``, its predictions one folder per source) rather than one dataset
    as its own dataset draws it."""
    return len(config.data.sources or ()) > 1 or nondimensional(config)


def nondimensional(config: PipelineConfig) -> bool:
    """Whether targets are in the non-dimensional form: ``data.nondimensional``, else with 2+ sources."""
    given = config.data.nondimensional
    return given if given is not None else len(config.data.sources or ()) > 1
