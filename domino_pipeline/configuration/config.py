"""The configuration, typed: one frozen dataclass per section of conf/config.yaml. The defaults
live in the YAML files only: every field is required, unknown and missing keys are refused, and
``__post_init__`` refuses values outside the allowed choices. ``load_config`` builds every
section once at an entry point.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from domino_pipeline.configuration.config_section import check_choice, check_type, from_section, wrong_keys
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.configuration.example_keys import check_example_keys
from domino_pipeline.configuration.run_selection import check_spec, parse_shard
from domino_pipeline.configuration.variables import PARTS  # the meshes of a run besides its STL, which every stage reads

MODEL_TYPES = ("surface", "volume", "combined")
DEVICES = ("auto", "cpu", "cuda")
VOLUME_SOURCES = ("points", "cells")  # VTU points with point data | cell centres with cell data
PROCESS_PARTS = ("all", "surface", "volume")  # process.parts: which of them every stage reads and keeps
NEIGHBOR_LAYOUTS = ("indices", "features")
NORMALIZATIONS = ("min_max", "mean_std")
SCHEDULERS = ("cosine", "step")
AMP_CHOICES = ("bf16", "fp16", "none")
SPLITS = ("train", "val", "test")
EXECUTOR_KINDS = ("pool", "dask")  # worker processes on this machine | a dask.distributed cluster
LOSS_TYPES = ("mse", "rmse")
LOSS_TERMS = ("volume", "surface", "surface_area", "integral")
SURFACE_TERMS = ("surface", "surface_area", "integral")
# Keys Hydra itself adds to a config loaded from a file (not sections of ours)
HYDRA_KEYS = ("defaults", "hydra")
# old key -> its new name: the old one is still read, with a DeprecationWarning naming the new one
RENAMED_KEYS = {"cache.check_sources": "cache.check_processed_stats"}


def check_at_least(section: str, config: Any, names: tuple[str, ...], minimum: float) -> None:
    """Refuse any of the fields ``names`` of ``config`` below ``minimum``."""
    for name in names:
        if getattr(config, name) < minimum:
            raise ValueError(f"{section}.{name} must be at least {minimum}, not {getattr(config, name)}")


def check_box(key: str, box: dict[str, list[float]]) -> None:
    """A box is {min: [x, y, z], max: [x, y, z]} with min below max on every axis."""
    lo, hi = box.get("min"), box.get("max")
    if set(box) != {"min", "max"} or len(lo) != 3 or len(hi) != 3 or not all(a < b for a, b in zip(lo, hi)):
        raise ValueError(f"{key} must be {{min: [x, y, z], max: [x, y, z]}} with min < max, not {box}")


@dataclass(frozen=True)
class CuratorLimitsConfig:
    """``data.quality.curator:`` physicsnemo-curator's per-run limits (docs/data_quality.md)."""

    enabled: bool
    sigma: float
    velocity_max: float
    pressure_max: float

    def __post_init__(self) -> None:
        check_positive("data.quality.curator", self, ("sigma", "velocity_max", "pressure_max"))


@dataclass(frozen=True)
class QualityConfig:
    """``data.quality:`` which processed runs cache_data.py and train.py leave out (run_quality.py)."""

    enabled: bool                 # false: every run is used
    include: list[str]            # runs used even when rejected
    robust_threshold: float       # |value - median| / (1.4826 MAD) across runs above which a statistic rejects
    coefficient_tolerance: float  # integrated against published Cd and Cl, relative
    curator: CuratorLimitsConfig

    def __post_init__(self) -> None:
        check_positive("data.quality", self, ("robust_threshold", "coefficient_tolerance"))
        if not all(isinstance(name, str) for name in self.include):
            raise ValueError(f"data.quality.include must list run names, not {self.include}")


def check_positive(section: str, config: Any, names: tuple[str, ...]) -> None:
    """Refuse any of the fields ``names`` of ``config`` that is not positive."""
    for name in names:
        if not getattr(config, name) > 0:
            raise ValueError(f"{section}.{name} must be positive, not {getattr(config, name)}")


