"""tools/openfoam_family without OpenFOAM: the Latin hypercube, the convergence verdict on log and
coefficient.dat texts, the resume bookkeeping, and a whole build whose OpenFOAM steps are
stand-ins that write the files the real ones write."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "openfoam_family"))
import alignment_study  # noqa: E402
import bookkeeping  # noqa: E402
import build_family  # noqa: E402
import convergence  # noqa: E402
import drag_shares  # noqa: E402
import sampling  # noqa: E402

sys.path.remove(str(ROOT / "tools" / "openfoam_family"))


def test_latin_hypercube_puts_one_point_in_each_stratum_of_each_column():
    points = sampling.latin_hypercube(16, 5, np.random.default_rng(0))
    assert points.shape == (16, 5) and ((points >= 0) & (points < 1)).all()
    for column in points.T:
        assert sorted(np.floor(column * 16).astype(int)) == list(range(16))
    again = sampling.latin_hypercube(16, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(points, again)
    assert not np.array_equal(points, sampling.latin_hypercube(16, 5, np.random.default_rng(1)))
    with pytest.raises(ValueError, match="n and dims must be >= 1"):
        sampling.latin_hypercube(0, 5, np.random.default_rng(0))


@pytest.mark.parametrize("name", sorted(sampling.RANGES))
def test_sampled_shapes_lie_in_their_ranges_and_make_closed_bodies(name):
    ranges = sampling.RANGES[name]
    shapes = sampling.sample_parameters(8, seed=3, ranges=ranges)
    for p in ranges:
        values = [s[p.field] for s in shapes]
        assert p.low <= min(values) and max(values) <= p.high, p.field
        assert max(values) - min(values) > 0.5 * (p.high - p.low) or p.low == p.high  # 8 strata
    for shape in shapes:
        points, tris, _ = sampling.make_case.body_triangles(sampling.variant(shape))
        edges = np.sort(np.concatenate([tris[:, [0, 1]], tris[:, [1, 2]], tris[:, [2, 0]]]), axis=1)
        assert (np.unique(edges, axis=0, return_counts=True)[1] == 2).all()  # watertight
    with pytest.raises(ValueError, match=r"unknown shape parameters \['wheels'\]"):
        sampling.variant({**shapes[0], "wheels": 4.0})


def test_wide_ranges_widen_the_proportions_and_keep_the_rest():
    car, wide = ({p.field: p for p in sampling.RANGES[k]} for k in ("car", "wide"))
    assert list(car) == list(wide)
    widened = {f for f in car if (wide[f].low, wide[f].high) != (car[f].low, car[f].high)}
    assert widened == {"length", "width", "z_roof"}
    assert all(wide[f].low < car[f].low and car[f].high < wide[f].high for f in widened)
    assert max(p.high for p in sampling.RANGES["wide"] if p.field == "z_belt") < wide["z_roof"].low  # a cabin on every body


def test_five_ranges_vary_five_parameters_and_fix_the_rest_at_their_middle():
    car, wide, five = ({p.field: p for p in sampling.RANGES[k]} for k in ("car", "wide", "five"))
    assert list(five) == list(car)
    varied = {f for f, p in five.items() if p.low < p.high}
    assert varied == set(sampling.VARIED_FIVE) == {"length", "z_roof", "nose_exponent", "tail_exponent", "cabin_end"}
    assert all((five[f].low, five[f].high) == (wide[f].low, wide[f].high) for f in varied)
    assert all(five[f].low == five[f].high == round((car[f].low + car[f].high) / 2, 6) for f in set(five) - varied)
    shapes = sampling.sample_parameters(6, seed=0, ranges=sampling.RANGES["five"])
    assert all(s["width"] == 1.75 and s["cabin_peak"] == 0.5 for s in shapes)


def test_derived_angles_of_a_symmetric_cabin_are_equal():
    shape = {"z_roof": 1.3, "z_belt": 0.8, "cabin_start": 0.2, "cabin_end": 0.7, "cabin_peak": 0.5, "length": 2.0}
    angles = sampling.derived_angles(shape)  # rise 0.5 over 0.5 m on each side: 45 degrees
    assert angles == {"windscreen_angle_deg": 45.0, "slant_angle_deg": 45.0}


def _log(residuals: list[dict[str, float]]) -> str:
    lines = ["Starting time loop", ""]
    for i, step in enumerate(residuals, start=1):
        lines += [f"Time = {i}", ""]
        for name, value in step.items():
            lines.append(f"smoothSolver:  Solving for {name}, Initial residual = {value}, Final residual = 1e-9, "
                         "No Iterations 2")
        lines.append("ExecutionTime = 1 s  ClockTime = 1 s")
    return "\n".join(lines) + "\nEnd\n"


def _coefficients(cd: np.ndarray) -> str:
    header = "# Force coefficients\n# magUInf           : 3.888900000000e+01\n#\n# Time              \tCd\tCs\tCl\n"
    return header + "".join(f"{i + 1}\t{v:.12e}\t0\t{-0.1:.12e}\n" for i, v in enumerate(cd))


def test_final_residuals_take_each_fields_first_solve_of_the_last_iteration():
    log = _log([{"Ux": 1.0, "p": 0.5}, {"Ux": 2e-6, "p": 3e-6}])
    log = log.replace("End", "GAMG:  Solving for p, Initial residual = 0.9, Final residual = 1e-9\nEnd")
    assert convergence.final_residuals(log) == {"Ux": 2e-6, "p": 3e-6}
    with pytest.raises(ValueError, match="no 'Time = ' iteration"):
        convergence.final_residuals("nothing here")


def test_a_flat_cd_and_small_residuals_converge_and_a_drifting_cd_does_not():
    steps = [{"Ux": 1e-6, "p": 2e-6}] * 3
    flat = 0.3 + 1e-3 * np.exp(-np.arange(500) / 30.0)
    verdict = convergence.judge(_log(steps), _coefficients(flat))
    assert verdict.converged and verdict.reason == "ok" and verdict.iterations == 500
    assert verdict.cd == pytest.approx(flat[-1]) and verdict.cd_rel_range == pytest.approx(
        (flat[-100:].max() - flat[-100:].min()) / flat[-100:].mean())
    drifting = 0.3 + 0.01 * np.sin(np.arange(500) / 10.0)  # +-3% over the last 100 iterations
    late = convergence.judge(_log([{"Ux": 1e-6, "p": 5e-3}]), _coefficients(drifting),
                             convergence.Criteria(residual_tol=1e-4, cd_tol=0.005))
    assert not late.converged
    assert late.reason.startswith("p residual 5.00e-03 >= 0.0001; Cd varies ") and "over the last 20%" in late.reason


def test_coefficient_columns_read_the_header_and_refuse_a_ragged_file():
    columns = convergence.coefficient_columns(_coefficients(np.array([0.5, 0.4])))
    assert list(columns) == ["Time", "Cd", "Cs", "Cl"]
    np.testing.assert_array_equal(columns["Cd"], [0.5, 0.4])
    with pytest.raises(ValueError, match="no column header"):
        convergence.coefficient_columns("1 2 3\n")
    with pytest.raises(ValueError, match="3 values per row, 4 column names"):
        convergence.coefficient_columns("# Time Cd Cs Cl\n1 2 3\n")


def test_bookkeeping_finishes_a_case_only_with_its_record_and_folder(tmp_path):
    root, work = tmp_path / "family", tmp_path / "work"
    for index, converged in ((1, True), (2, False)):
        bookkeeping.staging_folder(root, index).mkdir(parents=True)
        (bookkeeping.staging_folder(root, index) / "body.stl").write_text("x")
        bookkeeping.commit_case(root, index, {"index": index, "converged": converged})
    assert (root / "run_1" / "body.stl").is_file() and (root / "not_converged" / "run_2" / "body.stl").is_file()
    bookkeeping.staging_folder(root, 3).mkdir()  # killed while staging
    bookkeeping.write_atomic(bookkeeping.record_path(root, 4), json.dumps({"index": 4, "converged": True}))
    assert bookkeeping.pending(root, [1, 2, 3, 4, 5]) == [3, 4, 5]  # 4: a record, no folder yet
    (work / "case_3").mkdir(parents=True)
    bookkeeping.clear_half_done(root, 3, work)
    bookkeeping.clear_half_done(root, 4, work)
    assert not bookkeeping.staging_folder(root, 3).exists() and not (work / "case_3").exists()
    assert bookkeeping.read_record(root, 4) is None
    assert sorted(p.name for p in root.iterdir()) == ["not_converged", "records", "run_1"]


def _stand_in(calls: list, fail_index: int | None = None):
    """run_step's stand-in: writes what each OpenFOAM step leaves that the build reads."""
    def run_step(case: Path, log: str, command: list[str]) -> None:
        index = int(case.name.split("_")[1])
        calls.append((index, log))
        if index == fail_index and log == "snappyHexMesh":
            raise build_family.StepFailed(f"{case}/log.{log}: snappyHexMesh exited with 1")
        cd, share = 0.2 + 0.01 * index, 0.5 + 0.1 * index
        printed = f"    Coefficients\n        Cd       : {cd}\t(pressure: {share * cd}\tviscous: {(1 - share) * cd})\n"
        (case / f"log.{log}").write_text({"snappyHexMesh": "Snapped mesh : cells:1234  faces:1",
                                          "simpleFoam": _log([{"Ux": 1e-6, "p": 1e-6}]) + printed}.get(log, ""))
        if log == "simpleFoam":
            coefficients = case / "postProcessing/forceCoeffs1/0/coefficient.dat"
            coefficients.parent.mkdir(parents=True)
            drift = 0.05 * (index == 3) * np.sin(np.arange(100.0))
            coefficients.write_text(_coefficients(0.2 + 0.01 * index + drift))
        if log.startswith("foamToVTK"):
            kind = log.split(".")[1]
            name = "internal.vtu" if kind == "internal" else "boundary.vtp"
            folder = case / f"VTK_{kind}" / "case_100"
            folder.mkdir(parents=True)
            (folder / name).write_text(name)
    return run_step


