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


def test_the_oracle_reads_the_parameters_and_names_those_the_family_holds_constant(tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    path = tmp_path / "parameters.csv"
    path.write_text("run,length,width,z_roof,slant_deg,Cd\n"
                    "run_1,3.0,1.75,1.1,10,1.2\nrun_2,4.0,1.75,1.7,20,1.5\n3,3.2,1.75,1.6,30,1.4\n")
    notes = []
    table = benchmark.family_parameters(path, ["run_1", "run_2", "run_3"], notes)
    assert sorted(table) == ["run_1", "run_2", "run_3"] and list(table["run_3"]) == [3.2, 1.75, 1.6]
    assert notes == ["oracle: a Gaussian process on length, z_roof (parameters.csv; constant in this family: width)"]
    assert benchmark.family_parameters(path, ["run_1", "run_4"], notes) is None
    assert "oracle baseline skipped: parameters.csv has no row for run_4" in notes[-1]
    assert benchmark.family_parameters(tmp_path / "absent.csv", ["run_1"], notes) is None


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


def test_the_mixture_trains_on_the_splits_training_bodies_validates_on_its_validation_bodies_and_leaves_test_out(
        monkeypatch, tmp_path):
    """The data.sources override, read as train.py's Hydra and the in-process composer read it: the
    family's runs its training and validation bodies, validated on exactly the latter, the second
    dataset all training (val_runs []), quoted paths with a space; the split's test runs and scaling
    factors dropped (the mixture scales over both sources); geometry points lowered (once) to its
    fewest STL vertices."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    benchmark = import_benchmark("benchmark_learning")
    work = tmp_path / "my work"
    args = benchmark.arguments().parse_args(["--family", str(tmp_path / "fam"), "--work", str(work),
                                             "--mixture-with", str(tmp_path / "dr"), "--mixture-weight", "0.5"])
    monkeypatch.setattr(benchmark, "run_attributes", lambda run: {"counts": {"stl_points": 300}})
    split, notes = {"train": ["run_1", "run_2"], "val": ["run_3"], "test": ["run_10"]}, []
    own = ["dataset=openfoam", "sampling.geometry_points=400", "train.test_runs=[run_10]", "train.test_fraction=0",
           f"sampling.scaling_factors={tmp_path / 'f.json'}"]
    mixed = benchmark.mixture_overrides(args, work, own, split, [tmp_path / "run_1.zarr"], notes)
    expected = [
        {"name": "family", "dataset": "openfoam", "processed_dir": str(work / "processed"),
         "cache_dir": str(work / "cache"), "raw_dir": str(tmp_path / "fam"), "weight": 1.0,
         "runs": ["run_1", "run_2", "run_3"], "val_runs": ["run_3"]},
        {"name": "drivaerml", "dataset": "drivaerml", "processed_dir": str(work / "mixture" / "processed"),
         "cache_dir": str(work / "mixture" / "cache"), "raw_dir": str(tmp_path / "dr"), "weight": 0.5,
         "runs": None, "val_runs": []}]
    config = benchmark.typed_config(mixed)  # as the in-process stages (cache_data.py, predict.py) read it
    assert [{key: getattr(source, key) for key in e} for source, e in zip(config.data.sources, expected)] == expected
    [override] = OverridesParser.create().parse_overrides([o for o in mixed if o.startswith("data.sources=")])
    assert [dict(e) for e in override.value()] == expected  # as train.py's command line (Hydra) reads it
    assert config.data.nondimensional is True and config.sampling.geometry_points == 300
    assert config.train.test_runs is None and config.sampling.scaling_factors is None
    assert config.train.test_fraction == 0  # conf/demo.yaml's test fraction does not hold family bodies out
    assert [o for o in mixed if o.startswith("sampling.geometry_points=")] == ["sampling.geometry_points=300"]
    assert "fewest STL vertices of a drivaerml run" in notes[0]


def test_mixture_arguments_a_later_stage_would_refuse_stop_the_benchmark_before_training(tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    for extra, message in ((["--mixture-with", str(tmp_path / "absent")], "no such folder"),
                           (["--mixture-dataset", "nosuch"], "no profile conf/dataset/nosuch.yaml"),
                           (["--mixture-weight", "0"], "must be positive"), (["--test", "2"], "at least 3 test")):
        args = benchmark.arguments().parse_args(["--family", str(tmp_path), "--mixture-with", str(tmp_path), *extra])
        with pytest.raises(SystemExit, match=message):
            benchmark.check_arguments(args)


def test_a_training_run_whose_split_is_not_the_benchmarks_stops_it(tmp_path):
    benchmark = import_benchmark("benchmark_learning")
    split = {"train": ["run_1", "run_2"], "val": ["run_3"], "test": ["run_4"]}
    (tmp_path / "split.json").write_text(json.dumps({"train": ["run_1.zarr", "run_2.zarr"], "val": ["run_3.zarr"],
                                                     "test": ["run_4.zarr"]}))
    benchmark.check_split(tmp_path, split)
    (tmp_path / "split.json").write_text(json.dumps({"train": ["run_1.zarr", "run_2.zarr", "run_4.zarr"],
                                                     "val": ["run_3.zarr"]}))
    with pytest.raises(SystemExit, match="its train runs .* are not the split's"):
        benchmark.check_split(tmp_path, split)


def test_the_tables_print_mean_and_spread_over_splits_and_the_ratio_to_the_best_baseline():
    report = import_benchmark("learning_report")
    summary = {"this run": {"p": {"mean": 0.05, "sd": 0.01}, "cd_mae_percent": {"mean": 0.5, "sd": 0.1}},
               "nearest body (surface distance)": {"p": {"mean": 0.2, "sd": 0.02},
                                                   "cd_mae_percent": {"mean": 3.0, "sd": 0.5}},
               "GP (descriptors)": {"cd_mae_percent": {"mean": 1.25, "sd": 0.2}},
               "GP (family parameters, oracle)": {"cd_mae_percent": {"mean": 0.25, "sd": 0.05}}}
    table = report.summary_table(summary, {"p": 0.101}, splits=3)
    assert "| pressure rel. L2 (area-weighted) | 0.0500 ± 0.0100 | 0.2000 ± 0.0200 | - | - | 0.1010 |" in table
    text = report.ratios_text(summary)
    assert "pressure L2 0.0500 = 0.25 x the nearest body's carried fields' 0.2000" in text
    assert "Cd error 0.50% = 0.40 x the best baseline's (GP (descriptors): 1.25%)" in text
    assert "2.00 x the oracle's (GP (family parameters, oracle): 0.25%)" in text
    record = {"dataset": "drivaerml", "family_source": "family", "weights": {"family": 1.0, "drivaerml": 0.5},
              "wall_s": 12.0, "per_run": [{}, {}], "split": {"family": {"train": ["run_1", "run_2"], "val": ["run_3"]},
                                                         "drivaerml": {"train": ["run_1", "run_2"], "val": []}}}
    assert ("over the family's 2 training bodies (weight 1) and 2 drivaerml runs (weight 0.5); validated on the 1 "
            "validation bodies, scored on the first split's 2 test bodies") in report.mixture_text(record)


@pytest.mark.slow
def test_the_learning_benchmark_runs_end_to_end_on_eight_openfoam_bodies_and_a_mixture(tmp_path, capsys):
    """The whole benchmark over two splits trained side by side, and its mixture arm with two tiny synthetic DrivAerML
    runs (in the same run: the family's processing, cache and first split's run are shared)."""
    from synthetic_data import generate_runs
    benchmark = import_benchmark("benchmark_learning")
    report_module = import_benchmark("learning_report")
    family = eight_bodies(tmp_path / "family")
    generate_runs(tmp_path / "drivaerml", 2, preset="tiny", seed=0, dataset="drivaerml")
    tiny = [o for o in TINY if not o.startswith("train.device")] + ["model.parameter_model.base_layer=16"]
    work = tmp_path / "work"
    benchmark.main(["--family", str(family), "--work", str(work), "--epochs", "2", "--seeds", "3",
                    "--splits", "2", "--val", "2", "--test", "3", "--train-jobs", "2",
                    "--skip-exact",  # its runs are the main run's functions (test_the_sampling_ab_trains_...)
                    "--mixture-with", str(tmp_path / "drivaerml"),
                    "--json", str(tmp_path / "out.json"), "--png", str(tmp_path / "out.png"), "--set", *tiny])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "out.json").read_text())
    assert "command: python benchmarks/benchmark_learning.py --family" in out and "commit: " in out
    assert "regime: 8 runs (solver not recorded (no family.json)): Re not known" in out  # no family.json here
    share = report["regime"]["cd_pressure_share_spread"]  # the two fixture runs' forceCoeffs parts, copied 4 times
    assert 0 < share["min"] < share["max"] < 1
    assert report["regime"]["cd_spread"]["max"] == pytest.approx(0.20423, rel=1e-4)
    for split in report["splits"]:  # trained side by side first, then reused as each split is measured
        assert out.count(f"reusing {work / 'train' / split['name']}\n") == 1
    assert report["sizes"] == {"train": 3, "val": 2, "test": 3} and len(report["splits"]) == 2
    tested = [set(split["roles"]["test"]) for split in report["splits"]]
    assert not tested[0] & tested[1]  # no body tested twice
    for split in report["splits"]:
        check_split_record(split, work)
    assert json.loads((work / "splits.json").read_text())[1]["test"] == report["splits"][1]["roles"]["test"]
    summary = report["summary"]
    assert set(summary) == {"this run", *report_module.BASELINES.values()}
    for key, label in report_module.ROWS:
        assert f"| {label} |" in out
        assert math.isfinite(summary["this run"][key]["mean"]), key
    for name in report_module.BASELINES.values():
        assert all(math.isfinite(summary[name][f"{c}_{k}"]["mean"]) for c in ("cd", "cl") for k in ("mae", "r2"))
    # the training mean of the first split: the mean of its three training bodies' forceCoeffs Cd
    first = report["splits"][0]
    published = {1: 0.179394, 2: 0.204230}  # tools/openfoam_fixture/README.md, last line of coefficient.dat
    train_cd = [published[1 + int(run.split("_")[1]) % 2] for run in first["roles"]["train"]]
    assert first["guesses"]["training_mean"][first["roles"]["test"][0]]["cd"] == pytest.approx(np.mean(train_cd),
                                                                                               rel=1e-5)
    # eight copies of two bodies: each test body's nearest training body is a copy of it, its fields exact
    for run, guess in first["guesses"]["nearest_body"].items():
        assert int(run.split("_")[1]) % 2 == int(guess["run"].split("_")[1]) % 2
        assert first["baseline_fields"]["nearest_body"][run]["p"] == pytest.approx(0.0, abs=1e-6)
    check_mixture(report, out)
    timing = report["timing"]
    assert timing["uncached"]["ended"] in ("reached the target", "cut at the time cap",
                                           "ran all epochs without reaching it")
    assert math.isfinite(timing["cached"]["reached_s"])
    assert report["sampling_ab"] == {"skipped": "--skip-exact"} and "sampling A/B skipped (--skip-exact)" in out
    assert (tmp_path / "out.png").stat().st_size > 10_000


def check_split_record(split: dict, work: Path) -> None:
    """One split of the end-to-end run: train.py trained and validated on its roles, the chosen
    checkpoint is the lowest validation loss, and predictions were made on its test bodies only."""
    roles = split["roles"]
    written = json.loads((work / "train" / split["name"] / "split.json").read_text())
    assert {role: sorted(r.removesuffix(".zarr") for r in written[role]) for role in roles} == {
        role: sorted(runs) for role, runs in roles.items()}
    epochs = [r for r in map(json.loads, (work / "train" / split["name"] / "epochs.jsonl").read_text().splitlines())
              if r.get("kind") == "epoch"]
    best = min(epochs, key=lambda r: r["val_loss"])
    assert (split["chosen"]["epoch"], split["chosen"]["val_loss"]) == (best["epoch"], best["val_loss"])
    assert sorted(r["run"] for r in split["per_run"]) == sorted(roles["test"])
    assert sorted(split["guesses"]["gp_descriptors"]) == sorted(roles["test"])
    assert math.isfinite(split["validation"]["p"]) and math.isfinite(split["columns"]["this run"]["p"])


def check_mixture(report: dict, out: str) -> None:
    """The mixture arm of the end-to-end run: trained on the first split's training bodies and both
    DrivAerML runs, validated on its validation bodies, scored (finite) on exactly its test bodies."""
    roles, mixture = report["splits"][0]["roles"], report["mixture"]
    family = mixture["split"]["family"]
    assert sorted(family["val"]) == sorted(roles["val"]) and sorted(family["train"]) == sorted(roles["train"])
    assert mixture["split"]["drivaerml"]["val"] == [] and len(mixture["split"]["drivaerml"]["train"]) == 2
    assert sorted(r["run"] for r in mixture["per_run"]) == sorted(roles["test"])
    for key in ("p", "wss_x", "cd_r2", "cd_mae_percent", "cd_mae", "train_s"):
        assert math.isfinite(mixture["columns"][key]), key
    assert "data.nondimensional=true" in mixture["overrides"] and "seed=3" in mixture["command"]
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
    report = import_benchmark("learning_report")
    trained = []

    def fake_train(work, name, overrides, stop=None):
        trained.append((name, [o for o in overrides if o.startswith(("seed=", "sampling.exact"))]))
        return _run([0.5, 0.1], every_s=10)

    def rows(p: float, cd: float) -> list[dict]:
        return [{"run": "run_1", "cd_pred": cd, "cd_published": 0.25, "cl_pred": -0.1, "cl_published": -0.2,
                 "p": p, "wss_x": 0.1, "wss_y": 0.1, "wss_z": 0.1}]

    predicted = []

    def fake_predict(work, name, overrides, role):
        predicted.append((name, role))
        return rows(0.4, 0.3) if "exact" in name else rows(0.25, 0.2)

    best = {"split0_default_seed7": 0.3, "split0_exact_seed7": 0.1, "split0_default_seed8": 0.2,
            "split0_exact_seed8": 0.1}
    monkeypatch.setattr(benchmark, "train", fake_train)
    monkeypatch.setattr(benchmark, "predict_role", fake_predict)
    monkeypatch.setattr(benchmark, "chosen_checkpoint", lambda folder: {"val_loss": best[folder.name], "epoch": 2})
    ab = benchmark.sampling_ab(tmp_path, ["x=1"], [7, 8], _run([0.5, 0.3], every_s=10))
    assert trained == [("split0_exact_seed7", ["seed=7", "sampling.exact=true"]), ("split0_default_seed8", ["seed=8"]),
                       ("split0_exact_seed8", ["seed=8", "sampling.exact=true"])]  # the main run is not trained again
    assert predicted == [(name, "test") for name in best]  # each arm's chosen model, on the test bodies, once
    assert ab["arms"]["default"][7] == {"val_loss": 0.3, "p": 0.25, "cd_mae_percent": pytest.approx(20.0)}
    assert ab["arms"]["exact"][8] == {"val_loss": 0.1, "p": pytest.approx(0.4), "cd_mae_percent": pytest.approx(20.0)}
    assert ab["summary"]["val_loss"]["default_outside_exact_range_by"] == pytest.approx(0.15)
    assert "| best validation loss | 0.3000 / 0.1000 | 0.2000 / 0.1000 |" in report.ab_table(ab, [7, 8])