@dataclass(frozen=True)
class SourceConfig:
    """One entry of ``data.sources``: a dataset's runs, its cache and its share of the draws (docs/mixtures.md)."""

    name: str               # names the source in logs, metrics, split.json and prediction folders (default_name)
    dataset: str            # a profile: conf/dataset/<dataset>.yaml, or a path to such a file
    processed_dir: str      # its processed runs: a folder or URL
    cache_dir: str          # its cache (cache_data.py builds it with the source's profile): a folder or URL
    weight: float           # its share of each epoch's draws is weight / the sum of the weights
    raw_dir: str | None     # its raw run folders (predict.py writes predictions onto their meshes); None: none
    runs: list[int | str] | None      # only these runs (as data.runs); None: all
    val_runs: list[int | str] | None  # its validation runs (as data.runs); None: train.val_fraction of them

    OPTIONAL: ClassVar[dict[str, Any]] = {"weight": 1.0, "raw_dir": None, "runs": None, "val_runs": None}

    def __post_init__(self) -> None:
        check_positive(f"data.sources.{self.name}", self, ("weight",))
        check_spec(self.runs)
        check_spec(self.val_runs)
        if not self.name or "/" in self.name:
            raise ValueError(f"data.sources: a source's name must be non-empty and hold no '/', not {self.name!r}")


def default_name(entry: dict, datasets: list[Any]) -> dict[str, str]:
    """``{"name": <its dataset's name>}`` for an entry without one whose dataset no other entry names:
    the profile's name, or a profile file's name without .yaml; else nothing."""
    dataset = entry.get("dataset")
    if "name" in entry or not isinstance(dataset, str) or datasets.count(dataset) > 1:
        return {}
    return {"name": Path(dataset).stem if dataset.endswith((".yaml", ".yml")) else dataset}


def sources_from(entries: list[Any]) -> list[SourceConfig]:
    """``data.sources`` entries (mappings; the OPTIONAL keys may be left out, ``name`` where
    ``default_name`` gives one) as SourceConfigs."""
    datasets = [entry.get("dataset") for entry in entries if isinstance(entry, dict)]
    sources = []
    for i, entry in enumerate(entries):
        if isinstance(entry, SourceConfig):
            sources.append(entry)
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"data.sources[{i}] must be a mapping of {list(SourceConfig.__dataclass_fields__)}, "
                             f"not {entry!r}")
        defaults = SourceConfig.OPTIONAL | default_name(entry, datasets)
        sources.append(from_section(SourceConfig, defaults | entry, f"data.sources[{i}]"))
    names = [source.name for source in sources]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"data.sources: names {twice} are given to more than one source")
    return sources


@dataclass(frozen=True)
class DataConfig:
    """``data:`` where the runs are, and which of them are used."""

    raw_dir: str            # run_<i>/ folders as published: a folder, an s3://, gs://, az:// prefix or hf://datasets/<owner>/<name>
    processed_dir: str      # processed runs, or physicsnemo-curator output as it is
    allow_pickle: bool      # also read legacy .npy dict runs (restricted unpickler)
    allow_missing_chunks: bool  # accept Zarr runs lacking chunks (read as fill values) from writers that omit them on purpose
    runs: list[int | str] | None  # process_data.py, cache_data.py: run numbers, ranges "a-b", run names; None: all
    shard: str | None       # "<i>/<n>": every n-th of those runs from the i-th (run_selection.py); None: all
    anonymous: bool | None  # remote raw_dir: unsigned requests (true), signed (false), null: unsigned where no credentials are set
    verify_checksums: bool  # remote raw_dir: hash every piece whose checksum the source publishes (all its bytes are then fetched)
    retry_deadline_s: float  # remote raw_dir: seconds within which a failed request (refused, reset, 5xx) is retried
    quality: QualityConfig
    sources: list[Any] | None  # several datasets in one training run (SourceConfig each); None: this section's one
    nondimensional: bool | None  # train in the non-dimensional form; None: with two or more sources

    def __post_init__(self) -> None:
        if self.sources is not None:
            if not self.sources:
                raise ValueError("data.sources is empty: list sources, or set it to null for one dataset")
            object.__setattr__(self, "sources", sources_from(self.sources))
        check_spec(self.runs)
        check_positive("data", self, ("retry_deadline_s",))
        if self.shard is not None:
            parse_shard(self.shard)


@dataclass(frozen=True)
class PhysicsConfig:
    """``physics:`` the references that make fields dimensionless (the flow itself: ``dataset.flow``)."""

    stream_velocity: float
    air_density: float
    reference_length: float | None  # None: each car's length

    def __post_init__(self) -> None:
        check_scaling_references(self.stream_velocity, self.air_density, self.reference_length)