def test_a_build_resumes_without_redoing_finished_cases(tmp_path, monkeypatch):
    root, work = tmp_path / "family", tmp_path / "work"
    calls: list = []
    monkeypatch.setattr(build_family, "run_step", _stand_in(calls, fail_index=4))
    monkeypatch.setattr(sampling, "MESH", {**sampling.MESH, "n_along": 8, "n_around": 8})  # small STLs, fast
    records = build_family.build(root, work, n=4, seed=0, jobs=2, keep=False)
    assert sorted(p.name for p in root.iterdir()) == [
        "convergence.csv", "family.json", "not_converged", "parameters.csv", "records", "run_1", "run_2"]
    assert sorted(p.name for p in (root / "run_1").iterdir()) == ["body.stl", "boundary.vtp", "coefficient.dat",
                                                                  "internal.vtu"]
    assert [r["converged"] for r in records] == [True, True, False, False]
    assert records[3]["reason"].endswith("snappyHexMesh exited with 1") and "Cd varies" in records[2]["reason"]
    assert build_family.summary(records).startswith("2 of 4 cases converged; Cd min 0.2100, mean 0.2150, max 0.2200")
    lines = (root / "parameters.csv").read_text().splitlines()
    assert lines[0].startswith("run,length,width,") and [l.split(",")[0] for l in lines[1:]] == ["run_1", "run_2"]
    lengths = [shape["length"] for shape in sampling.sample_parameters(4, 0)]
    assert build_family.summary(records).endswith(
        f"; pressure share of drag min 60.0%, median 65.0%, max 70.0%; "
        f"Re (U length / nu) {38.889 * min(lengths[:2]) / 1.5e-5:,.0f} .. {38.889 * max(lengths[:2]) / 1.5e-5:,.0f}")
    assert records[0]["cd_pressure"] == pytest.approx(0.6 * 0.21) and records[0]["cd_viscous"] == pytest.approx(0.4 * 0.21)
    assert records[1]["cd_pressure_share"] == pytest.approx(0.7)
    assert records[0]["reynolds"] == pytest.approx(38.889 * lengths[0] / 1.5e-5, abs=0.05)
    table = (root / "convergence.csv").read_text().splitlines()
    assert ",Cd_pressure,Cd_viscous,Cd_pressure_share,Re," in table[0]
    assert ",0.126,0.084,0.6," in table[1] and table[4].startswith("run_4,False,")
    assert "pressure" not in lines[0]  # the benchmark reads parameters.csv's columns as shape parameters
    assert len((root / "convergence.csv").read_text().splitlines()) == 5
    # a kill while case 2 was being staged, after case 1 finished
    (root / "run_2").rename(bookkeeping.staging_folder(root, 2))
    calls.clear()
    build_family.build(root, work, n=4, seed=0, jobs=2, keep=False)
    assert {index for index, _ in calls} == {2} and (root / "run_2" / "body.stl").is_file()
    calls.clear()
    build_family.build(root, work, n=4, seed=0, jobs=1, keep=False)
    assert calls == []
    with pytest.raises(SystemExit, match="family built with other settings \\(n, seed differ\\)"):
        build_family.build(root, work, n=5, seed=1, jobs=1, keep=False)
    with pytest.raises(SystemExit, match="family built with other settings \\(parameters differ\\)"):
        build_family.build(root, work, n=4, seed=0, jobs=1, keep=False, ranges=sampling.RANGES["wide"])
    assert calls == []


