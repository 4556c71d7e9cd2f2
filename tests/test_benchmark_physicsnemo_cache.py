"""benchmark_physicsnemo_cache on tiny processed runs: its CLI, the sizes and notes it reports,
and that physicsnemo's own reader, on the cache the driver writes, returns the true neighbours."""

from __future__ import annotations

import io
import json
import statistics
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import zarr
from conftest import import_benchmark
from scipy.spatial import cKDTree

_bench = import_benchmark("benchmark_physicsnemo_cache")
as_box = _bench.as_box
cached_dataset = _bench.cached_dataset
config_defaults = _bench.config_defaults
main = _bench.main
measure_physicsnemo_cache = _bench.measure_physicsnemo_cache
stage_runs = _bench.stage_runs

pytestmark = [pytest.mark.slow, pytest.mark.physicsnemo_release]


SURFACE_POINTS = 256
# More geometry points than a tiny STL has vertices, as in the bench preset: physicsnemo's
# uncached datapipe refuses that, and the driver notes it and draws the vertex count instead.
SIZES = {"surface_points": SURFACE_POINTS, "volume_points": 256, "geometry_points": 5000}
REPEATS = 2


@pytest.fixture(scope="module")
def cli_run(tiny_processed_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Run the CLI once on both tiny runs; return its work folder, JSON result and stdout."""
    work = tmp_path_factory.mktemp("physicsnemo_cache")
    json_path = work / "result.json"
    argv = [
        "--processed", str(tiny_processed_dir), "--runs", "run_1", "run_2",
        "--work", str(work), "--json", str(json_path),
        "--model-type", "surface", "--surface-points", str(SIZES["surface_points"]),
        "--volume-points", str(SIZES["volume_points"]),
        "--geometry-points", str(SIZES["geometry_points"]),
        "--interp-res", "16", "8", "8", "--repeats", str(REPEATS),
    ]
    printed = io.StringIO()
    with redirect_stdout(printed):
        main(argv)
    return work, json.loads(json_path.read_text()), printed.getvalue()


def test_cli_prints_the_table_and_writes_the_timings(cli_run):
    _, result, printed = cli_run
    assert "| cached __getitem__, median s of 2 |" in printed
    assert "| uncached __getitem__, s (one draw) |" in printed
    assert result["physicsnemo_version"] == "2.2.2"
    assert result["settings"]["interp_res"] == [16, 8, 8]
    assert len(result["cached_getitem_all_s"]) == REPEATS
    assert result["cached_getitem_s"] == statistics.median(result["cached_getitem_all_s"])
    assert len(result["cache_build_all_s"]) == 2
    assert min(result["cache_build_all_s"]) > 0
    assert result["uncached_getitem_s"] > 0


def test_reported_bytes_are_the_cache_files_on_disk(cli_run, tiny_processed_dir):
    work, result, _ = cli_run
    files = sorted((work / "cache").iterdir())
    assert [f.name for f in files] == ["run_1_cached.npy", "run_2_cached.npy"]
    assert result["cache_bytes_per_run_readable"] == np.mean([f.stat().st_size for f in files])
    kept = sum(len(kept_surface_points(tiny_processed_dir / f"run_{i}.zarr")) for i in (1, 2)) / 2
    added = result["cache_bytes_per_run_readable"] - result["cache_bytes_per_run"]
    assert added >= kept * 6 * 8  # neighbor_indices: int64, 6 neighbours per kept surface point


def test_notes_say_what_breaks_as_shipped(cli_run):
    notes = "\n".join(cli_run[1]["notes"])
    for expected in (
        "unexpected keyword argument 'use_cache'",
        "missing 1 required positional argument: 'input_path'",
        "unexpected keyword argument 'positional_encoding'",
        "sample['filename']: KeyError: 'filename'",
        "as the example saves it: KeyError: 'neighbor_indices'",
        "batch axis kept: IndexError",
        "uncached DoMINODataPipe draw: ValueError: Surface mesh has fewer points than requested",
    ):
        assert expected in notes
    assert notes.count("equals the stored surface_mesh_neighbors: True") == 2


def kept_surface_points(run_path: Path) -> np.ndarray:
    """Surface centres with area > 0 strictly inside the volume box, as physicsnemo keeps them."""
    group = zarr.open_group(str(run_path), mode="r")
    centers = group["surface_mesh_centers"][:]
    centers = centers[group["surface_areas"][:] > 0]
    box = config_defaults()["bounding_box_volume"]
    inside = ((centers > box["min"]) & (centers < box["max"])).all(axis=1)
    return centers[inside]


def test_physicsnemo_reader_returns_the_true_neighbours(cli_run, tiny_processed_dir):
    work, result, _ = cli_run
    settings = {**result["settings"], "model_type": "surface"}
    dataset = cached_dataset(work / "cache", settings)
    run = dataset.filenames[dataset.indices[0]].removesuffix("_cached.npy")
    draw = dataset[0]
    assert tuple(draw["surface_mesh_neighbors"].shape) == (SURFACE_POINTS, 6, 3)
    box = config_defaults()["bounding_box_surface"]
    low, high = np.asarray(box["min"]), np.asarray(box["max"])
    to_metres = lambda x: (np.asarray(x, np.float64) + 1) / 2 * (high - low) + low  # noqa: E731
    centers = to_metres(draw["surface_mesh_centers"])
    neighbours = to_metres(draw["surface_mesh_neighbors"])
    got = np.sort(np.linalg.norm(neighbours - centers[:, None], axis=-1), axis=1)
    tree = cKDTree(kept_surface_points(tiny_processed_dir / f"{run}.zarr"))
    reference, _ = tree.query(centers, k=7)
    np.testing.assert_allclose(got, reference[:, 1:], atol=1e-5)


def test_unknown_run_and_model_type_are_refused(tiny_processed_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="run_99.zarr does not exist"):
        measure_physicsnemo_cache(tiny_processed_dir, ["run_99"], tmp_path, **SIZES)
    with pytest.raises(ValueError, match="model_type 'wing'"):
        measure_physicsnemo_cache(tiny_processed_dir, ["run_1"], tmp_path, model_type="wing")


def test_runs_and_boxes_are_taken_in_the_forms_callers_hold(tiny_processed_dir, tmp_path):
    staged = stage_runs(tiny_processed_dir, [tiny_processed_dir / "run_2.zarr", "run_1"], tmp_path)
    assert [link.name for link in staged] == ["run_2.zarr", "run_1.zarr"]
    assert staged[0].resolve() == (tiny_processed_dir / "run_2.zarr").resolve()
    box = {"min": [-1, -2, -3], "max": [1, 2, 3]}
    expected = {"min": [-1.0, -2.0, -3.0], "max": [1.0, 2.0, 3.0]}
    assert as_box(SimpleNamespace(**box)) == as_box(box) == expected
