"""Drag and lift in the data set's own terms: the integrated true coefficients of a run equal the
ones its folder publishes (the profile's coefficient files, with its references file's area),
whatever scaling density the fields were stored with, since the synthetic runs' fields are
kinematic as DrivAerML's are, in OpenFOAM's orientation as DrivAerML's are (normals into the car,
wall shear on the fluid)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import DEFAULTS, PROCESS_OPTIONS, typed_config

from domino_pipeline.inference.forces import (
    ForceConvention,
    ForceSettings,
    FreeStream,
    force_coefficients,
)
from domino_pipeline.inference.predict_runs import RunPrediction, run_record
from domino_pipeline.inference.run_inputs import Physics, load_processed, load_raw_run
from domino_pipeline.inputs.published_forces import read_first_row, read_published
from process_data import process_all

PROFILE = typed_config(name="demo").dataset  # DrivAerML's, whose layout and conventions the synthetic runs have
VARIABLES = {part: PROFILE.variables(part) for part in ("surface", "volume")}
PROFILE_CONVENTION = ForceConvention(normals=PROFILE.flow.normals, wall_shear=PROFILE.flow.wall_shear)
OUTWARD = ForceConvention(normals="out_of_body", wall_shear="on_body")
DRIVAERML_STREAM = FreeStream(velocity=PROFILE.flow.velocity, density=1.205, kinematic=True)
TOLERANCE = 0.005  # the acceptance bound: integrated against published within 0.5%


def settings(**changes) -> ForceSettings:
    return ForceSettings(**{"reference_area": 2.16, "convention": PROFILE_CONVENTION, "free_stream": DRIVAERML_STREAM,
                            "pressure": "pMeanTrim", "wall_shear_stress": "wallShearStressMeanTrim"} | changes)


def own_area(run_dir: Path) -> float:
    return read_published(run_dir, run_dir.name.removeprefix("run_"), PROFILE).own_references.area


def true_coefficients(run, forces: ForceSettings) -> dict:
    """run_record of a prediction equal to the truth: the integrated true coefficients."""
    return run_record(run, RunPrediction(surface=run.true_surface, volume=None, seconds=0.0), variables=VARIABLES,
                      forces=forces)


def scaling(air_density: float) -> Physics:
    return Physics(DEFAULTS.physics.stream_velocity, air_density, None)


@pytest.mark.parametrize("name", ["run_1", "run_2"])
def test_the_integrated_true_drag_is_the_published_one(tiny_raw_dir, name):
    run = load_raw_run(tiny_raw_dir / name, PROFILE, scaling(1.205), volume=False)
    assert run.published is not None and run.reference_area == own_area(tiny_raw_dir / name)
    record = true_coefficients(run, settings())
    assert record["a_ref"] == run.reference_area  # the variant's own area, as the published figures use
    assert record["cd_published"] > 0.05
    assert record["cd_true"] == pytest.approx(record["cd_published"], rel=TOLERANCE)
    assert record["cl_true"] == pytest.approx(record["cl_published"], abs=TOLERANCE * record["cd_published"])


def test_the_scaling_density_changes_neither_drag_nor_the_agreement(tiny_raw_dir, tmp_path):
    """Kinematic fields: the stored p / (rho U^2) changes with physics.air_density, the physical
    field rebuilt from it does not, nor the coefficients."""
    published = read_published(tiny_raw_dir / "run_1", "1", PROFILE).own
    area = own_area(tiny_raw_dir / "run_1")
    drags, stored = {}, {}
    for density in (1.205, 2.5):
        out = tmp_path / f"rho{density}"
        results = process_all(tiny_raw_dir, out, dataclasses.replace(PROCESS_OPTIONS, air_density=density))
        assert all(r.status == "processed" for r in results)
        run = load_processed(out / "run_1.zarr", volume=False)
        stored[density] = run.true_surface[:, 0]
        drags[density] = true_coefficients(run, settings(reference_area=area))["cd_true"]
        drags[f"raw {density}"] = true_coefficients(load_raw_run(tiny_raw_dir / "run_1", PROFILE, scaling(density),
                                                                 volume=False), settings())["cd_true"]
    np.testing.assert_allclose(stored[2.5] * 2.5, stored[1.205] * 1.205, rtol=1e-5)  # the stored fields did change
    assert len(drags) == 4
    for drag in drags.values():
        assert drag == pytest.approx(drags[1.205], rel=1e-5)
        assert drag == pytest.approx(published["cd"], rel=TOLERANCE)


def test_the_coefficients_divide_by_the_free_stream_not_the_scaling_reference():
    """A unit cube pushed by pressure 1 on its front face: F_x = 1. Kinematic: C_d = 1 / (0.5 U^2
    A); in pascals: 1 / (0.5 rho U^2 A)."""
    vector_areas = np.array([[-1.0, 0, 0], [1.0, 0, 0]])
    pressure, shear, areas = np.array([1.0, 0.0]), np.zeros((2, 3)), np.ones(2)
    for stream, expected in ((FreeStream(38.89, 1.2, kinematic=True), 1 / (0.5 * 38.89**2 * 2.0)),
                             (FreeStream(38.89, 1.2, kinematic=False), 1 / (0.5 * 1.2 * 38.89**2 * 2.0))):
        got = force_coefficients(pressure, shear, vector_areas, areas, reference_area=2.0,
                                 dynamic_pressure=stream.dynamic_pressure, convention=OUTWARD)
        assert got == pytest.approx({"cd": expected, "cl": 0.0})
    with pytest.raises(ValueError, match="dataset.flow.velocity and density must be positive"):
        FreeStream(0.0, 1.2)


def test_the_reference_area_is_the_runs_own_or_the_constant():
    assert settings().area_for(2.3) == 2.3
    assert settings().area_for(None) == 2.16
    assert settings(reference_area_per_run=False).area_for(2.3) == 2.16


def test_published_files_are_read_by_column_name_and_bad_ones_are_named(tmp_path):
    run = tmp_path / "run_9"
    run.mkdir()
    nothing = read_published(run, "9", PROFILE)
    assert nothing.own is None and nothing.constant is None and nothing.own_references is None
    assert nothing.constant_references.area == PROFILE.references.area
    (run / "force_mom_9.csv").write_text("Cd, Cs, Cl, Clf, Clr\n0.31, 0.001, -0.02, 0.1, -0.12\n")
    (run / "force_mom_constref_9.csv").write_text("cd,cl,clf,clr,cs\n0.3,-0.01,0.1,-0.11,0.002\n")
    (run / "geo_ref_9.csv").write_text("lRef,aRef,forcesCoR,lRefRef,aRefRef,forcesCoRRef\n"
                                       "2.79,2.298,(1.402 0 -0.3176),2.78618,2.17,(1.40009 0 -0.3176)\n")
    published = read_published(run, "9", PROFILE)
    assert published.own == {"cd": 0.31, "cl": -0.02, "clf": 0.1, "clr": -0.12, "cs": 0.001}
    assert published.constant["cs"] == 0.002 and published.constant["cd"] == 0.3
    assert published.own_references.area == 2.298 and published.own_references.length == 2.79
    assert published.own_references.centre == (1.402, 0.0, -0.3176)
    assert published.constant_references.centre == (1.40009, 0.0, -0.3176)
    (run / "geo_ref_9.csv").write_text("lRef, aRef\n2.786\n")
    with pytest.raises(ValueError, match="geo_ref_9.csv: expected a header and one row"):
        read_published(run, "9", PROFILE)
    (run / "geo_ref_9.csv").write_text("lRef,aRef,forcesCoR\n2.79,2.298,(1.402 0)\n")
    with pytest.raises(ValueError, match=r"geo_ref_9.csv: column forcesCoR must hold 3 numbers"):
        read_published(run, "9", PROFILE)
    (run / "geo_ref_9.csv").unlink()
    (run / "force_mom_9.csv").write_text("Cs, Cl\n0.1, 0.2\n")
    with pytest.raises(ValueError, match=r"force_mom_9.csv: no column Cd; columns \['cl', 'cs'\]"):
        read_published(run, "9", PROFILE)
    (run / "force_mom_9.csv").write_text("Cd, Cl, Clf, Clr, Cs\nx, 0.2, 0, 0, 0\n")
    with pytest.raises(ValueError, match="force_mom_9.csv: column Cd holds 'x', not a number"):
        read_published(run, "9", PROFILE)
    assert read_first_row(run / "force_mom_9.csv")["cd"] == "x"