def test_alignment_study_reads_coefficients_and_compares_pressures_face_by_face():
    text = (ROOT / "tests" / "data" / "openfoam" / "run_1" / "coefficient.dat").read_text()
    last = [ln for ln in text.splitlines() if ln.strip()][-1].split()
    assert alignment_study.last_column(text, "Cd") == float(last[1])
    assert alignment_study.last_column(text, "Cl") == float(last[3])
    variant = sampling.variant(sampling.sample_parameters(4, 0)[0])
    assert alignment_study.finest_cell(variant) == pytest.approx(24.0 / 28 / 8)
    finer = alignment_study.mesh_study.refined(sampling.sample_parameters(4, 0)[0], 1.5, variant.end_time)
    assert alignment_study.finest_cell(finer) == pytest.approx(24.0 / 42 / 8)  # the base grid's cells x 1.5
    rng = np.random.default_rng(0)
    centres, areas, p = rng.random((200, 3)), rng.random(200) + 0.5, rng.normal(size=200)
    assert alignment_study.pressure_difference((centres, areas, p), (centres, areas, p)) == 0.0
    # b's faces in another order, its pressure off by 10%: the nearest face is found whatever the order
    order = rng.permutation(200)
    b = (centres[order], areas[order], 1.1 * p[order])
    assert alignment_study.pressure_difference((centres, areas, p), b) == pytest.approx(0.1)


