"""benchmarks/benchmark_time_to_accuracy.py and its helpers: the stop rule and an arm's summary
against figures worked by hand; physicsnemo's draws (the third arm) against our own item of the
same run, row by row; and the whole benchmark end to end at a tiny size."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import import_benchmark, typed_config
from test_train import TINY

runs = import_benchmark("training_runs")


def epoch(n: int, at_s: float, val_loss: float, wait: float = 1.0, compute: float = 3.0, epoch_s: float = 4.5,
          **more) -> dict:
    return {"epoch": n, "at_s": at_s, "val_loss": val_loss, "data_wait_s": wait, "compute_s": compute,
            "epoch_s": epoch_s, "samples_per_s": 2.0, **more}


def test_the_stop_rule_stops_at_the_target_or_the_cap_and_never_after_the_last_epoch():
    stop = runs.stop_rule(target=0.5, cap_s=100.0, last_epoch=3)
    assert not stop([], 10.0)
    assert not stop([epoch(1, 10, 0.6)], 50.0)
    assert stop([epoch(1, 10, 0.6)], 100.5)                       # past the cap
    assert stop([epoch(1, 10, 0.5004)], 20.0)                     # within the relative slack of 1e-3
    assert not stop([epoch(1, 10, 0.5006)], 20.0)
    assert not stop([epoch(1, 10, 0.6), epoch(3, 30, 0.4)], 500.0)  # the last epoch ends the run by itself


def test_an_arm_summary_reads_time_to_target_epoch_time_and_data_wait_up_to_the_target():
    result = {"wall_s": 70.0, "stopped": True, "epochs": [
        epoch(1, 20.0, 0.9, wait=1.0, compute=3.0, epoch_s=4.0),
        epoch(2, 40.0, 0.45, wait=3.0, compute=1.0, epoch_s=5.0, peak_memory_mb=900.0, memory_kind="cpu_peak_rss"),
        epoch(3, 60.0, 0.40, wait=10.0, compute=10.0, epoch_s=9.0)]}
    s = runs.arm_summary(result, target=0.5, cap_s=200.0, peak_host_mb=1234.0)
    assert s["time_to_target_s"] == 40.0 and s["epoch_reached"] == 2 and s["ended"] == "reached the target"
    assert s["epoch_s"] == 5.0                                     # the median epoch
    assert s["data_wait_share"] == pytest.approx((1 + 3) / (1 + 3 + 3 + 1))  # epochs 1..2 only
    assert s["peak_device_mb"] is None and s["peak_host_mb"] == 1234.0   # a CPU figure is no GPU figure
    assert s["curve"] == [[20.0, 0.9, 1], [40.0, 0.45, 2], [60.0, 0.40, 3]]
    assert s["loss_at_end"] == 0.40 and s["best_val_loss"] == 0.40

    capped = runs.arm_summary(result, target=0.1, cap_s=65.0, peak_host_mb=None)
    assert capped["time_to_target_s"] is None and capped["ended"] == "cut at the time cap"
    assert capped["data_wait_share"] == pytest.approx(14 / 28)  # every epoch
    gpu = runs.arm_summary({"wall_s": 1.0, "stopped": False, "epochs": [
        epoch(1, 1.0, 0.3, peak_memory_mb=512.0, memory_kind="cuda_torch_peak+warp_pool_peak")]}, 0.5, 10.0, None)
    assert gpu["peak_device_mb"] == 512.0


def test_an_arm_that_never_reached_the_target_gives_a_lower_bound_not_a_ratio():
    fast = {"time_to_target_s": 20.0, "wall_s": 25.0}
    assert runs.time_ratio({"time_to_target_s": 300.0, "wall_s": 310.0}, fast) == {
        "ratio": 15.0, "bound": None, "text": "15.0x"}
    capped = runs.time_ratio({"time_to_target_s": None, "wall_s": 260.0}, fast)
    assert capped["ratio"] is None and capped["bound"] == 13.0 and capped["text"] == "> 13.0x (not reached)"


def test_the_table_holds_every_arm_and_the_ratios():
    bench = import_benchmark("benchmark_time_to_accuracy")
    summaries = {
        "cached": {"time_to_target_s": 100.0, "wall_s": 100.0, "epoch_s": 4.0},
        "uncached": {"time_to_target_s": 1500.0, "wall_s": 1500.0, "epoch_s": 60.0},
        "physicsnemo": {"time_to_target_s": None, "wall_s": 1210.0, "epoch_s": 50.0}}
    ratios = bench.ratios(summaries)
    assert ratios["uncached_over_cached"]["ratio"] == 15.0
    assert ratios["physicsnemo_over_cached"]["bound"] == pytest.approx(12.1)
    assert ratios["cached_epoch_over_physicsnemo_epoch"] == pytest.approx(0.08)
    common = {"ended": "x", "epochs_run": 3, "data_wait_share": 0.5, "peak_host_mb": 1000.0, "peak_device_mb": None,
              "loss_at_end": 0.1}
    record = {"size": "bench", "surface_cells": 1_000_555, "runs": 20, "target_val_loss": 0.01, "cap_s": 1200.0,
              "cache_build_s": 400.0, "arms": {arm: s | common for arm, s in summaries.items()}, "ratios": ratios}
    table = bench.size_table(record)
    assert "**bench**: 1,000,555 surface cells a body, 20 bodies" in table
    assert "| uncached | 1,500 | x | 3 | 60.00 | 50.0% | 1,000 | - | 0.10000 |" in table
    assert "uncached / cached: 15.0x; physicsnemo / cached: > 12.1x (not reached)" in table


@pytest.mark.slow
@pytest.mark.physicsnemo_release
def test_physicsnemo_draws_are_rows_of_our_item_of_the_same_run(features_cache_dir, tiny_processed_dir, tmp_path):
    """The third arm trains on the problem the other two train on: every row physicsnemo's datapipe
    draws (as physicsnemo_training.py configures it) is a row of our own item of that run (all its
    rows, drawn exactly), with the same normals, areas, scaled targets, centre-of-mass offsets and
    neighbours; the grid, its SDF, the box and the global parameters are ours too."""
    from scipy.spatial import cKDTree

    from datapipe import CachedDoMINODataset
    from domino_pipeline.store.manifest import read_manifest
    trainer = import_benchmark("physicsnemo_training")
    stage_runs = import_benchmark("benchmark_physicsnemo_cache").stage_runs
    counts = read_manifest(features_cache_dir)["runs"]["run_1"]["counts"]
    ours = CachedDoMINODataset(features_cache_dir, runs=["run_1"], model_type="surface", exact=True,
                               surface_points=counts["surface"], geometry_points=counts["geometry"])
    full = {key: value.numpy() for key, value in ours[0].items()}
    config = typed_config("model_type=surface", "geometry.interp_res=[16,8,8]", "sampling.surface_points=256",
                          "sampling.geometry_points=400")
    stage = stage_runs(tiny_processed_dir, ["run_1"], tmp_path / "stage")[0].parent
    pipe = trainer.physicsnemo_pipe(config, stage, ours.scaling_factors, trainer.global_parameters(ours[0]),
                                    on_gpu=False)
    item = {key: value[0].numpy() for key, value in pipe[0].items()}  # its batch axis dropped

    assert set(item) == set(full)
    for key in ("surf_grid", "surface_min_max", "global_params_values", "global_params_reference"):
        np.testing.assert_allclose(item[key], full[key], atol=1e-6, err_msg=key)
    np.testing.assert_allclose(item["sdf_surf_grid"], full["sdf_surf_grid"], atol=1e-5)
    assert item["surface_mesh_centers"].shape == (256, 3) and item["geometry_coordinates"].shape == (400, 3)
    distance, row = cKDTree(full["surface_mesh_centers"]).query(item["surface_mesh_centers"])
    assert distance.max() < 1e-6 and len(set(row)) == 256          # 256 distinct rows of ours
    for key in ("surface_normals", "surface_areas", "surface_fields", "pos_surface_center_of_mass"):
        np.testing.assert_allclose(item[key], full[key][row], rtol=1e-5, atol=1e-6, err_msg=key)
    for key in ("surface_mesh_neighbors", "surface_neighbors_normals", "surface_neighbors_areas"):
        theirs, mine = item[key], full[key][row]  # neighbours in distance order; compare as sets per row
        order = lambda a: np.sort(a.reshape(len(a), a.shape[1], -1), axis=1)  # noqa: E731
        np.testing.assert_allclose(order(theirs), order(mine), atol=1e-6, err_msg=key)
    vertex_distance, _ = cKDTree(full["geometry_coordinates"]).query(item["geometry_coordinates"])
    assert vertex_distance.max() == 0.0                            # STL vertices, unnormalised, as ours


@pytest.mark.slow
def test_the_benchmark_runs_three_arms_end_to_end_at_a_tiny_size(tmp_path, capsys):
    bench = import_benchmark("benchmark_time_to_accuracy")
    tiny = [o for o in TINY if not o.startswith(("train.device", "geometry.device"))]
    out = tmp_path / "out.json"
    bench.main(["--sizes", "tiny", "--runs", "5", "--epochs", "2", "--work", str(tmp_path / "work"),
                "--processes", "2", "--json", str(out), "--png", str(tmp_path / "out.png"),
                "--set", *tiny, "model.parameter_model.base_layer=16"])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert "command: python benchmarks/benchmark_time_to_accuracy.py --sizes tiny" in printed
    record = report["sizes"]["tiny"]
    assert set(record["arms"]) == {"cached", "uncached", "physicsnemo"} and record["runs"] == 5
    for arm, s in record["arms"].items():
        for key in ("surface_cells", "time_to_target_s", "cap_s", "epoch_s", "data_wait_share"):
            assert key in s, (arm, key)
        assert s["surface_cells"] == record["surface_cells"] > 2000 and s["peak_host_mb"] > 100
        assert s["epochs_run"] >= 1 and 0.0 <= s["data_wait_share"] < 1.0
    cached, uncached = record["arms"]["cached"], record["arms"]["uncached"]
    # the same seed and draws: the uncached arm's validation losses are the cached arm's
    assert [c[1] for c in uncached["curve"]] == pytest.approx([c[1] for c in cached["curve"]], rel=1e-5)
    assert cached["time_to_target_s"] is not None and record["target_val_loss"] == cached["curve"][-1][1]
    assert uncached["time_to_target_s"] is not None
    assert "| physicsnemo | " in printed and (tmp_path / "out.png").stat().st_size > 10_000
    pn_log = (tmp_path / "work" / "tiny" / "train" / "physicsnemo" / "train.log").read_text()
    assert "physicsnemo DoMINODataPipe (CPU preprocessing)" in pn_log
    assert math.isfinite(record["arms"]["physicsnemo"]["loss_at_end"])
