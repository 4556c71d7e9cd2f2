"""A processed run's statistics against numpy over its stored arrays, VTK over its raw files and the
generator's float64 coefficients; the pass over a curator-form run gives the same statistics."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from conftest import DEFAULTS, PROCESS_OPTIONS
from curator_fixtures import write_curator_npz, write_curator_zarr
from vtkmodules.util.numpy_support import vtk_to_numpy

from domino_pipeline.inputs.statistics.array_statistics import statistics_of_run
from domino_pipeline.inputs.statistics.cell_quality import polygon_quality
from domino_pipeline.inputs.processing.field_divisors import field_divisors
from domino_pipeline.processed.runs import load_run, open_run
from domino_pipeline.inputs.processing.published_forces import read_published
from domino_pipeline.processed.statistics_table import flatten
from domino_pipeline.configuration.variables import column_names
from domino_pipeline.inputs.processing.process_runs import process_run


@pytest.fixture(scope="module")
def processed(tiny_processed_dir: Path) -> tuple[dict, dict, dict]:
    """run_1's arrays, attributes and statistics."""
    path = tiny_processed_dir / "run_1.zarr"
    attrs = dict(open_run(path).attrs)
    return load_run(path), attrs, attrs["statistics"]


def _column_statistics(values: np.ndarray) -> dict:
    values = values.astype(np.float64)
    return {"min": values.min(), "max": values.max(), "mean": values.mean(), "std": values.std(), "nonfinite": 0,
            "p01": np.quantile(values, 0.01), "p99": np.quantile(values, 0.99), **_trimmed(values)}


def _trimmed(values: np.ndarray) -> dict:
    cut = len(values) // 100
    inside = np.sort(values)[cut:len(values) - cut]
    return {"mean_trimmed": inside.mean(), "std_trimmed": inside.std()}


@pytest.mark.parametrize("part", ["surface", "volume"])
def test_field_and_position_statistics_are_numpys_over_the_stored_arrays(processed, part):
    arrays, _, statistics = processed
    fields = arrays[f"{part}_fields"]
    names = column_names(getattr(DEFAULTS.variables, part))
    assert statistics[part]["count"] == len(fields)
    for j, name in enumerate(names):
        assert statistics[part]["fields"][name] == pytest.approx(_column_statistics(fields[:, j]), rel=1e-9, abs=1e-15)
    positions = arrays["surface_mesh_centers" if part == "surface" else "volume_mesh_centers"]
    for j, axis in enumerate("xyz"):
        assert statistics[part]["positions"][axis] == {"min": positions[:, j].min(), "max": positions[:, j].max()}


def test_surface_areas_volume_and_force_sums_are_numpys(processed):
    arrays, attrs, statistics = processed
    surface = statistics["surface"]
    areas = arrays["surface_areas"].astype(np.float64)
    assert surface["area"] == pytest.approx({"min": areas.min(), "max": areas.max(), "mean": areas.mean(),
                                             "total": areas.sum()}, rel=1e-9)
    vector_areas = arrays["surface_normals"].astype(np.float64) * areas[:, None]
    centres = arrays["surface_mesh_centers"].astype(np.float64)
    assert surface["enclosed_volume"] == pytest.approx(np.sum(centres * vector_areas) / 3.0, rel=1e-9)
    divisors = field_divisors(PROCESS_OPTIONS.surface_fields, 30.0, 1.205, attrs["nut_length_scale"], np.float64)
    physical = arrays["surface_fields"].astype(np.float64) * divisors
    np.testing.assert_allclose(surface["force_sums"]["pressure"], physical[:, 0] @ vector_areas, rtol=1e-9)
    np.testing.assert_allclose(surface["force_sums"]["shear"], areas @ physical[:, 1:4], rtol=1e-9)


def test_the_stl_statistics_are_vtks(processed, tiny_raw_dir):
    arrays, _, statistics = processed
    stl = statistics["stl"]
    mesh = pv.read(tiny_raw_dir / "run_1" / "drivaer_1.stl")
    assert (stl["points"], stl["triangles"]) == (len(arrays["stl_coordinates"]), len(arrays["stl_areas"]))
    assert stl["area"] == pytest.approx(mesh.area, rel=1e-6)
    assert stl["enclosed_volume"] == pytest.approx(mesh.volume, rel=1e-6)  # wound outward: positive
    assert (stl["open_edges"], stl["non_manifold_edges"], stl["degenerate_triangles"]) == (0, 0, 0)
    # the boundary is the same body, finer: the same volume, its normals into the car (as OpenFOAM's)
    assert statistics["consistency"]["surface_to_stl_volume"] == pytest.approx(-1.0, abs=0.03)