def test_prism_layers_are_asked_of_snappyhexmesh_only_when_set():
    variant = sampling.variant(sampling.sample_parameters(4, 0)[0])
    plain = sampling.make_case.snappy_dict(variant)
    assert "addLayers       false;" in plain and "layers {}" in plain  # the family's mesh: no layers
    layered = sampling.make_case.snappy_dict(sampling.with_settings(variant, layers=3))
    assert "addLayers       true;" in layered and '"body.*" { nSurfaceLayers 3; }' in layered
    assert layered.replace("addLayers       true;", "addLayers       false;").replace(' "body.*" { nSurfaceLayers 3; } ', "") == plain


def test_a_laminar_family_writes_its_viscosity_no_model_and_a_zero_nut(tmp_path):
    laminar = sampling.Settings("laminar", 0.4, base_factor=2.0)
    case = tmp_path / "case"
    sampling.make_case.write_case(case, sampling.variant(sampling.sample_parameters(4, 0)[0], laminar))
    assert "nu 0.4;" in (case / "constant/transportProperties").read_text()
    assert "simulationType laminar;" in (case / "constant/turbulenceProperties").read_text()
    nut = (case / "0/nut").read_text()
    assert "WallFunction" not in nut and nut.count("type calculated;") == 4  # inlet, outlet, ground, body
    rans = tmp_path / "rans"
    sampling.make_case.write_case(rans, sampling.variant(sampling.sample_parameters(4, 0)[0]))
    assert "nu 1.5e-05;" in (rans / "constant/transportProperties").read_text()
    assert "RASModel kOmegaSST;" in (rans / "constant/turbulenceProperties").read_text()
    assert "nutkWallFunction" in (rans / "0/nut").read_text()
    # the solver wrote time 500 without nut: the zero field goes there, so foamToVTK exports it
    (case / "500").mkdir()
    build_family.copy_zero_nut(case)
    assert (case / "500/nut").read_text() == nut
    assert build_family.family_settings(laminar)["openfoam"] == "v1912 simpleFoam laminar nu 0.4"
    assert build_family.family_settings(laminar)["mesh"]["base_cells"] == [56, 24, 14]
    assert "(56 24 14) simpleGrading" in (case / "system/blockMeshDict").read_text()
    before = json.loads(json.dumps({**build_family.family_settings(), "n": 4, "seed": 0}))
    assert before["openfoam"] == "v1912 simpleFoam kOmegaSST" and before["mesh"]["base_cells"] == [28, 12, 7]


