"""benchmarks/benchmark_learning.py: its scores and baselines against figures worked by hand, the
mixture arm's sources, and the whole benchmark end to end on the two committed OpenFOAM runs copied
to eight bodies, with a mixture of them and two tiny synthetic DrivAerML runs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import import_benchmark
from test_train import TINY

OPENFOAM = Path(__file__).resolve().parent / "data" / "openfoam"


def test_scores_of_predicted_coefficients_match_hand_worked_figures():
    metrics = import_benchmark("learning_metrics")
    true, predicted = [0.2, 0.3, 0.4], [0.25, 0.3, 0.35]
    # SS_res = 0.0025 + 0 + 0.0025, SS_tot = 0.01 + 0 + 0.01
    assert metrics.r_squared(predicted, true) == pytest.approx(1 - 0.005 / 0.02)
    assert metrics.r_squared(true, true) == 1.0
    assert metrics.r_squared([0.3] * 3, true) == pytest.approx(0.0)  # the true mean scores 0
    assert math.isnan(metrics.r_squared(predicted, [0.3] * 3))
    assert metrics.mean_abs_percent(predicted, true) == pytest.approx((25 + 0 + 12.5) / 3)
    assert metrics.coefficient_scores(predicted, true)["mae"] == pytest.approx(0.1 / 3)


def test_the_nearest_body_is_the_closest_in_range_scaled_parameters(tmp_path):
    metrics = import_benchmark("learning_metrics")
    path = tmp_path / "parameters.csv"
    path.write_text("run,length,width,slant_angle_deg,Cd\n"
                    "run_1,3.0,1.0,10,0.3\nrun_2,4.0,2.0,20,0.2\n3,3.15,1.9,30,0.25\nrun_4,3.8,1.15,40,0.1\n")
    columns, table = metrics.read_parameters(path)
    assert columns == ["length", "width"] and set(table) == {"run_1", "run_2", "run_3", "run_4"}
    # both ranges 1.0: from run_3 (3.15, 1.9) to run_1 sqrt(0.0225 + 0.81), to run_4 sqrt(0.4225 + 0.5625)
    assert metrics.nearest_runs(table, ["run_1", "run_4"], ["run_3"]) == {"run_3": "run_1"}
    # brute force over every split of one, with the widths in other units (tenfold): the same answers
    table = {run: values * [1.0, 10.0] for run, values in table.items()}
    scaled = np.stack(list(table.values()))
    span = scaled.max(0) - scaled.min(0)
    for held in table:
        train = [r for r in table if r != held]
        expected = min(train, key=lambda r: np.linalg.norm((table[r] - table[held]) / span))
        assert metrics.nearest_runs(table, train, [held])[held] == expected
    with pytest.raises(ValueError, match="runs without a row in the parameter table: \\['run_9'\\]"):
        metrics.nearest_runs(table, ["run_9"], ["run_1"])


def test_a_parameter_fixed_across_the_family_neither_moves_the_nearest_body_nor_is_named_as_varied(
        monkeypatch, tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    path = tmp_path / "parameters.csv"
    path.write_text("run,length,width,z_roof\nrun_1,3.0,1.75,1.1\nrun_2,4.0,1.75,1.7\nrun_3,3.2,1.75,1.6\n")
    coefficients = {"run_1": {"cd": 1.2, "cl": 0.1}, "run_2": {"cd": 1.5, "cl": 0.3}, "run_3": {"cd": 1.4, "cl": 0.2}}
    monkeypatch.setattr(benchmark, "published", lambda path: coefficients[path.name])
    notes = []
    _, guesses = benchmark.baselines({run: Path(run) for run in coefficients},
                                     {"train": ["run_1", "run_2"], "held_out": ["run_3"]}, path, notes)
    # ranges 1.0 and 0.6: from run_3 to run_1 sqrt(0.04 + 0.694), to run_2 sqrt(0.64 + 0.0278)
    assert guesses["nearest_body"]["run_3"]["run"] == "run_2"
    assert guesses["training_mean"]["run_3"]["cd"] == pytest.approx(1.35)
    assert ("nearest body: range-scaled Euclidean distance over length, z_roof "
            "(parameters.csv; constant in this family: width)") in notes


def test_a_parameter_table_without_a_run_column_is_refused(tmp_path):
    metrics = import_benchmark("learning_metrics")
    path = tmp_path / "p.csv"
    path.write_text("case,length\n1,3.0\n")
    with pytest.raises(ValueError, match="p.csv: a parameter table needs a header with a 'run' column"):
        metrics.read_parameters(path)
    path.write_text("run,length\nrun_1,long\n")
    with pytest.raises(ValueError, match="p.csv:2: not a number in \\['length'\\]"):
        metrics.read_parameters(path)


def test_the_surface_box_is_widened_only_when_a_body_leaves_it_and_then_holds_every_body():
    benchmark = import_benchmark("benchmark_learning")
    box = ([-1.2, -1.2, 0.0], [3.6, 1.2, 1.8])
    inside = {"run_1": [[-0.7, -0.9, 0.2], [3.1, 0.9, 1.5]], "run_2": [[-0.7, -0.8, 0.3], [3.3, 0.8, 1.6]]}
    notes = []
    assert benchmark.surface_box_overrides(inside, *box, notes) == [] and notes == []

    longer = inside | {"run_3": [[-0.7, -1.0, 0.25], [4.1, 1.0, 1.7]]}
    overrides = benchmark.surface_box_overrides(longer, *box, notes)
    # extent x -0.7..4.1 (4.8 m): 0.24 m margin, rounded out to 0.1 m; y and z stay the box's
    assert overrides == ["dataset.bounding_boxes.surface.min=[-1.2,-1.2,0.0]",
                         "dataset.bounding_boxes.surface.max=[4.4,1.2,1.8]"]
    assert len(notes) == 1 and "1 of 3 runs leave it (run_3)" in notes[0]


def test_the_sampling_ab_says_by_how_much_the_default_leaves_the_exact_range():
    benchmark = import_benchmark("benchmark_learning")
    arms = {"default": {1: {"val_loss": 0.05, "p": 0.2, "cd_mae_percent": 5.0},
                        2: {"val_loss": 0.07, "p": 0.2, "cd_mae_percent": 7.0}},
            "exact": {1: {"val_loss": 0.055, "p": 0.1, "cd_mae_percent": 6.0},
                      2: {"val_loss": 0.065, "p": 0.15, "cd_mae_percent": 2.0}}}
    summary = benchmark.ab_summary(arms, [1, 2])
    assert summary["val_loss"]["default_outside_exact_range_by"] == 0.0  # mean 0.06 within 0.055 .. 0.065
    assert summary["p"]["default_outside_exact_range_by"] == pytest.approx(0.05)
    assert summary["cd_mae_percent"]["default_outside_exact_range_by"] == 0.0
    assert summary["p"]["exact"] == {"mean": pytest.approx(0.125), "sd": pytest.approx(0.05 / math.sqrt(2))}


def eight_bodies(folder: Path) -> Path:
    """run_1 .. run_8: the two committed OpenFOAM runs (surface files only) in turn, with a
    parameter table (their length and height; a made-up third column to tell copies apart)."""
    lines = ["run,length,height,tag,Cd"]
    for i in range(1, 9):
        source = OPENFOAM / f"run_{1 + i % 2}"
        (folder / f"run_{i}").mkdir(parents=True)
        for name in ("body.stl", "boundary.vtp", "coefficient.dat"):
            shutil.copy(source / name, folder / f"run_{i}" / name)
        lines.append(f"run_{i},{4.0 if i % 2 == 0 else 3.6},{1.35 if i % 2 == 0 else 1.30},{i},0")
    (folder / "parameters.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_the_mixture_validates_on_the_held_out_bodies_and_trains_on_every_run_of_the_other(monkeypatch, tmp_path):
    """The data.sources override, read as train.py's Hydra and the in-process composer read it: the
    family validated on exactly the held-out bodies, the second dataset all training (val_runs
    []), quoted paths with a space; geometry points lowered (once) to its fewest STL vertices."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    benchmark = import_benchmark("benchmark_learning")
    work = tmp_path / "my work"
    args = benchmark.arguments().parse_args(["--family", str(tmp_path / "fam"), "--work", str(work),
                                             "--mixture-with", str(tmp_path / "dr"), "--mixture-weight", "0.5"])
    monkeypatch.setattr(benchmark, "run_attributes", lambda run: {"counts": {"stl_points": 300}})
    split, notes = {"train": ["run_1", "run_2"], "held_out": ["run_3", "run_10"]}, []
    mixed = benchmark.mixture_overrides(args, work, ["dataset=openfoam", "sampling.geometry_points=400"], split,
                                        [tmp_path / "run_1.zarr"], notes)
    expected = [
        {"name": "family", "dataset": "openfoam", "processed_dir": str(work / "processed"),
         "cache_dir": str(work / "cache"), "raw_dir": str(tmp_path / "fam"), "weight": 1.0,
         "val_runs": ["run_3", "run_10"]},
        {"name": "drivaerml", "dataset": "drivaerml", "processed_dir": str(work / "mixture" / "processed"),
         "cache_dir": str(work / "mixture" / "cache"), "raw_dir": str(tmp_path / "dr"), "weight": 0.5, "val_runs": []}]
    config = benchmark.typed_config(mixed)  # as the in-process stages (cache_data.py, predict.py) read it
    assert [{key: getattr(source, key) for key in e} for source, e in zip(config.data.sources, expected)] == expected
    [override] = OverridesParser.create().parse_overrides([o for o in mixed if o.startswith("data.sources=")])
    assert [dict(e) for e in override.value()] == expected  # as train.py's command line (Hydra) reads it
    assert config.data.nondimensional is True and config.sampling.geometry_points == 300
    assert [o for o in mixed if o.startswith("sampling.geometry_points=")] == ["sampling.geometry_points=300"]
    assert "fewest STL vertices of a drivaerml run" in notes[0]


