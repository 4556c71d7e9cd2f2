"""Several cached datasets as one (docs/mixtures.md): ``MixtureDataset`` draws a run of any source in the
non-dimensional (or stored) form, scaled by factors over every source; ``WeightedSourceSampler`` gives each source its
weight's share of an epoch's draws. Imports neither Warp nor the model: it runs in DataLoader workers. A draw's key is
``repeat * len(dataset) + index``: ``index`` the run in the sources' order, ``repeat`` how many times the epoch drew it
before; repeat r draws it as in epoch ``epoch + r * REPEAT_EPOCHS``, so every repeat has new points."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from domino_pipeline.compute.nondimensional_form import RunForm
from domino_pipeline.compute.scaling import affine
from domino_pipeline.loading.cached import CachedDoMINODataset

REPEAT_EPOCHS = 2**32  # far beyond any epoch count: a repeat's draws never meet another epoch's
SHARED_SETTINGS = {"interp_res": "geometry.interp_res", "num_neighbors_surface": "geometry.num_neighbors_surface",
                   "neighbor_layout": "geometry.neighbor_layout"}  # what one model needs of every source's cache
NORMAL_KEYS = ("surface_normals", "surface_neighbors_normals")
AREA_KEYS = ("surface_areas", "surface_neighbors_areas")


@dataclass(frozen=True)
class MixturePart:
    """One ``data.sources`` entry of a mixture: its cached runs (unscaled), their forms and statistics, its weight."""

    name: str
    dataset: CachedDoMINODataset
    forms: list[RunForm]
    statistics: list[dict]
    weight: float
    variables: dict[str, list[list[str]]]  # per part, [name, kind] of the targets in the mixture's form

    def __post_init__(self) -> None:
        if not len(self.forms) == len(self.statistics) == len(self.dataset):
            raise ValueError(f"source {self.name}: {len(self.forms)} forms and {len(self.statistics)} statistics "
                             f"for {len(self.dataset)} runs")


def check_settings_agree(caches: Sequence[tuple[str, object, dict]]) -> None:
    """Refuse caches (name, location, settings) built with another grid, neighbour count or layout than the first."""
    name, where, settings = caches[0]
    for other, other_where, other_settings in caches[1:]:
        for key, setting in SHARED_SETTINGS.items():
            mine, theirs = settings.get(key), other_settings.get(key)
            if mine != theirs:
                raise ValueError(f"data.sources: source {other} ({other_where}) was cached with {setting}={theirs}, "
                                 f"source {name} ({where}) with {setting}={mine}; one model needs the same for "
                                 "every source")


def check_parts_agree(sources: Sequence[MixturePart]) -> None:
    """``check_settings_agree`` of the sources' caches, and refuse targets of other variables in the form."""
    check_settings_agree([(s.name, s.dataset.cache_dir, s.dataset.settings) for s in sources])
    first = sources[0]
    for other in sources[1:]:
        if other.variables != first.variables:
            raise ValueError(f"data.sources: source {other.name} has targets {other.variables}, source {first.name} "
                             f"{first.variables}; set data.nondimensional=true, or give sources of the same fields")