def check_scaling_references(stream_velocity: float, air_density: float, reference_length: float | None) -> None:
    """Refuse scaling references that are not positive (reference_length None: each car's)."""
    length = 1.0 if reference_length is None else reference_length
    if min(stream_velocity, air_density, length) <= 0:
        raise ValueError("physics: stream_velocity, air_density and reference_length (when given) "
                         f"must be positive, not {stream_velocity}, {air_density}, {reference_length}")


@dataclass(frozen=True)
class VariablesConfig:
    """The field names of each part and their kind, in column order (the profile's ``dataset.fields``)."""

    surface: dict[str, str]
    volume: dict[str, str]


def parts_named(setting: str) -> tuple[str, ...]:
    """The parts (of PARTS) a ``process.parts`` value names: "all" is both."""
    check_choice("process.parts", setting, PROCESS_PARTS)
    return PARTS if setting == "all" else (setting,)


def parts_setting(parts: tuple[str, ...] | list[str]) -> str:
    """The ``process.parts`` value that names ``parts`` (the inverse of ``parts_named``)."""
    chosen = tuple(part for part in PARTS if part in parts)
    if not chosen or len(chosen) != len(tuple(parts)):
        raise ValueError(f"parts must be some of {list(PARTS)}, not {list(parts)}")
    return "all" if chosen == PARTS else chosen[0]


@dataclass(frozen=True)
class ProcessConfig:
    """``process:`` process_data.py's batch, and which parts of a run every stage reads."""

    num_processes: int
    volume_source: str
    overwrite: bool
    parts: str              # all | surface | volume: the STL and these meshes are read, processed, cached
    statistics: bool        # gather each run's statistics while processing it (data quality)

    def __post_init__(self) -> None:
        check_choice("process.volume_source", self.volume_source, VOLUME_SOURCES)
        check_choice("process.parts", self.parts, PROCESS_PARTS)
        check_at_least("process", self, ("num_processes",), 1)

    @property
    def part_names(self) -> tuple[str, ...]:
        """The parts ``parts`` names ("all": surface and volume)."""
        return parts_named(self.parts)


@dataclass(frozen=True)
class ExecutorConfig:
    """``executor:`` where process_data.py and cache_data.py run their per-run tasks (executors.py)."""

    kind: str             # pool | dask
    address: str | None   # dask: a running scheduler's address; None: a local cluster

    def __post_init__(self) -> None:
        check_choice("executor.kind", self.kind, EXECUTOR_KINDS)
        if self.address is not None and self.kind != "dask":
            raise ValueError(f"executor.address is a Dask scheduler's; set executor.kind=dask "
                             f"to use {self.address!r}")


@dataclass(frozen=True)
class GeometryConfig:
    """``geometry:`` the per-run work a cache holds (``PreprocessSettings`` with the variables)."""

    bounding_box_volume: dict[str, list[float]]   # {min: [x, y, z], max: [x, y, z]}
    bounding_box_surface: dict[str, list[float]]
    interp_res: list[int]
    num_neighbors_surface: int
    permutation_seed: int
    neighbor_layout: str
    device: str

    def __post_init__(self) -> None:
        check_box("geometry.bounding_box_volume", self.bounding_box_volume)
        check_box("geometry.bounding_box_surface", self.bounding_box_surface)
        check_choice("geometry.neighbor_layout", self.neighbor_layout, NEIGHBOR_LAYOUTS)
        if self.device not in DEVICES and not (self.device.startswith("cuda:") and self.device[5:].isdigit()):
            raise ValueError(f"geometry.device must be one of {list(DEVICES)} or cuda:<index>, not {self.device!r}")


@dataclass(frozen=True)
class SamplingConfig:
    """``sampling:`` what a draw takes (compute/sampling.py) and the target scaling."""

    surface_points: int
    volume_points: int
    geometry_points: int
    surface_window_factor: int | None  # None: the whole surface
    volume_window_factor: int | None   # None: all volume rows
    exact: bool
    val_exact: bool
    normalization: str
    scaling_factors: str | None        # None: the cache's own, or <output_dir>/scaling_factors.json
    allow_other_split: bool

    def __post_init__(self) -> None:
        check_choice("sampling.normalization", self.normalization, NORMALIZATIONS)
        check_at_least("sampling", self, ("surface_points", "volume_points", "geometry_points"), 1)


@dataclass(frozen=True)
class CacheConfig:
    """``cache:`` the training cache."""

    enabled: bool
    dir: str
    rebuild: bool
    validate: bool
    check_processed_stats: bool  # refuse runs whose processed run's stat fingerprint changed since the cache was built
    max_open_runs: int
    num_processes: int    # runs built at once (the executor's pool or local Dask cluster)

    def __post_init__(self) -> None:
        check_at_least("cache", self, ("max_open_runs", "num_processes"), 1)