OPENFOAM_FIXTURE = ROOT / "tests" / "data" / "openfoam"


@pytest.mark.parametrize("name", ["run_1", "run_2"])
def test_the_drag_split_from_the_surface_is_the_one_openfoam_printed(name):
    """boundary.vtp's p and wallShearStress integrated (drag_shares.surface_split) against what
    forceCoeffs printed for the same run (reference/openfoam_reference.txt, read by log_split)."""
    printed = drag_shares.log_split((OPENFOAM_FIXTURE / name / "reference" / "openfoam_reference.txt").read_text())
    integrated = drag_shares.surface_split(OPENFOAM_FIXTURE / name)
    assert integrated.pressure == pytest.approx(printed.pressure, rel=1e-6)
    assert integrated.viscous == pytest.approx(printed.viscous, rel=1e-6)
    assert 0.9 < integrated.pressure_share < 0.97  # the air fixture: drag mostly pressure
    coefficients = convergence.coefficient_columns((OPENFOAM_FIXTURE / name / "coefficient.dat").read_text())
    assert integrated.total == pytest.approx(coefficients["Cd"][-1], rel=1e-6)


def test_log_split_takes_the_last_iteration_and_refuses_a_log_without_one():
    log = ("Time = 1\n        Cd       : 0.5\t(pressure: 0.2\tviscous: 0.3)\n"
           "Time = 2\n        Cd       : 0.45\t(pressure: 0.25\tviscous: 0.2)\n"
           "        Cs       : 0.01\t(pressure: 0.02\tviscous: -0.01)\n")
    split = drag_shares.log_split(log)
    assert (split.pressure, split.viscous) == (0.25, 0.2) and split.pressure_share == pytest.approx(0.25 / 0.45)
    assert split.record() == {"cd_pressure": 0.25, "cd_viscous": 0.2, "cd_pressure_share": split.pressure_share}
    with pytest.raises(ValueError, match="no forceCoeffs line"):
        drag_shares.log_split(_log([{"Ux": 1e-6}]))
    with pytest.raises(ValueError, match="Cd 0.5 is not its pressure 0.2 plus viscous 0.2"):
        drag_shares.log_split("Cd : 0.5 (pressure: 0.2 viscous: 0.2)")


def test_the_regime_of_a_family_from_its_run_folders(tmp_path):
    """A family of the two fixture runs, one of them given a length: Re = U length / nu with family.json's nu."""
    root = tmp_path / "family"
    for index, length in ((1, 4.0), (2, 3.0)):
        run = root / f"run_{index}"
        run.mkdir(parents=True)
        for name in ("boundary.vtp", "coefficient.dat"):
            (run / name).write_bytes((OPENFOAM_FIXTURE / f"run_{index}" / name).read_bytes())
        bookkeeping.write_atomic(bookkeeping.record_path(root, index),
                                 json.dumps({"index": index, "cd": 0.2, "shape": {"length": length}}))
    laminar = sampling.Settings("laminar", 0.02)
    (root / "family.json").write_text(json.dumps(build_family.family_settings(laminar)))
    regime = drag_shares.family_regime(root)
    assert regime["nu"] == 0.02 and [r["run"] for r in regime["runs"]] == ["run_1", "run_2"]
    assert [r["re"] for r in regime["runs"]] == pytest.approx([38.889 * 4.0 / 0.02, 38.889 * 3.0 / 0.02])
    assert regime["re_spread"] == pytest.approx({"min": 5833.35, "median": 6805.575, "max": 7777.8})
    printed = [drag_shares.log_split((OPENFOAM_FIXTURE / f"run_{i}/reference/openfoam_reference.txt").read_text())
               for i in (1, 2)]
    shares = sorted(p.pressure_share for p in printed)
    assert regime["cd_pressure_share_spread"]["min"] == pytest.approx(shares[0], rel=1e-6)
    assert regime["cd_pressure_share_spread"]["max"] == pytest.approx(shares[1], rel=1e-6)
    assert drag_shares.describe(regime).startswith(
        "2 runs (v1912 simpleFoam laminar nu 0.02): Re (U length / nu) 5,833 .. 7,778 (median 6,806); Cd ")
    only_two = drag_shares.family_regime(root, ["run_2"])
    assert [r["run"] for r in only_two["runs"]] == ["run_2"] and only_two["re_spread"]["max"] == pytest.approx(5833.35)
    (root / "family.json").unlink()  # a folder of runs without the family's records: Cd and its parts still
    bare = drag_shares.family_regime(root)
    assert "re_spread" not in bare and bare["cd_pressure_share_spread"] == regime["cd_pressure_share_spread"]
    assert "solver not recorded (no family.json)): Re not known" in drag_shares.describe(bare)
    air = {"openfoam": build_family.family_settings()["openfoam"]}
    assert drag_shares.family_viscosity(air) == sampling.RANS.nu
    with pytest.raises(ValueError, match="no magUInf, Aref in its header"):
        drag_shares.coefficient_header("# Time Cd\n1 0.2\n")


