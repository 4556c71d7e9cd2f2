"""Both datasets: the cached one returns exactly what the uncached one returns, in both neighbour
layouts; draws depend only on (seed, epoch, index), whatever the workers; a features-layout draw
reads its window, not the whole surface; bad input fails with the run named."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from conftest import VARIABLES, parametrize_tiered, yaml_config
from cache_fixtures import (
    BOX_SURFACE,
    BOX_VOLUME,
    INTERP_RES,
    SAMPLES,
    build_tiny_cache,
    generation,
    tiny_settings,
)
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from datapipe import (
    CachedDoMINODataset,
    DoMINODataPipe,
    collate_items,
    dataset_from_config,
)
from domino_pipeline.compute.sampling import TooFewPointsError
from domino_pipeline.compute.scaling import (
    compute_scaling_factors,
    save_scaling_factors,
)
from domino_pipeline.compute.settings import NEIGHBOR_FEATURES, NEIGHBOR_LAYOUTS
from domino_pipeline.processed.run_layout import ProcessedRunError
from domino_pipeline.store import cache_format
from domino_pipeline.store.cache_format import layout_arrays
from domino_pipeline.store.chunk_reader import CHECKSUM_BYTES

ROOT = Path(__file__).resolve().parents[1]
SURFACE_KEYS = {"surface_mesh_centers", "surface_normals", "surface_areas", "pos_surface_center_of_mass",
                "surface_mesh_neighbors", "surface_neighbors_normals", "surface_neighbors_areas",
                "surface_fields"}
VOLUME_KEYS = {"grid", "sdf_grid", "volume_mesh_centers", "sdf_nodes", "pos_volume_closest",
               "pos_volume_center_of_mass", "volume_min_max", "volume_fields"}
COMMON_KEYS = {"geometry_coordinates", "surf_grid", "sdf_surf_grid", "global_params_values",
               "global_params_reference", "surface_min_max"}


@pytest.fixture(scope="module")
def factors(tiny_processed_dir):
    from domino_pipeline.processed.runs import list_runs
    return compute_scaling_factors(list_runs(tiny_processed_dir))


def _uncached(processed_dir, **kw):
    args = dict(bounding_box_volume=BOX_VOLUME, bounding_box_surface=BOX_SURFACE, interp_res=INTERP_RES,
                device="cpu", **VARIABLES, **SAMPLES)
    args.update(kw)
    return DoMINODataPipe(processed_dir, **args)


def _cached(cache_dir, **kw):
    args = dict(SAMPLES)
    args.update(kw)
    return CachedDoMINODataset(cache_dir, **args)


def _assert_same_item(a: dict, b: dict, atol=1e-6) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype == torch.float32, key
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=key)


# The sampling modes: the defaults (on a tiny run the volume window is the whole volume), the exact
# law, and small cyclic windows of both parts (windows that wrap past the last stored row).
LAWS = {"default": {}, "exact": {"exact": True},
        "windows": {"surface_window_factor": 2, "volume_window_factor": 3}}


@parametrize_tiered("model_type,law", list(itertools.product(["surface", "volume", "combined"], LAWS)),
                    fast=("combined", "windows"))
def test_cached_equals_uncached(model_type, law, cache_dir, tiny_processed_dir, factors):
    common = dict(model_type=model_type, seed=5, scaling_factors=factors, **LAWS[law])
    cached = _cached(cache_dir, **common)
    uncached = _uncached(tiny_processed_dir, **common)
    assert len(cached) == len(uncached) == 2
    for epoch in (0, 3):
        cached.set_epoch(epoch)
        uncached.set_epoch(epoch)
        for index in range(2):
            _assert_same_item(cached[index], uncached[index])


@parametrize_tiered("model_type", ["surface", "combined"], fast="combined")
def test_the_features_layout_gives_the_same_items(model_type, cache_dir, features_cache_dir,
                                                  tiny_processed_dir, factors):
    common = dict(model_type=model_type, seed=5, scaling_factors=factors)
    features, indices = _cached(features_cache_dir, **common), _cached(cache_dir, **common)
    uncached = _uncached(tiny_processed_dir, **common)
    assert (features.neighbor_layout, indices.neighbor_layout) == ("features", "indices")
    for epoch in (0, 3):
        for ds in (features, indices, uncached):
            ds.set_epoch(epoch)
        for index in range(2):
            item = features[index]
            _assert_same_item(item, indices[index], atol=0)
            _assert_same_item(item, uncached[index])


@pytest.mark.parametrize("cache", ["cache_dir", "features_cache_dir"])
def test_surface_point_arrays_are_drawn_into_output_arrays(cache, request, monkeypatch):
    """In a DataLoader worker, output_array places them in the buffer the batch travels in."""
    from domino_pipeline.loading import cached

    made = []

    def recording(shape, dtype):
        made.append(np.empty(shape, dtype))
        return made[-1]

    monkeypatch.setattr(cached, "output_array", recording)
    item = _cached(request.getfixturevalue(cache))[0]
    for key in ("surface_mesh_centers", "surface_normals", "surface_areas", "surface_mesh_neighbors",
                "surface_neighbors_normals", "surface_neighbors_areas"):
        assert any(np.shares_memory(item[key].numpy(), array) for array in made), key


def test_the_features_layout_through_workers(features_cache_dir):
    ds = _cached(features_cache_dir, model_type="combined")
    packed = DataLoader(ds, batch_size=1, num_workers=1, collate_fn=collate_items)
    for index, batch in enumerate(packed):
        expected = ds[index]
        assert batch.keys() == expected.keys()
        for key in expected:
            assert torch.equal(batch[key][0], expected[key]), key


SMALL_CHUNK = 32  # rows per chunk of the surface row arrays in the byte-counting caches


@pytest.fixture(scope="module")
def small_chunk_caches(tiny_processed_dir, tmp_path_factory):
    """A cache of each layout whose surface row arrays have 32-row chunks (a tiny run has one
    chunk per array otherwise), so the chunks a draw reads show how far its reads spread."""
    caches = {}
    with pytest.MonkeyPatch.context() as patch:
        for table in (cache_format.ARRAYS, cache_format.NEIGHBOR_FEATURE_ARRAYS):
            for name, spec in table.items():
                if name.startswith("surface_") and spec.chunk_rows is not None:
                    patch.setitem(table, name, cache_format.ArraySpec(spec.dtype, SMALL_CHUNK, spec.shard_rows))
        for layout in NEIGHBOR_LAYOUTS:
            caches[layout] = build_tiny_cache(tiny_processed_dir, tmp_path_factory.mktemp(layout),
                                              tiny_settings(neighbor_layout=layout))
    return caches


def _surface_reads_of_a_draw(cache, surface_points: int, window_factor: int) -> tuple[dict, dict, int]:
    """Bytes each surface row array gives one surface draw (inner chunks only: each array's
    metadata is read before, and its one shard index is left out), the bytes of one inner chunk
    of each, and the surface rows."""
    ds = _cached(cache, model_type="surface", surface_points=surface_points,
                 surface_window_factor=window_factor)
    run = ds.run(0)
    names = [n for n in layout_arrays(ds.neighbor_layout)
             if n.startswith("surface_") and n != "surface_grid_sdf"]
    before = {name: run.reader(name).bytes_read for name in names}
    ds[0]
    index = {name: run.reader(name).chunks_per_shard * 16 + CHECKSUM_BYTES for name in names}
    read = {name: max(0, run.reader(name).bytes_read - before[name] - index[name]) for name in names}
    chunk_file = {name: run.reader(name).chunk_nbytes + CHECKSUM_BYTES for name in names}
    return read, chunk_file, run.attrs["counts"]["surface"]


@pytest.mark.slow
def test_a_features_draw_reads_its_window_an_indices_draw_the_whole_surface(small_chunk_caches):
    points, factor = 64, 2
    window_chunks = -(-points * factor // SMALL_CHUNK) + 2  # the most chunks a cyclic window can touch
    features, chunk_file, ns = _surface_reads_of_a_draw(small_chunk_caches["features"], points, factor)
    indices, _, _ = _surface_reads_of_a_draw(small_chunk_caches["indices"], points, factor)
    surface_chunks = -(-ns // SMALL_CHUNK)
    assert surface_chunks >= 10 * window_chunks  # the window is a small part of the surface
    sources = [f"surface_{name}" for name in NEIGHBOR_FEATURES]
    for name in sources:  # the gather through the indices touches nearly every chunk
        assert indices[name] >= 0.9 * surface_chunks * chunk_file[name], name
    assert features["surface_neighbors"] == 0
    for name, nbytes in features.items():  # no chunk outside the window (areas: sampling reads them too)
        reads = 2 if name == "surface_areas" else 1
        assert nbytes <= reads * window_chunks * chunk_file[name], name
    stored = [f"surface_neighbor_{name}" for name in NEIGHBOR_FEATURES]
    assert all(features[name] > 0 for name in stored)
    neighbour_part = {"features": sum(features[n] for n in sources + stored),
                      "indices": sum(indices[n] for n in sources + ["surface_neighbors"])}
    assert neighbour_part["features"] < neighbour_part["indices"] / 2, neighbour_part


@pytest.mark.parametrize("model_type", ["surface", "volume", "combined"])
def test_item_keys_and_shapes(model_type, cache_dir, factors):
    item = _cached(cache_dir, model_type=model_type, scaling_factors=factors)[0]
    expected = COMMON_KEYS | (SURFACE_KEYS if model_type != "volume" else set()) | \
        (VOLUME_KEYS if model_type != "surface" else set())
    assert set(item) == expected
    g, s, v = SAMPLES["geometry_points"], SAMPLES["surface_points"], SAMPLES["volume_points"]
    assert item["geometry_coordinates"].shape == (g, 3)
    assert item["surf_grid"].shape == (*INTERP_RES, 3) and item["sdf_surf_grid"].shape == INTERP_RES
    assert item["global_params_values"].shape == (2, 1) and item["surface_min_max"].shape == (2, 3)
    if model_type != "volume":
        assert item["surface_mesh_neighbors"].shape == (s, 6, 3)
        assert item["surface_neighbors_areas"].shape == (s, 6) and item["surface_fields"].shape == (s, 4)
        assert torch.all(item["surface_areas"] > 0)
        assert item["surface_fields"].abs().max() <= 1.0 + 1e-6  # min-max scaled
    if model_type != "surface":
        assert item["sdf_nodes"].shape == (v, 1) and item["volume_fields"].shape == (v, 5)
        assert item["volume_min_max"].shape == (2, 3)


def test_neighbours_are_the_nearest_kept_cells(cache_dir):
    """Independent check of the gathered neighbours: brute force over all kept cells."""
    item = _cached(cache_dir, model_type="surface")[0]
    run = zarr.open_group(str(generation(cache_dir, "run_1")), mode="r")
    everything = run["surface_coordinates"][...]
    lo, hi = (np.asarray(b, np.float32) for b in BOX_SURFACE)
    physical = (everything + 1) / 2 * (hi - lo) + lo
    centers = (item["surface_mesh_centers"].numpy() + 1) / 2 * (hi - lo) + lo
    d = np.linalg.norm(centers[:, None, :] - physical[None, :, :], axis=2)
    nearest = np.sort(d, axis=1)[:, 1:7]
    gathered = (item["surface_mesh_neighbors"].numpy() + 1) / 2 * (hi - lo) + lo
    got = np.linalg.norm(gathered - centers[:, None, :], axis=2)
    np.testing.assert_allclose(np.sort(got, axis=1), nearest, atol=1e-5)


def _epoch_items(loader, dataset, epoch):
    dataset.set_epoch(epoch)
    return [{k: v[0] for k, v in batch.items()} for batch in loader]


def test_draws_are_the_same_whatever_the_workers_and_differ_per_epoch(cache_dir):
    ds = _cached(cache_dir, model_type="combined")
    serial = DataLoader(ds, batch_size=1, num_workers=0)
    parallel = DataLoader(ds, batch_size=1, num_workers=2, persistent_workers=True, pin_memory=True)
    for epoch in (0, 1, 2):  # set_epoch must reach the persistent workers
        a, b = _epoch_items(serial, ds, epoch), _epoch_items(parallel, ds, epoch)
        for x, y in zip(a, b):
            _assert_same_item(x, y, atol=0)
    ds.set_epoch(0)
    first = ds[0]
    ds.set_epoch(1)
    assert not torch.equal(first["volume_mesh_centers"], ds[0]["volume_mesh_centers"])
    assert not torch.equal(first["surface_mesh_centers"], ds[0]["surface_mesh_centers"])
    assert not torch.equal(ds[0]["volume_mesh_centers"], ds[1]["volume_mesh_centers"])


def test_collate_items_gives_the_default_batches_with_and_without_workers(cache_dir):
    ds = _cached(cache_dir, model_type="combined")
    reference = DataLoader(ds, batch_size=1, num_workers=0)
    packed = DataLoader(ds, batch_size=1, num_workers=2, persistent_workers=True, pin_memory=True,
                        collate_fn=collate_items)
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        expected, got = list(reference), list(packed)
        assert len(expected) == len(got) == len(ds)
        for x, y in zip(expected, got):
            assert x.keys() == y.keys()
            for key in x:
                assert y[key].shape == x[key].shape and y[key].dtype == x[key].dtype, key
                assert torch.equal(x[key], y[key]), key
    pair = collate_items([ds[0], ds[1]])
    assert pair["surface_mesh_centers"].shape[0] == 2
    assert torch.equal(pair["surface_mesh_centers"][1], ds[1]["surface_mesh_centers"])


def test_the_dataset_holds_no_arrays(cache_dir):
    ds = _cached(cache_dir)
    ds[0]  # opens a run and builds the grids in this process
    state = ds.__getstate__()
    arrays = [k for k, v in state.items() if isinstance(v, np.ndarray) or
              (isinstance(v, torch.Tensor) and v.numel() > 1)]
    assert arrays == [] and state["_open"] == {}
    assert state["_epoch"].is_shared()


def test_missing_array_nan_and_too_few_points(tiny_processed_dir, cache_dir, tmp_path):
    broken = tmp_path / "processed"
    shutil.copytree(tiny_processed_dir, broken)
    shutil.rmtree(broken / "run_1.zarr" / "surface_normals")
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: missing arrays \['surface_normals'\]"):
        _uncached(broken)[0]
    group = zarr.open_group(str(broken / "run_2.zarr"), mode="r+")
    fields = group["volume_fields"][...]
    fields[3, 1] = np.nan
    group["volume_fields"][...] = fields
    with pytest.raises(ProcessedRunError, match="run_2.zarr: array volume_fields has 1 non-finite"):
        _uncached(broken, model_type="volume")[1]
    with pytest.raises(TooFewPointsError, match=r"run_1.zarr: volume points: 8000 rows, fewer than the 9000"):
        _uncached(tiny_processed_dir, model_type="volume", volume_points=9000)[0]
    with pytest.raises(TooFewPointsError, match=r"run_1/g1.zarr: STL vertices: \d+ rows, fewer than the 100000"):
        _cached(cache_dir, geometry_points=100_000)[0]


def test_uncached_on_cuda_refuses_workers(tiny_processed_dir):
    ds = _uncached(tiny_processed_dir)
    ds.preprocess = dataclasses.replace(ds.preprocess, device="cuda:0")  # as if on a GPU machine
    batches = iter(DataLoader(ds, batch_size=1, num_workers=1))
    with pytest.raises(RuntimeError, match="cannot run in DataLoader workers.*CachedDoMINODataset") as refused:
        next(batches)
    traceback.clear_frames(refused.tb)  # then del shuts its worker down; a garbage collection would wait 5 s on it
    del batches


def test_dataset_from_config_picks_the_cached_or_uncached_dataset(tiny_processed_dir, cache_dir, factors, tmp_path):
    cfg = yaml_config()
    factors_path = save_scaling_factors(tmp_path / "factors.json", factors)
    OmegaConf.update(cfg, "data.processed_dir", str(tiny_processed_dir))
    OmegaConf.update(cfg, "cache.dir", str(cache_dir))
    OmegaConf.update(cfg, "geometry.interp_res", list(INTERP_RES))
    OmegaConf.update(cfg, "geometry.device", "cpu")
    OmegaConf.update(cfg, "geometry.neighbor_layout", "indices")  # the layout cache_dir was built in
    OmegaConf.update(cfg, "sampling.scaling_factors", str(factors_path))
    for key, value in SAMPLES.items():
        OmegaConf.update(cfg, f"sampling.{key}", value)
    uncached = dataset_from_config(cfg, ["run_2"], train=True)
    OmegaConf.update(cfg, "cache.enabled", True)
    cached = dataset_from_config(cfg, ["run_2"], train=True)
    assert isinstance(uncached, DoMINODataPipe) and isinstance(cached, CachedDoMINODataset)
    _assert_same_item(cached[0], uncached[0])
    validation = dataset_from_config(cfg, ["run_2"], train=False)
    assert not torch.equal(validation[0]["surface_mesh_centers"], cached[0]["surface_mesh_centers"])
    OmegaConf.update(cfg, "geometry.num_neighbors_surface", 5)
    with pytest.raises(ValueError, match="num_neighbors_surface: cached 7, expected 5"):
        dataset_from_config(cfg, ["run_2"], train=True)
    OmegaConf.update(cfg, "geometry.num_neighbors_surface", 7)
    OmegaConf.update(cfg, "geometry.neighbor_layout", "features")
    with pytest.raises(ValueError, match="neighbor_layout: cached indices, expected features"):
        dataset_from_config(cfg, ["run_2"], train=True)
    OmegaConf.update(cfg, "cache.enabled", False)  # the uncached dataset ignores the layout
    _assert_same_item(dataset_from_config(cfg, ["run_2"], train=True)[0], uncached[0], atol=0)


def test_uncached_geometry_errors_name_the_run(tiny_processed_dir, monkeypatch):
    from domino_pipeline.loading import uncached

    def no_triangle(*args, **kwargs):
        raise ValueError("mesh has no usable triangle")

    monkeypatch.setattr(uncached, "grid_sdf", no_triangle)
    with pytest.raises(ValueError, match=r"run_1\.zarr: mesh has no usable triangle"):
        _uncached(tiny_processed_dir)[0]


def test_the_cache_scaling_factors_are_found_checked_and_matched(cache_dir, tmp_path):
    from domino_pipeline.compute.scaling import load_scaling_factors, unscale_fields
    from domino_pipeline.store.cache_format import CacheError

    ds = _cached(cache_dir)  # no scaling_factors: the cache's own
    assert ds.scaling_factors == load_scaling_factors(cache_dir / "scaling_factors.json")
    assert ds[0]["surface_fields"].abs().max() <= 1.0 + 1e-6
    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    factors = json.loads((copy / "scaling_factors.json").read_text())
    factors["surface"]["max"][0] *= 2
    (copy / "scaling_factors.json").write_text(json.dumps(factors))
    with pytest.raises(CacheError, match="scaling_factors.json: changed since cache_data.py wrote it"):
        _cached(copy)
    factors["variables"]["surface"][0][0] = "CpMeanTrim"
    with pytest.raises(ValueError, match="scaling factors were computed for variables"):
        _cached(cache_dir, scaling_factors=factors)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["scaling_factors"]
    from domino_pipeline.store.manifest import manifest_digest
    manifest["sha256"] = manifest_digest(manifest)  # a consistent manifest without factors
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match="the manifest records no scaling factors; rerun cache_data.py"):
        _cached(copy)
    unscaled = _cached(copy, scaling_factors=None)[0]["surface_fields"]  # as asked
    torch.testing.assert_close(unscale_fields(ds[0]["surface_fields"], ds.scaling_factors, "surface"), unscaled)


def test_the_readme_example_runs_as_written(cache_dir):
    """The README's own-script example, on the tiny cache: only the path, sizes, workers and
    epochs are changed."""
    readme = (ROOT / "README.md").read_text()
    code = readme.split("## In your own training script", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    for old, new in (('"/data/cache"', repr(str(cache_dir))), ("8192", "256"), ("300_000", "400"),
                     ("num_workers=12", "num_workers=0"), ("persistent_workers=True", "persistent_workers=False"),
                     ("range(500)", "range(2)")):
        assert old in code, old
        code = code.replace(old, new)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["ds"].scaling_factors is not None and scope["batch"]["surface_fields"].shape == (1, 256, 4)


@pytest.mark.parametrize("make", [_cached, _uncached], ids=["cached", "uncached"])
def test_the_calls_the_examples_compute_l2_makes_work(make, cache_dir, tiny_processed_dir, factors):
    """physicsnemo's DoMINO example validates with ``compute_l2(pred_surface, pred_volume, batch,
    dataset)``, which calls ``dataset.unscale_model_outputs(surface_fields=...)`` and
    ``(volume_fields=...)`` on batched tensors and takes the surface from the second slot, the
    volume from the first. Unscaled, the targets are those of the same draw without factors."""
    source = cache_dir if make is _cached else tiny_processed_dir
    scaled, plain = (make(source, model_type="combined", seed=3, scaling_factors=f) for f in (factors, None))
    item, reference = scaled[1], plain[1]
    batch = {key: value.unsqueeze(0) for key, value in item.items()}
    _, surface = scaled.unscale_model_outputs(surface_fields=batch["surface_fields"])
    volume, nothing = scaled.unscale_model_outputs(volume_fields=batch["volume_fields"])
    assert nothing is None and surface.shape == batch["surface_fields"].shape
    torch.testing.assert_close(surface[0], reference["surface_fields"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(volume[0], reference["volume_fields"], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(batch["surface_fields"][0], reference["surface_fields"])  # the factors did scale
    assert plain.unscale_model_outputs(volume_fields=reference["volume_fields"])[0] is reference["volume_fields"]


def test_uncached_draws_prepare_a_runs_knn_index_once(tiny_processed_dir, monkeypatch):
    from domino_pipeline.compute import geometry

    built, original = [], geometry.KnnIndex.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(geometry.KnnIndex, "__init__", counting)
    ds = _uncached(tiny_processed_dir)
    first = [ds[0] for _ in range(3)] + [ds[1]]
    assert len(built) == 2  # one per run, not one per draw
    fresh = _uncached(tiny_processed_dir)  # a new dataset prepares again: the same neighbours
    for key in ("surface_mesh_neighbors", "surface_neighbors_normals", "surface_neighbors_areas"):
        assert torch.equal(first[0][key], fresh[0][key])