@dataclass(frozen=True)
class LossConfig:
    """``loss:`` the loss type and each term's weight (0: the term is not computed)."""

    type: str
    volume_weight: float
    surface_weight: float
    area_weight: float
    integral_weight: float
    area_scaling_factor: float

    def __post_init__(self) -> None:
        check_at_least("loss", self, tuple(loss_weight_key(term) for term in LOSS_TERMS), 0)
        check_choice("loss.type", self.type, LOSS_TYPES)
        check_positive("loss", self, ("area_scaling_factor",))

    def weight(self, term: str) -> float:
        """The weight of ``term`` (one of LOSS_TERMS)."""
        return float(getattr(self, loss_weight_key(term)))

    def active_terms(self, parts: tuple[str, ...]) -> list[str]:
        """The terms with a positive weight that the model's parts ("surface", "volume") allow."""
        return [t for t in LOSS_TERMS
                if self.weight(t) > 0 and ("surface" if t in SURFACE_TERMS else "volume") in parts]

    def check(self, parts: tuple[str, ...], surface_width: int) -> None:
        """Refuse a choice the model cannot serve: no term at all, or the area-weighted and
        integral terms without a [pressure, 3 wall-shear components] surface output."""
        if not self.active_terms(parts):
            raise ValueError(f"loss: no term with a positive weight for a model with {parts} outputs "
                             f"({dataclasses.asdict(self)})")
        needs_layout = [t for t in ("surface_area", "integral") if t in self.active_terms(parts)]
        if needs_layout and surface_width != 4:
            raise ValueError(f"loss terms {needs_layout} need 4 surface variables (pressure, then the 3 "
                             f"wall-shear components); the configured surface variables have "
                             f"{surface_width} columns")

    def describe(self, parts: tuple[str, ...] = ("surface", "volume")) -> str:
        """One line for logs, the terms a model with ``parts`` uses, e.g. ``mse: 1 x surface + 1 x volume``."""
        terms = " + ".join(f"{self.weight(t):g} x {t}" for t in self.active_terms(parts)) or "nothing"
        suffix = f" (area scaling {self.area_scaling_factor:g})" if "surface_area" in self.active_terms(parts) else ""
        return f"{self.type}: {terms}{suffix}"


def loss_weight_key(term: str) -> str:
    """The ``loss:`` key of a term's weight."""
    return {"surface_area": "area_weight"}.get(term, f"{term}_weight")


@dataclass(frozen=True)
class TrainConfig:
    """``train:`` train.py's optimisation, schedule, split, loaders and device."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    scheduler: str          # cosine: to min_lr over all epochs | step: x gamma every step_size epochs
    min_lr: float
    step_size: int
    gamma: float
    clip_grad_norm: float   # <= 0: no clipping
    max_nonfinite_steps: int  # steps whose loss or gradient is not finite skipped before training stops; 0: none
    amp: str                # bf16 | fp16 | none; used on CUDA only
    val_fraction: float
    test_fraction: float    # held out of training and validation alike (predict.split=test)
    test_runs: list[int | str] | None  # those runs instead (data.runs' forms); None: test_fraction of them
    split_seed: int | None  # seeds the train/validation split; None: the run's seed
    val_every: int
    checkpoint_every: int
    keep_checkpoints: int   # checkpoints kept (the newest that pass their check); older ones removed
    num_workers: int
    val_num_workers: int
    device: str             # auto | cpu | cuda
    cpu_threads: int        # torch intra-op threads when training on the CPU; 0: torch's default
    init_from: str | None   # a physicsnemo .mdlus model to start from (fine-tuning); None: fresh weights
    resume_from: str | None  # a physicsnemo checkpoint folder (checkpoint.0.<e>.pt, DoMINO.0.<e>.mdlus) to continue

    def __post_init__(self) -> None:
        check_choice("train.scheduler", self.scheduler, SCHEDULERS)
        check_choice("train.amp", self.amp, AMP_CHOICES)
        check_choice("train.device", self.device, DEVICES)
        for name in ("val_fraction", "test_fraction"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"train.{name} must be in [0, 1), not {getattr(self, name)}")
        if self.test_runs is not None and self.test_fraction > 0:
            raise ValueError(f"train.test_runs={self.test_runs} and train.test_fraction={self.test_fraction}: "
                             "give one of them")
        check_at_least("train", self, ("cpu_threads", "num_workers", "val_num_workers", "max_nonfinite_steps"), 0)
        check_at_least("train", self, ("epochs", "batch_size", "val_every", "checkpoint_every", "keep_checkpoints",
                                       "step_size"), 1)


@dataclass(frozen=True)
class PredictConfig:
    """``predict:`` predict.py's checkpoint, runs and outputs."""

    checkpoint: str
    runs: list[str]
    split: str | None         # train | val: add the runs of <train_dir>/split.json
    source: str | None        # over data.sources: only this source (predict.runs are its runs); None: each
    train_dir: str
    out_dir: str
    batch_points: int         # surface cells (or volume points) per forward pass
    volume: bool
    device: str
    plot: bool

    def __post_init__(self) -> None:
        if self.split is not None:
            check_choice("predict.split", self.split, SPLITS)
        check_choice("predict.device", self.device, DEVICES)
        check_at_least("predict", self, ("batch_points",), 1)