def test_mixture_arguments_a_later_stage_would_refuse_stop_the_benchmark_before_training(tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    for extra, message in ((["--mixture-with", str(tmp_path / "absent")], "no such folder"),
                           (["--mixture-dataset", "nosuch"], "no profile conf/dataset/nosuch.yaml"),
                           (["--mixture-weight", "0"], "must be positive")):
        args = benchmark.arguments().parse_args(["--family", str(tmp_path), "--mixture-with", str(tmp_path), *extra])
        with pytest.raises(SystemExit, match=message):
            benchmark.check_arguments(args)


def test_the_mixture_column_stands_beside_this_run():
    benchmark = import_benchmark("benchmark_learning")
    report = {"columns": {"this run": {"p": 0.2}, "DoMINO published (DrivAerML)": {"p": 0.101}}}
    record = {"dataset": "drivaerml", "weights": {"family": 1.0, "drivaerml": 0.5}, "wall_s": 12.0,
              "split": {"family": {"train": ["run_1", "run_2"], "val": ["run_3"]},
                        "drivaerml": {"train": ["run_1", "run_2"], "val": []}}}
    benchmark.add_mixture(report, {"p": 0.3}, record)
    assert list(report["columns"]) == ["this run", "mixture (family + drivaerml)", "DoMINO published (DrivAerML)"]
    assert "| pressure rel. L2 (area-weighted) | 0.2000 | 0.3000 | 0.1010 |" in benchmark.main_table(report["columns"])
    assert ("over the family's 2 training bodies (weight 1) and 2 drivaerml runs (weight 0.5); validated and "
            "scored on the 1 held-out bodies") in benchmark.mixture_text(record)


@pytest.mark.slow
def test_the_learning_benchmark_runs_end_to_end_on_eight_openfoam_bodies_and_a_mixture(tmp_path, capsys):
    """The whole benchmark, and its mixture arm with two tiny synthetic DrivAerML runs (in the same
    run: the family's processing, cache and main run are shared)."""
    from synthetic_data import generate_runs
    benchmark = import_benchmark("benchmark_learning")
    family = eight_bodies(tmp_path / "family")
    generate_runs(tmp_path / "drivaerml", 2, preset="tiny", seed=0, dataset="drivaerml")
    tiny = [o for o in TINY if not o.startswith("train.device")] + ["model.parameter_model.base_layer=16"]
    benchmark.main(["--family", str(family), "--work", str(tmp_path / "work"), "--epochs", "1", "--seeds", "3",
                    "--skip-exact",  # its runs are the main run's functions (test_the_sampling_ab_trains_...)
                    "--mixture-with", str(tmp_path / "drivaerml"),
                    "--json", str(tmp_path / "out.json"), "--png", str(tmp_path / "out.png"), "--set", *tiny])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "out.json").read_text())
    assert "command: python benchmarks/benchmark_learning.py --family" in out and "commit: " in out
    split = report["split"]
    assert len(split["held_out"]) == 6 and len(split["train"]) == 2 and not set(split["held_out"]) & set(split["train"])
    assert json.loads((tmp_path / "work" / "split.json").read_text()) == split
    columns = report["columns"]
    assert set(columns) == {"this run", "mixture (family + drivaerml)", "DoMINO published (DrivAerML)",
                            "training mean", "nearest body"}
    check_mixture(report, out)
    for key, label in benchmark.ROWS:
        assert f"| {label} |" in out
        if key in ("p", "wss_x", "wss_y", "wss_z", "cd_r2", "cd_mae_percent", "cl_r2", "cl_mae_percent", "train_s"):
            assert math.isfinite(columns["this run"][key]), key
    for baseline in ("training mean", "nearest body"):
        assert all(math.isfinite(columns[baseline][f"{c}_{k}"]) for c in ("cd", "cl") for k in ("r2", "mae_percent"))
    # the training mean is the mean of the two training bodies' forceCoeffs Cd (one of each source run)
    published = {1: 0.179394, 2: 0.204230}  # tools/openfoam_fixture/README.md, last line of coefficient.dat
    train_cd = [published[1 + int(run.split("_")[1]) % 2] for run in split["train"]]
    assert report["guesses"]["training_mean"][split["held_out"][0]]["cd"] == pytest.approx(np.mean(train_cd), rel=1e-5)
    timing = report["timing"]
    assert timing["uncached"]["ended"] in ("reached the target", "cut at the time cap",
                                           "ran all epochs without reaching it")
    assert math.isfinite(timing["cached"]["reached_s"]) and timing["cached"]["epoch"] == 1
    assert report["sampling_ab"] == {"skipped": "--skip-exact"} and "sampling A/B skipped (--skip-exact)" in out
    assert (tmp_path / "out.png").stat().st_size > 10_000