def test_alignment_study_solves_the_bodies_of_the_family_its_ranges_name(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(alignment_study, "study_body", lambda work, body, shape, *rest: seen.append((body, shape)) or
                        {"body": body, "rows": [], "cd_std_over_mean": 0.0, "cd_range_over_mean": 0.0, "cl_std": 0.0})
    monkeypatch.setattr(sys, "argv", ["alignment_study.py", str(tmp_path), "--bodies", "39", "2", "--n", "80",
                                      "--ranges", "five", "--laminar-nu", "0.005"])
    alignment_study.main()
    five = sampling.sample_parameters(80, 0, sampling.RANGES["five"])
    assert seen == [(39, five[38]), (2, five[1])] and five[38] != sampling.sample_parameters(80, 0)[38]


def test_a_models_drag_error_split_into_its_pressure_and_viscous_parts(tmp_path):
    """A predict.py folder whose model has 10% too much pressure and 5% too little shear on a
    fixture body: the parts' errors are those fractions of the solver's parts (surface_split, which
    equals forceCoeffs' print), in percent of its Cd."""
    import pyvista

    run = OPENFOAM_FIXTURE / "run_1"
    header = drag_shares.coefficient_header((run / "coefficient.dat").read_text())
    mesh = pyvista.read(run / "boundary.vtp")
    mesh.cell_data["p_pred"] = 1.1 * mesh.cell_data["p"]
    mesh.cell_data["wallShearStress_pred"] = 0.95 * mesh.cell_data["wallShearStress"]
    mesh.save(tmp_path / "run_1_surface.vtp")
    (tmp_path / "predictions.csv").write_text(f"run,u_inf,a_ref\nrun_1,{header['magUInf']},{header['Aref']}\n")
    solver = drag_shares.surface_split(run)
    [row] = drag_shares.prediction_errors(tmp_path)
    assert row["cd"] == pytest.approx(solver.total, rel=1e-9)
    assert row["pressure_error_percent"] == pytest.approx(10.0 * solver.pressure / solver.total, rel=1e-6)
    assert row["viscous_error_percent"] == pytest.approx(-5.0 * solver.viscous / solver.total, rel=1e-6)
    assert row["error_percent"] == pytest.approx(row["pressure_error_percent"] + row["viscous_error_percent"])
    summary = drag_shares.describe_errors([row])
    assert summary.startswith(f"1 bodies: Cd mean abs. error {abs(row['error_percent']):.2f}%")
    (tmp_path / "run_1_surface.vtp").unlink()
    with pytest.raises(ValueError, match="run_1_surface.vtp: missing"):
        drag_shares.prediction_errors(tmp_path)
    mesh.cell_data.remove("p_pred")
    mesh.save(tmp_path / "run_1_surface.vtp")
    with pytest.raises(ValueError, match="run_1_surface.vtp: no cell field p_pred"):
        drag_shares.prediction_errors(tmp_path)
    with pytest.raises(ValueError, match="no predictions.csv"):
        drag_shares.prediction_errors(tmp_path / "elsewhere")