@dataclass(frozen=True)
class ForcesConfig:
    """``forces:`` how predict.py reports the coefficients (conventions and references: the profile's)."""

    reference_area_per_run: bool  # a run's own references where it publishes them; else the constant ones


@dataclass(frozen=True)
class DistributedConfig:
    """``distributed:`` how long the ranks of a job wait for one another (seconds; docs/gpu.md)."""

    timeout_s: float
    work_timeout_s: float

    def __post_init__(self) -> None:
        check_positive("distributed", self, ("timeout_s", "work_timeout_s"))


@dataclass(frozen=True)
class PipelineConfig:
    """The whole configuration; ``model`` stays a plain mapping, checked when the model is built."""

    model_type: str
    seed: int
    output_dir: str
    model: dict[str, Any]
    dataset: DatasetConfig
    data: DataConfig
    physics: PhysicsConfig
    process: ProcessConfig
    executor: ExecutorConfig
    geometry: GeometryConfig
    sampling: SamplingConfig
    cache: CacheConfig
    loss: LossConfig
    train: TrainConfig
    distributed: DistributedConfig
    predict: PredictConfig
    forces: ForcesConfig

    def __post_init__(self) -> None:
        check_choice("model_type", self.model_type, MODEL_TYPES)

    @property
    def variables(self) -> VariablesConfig:
        """The field names and kinds of each part, from the dataset profile."""
        return VariablesConfig(surface=self.dataset.variables("surface"), volume=self.dataset.variables("volume"))

    def as_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON values (recorded in checkpoints and cache manifests)."""
        return dataclasses.asdict(self)


# The sections (a dataclass each) and the top-level keys of the config, in PipelineConfig's order
_FIELDS = typing.get_type_hints(PipelineConfig)
SECTIONS = {name: hint for name, hint in _FIELDS.items() if dataclasses.is_dataclass(hint)}
TOP_LEVEL = {name: hint for name, hint in _FIELDS.items() if name not in SECTIONS}


def renamed_message(old: str, new: str) -> str:
    """The one-line warning for the renamed key ``old``."""
    return f"{old} is deprecated: it is now {new}"


def with_new_names(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a whole config) with each old key of RENAMED_KEYS under its new name, a
    DeprecationWarning for each. The shipped conf/ holds only new names, so a config composed over
    it that sets an old key holds both: the old one, which someone wrote, is the value taken."""
    for old, new in RENAMED_KEYS.items():
        (section, old_key), new_key = old.split("."), new.split(".")[1]
        entries = values.get(section)
        if not isinstance(entries, dict) or old_key not in entries:
            continue
        warnings.warn(renamed_message(old, new), DeprecationWarning, stacklevel=3)
        kept = {key: v for key, v in entries.items() if key not in (old_key, new_key)}
        values = values | {section: kept | {new_key: entries[old_key]}}
    return values


def load_config(cfg: DictConfig) -> PipelineConfig:
    """Every section of ``cfg`` into its dataclass; unknown and missing keys are errors."""
    values = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k not in HYDRA_KEYS}
    values = with_new_names(values)
    check_example_keys(values)
    known = set(SECTIONS) | set(TOP_LEVEL)
    if set(values) != known:
        raise ValueError(f"config: {wrong_keys(values, known)}")
    sections = {name: from_section(cls, values[name], name) for name, cls in SECTIONS.items()}
    top = {key: check_type(key, values[key], hint) for key, hint in TOP_LEVEL.items()}
    return PipelineConfig(**top, **sections)