def check_mixture(report: dict, out: str) -> None:
    """The mixture arm of the end-to-end run: trained on the family's training bodies and both
    DrivAerML runs, scored (finite) on exactly the held-out bodies, its column printed."""
    held_out, mixture = sorted(report["split"]["held_out"]), report["mixture"]
    family = mixture["split"]["family"]
    assert sorted(family["val"]) == held_out and sorted(family["train"]) == sorted(report["split"]["train"])
    assert mixture["split"]["drivaerml"]["val"] == [] and len(mixture["split"]["drivaerml"]["train"]) == 2
    assert sorted(r["run"] for r in mixture["per_run"]) == held_out
    scores = report["columns"]["mixture (family + drivaerml)"]
    for key in ("p", "wss_x", "cd_r2", "cd_mae_percent", "cd_mae", "train_s"):
        assert math.isfinite(scores[key]), key
    assert "data.nondimensional=true" in mixture["overrides"] and "seed=3" in mixture["command"]
    assert "| measure (held-out bodies) | this run | mixture (family + drivaerml) |" in out
    assert "mixture (family + drivaerml): one model" in out


def _run(losses: list[float], every_s: float, stopped: bool = False) -> dict:
    epochs = [{"epoch": e, "val_loss": v, "epoch_s": every_s - 1, "at_s": 5 + e * every_s}
              for e, v in enumerate(losses, start=1)]
    return {"wall_s": epochs[-1]["at_s"] + 1, "stopped": stopped, "epochs": epochs}


