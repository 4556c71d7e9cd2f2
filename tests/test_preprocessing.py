"""The shared preprocessing: filtering, permutation, normalisation, centre of mass, kNN against
scipy's cKDTree, SDF of rows and grids, the neighbour layouts, settings and their fingerprint,
bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cache_fixtures import tiny_settings
from conftest import typed_config, yaml_config
from scipy.spatial import cKDTree

from domino_pipeline.compute.preprocessing import (
    grid_sdf,
    preprocess_run,
    surface_neighbors,
    volume_sdf,
)
from domino_pipeline.compute.rows import drop_self, make_grid, normalize, prepare_rows
from domino_pipeline.compute.settings import neighbor_layout_of, settings_from_config
from domino_pipeline.configuration.config import load_config
from domino_pipeline.processed.runs import list_runs, load_run


@pytest.fixture(scope="module")
def run_arrays(tiny_processed_dir):
    return load_run(list_runs(tiny_processed_dir)[0])


def _toy_arrays(n_surface=400, n_volume=600, seed=0):
    """A unit-ish tetrahedron body plus random surface and volume rows, some outside the box."""
    rng = np.random.default_rng(seed)
    verts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    faces = np.array([0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3], dtype=np.int32)
    surface = rng.uniform(-1, 2, size=(n_surface, 3)).astype(np.float32)
    surface[:5] = [9.0, 0.0, 0.0]  # outside the volume box
    areas = rng.uniform(0.1, 1.0, n_surface).astype(np.float32)
    areas[5:10] = 0.0
    volume = rng.uniform(-2.4, 2.4, size=(n_volume, 3)).astype(np.float32)
    volume[:7] = [0.0, 0.0, 5.0]
    return {
        "stl_coordinates": verts, "stl_faces": faces,
        "stl_centers": verts[faces.reshape(-1, 3)].mean(axis=1),
        "stl_areas": np.array([0.5, 0.5, 0.5, 0.866], dtype=np.float32),
        "surface_mesh_centers": surface, "surface_normals": rng.normal(size=(n_surface, 3)).astype(np.float32),
        "surface_areas": areas, "surface_fields": rng.normal(size=(n_surface, 4)).astype(np.float32),
        "volume_mesh_centers": volume, "volume_fields": rng.normal(size=(n_volume, 5)).astype(np.float32),
        "global_params_values": np.array([30.0, 1.205], np.float32),
        "global_params_reference": np.array([30.0, 1.205], np.float32),
    }


SETTINGS = tiny_settings(bounding_box_volume=((-2.5, -2.5, -2.5), (2.5, 2.5, 2.5)),
                         bounding_box_surface=((-1.5, -1.5, -1.5), (2.5, 2.5, 2.5)))


def test_normalize_and_grid():
    box = ((-1.0, 0.0, 2.0), (3.0, 1.0, 4.0))
    np.testing.assert_allclose(normalize(np.array([[-1, 0, 2], [3, 1, 4], [1, 0.5, 3]]), box),
                               [[-1, -1, -1], [1, 1, 1], [0, 0, 0]], atol=1e-6)
    grid = make_grid(box, (5, 3, 4))
    assert grid.shape == (5, 3, 4, 3) and grid.dtype == np.float32
    np.testing.assert_allclose(grid[0, 0, 0], [-1, -1, -1], atol=1e-6)
    np.testing.assert_allclose(grid[-1, -1, -1], [1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(grid[:, 0, 0, 0], np.linspace(-1, 1, 5), atol=1e-6)


def test_prepare_rows_filters_permutes_and_normalises():
    arrays = _toy_arrays()
    p = prepare_rows(arrays, SETTINGS)
    centers, areas = arrays["surface_mesh_centers"], arrays["surface_areas"]
    keep = (areas > 0) & np.all(np.abs(centers) < 2.5, axis=1)
    assert len(p.surface_points) == keep.sum() == 400 - 10
    # the kept rows, in some permutation, with their attributes carried along
    order = np.lexsort(p.surface_points.T)
    ref_order = np.lexsort(centers[keep].T)
    np.testing.assert_array_equal(p.surface_points[order], centers[keep][ref_order])
    np.testing.assert_array_equal(p.surface_fields[order], arrays["surface_fields"][keep][ref_order])
    assert not np.array_equal(p.surface_points, centers[keep])  # permuted
    np.testing.assert_array_equal(p.surface_coordinates, normalize(p.surface_points, SETTINGS.bounding_box_surface))
    assert len(p.volume_coordinates) == 600 - 7
    assert np.all(np.abs(p.volume_coordinates) <= 1)
    again = prepare_rows(arrays, SETTINGS)
    np.testing.assert_array_equal(again.volume_fields, p.volume_fields)  # fixed permutation
    other = prepare_rows(arrays, dataclasses.replace(SETTINGS, permutation_seed=1))
    assert not np.array_equal(other.volume_fields, p.volume_fields)
    weights = arrays["stl_areas"].astype(np.float64)
    np.testing.assert_allclose(p.center_of_mass, (weights[:, None] * arrays["stl_centers"]).sum(0) / weights.sum(),
                               rtol=1e-6)


def test_prepare_rows_only_the_parts_asked():
    p = prepare_rows(_toy_arrays(), SETTINGS, parts=("volume",))
    assert p.surface_points is None and p.volume_coordinates is not None


def test_neighbours_match_ckdtree_for_all_rows_and_for_a_subset():
    p = prepare_rows(_toy_arrays(), SETTINGS)
    k = SETTINGS.num_neighbors_surface
    _, ref = cKDTree(p.surface_points.astype(np.float64)).query(p.surface_points, k=k)
    all_rows = surface_neighbors(p, SETTINGS)
    assert all_rows.dtype == np.int32 and all_rows.shape == (len(p.surface_points), k - 1)
    np.testing.assert_array_equal(all_rows, ref[:, 1:])
    rows = np.array([3, 17, 100, 250])
    np.testing.assert_array_equal(surface_neighbors(p, SETTINGS, rows), all_rows[rows])


def test_drop_self_handles_duplicates():
    indices = np.array([[4, 0, 1], [0, 5, 1], [2, 3, 1]])
    np.testing.assert_array_equal(drop_self(indices, np.array([4, 5, 9])), [[0, 1], [0, 1], [2, 3]])


def test_volume_sdf_of_some_rows_equals_the_full_computation():
    p = prepare_rows(_toy_arrays(), SETTINGS)
    sdf, closest = volume_sdf(p, SETTINGS)
    rows = np.r_[3:9, 100:160, len(sdf) - 5:len(sdf)]
    part_sdf, part_closest = volume_sdf(p, SETTINGS, rows)
    np.testing.assert_array_equal(part_sdf, sdf[rows])
    np.testing.assert_array_equal(part_closest, closest[rows])
    # the tetrahedron x, y, z >= 0, x + y + z <= 1 is scaled by 0.4 in the +-2.5 box
    q = p.volume_coordinates
    inside = np.all(q > 0, axis=1) & (q.sum(axis=1) < 0.4)
    assert inside.any() and (~inside).any()
    np.testing.assert_array_equal(sdf < 0, inside)
    np.testing.assert_allclose(np.abs(sdf), np.linalg.norm(q - closest, axis=1), atol=1e-5)
    on_a_face = np.isclose(closest, 0, atol=1e-5).any(axis=1) | np.isclose(closest.sum(axis=1), 0.4, atol=1e-5)
    assert on_a_face.all()


def test_grid_sdf_sign_on_a_car(run_arrays):
    p = prepare_rows(run_arrays, tiny_settings(), parts=())
    sdf = grid_sdf(p, tiny_settings(), "surface")
    assert sdf.shape == (16, 8, 8) and sdf.dtype == np.float32
    assert sdf[0, 0, -1] > 0 and sdf.min() < 0  # a corner of the box is outside, some points inside


def test_preprocess_run_contents(run_arrays):
    out = preprocess_run(run_arrays, tiny_settings())
    ns, nv = len(out["surface_coordinates"]), len(out["volume_coordinates"])
    assert out["surface_neighbors"].shape == (ns, 6) and out["surface_neighbors"].dtype == np.int32
    assert out["surface_neighbors"].max() < ns
    assert out["volume_sdf"].shape == (nv,) and out["volume_closest"].shape == (nv, 3)
    assert np.all(out["volume_sdf"] > 0)  # the synthetic volume points are all outside the car
    assert out["geometry_coordinates"].shape == run_arrays["stl_coordinates"].shape
    assert len(out["scalars"]["center_of_mass"]) == 3
    assert not any(name.startswith("surface_neighbor_") for name in out)  # the indices layout


def test_the_features_layout_adds_the_neighbours_features(run_arrays):
    indices = preprocess_run(run_arrays, tiny_settings())
    out = preprocess_run(run_arrays, tiny_settings(neighbor_layout="features"))
    neighbors = out["surface_neighbors"]
    np.testing.assert_array_equal(neighbors, indices["surface_neighbors"])
    ns = len(out["surface_coordinates"])
    for name, shape in (("coordinates", (ns, 6, 3)), ("normals", (ns, 6, 3)), ("areas", (ns, 6))):
        stored = out[f"surface_neighbor_{name}"]
        assert stored.shape == shape and stored.dtype == np.float32, name
        np.testing.assert_array_equal(stored, out[f"surface_{name}"][neighbors], err_msg=name)


def test_bad_input_is_named():
    arrays = _toy_arrays()
    arrays["surface_fields"] = arrays["surface_fields"][:, :3]
    with pytest.raises(ValueError, match="toy: surface_fields has shape .* need 4 columns"):
        prepare_rows(arrays, SETTINGS, source="toy")
    arrays = _toy_arrays(n_surface=16)
    arrays["surface_areas"][:] = 0.0
    with pytest.raises(ValueError, match="toy: 0 surface cells inside the volume box"):
        prepare_rows(arrays, SETTINGS, source="toy")


def test_settings_validation_and_fingerprint():
    with pytest.raises(ValueError, match="interp_res"):
        tiny_settings(interp_res=(16, 8))
    with pytest.raises(ValueError, match="bounding_box_volume"):
        tiny_settings(bounding_box_volume=((0, 0, 0), (0, 1, 1)))
    with pytest.raises(ValueError, match="kind must be one of"):
        tiny_settings(volume_variables=(("UMeanTrim", "tensor"),))
    with pytest.raises(ValueError, match=r"neighbor_layout must be one of \['indices', 'features'\], not 'feature'"):
        tiny_settings(neighbor_layout="feature")
    base = tiny_settings()
    assert base.fingerprint() == tiny_settings(device="cuda:0").fingerprint()  # device: same contents
    for change in ({"interp_res": (16, 8, 9)}, {"num_neighbors_surface": 5}, {"permutation_seed": 1},
                   {"bounding_box_surface": ((-1.5, -1.4, -0.3), (5.0, 1.4, 1.4))},
                   {"surface_variables": (("pMeanTrim", "scalar"), ("wallShearStress", "vector"))},
                   {"neighbor_layout": "features"}):
        assert tiny_settings(**change).fingerprint() != base.fingerprint(), change
    assert "device" not in base.fingerprinted()


def test_the_default_neighbor_layout_keeps_older_fingerprints_and_configs():
    base = tiny_settings().fingerprinted()
    assert "neighbor_layout" not in base  # caches built before the setting stay current
    assert neighbor_layout_of(base) == "indices"
    features = tiny_settings(neighbor_layout="features").fingerprinted()
    assert neighbor_layout_of(features) == "features"
    config = typed_config()
    assert settings_from_config(config.geometry, config.variables).neighbor_layout == "features"  # the default
    config = typed_config("geometry.neighbor_layout=indices")
    assert settings_from_config(config.geometry, config.variables).neighbor_layout == "indices"
    cfg = yaml_config()
    del cfg.geometry["neighbor_layout"]  # a config from before the setting: refused, never defaulted
    with pytest.raises(ValueError, match=r"geometry config: missing keys \['neighbor_layout'\]$"):
        load_config(cfg)
    with pytest.raises(ValueError, match=r"geometry.neighbor_layout must be one of \['indices', 'features'\]"):
        typed_config("geometry.neighbor_layout=feature")