@dataclass(frozen=True)
class ItemTransform:
    """One run's item into the mixture's form: per part one multiply-add, the normals' sign, the areas' factor."""

    fields: dict[str, tuple[torch.Tensor, torch.Tensor]]
    normal: float
    area: float

    def apply(self, item: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``item`` (a source's own, unscaled: its tensors are its own) converted in place."""
        for part, (multiply, add) in self.fields.items():
            item[f"{part}_fields"].mul_(multiply).add_(add)
        if "surface" in self.fields:
            if self.normal != 1.0:
                for key in NORMAL_KEYS:
                    item[key].neg_()
            for key in AREA_KEYS:
                item[key].mul_(self.area)
        return item


def item_transform(form: RunForm, parts: Sequence[str], factors: dict | None) -> ItemTransform:
    """``form`` then ``factors`` (None: unscaled) as one multiply-add per part of ``parts``."""
    fields = {}
    for part in parts:
        offset, scale = (0.0, 1.0) if factors is None else affine(factors, part)
        fields[part] = (torch.from_numpy((form.fields[part] / scale).astype(np.float32)),
                        torch.from_numpy((-np.asarray(offset) / scale * np.ones_like(form.fields[part]))
                                         .astype(np.float32)))
    return ItemTransform(fields, float(form.normal), float(form.area))


class MixtureDataset(Dataset):
    """The runs of every source, in order, as one dataset of items in the mixture's form."""

    def __init__(self, sources: Sequence[MixturePart], *, scaling_factors: dict | None) -> None:
        if not sources:
            raise ValueError("a mixture needs at least one source")
        check_parts_agree(sources)
        self.sources = list(sources)
        self.scaling_factors = scaling_factors
        self.parts = sources[0].dataset.parts
        self.settings = sources[0].dataset.settings  # the shared grid, neighbours and layout (checked)
        self.sizes = [len(s.dataset) for s in sources]  # the number of runs of each source
        self.starts = np.cumsum([0] + self.sizes).tolist()
        self.run_names = [f"{s.name}/{name}" for s in sources for name, _ in s.dataset.run_origins]  # in index order
        # DataLoader workers: "spawn" when any source's cache needs it (on object storage), else None
        self.worker_context = "spawn" if any(s.dataset.worker_context == "spawn" for s in sources) else None
        self._transforms: dict[tuple[int, int], ItemTransform] = {}  # per process, made on first use

    def __len__(self) -> int:
        return self.starts[-1]

    def locate(self, index: int) -> tuple[int, int]:
        """(source, run within it) of run ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"run {index} of a mixture of {len(self)} runs")
        source = bisect.bisect_right(self.starts, index) - 1
        return source, index - self.starts[source]

    def source_indices(self, source: int) -> range:
        """The indices of ``source``'s runs."""
        return range(self.starts[source], self.starts[source + 1])

    def set_epoch(self, epoch: int) -> None:
        """Draw the points of ``epoch`` from now on, in this process and in every worker."""
        for source in self.sources:
            source.dataset.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self.sources[0].dataset.epoch

    def __getitem__(self, key: int) -> dict[str, torch.Tensor]:
        repeat, index = divmod(int(key), len(self))
        source, run = self.locate(index)
        chosen = self.sources[source]
        item = chosen.dataset.item(run, self.epoch + repeat * REPEAT_EPOCHS)
        if (source, run) not in self._transforms:
            self._transforms[source, run] = item_transform(chosen.forms[run], self.parts, self.scaling_factors)
        return self._transforms[source, run].apply(item)


class WeightedSourceSampler(Sampler[int]):
    """Each epoch ``draws`` keys (None: all runs) of a ``MixtureDataset``: source s gets weight_s / sum(weights)
    (largest remainders, ties at random), its runs in shuffled rounds, all shuffled together, deterministic in (seed,
    epoch); distinct keys, rounded up to a multiple of ``num_replicas``, rank r taking every ``num_replicas``-th from
    the r-th."""

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], *, num_replicas: int = 1, rank: int = 0,
                 seed: int = 0, draws: int | None = None) -> None:
        if len(sizes) != len(weights) or not sizes or min(sizes) < 1 or not min(weights) > 0:
            raise ValueError(f"every source needs a run and a positive weight; sizes {list(sizes)}, "
                             f"weights {list(weights)}")
        self.sizes, self.weights = [int(n) for n in sizes], [float(w) for w in weights]
        self.num_replicas, self.rank, self.seed = int(num_replicas), int(rank), int(seed)
        wanted = sum(self.sizes) if draws is None else int(draws)
        self.total = -(-wanted // self.num_replicas) * self.num_replicas
        self.starts = np.cumsum([0] + self.sizes).tolist()
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def counts(self, rng: np.random.Generator) -> list[int]:
        """Draws per source: the largest-remainder apportionment of ``total`` by weight."""
        shares = self.total * np.asarray(self.weights) / sum(self.weights)
        counts = np.floor(shares).astype(int)
        remainders = shares - counts
        order = np.lexsort((rng.random(len(shares)), -remainders))  # larger remainder first, ties at random
        counts[order[:self.total - counts.sum()]] += 1
        return counts.tolist()

    def epoch_keys(self, epoch: int) -> list[int]:
        """Every rank's keys of ``epoch``, in order."""
        rng = np.random.default_rng([self.seed, epoch])
        keys = []
        for source, count in enumerate(self.counts(rng)):
            size = self.sizes[source]
            for repeat in range(-(-count // size)):
                runs = rng.permutation(size)[:count - repeat * size]
                keys += (repeat * self.starts[-1] + self.starts[source] + runs).tolist()
        return [keys[i] for i in rng.permutation(len(keys))]

    def __iter__(self):
        return iter(self.epoch_keys(self.epoch)[self.rank::self.num_replicas])

    def __len__(self) -> int:
        return self.total // self.num_replicas
