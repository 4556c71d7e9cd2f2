"""``CachedDoMINODataset``: DoMINO items drawn from a cache written by ``cache_data.py``. Imports neither Warp nor the
model, so a DataLoader worker stays light."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from domino_pipeline.compute.sampling import TooFewPointsError, part_window, window_spans
from domino_pipeline.compute.scaling import check_factors_match
from domino_pipeline.compute.settings import NEIGHBOR_FEATURES, held_parts, neighbor_layout_of
from domino_pipeline.configuration.config import parts_setting
from domino_pipeline.processed.runs import run_name
from domino_pipeline.loading.batch_transfer import output_array
from domino_pipeline.loading.items import EpochDataset, build_item, item_grids
from domino_pipeline.storage.object_store import is_url
from domino_pipeline.store.cache_format import CacheError, StaleCacheError, diff_settings, layout_arrays
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.chunk_reader import Allocator
from domino_pipeline.store.manifest import manifest_scaling_factors, read_manifest, run_path


class CachedDoMINODataset(EpochDataset):
    """DoMINO items drawn from a cache (docs/cache_format.md), at most ``max_open_runs`` runs open per process.
    ``expected``: the settings the cache must have; ``scaling_factors``: "manifest" (the cache's own, checked), a dict,
    a file or None; ``processed_stats``: run -> ``stat_fingerprint`` (a run written since it was cached is stale;
    ``sources``, its earlier name, is still read, with a DeprecationWarning)."""

    def __init__(self, cache_dir: str | os.PathLike, *, runs: Sequence[str | os.PathLike] | None = None,
                 model_type: str = "surface", surface_points: int = 8192, volume_points: int = 8192,
                 geometry_points: int = 300_000, scaling_factors: dict | str | os.PathLike | None = "manifest",
                 seed: int = 0, expected: dict | None = None, surface_window_factor: int | None = 8,
                 volume_window_factor: int | None = 8, exact: bool = False,
                 processed_stats: dict[str, str] | None = None, max_open_runs: int = 8,
                 sources: dict[str, str] | None = None) -> None:
        if sources is not None:
            warnings.warn("CachedDoMINODataset(sources=...) is now processed_stats=...", DeprecationWarning,
                          stacklevel=2)
            processed_stats = sources if processed_stats is None else processed_stats
        self.cache_dir = cache_dir if is_url(cache_dir) else Path(cache_dir)
        manifest = read_manifest(self.cache_dir)
        if isinstance(scaling_factors, str) and scaling_factors == "manifest":
            scaling_factors = manifest_scaling_factors(self.cache_dir, manifest)
        super().__init__(self.cache_dir, model_type=model_type, surface_points=surface_points,
                         volume_points=volume_points, geometry_points=geometry_points,
                         surface_window_factor=surface_window_factor, volume_window_factor=volume_window_factor,
                         exact=exact, seed=seed, scaling_factors=scaling_factors)
        self.settings, self.fingerprint = manifest["settings"], manifest["fingerprint"]
        self.neighbor_layout = neighbor_layout_of(self.settings)
        if expected is not None:
            _check_settings(self.cache_dir, self.settings, expected)
        _check_parts(self.cache_dir, self.settings, model_type, self.parts)
        check_factors_match(self.scaling_factors, self.settings["surface_variables"],
                            self.settings["volume_variables"], str(self.cache_dir), self.parts)
        names = list(manifest["runs"]) if runs is None else [run_name(r) for r in runs]
        missing = [n for n in names if n not in manifest["runs"]]
        if missing:
            raise FileNotFoundError(f"{self.cache_dir}: runs {missing} are not in the cache manifest")
        entries = [manifest["runs"][n] for n in names]
        _check_processed_stats(self.cache_dir, names, entries, processed_stats)
        self.run_paths = [run_path(self.cache_dir, n, e) for n, e in zip(names, entries)]
        self.run_metadata = [e.get("metadata_sha256") for e in entries]
        self.run_origins = [(n, {"source": e.get("source")}) for n, e in zip(names, entries)]
        self.max_open_runs = max(1, int(max_open_runs))
        self._open: OrderedDict[int, CacheRun] = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_open": OrderedDict()}  # open stores stay in their process

    def run(self, index: int) -> CacheRun:
        """The opened cache run of ``index``, opened on first use and closed after ``max_open_runs`` others."""
        if self._pid != os.getpid():  # a forked worker opens its own stores
            self._open, self._pid = OrderedDict(), os.getpid()
        if index in self._open:
            self._open.move_to_end(index)
            return self._open[index]
        run = CacheRun(self.run_paths[index], metadata=self.run_metadata[index], entry=self.run_origins[index])
        if run.attrs.get("settings_fingerprint") != self.fingerprint:
            raise StaleCacheError(f"{run.path}: built with other settings than the manifest records:\n  "
                                  + "\n  ".join(diff_settings(run.attrs.get("settings", {}), self.settings)))
        self._open[index] = run
        while len(self._open) > self.max_open_runs:
            self._open.popitem(last=False)[1].close()
        return run

    def open_run_indices(self) -> list[int]:
        """The indices of the runs this process holds open, least recently used first."""
        return list(self._open) if self._pid == os.getpid() else []

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.item(index, self.epoch)

    def item(self, index: int, epoch: int) -> dict[str, torch.Tensor]:
        """The item of run ``index`` drawn as in ``epoch`` (``__getitem__``: the current epoch)."""
        run = self.run(index)
        run.check_present()
        counts = run.attrs["counts"]
        resident = self._grid_arrays() + ["geometry_coordinates"]  # what every draw reads: kept with the open run
        run.keep(resident, [n for n in layout_arrays(self.neighbor_layout)  # the drawn parts' rows: shard indexes kept
                            if n not in resident and n.split("_")[0] in self.parts])
        staged = run.stage(self._window_spans(index, epoch, counts))
        try:
            areas = self._areas_reader(run, counts["surface"], staged) if "surface" in self.parts else None
            draw = self._draw(index, counts, areas, epoch)
        except TooFewPointsError as err:
            raise TooFewPointsError(f"{run.path}: {err}") from err
        reads = self._reads(draw)
        drawn = dict(zip([name for name, _, _ in reads], run.read_many(reads, staged)))
        if draw.surface_rows is not None and self.neighbor_layout != "features":
            gathered = _gather_neighbors(run, draw.surface_rows, drawn.pop("surface_neighbors"))
            drawn |= {f"surface_{name}": data for name, data in gathered.items()}
        return build_item(
            settings=self.settings, scalars=run.attrs["scalars"], geometry_coordinates=drawn["geometry_coordinates"],
            grids=item_grids(self._grid_recipes, self.parts, lambda part: drawn[f"{part}_grid_sdf"]),
            surface=None if draw.surface_rows is None else _part(drawn, "surface_"),
            volume=None if draw.volume_rows is None else _part(drawn, "volume_"), scaling_factors=self.scaling_factors)

    def _window_spans(self, index: int, epoch: int, counts: dict) -> dict[str, list[tuple[int, int]]]:
        """The rows each array of a draw comes from (its part's window), in one wave; none where a part takes all."""
        spans = {}
        for part, points in (("surface", self.surface_points), ("volume", self.volume_points)):
            if part not in self.parts:
                continue
            n_rows = counts[part]
            start, width = part_window(self.seed, epoch, index, part, n_rows, points, self.law)
            if width >= n_rows:
                return {}
            names = [name for name, _ in self._row_arrays(part)]
            if part == "surface" and "surface_areas" not in names:  # read by the areas reader
                names.append("surface_areas")
            spans |= {name: window_spans(start, width, n_rows) for name in names}
        return spans

    def _row_arrays(self, part: str) -> list[tuple[str, Allocator]]:
        """The arrays and allocators a draw reads at its rows of ``part`` (in ``indices``: neighbour indices)."""
        if part == "volume":
            return [(f"volume_{n}", np.empty) for n in ("coordinates", "fields", "sdf", "closest")]
        if self.neighbor_layout != "features":
            return [("surface_fields", np.empty), ("surface_neighbors", np.empty)]
        return [("surface_fields", np.empty)] + [(f"surface_{n}", output_array) for n in NEIGHBOR_FEATURES] + \
            [(f"surface_neighbor_{n}", output_array) for n in NEIGHBOR_FEATURES]

    def _areas_reader(self, run: CacheRun, n_rows: int, staged):
        """``read(a, b)``: areas of surface rows a..b-1 (from ``staged``); a wrapping window's two spans in one wave."""
        width = self.law.window("surface", self.surface_points, n_rows)
        pending: dict[tuple[int, int], np.ndarray] = {}

        def read(a: int, b: int) -> np.ndarray:
            if (a, b) in pending:
                return pending.pop((a, b))
            if b == n_rows and 0 < a and width > n_rows - a:
                rest = (0, width - (n_rows - a))
                end, start = run.read_many([("surface_areas", slice(a, b), np.empty),
                                            ("surface_areas", slice(*rest), np.empty)], staged)
                pending[rest] = start
                return end
            return run.read_many([("surface_areas", slice(a, b), np.empty)], staged)[0]
        return read

    def _grid_arrays(self) -> list[str]:
        return ["surface_grid_sdf"] + (["volume_grid_sdf"] if "volume" in self.parts else [])

    def _reads(self, draw) -> list[tuple[str, object, object]]:
        """The (array, selection, allocator) triples a draw reads once its rows are chosen."""
        reads = [(name, Ellipsis, output_array) for name in self._grid_arrays()]
        reads.append(("geometry_coordinates", draw.geometry_rows, output_array))
        for part, rows in (("surface", draw.surface_rows), ("volume", draw.volume_rows)):
            if rows is not None:
                reads += [(name, rows, allocate) for name, allocate in self._row_arrays(part)]
        return reads


def _check_settings(cache_dir: Path | str, settings: dict, expected: dict) -> None:
    """StaleCacheError listing every setting (but the parts) the cache was built with otherwise."""
    differences = diff_settings(*({k: v for k, v in s.items() if k != "parts"} for s in (settings, expected)))
    if differences:
        raise StaleCacheError(f"{cache_dir}: the cache was built with other settings; "
                              "rebuild it (cache_data.py cache.rebuild=true):\n  " + "\n  ".join(differences))


def _check_parts(cache_dir: Path | str, settings: dict, model_type: str, needed: tuple[str, ...]) -> None:
    """CacheError naming the parts and arrays a ``model_type`` model needs that the cache lacks."""
    held = held_parts(settings)
    lacking = [part for part in needed if part not in held]
    if not lacking:
        return
    layout = neighbor_layout_of(settings)
    arrays = [name for name in layout_arrays(layout) if name not in layout_arrays(layout, held)]
    raise CacheError(f"cache {cache_dir}: built without {' and '.join(lacking)} parts (process.parts="
                     f"{parts_setting(held)}); model_type={model_type} needs {', '.join(arrays)}: "
                     f"rebuild it with process.parts=all, or train model_type={parts_setting(held)}")


def _part(drawn: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The drawn arrays of one part, named without ``prefix`` (``surface_fields`` -> ``fields``)."""
    return {name[len(prefix):]: data for name, data in drawn.items() if name.startswith(prefix)
            and not name.endswith("grid_sdf")}


def _check_processed_stats(cache_dir: Path, names: list[str], entries: list[dict],
                           stats: dict[str, str] | None) -> None:
    """StaleCacheError naming the runs built from another version of their processed run (``stats`` None: none)."""
    changed = [n for n, e in zip(names, entries) if n in (stats or {}) and e.get("source", {}).get("stat") != stats[n]]
    if changed:
        raise StaleCacheError(f"{cache_dir}: runs {changed} were written again after the cache "
                              "was built; rerun cache_data.py (cache.rebuild=true where their data "
                              "changed), or set cache.check_processed_stats=false")


def _gather_neighbors(run: CacheRun, rows: np.ndarray, neighbors: np.ndarray) -> dict[str, np.ndarray]:
    """The rows' and their ``neighbors``' coordinates, normals and areas, one pass over each array's chunks."""
    drawn = {}
    wanted = np.concatenate([rows, neighbors.ravel()])
    reads = [(f"surface_{name}", wanted, output_array) for name in NEIGHBOR_FEATURES]
    for name, both in zip(NEIGHBOR_FEATURES, run.read_many(reads)):
        drawn[name] = both[:len(rows)]
        drawn[f"neighbor_{name}"] = both[len(rows):].reshape(*neighbors.shape, *both.shape[1:])
    return drawn
