"""The quality checks: 30 tiny synthetic runs with the six known defects of synthetic/defects.py,
each rejected for its own reason and no clean run rejected; the robust scores, the coefficient
check, the choice of convention, the curator's limits and the selection cache_data.py and
train.py make."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import matplotlib.pyplot as plt
from conftest import DEFAULTS, import_benchmark, typed_config

from domino_pipeline.configuration.force_integration import ForceConvention
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.processed.run_quality import (
    Selection,
    clipped_magnitude,
    coefficient_mismatches,
    judge,
    minimum_scale,
    robust_scores,
    quality_selection,
)
from domino_pipeline.processed.runs import list_runs, load_run, read_options_from_config
from domino_pipeline.inputs.statistics.table_writer import write_statistics_table
from domino_pipeline.processed.statistics_table import read_statistics_table
from domino_pipeline.inputs.processing.process_runs import process_all
from synthetic_data import generate_runs
from synthetic.defects import inject_defects, parse_defects

N_RUNS = 30
# synthetic_data.py's conventions: normals out of the car, wall shear on the car
SYNTHETIC = DEFAULTS  # the generator writes DrivAerML's conventions (OpenFOAM's)
OTHER = typed_config("dataset.flow.normals=out_of_body", "dataset.flow.wall_shear=on_body")
# the words each defect's reasons must hold, and those they must not
VOLUME = ["volume count", "volume UMeanTrim", "volume pMeanTrim", "volume nutMeanTrim"]
SURFACE = ["surface pMeanTrim", "surface wallShearStressMeanTrim", "surface_to_stl_volume", "surface_stl_bounds_gap"]
EXPECTED = {
    "scaled_fields": (["surface pMeanTrim std", "volume UMeanTrim_x mean", "Cd "], []),
    "foreign_boundary": (["surface_stl_bounds_gap", "Cd "], VOLUME),
    "reversed_boundary": (["surface_to_stl_volume", "Cd -"], VOLUME),
    "truncated_volume": (["volume count 800"], ["Cd ", "Cl ", *SURFACE]),
    "foreign_forces": (["Cd ", "vs published"], VOLUME + SURFACE),
    "offset_field": (["surface pMeanTrim mean"], ["Cd ", "Cl ", *VOLUME]),
}


@pytest.fixture(scope="module")
def defective(tmp_path_factory) -> dict:
    """30 tiny runs, the six defects on six of them, processed with the synthetic conventions and
    tabled (about 10 s on two free cores)."""
    work = tmp_path_factory.mktemp("quality")
    generate_runs(work / "raw", N_RUNS, preset="tiny", seed=0)
    defects = inject_defects(work / "raw", parse_defects("all", N_RUNS), DEFAULTS.dataset)
    options = ProcessOptions.from_config(SYNTHETIC.dataset, SYNTHETIC.physics, SYNTHETIC.process)
    results = process_all(work / "raw", work / "processed", options, num_processes=1)
    assert all(r.status == "processed" for r in results), [r for r in results if r.status != "processed"]
    write_statistics_table(work / "processed", SYNTHETIC.dataset,
                           read_options_from_config(SYNTHETIC.data, SYNTHETIC.physics), work / "raw")
    return {"processed": work / "processed", "raw": work / "raw", "defects": defects,
            "rows": read_statistics_table(work / "processed")}


@pytest.mark.slow
def test_each_defect_is_rejected_for_its_reason_and_no_clean_run_is(defective):
    verdicts = judge(defective["rows"], SYNTHETIC.data.quality, SYNTHETIC.dataset)
    assert sorted(defective["defects"].values()) == sorted(EXPECTED)
    assert set(verdicts.rejected) == set(defective["defects"]), verdicts.rejected
    assert verdicts.notes == [] and len(verdicts.checked) == N_RUNS
    for run, defect in defective["defects"].items():
        reasons = " | ".join(verdicts.rejected[run])
        present, absent = EXPECTED[defect]
        assert all(word in reasons for word in present), (defect, reasons)
        assert not any(word in reasons for word in absent), (defect, reasons)
    clean = set(verdicts.scores) - set(defective["defects"])
    worst = max(abs(z) for run in clean for z in verdicts.scores[run].values())
    assert worst < SYNTHETIC.data.quality.robust_threshold / 2  # a margin, not a near miss


@pytest.mark.slow
def test_a_profile_with_the_other_conventions_is_named_and_the_same_runs_rejected(defective):
    verdicts = judge(defective["rows"], OTHER.data.quality, OTHER.dataset)
    assert len(verdicts.notes) == 1 and verdicts.notes[0].startswith(
        f"the published coefficients of {N_RUNS - 4} of {N_RUNS} runs fit normals into_body and wall shear on_fluid, "
        "of 0 the profile's (out_of_body, on_body)")
    assert set(verdicts.rejected) == set(defective["defects"])


@pytest.mark.slow
def test_cache_and_training_selection_names_every_excluded_run(defective):
    runs = list_runs(defective["processed"])
    selection = quality_selection(runs, replace(SYNTHETIC.data, processed_dir=str(defective["processed"])), SYNTHETIC.dataset)
    assert len(selection.kept) == N_RUNS - 6 and set(selection.excluded) == set(defective["defects"])
    line, *details = selection.summary().splitlines()
    assert line.startswith("6 runs excluded by quality: run_3 (Cd ") and "more below), run_8 (Cd " in line
    assert "run_18 (volume count 800, 900 sigma)" in line and "run_23 (Cd " in line
    every = {d.split(":")[0].strip(): d.split(": ", 1)[1] for d in details}  # every reason of those with more than 2
    assert "run_18" not in every and every["run_3"] == "; ".join(selection.excluded["run_3"])
    assert len(selection.excluded["run_3"]) > 20  # every field scaled: every field's statistics are off
    quality = replace(SYNTHETIC.data.quality, include=["run_18", "run_99"])
    data = replace(SYNTHETIC.data, processed_dir=str(defective["processed"]), quality=quality)
    taken_back = quality_selection(runs, data, SYNTHETIC.dataset)
    assert "run_18" not in taken_back.excluded and len(taken_back.kept) == N_RUNS - 5
    assert "quality: run_18 used though rejected (data.quality.include): volume count 800" in taken_back.summary()
    assert "data.quality.include names no run here: ['run_99']" in taken_back.summary()
    off = quality_selection(runs, replace(data, quality=replace(quality, enabled=False)), SYNTHETIC.dataset)
    assert off.kept == runs and off.summary() == "quality: checks off (data.quality.enabled=false)"


@pytest.mark.slow
def test_the_curator_limits_reject_the_scaled_run_only(defective):
    quality = replace(SYNTHETIC.data.quality, robust_threshold=1e9, coefficient_tolerance=1e9,
                      curator=replace(SYNTHETIC.data.quality.curator, enabled=True))
    verdicts = judge(defective["rows"], quality, SYNTHETIC.dataset)
    scaled = next(run for run, defect in defective["defects"].items() if defect == "scaled_fields")
    assert list(verdicts.rejected) == [scaled]
    # the curator's own computation on the stored array: |values| within mean +- 7 std, their max
    fields = load_run(defective["processed"] / f"{scaled}.zarr", ["volume_fields"])["volume_fields"]
    u = fields[:, 0].astype(np.float64)
    largest = np.abs(u[np.abs(u - u.mean()) <= 7 * u.std()]).max()
    assert f"volume UMeanTrim_x |max| {largest:.3g} > 3.5 (physicsnemo-curator's limit)" in verdicts.rejected[scaled]


@pytest.mark.slow
def test_the_defects_file_names_the_runs(defective):
    assert json.loads((defective["raw"] / "defects.json").read_text()) == defective["defects"]


def test_robust_scores():
    z, median, scale = robust_scores([1.0, 2.0, 3.0, 4.0, 100.0, None])
    assert (median, scale) == (3.0, 1.4826)
    np.testing.assert_allclose(z[:5], (np.array([1, 2, 3, 4, 100]) - 3) / 1.4826)
    assert np.isnan(z[5])
    z, _, scale = robust_scores([8000, 8000, 8000, 800])  # no spread: the median's 0.1% is the unit
    assert scale == 8.0 and z[3] == -900
    z, _, _ = robust_scores([0, 0, 0, 12])  # nothing to scale by: any other value is an outlier
    assert list(z) == [0, 0, 0, np.inf]
    assert robust_scores([None])[1] != robust_scores([None])[1]  # NaN


def test_location_statistics_are_scored_in_a_fiftieth_of_the_fields_spread_at_least():
    # ten runs whose pressure is bunched against the stagnation value: p99 all but equal, MAD 0
    rows = [{"run": f"run_{i}", "version": 1.0, "surface.fields.p.p99": 0.7, "surface.fields.p.std_trimmed": 0.2 + 0.01 * i,
             "surface.fields.p.mean_trimmed": -0.2} for i in range(10)]
    spread = np.median([0.2 + 0.01 * i for i in range(10)])
    assert minimum_scale("surface.fields.p.p99", rows) == pytest.approx(0.02 * spread)
    assert minimum_scale("surface.fields.p.mean_trimmed", rows) == pytest.approx(0.02 * spread)
    assert minimum_scale("surface.fields.p.std_trimmed", rows) == 0.0
    assert minimum_scale("consistency.surface_stl_bounds_gap", rows) == 1e-3
    rows[1]["surface.fields.p.p99"] = 0.69  # 0.01 below the others: 2 units, not a defect
    rows[2]["surface.fields.p.mean_trimmed"] = 0.3  # offset by half a dynamic pressure: 100 units
    verdicts = judge(rows, DEFAULTS.data.quality, DEFAULTS.dataset)
    assert verdicts.scores["run_1"]["surface.fields.p.p99"] == pytest.approx(-0.01 / (0.02 * spread))
    assert verdicts.rejected == {"run_2": [f"surface p mean_trimmed 0.3, {0.5 / (0.02 * spread):.0f} sigma"]}


def _row(cd: float, cl: float, pressure: list[float], shear: list[float], area: float = 2.0) -> dict:
    return {"run": "run_1", "version": 1.0, "surface.force_sums.pressure.x": pressure[0],
            "surface.force_sums.pressure.y": pressure[1], "surface.force_sums.pressure.z": pressure[2],
            "surface.force_sums.shear.x": shear[0], "surface.force_sums.shear.y": shear[1],
            "surface.force_sums.shear.z": shear[2], "published.own.cd": cd, "published.own.cl": cl,
            "published.own_area": area}


def test_coefficient_mismatches_measure_lift_against_drag():
    flow = replace(DEFAULTS.dataset.flow, velocity=10.0)  # q = 50 (kinematic), q A = 100
    convention = ForceConvention("into_body", "on_fluid")
    # into the body, on the fluid: F = P - S = (30, 0, 1)
    row = _row(0.30, 0.0, [31.0, 0.0, 1.0], [1.0, 0.0, 0.0])
    assert coefficient_mismatches(row, flow, convention, 0.02) == {"own": "Cl 0.01 vs published 0 (own references)"}
    assert coefficient_mismatches(row, flow, convention, 0.04) == {}  # 0.01 / 0.30 < 4%
    assert coefficient_mismatches(_row(0.3, 0.01, [31.0, 0, 1.0], [1.0, 0, 0]), flow, convention, 0.02) == {}
    assert coefficient_mismatches(_row(0.27, 0.05, [31.0, 0, 1.0], [1.0, 0, 0]), flow, convention, 0.02) == \
        {"own": "Cd 0.3 vs published 0.27, Cl 0.01 vs published 0.05 (own references)"}
    assert coefficient_mismatches(_row(0.3, 0.01, [-31.0, 0, -1.0], [1.0, 0, 0]), flow,
                                  ForceConvention("out_of_body", "on_fluid"), 0.02) == {}


def test_the_curator_clip_is_the_band_when_values_lie_beyond_it():
    row = {"p.min": -1.0, "p.max": 50.0, "p.mean": 0.0, "p.std": 1.0}
    assert clipped_magnitude(row, "p", 7.0) == 7.0
    assert clipped_magnitude(row, "p", 100.0) == 50.0
    assert clipped_magnitude({}, "p", 7.0) is None


def test_unreadable_and_unchecked_runs(tmp_path):
    rows = [{"run": "run_1", "error": "run_1.npz: unreadable"}]
    verdicts = judge(rows, DEFAULTS.data.quality, DEFAULTS.dataset)
    assert verdicts.rejected == {"run_1": ["unreadable: run_1.npz: unreadable"]}
    data = replace(DEFAULTS.data, processed_dir=str(tmp_path))
    selection = quality_selection([tmp_path / "run_1.zarr"], data, DEFAULTS.dataset)
    assert selection.kept == [tmp_path / "run_1.zarr"] and selection.unchecked == ["run_1"]
    assert "no statistics.csv in" in selection.summary()
    with pytest.raises(ValueError, match=r"every run is excluded by quality \(1 run excluded by quality: run_1 \(x\)"):
        Selection([], excluded={"run_1": ["x"]}).require_some(tmp_path)


@pytest.mark.slow
def test_the_report_draws_and_names_every_rejected_run(defective, tmp_path):
    dataset_report = import_benchmark("dataset_report")
    out = tmp_path / "report"
    code = dataset_report.main(["--out", str(out), f"data.processed_dir={defective['processed']}",
                                f"data.raw_dir={defective['raw']}"])
    result = json.loads((out / "quality.json").read_text())
    assert code == 0 and set(result["rejected"]) == set(defective["defects"])
    assert set(result["named_in_figure"]) == set(defective["defects"])  # each marked where it is wrong
    image = plt.imread(out / "dataset_report.png")
    assert image.shape[0] > 500 and image.shape[1] > 1000
    assert read_statistics_table(out) == read_statistics_table(defective["processed"])