def test_the_cell_quality_is_the_raw_polygons(processed, tiny_raw_dir):
    arrays, _, statistics = processed
    mesh = pv.read(tiny_raw_dir / "run_1" / "boundary_1.vtp")
    offsets, ids = vtk_to_numpy(mesh.GetPolys().GetOffsetsArray()), vtk_to_numpy(mesh.GetPolys().GetConnectivityArray())
    non_planarity, aspect = polygon_quality(np.asarray(mesh.points), offsets[:-1], offsets[1:], ids,
                                            arrays["surface_mesh_centers"], arrays["surface_normals"],
                                            arrays["surface_areas"])
    cells = statistics["surface"]["cells"]
    assert cells["aspect_ratio_max"] == pytest.approx(aspect.max())
    assert cells["aspect_ratio_mean"] == pytest.approx(aspect.mean())
    assert cells["non_planarity_max"] == pytest.approx(non_planarity.max(), rel=1e-6)
    assert cells["non_planarity_mean"] == pytest.approx(non_planarity.mean(), rel=1e-5)
    # the generator warps some polygons out of their plane, as snappyHexMesh's are
    assert 0.05 < cells["non_planarity_max"] < 1 and cells["zero_edge_cells"] == 0


def test_published_and_integrated_coefficients(processed, tiny_raw_dir):
    """The default profile's conventions (DrivAerML's: normals into the car, shear on the fluid)
    are the synthetic runs': the integrated coefficients are the published ones."""
    _, _, statistics = processed
    published = read_published(tiny_raw_dir / "run_1", "1", DEFAULTS.dataset)
    assert statistics["published"]["own"] == published.own
    assert statistics["published"]["own_area"] == published.own_references.area
    for which in ("own", "constant"):
        for name in ("cd", "cl"):
            assert statistics["forces"][which][name] == pytest.approx(statistics["published"][which][name], rel=1e-5)


def test_processing_without_statistics_stores_none_and_the_same_arrays(tiny_raw_dir, tiny_processed_dir, tmp_path):
    process_run(tiny_raw_dir / "run_1", tmp_path / "run_1.zarr", replace(PROCESS_OPTIONS, statistics=False))
    assert "statistics" not in open_run(tmp_path / "run_1.zarr").attrs
    without, with_statistics = (load_run(p / "run_1.zarr") for p in (tmp_path, tiny_processed_dir))
    for name, array in with_statistics.items():
        np.testing.assert_array_equal(without[name], array, err_msg=name)


@pytest.mark.parametrize("form", ["zarr", "npz"])
def test_a_pass_over_a_curator_run_gives_the_streamed_statistics(processed, tiny_raw_dir, tmp_path, form):
    arrays, _, streamed = processed
    path = tmp_path / f"run_1.{form}"
    (write_curator_zarr if form == "zarr" else write_curator_npz)(path, arrays)
    published = read_published(tiny_raw_dir / "run_1", "1", DEFAULTS.dataset)
    got = statistics_of_run(open_run(path), DEFAULTS.dataset, (30.0, 1.205), published, block_rows=1000)
    want = flatten(streamed)
    cells = [key for key in want if key.startswith("surface.cells.")]
    assert cells and set(flatten(got)) == set(want) - set(cells)  # no polygons stored: no cell quality
    for key, value in flatten(got).items():
        assert value == (None if want[key] is None else pytest.approx(want[key], rel=1e-6, abs=1e-12)), key


@pytest.mark.parametrize("parts", ["surface", "volume"])
def test_a_run_processed_in_part_has_that_parts_statistics(processed, tiny_raw_dir, tmp_path, parts):
    _, _, everything = processed
    process_run(tiny_raw_dir / "run_1", tmp_path / "run_1.zarr", replace(PROCESS_OPTIONS, parts=parts))
    statistics = open_run(tmp_path / "run_1.zarr").attrs["statistics"]
    other = "volume" if parts == "surface" else "surface"
    assert other not in statistics and statistics[parts]["count"] == everything[parts]["count"]
    assert statistics["stl"] == everything["stl"]
    assert (statistics["forces"] == everything["forces"]) == (parts == "surface")  # forces need the surface