def test_an_uncached_run_cut_at_the_cap_is_compared_at_the_loss_it_reached(monkeypatch, tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    cached = _run([0.5, 0.3, 0.2, 0.1], every_s=10)
    asked = {}

    def fake_train(work, name, overrides, stop):
        asked["overrides"], asked["stop"] = overrides, stop
        return _run([0.5, 0.3], every_s=40, stopped=True)

    monkeypatch.setattr(benchmark, "train", fake_train)
    timing = benchmark.cached_against_uncached(tmp_path, ["seed=1"], cached, cap_s=None)
    assert "cache.enabled=false" in asked["overrides"] and timing["cap_s"] == 2 * cached["wall_s"]
    assert timing["cached"] == {"reached_s": 45, "epoch": 4, "wall_s": 46, "epochs_s_to_reach": 36,
                                "reached_uncached_best_s": 25}
    assert timing["uncached"]["ended"] == "cut at the time cap" and timing["uncached"]["reached_best_s"] == 85
    assert "uncached / cached 3.40x" in benchmark.timing_text(timing)
    stop = asked["stop"]
    assert not stop([{"epoch": 1, "val_loss": 0.3}], 10.0)          # neither at the target nor at the cap
    assert stop([{"epoch": 1, "val_loss": 0.3}], 93.0)              # past the cap
    assert stop([{"epoch": 2, "val_loss": 0.1}], 10.0)              # reached the target
    assert not stop([{"epoch": 4, "val_loss": 0.3}], 93.0)          # the last epoch: it ends by itself


def test_the_sampling_ab_trains_each_arm_and_seed_once_and_reuses_the_main_run(monkeypatch, tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    trained = []

    def fake_train(work, name, overrides, stop=None):
        trained.append((name, [o for o in overrides if o.startswith(("seed=", "sampling.exact"))]))
        return _run([0.5, 0.1 if "exact" in name else 0.2], every_s=10)

    rows = [{"run": "run_1", "cd_pred": 0.2, "cd_published": 0.25, "cl_pred": -0.1, "cl_published": -0.2,
             "rel_l2_area_p": 0.3, "rel_l2_area_wx": 0.1, "rel_l2_area_wy": 0.1, "rel_l2_area_wz": 0.1},
            {"run": "run_2", "cd_pred": 0.3, "cd_published": 0.25, "cl_pred": -0.3, "cl_published": -0.3,
             "rel_l2_area_p": 0.5, "rel_l2_area_wx": 0.1, "rel_l2_area_wy": 0.1, "rel_l2_area_wz": 0.1}]
    monkeypatch.setattr(benchmark, "train", fake_train)
    monkeypatch.setattr(benchmark, "predict_held_out", lambda work, name, overrides: rows)
    main = _run([0.5, 0.3], every_s=10)
    ab = benchmark.sampling_ab(tmp_path, ["x=1"], [7, 8], main, {"p": 0.25, "cd_mae_percent": 9.0})
    assert trained == [("exact_seed7", ["seed=7", "sampling.exact=true"]), ("default_seed8", ["seed=8"]),
                       ("exact_seed8", ["seed=8", "sampling.exact=true"])]
    assert ab["arms"]["default"][7] == {"val_loss": 0.3, "p": 0.25, "cd_mae_percent": 9.0}  # the main run's
    assert ab["arms"]["exact"][8] == {"val_loss": 0.1, "p": pytest.approx(0.4), "cd_mae_percent": pytest.approx(20.0)}
    assert ab["summary"]["val_loss"]["default_outside_exact_range_by"] == pytest.approx(0.15)
    assert "| final validation loss | 0.3000 / 0.1000 | 0.2000 / 0.1000 |" in benchmark.ab_table(ab, [7, 8])
