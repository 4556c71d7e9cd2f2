"""The item both datasets return (loading/items.py): DoMINO's input names and shapes, positions
relative to the centre of mass in each part's own normalisation, targets scaled with min-max
factors; the constant grids, built once per process; the parts of each model type."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from domino_pipeline.loading.items import MODEL_TYPES, build_item, constant_grid, parts_of

BOX_VOLUME = ((-2.0, -1.0, 0.0), (6.0, 1.0, 2.0))
BOX_SURFACE = ((-1.0, -1.0, 0.0), (5.0, 1.0, 1.0))
SETTINGS = {"bounding_box_volume": BOX_VOLUME, "bounding_box_surface": BOX_SURFACE}
SCALARS = {"center_of_mass": [2.0, 0.0, 0.5], "global_params_values": [30.0, 1.2],
           "global_params_reference": [30.0, 1.2]}
FACTORS = {"normalization": "min_max",
           "surface": {"min": [-2.0] * 4, "max": [2.0] * 4, "mean": [0.0] * 4, "std": [1.0] * 4},
           "volume": {"min": [0.0] * 5, "max": [10.0] * 5, "mean": [0.0] * 5, "std": [1.0] * 5}}


def _parts(rng, ns: int, nv: int, k: int) -> tuple[dict, dict]:
    surface = {"coordinates": rng.uniform(-1, 1, (ns, 3)), "normals": rng.normal(size=(ns, 3)),
               "areas": rng.uniform(0.1, 1, ns), "fields": rng.uniform(-2, 2, (ns, 4)),
               "neighbor_coordinates": rng.uniform(-1, 1, (ns, k, 3)),
               "neighbor_normals": rng.normal(size=(ns, k, 3)), "neighbor_areas": rng.uniform(0, 1, (ns, k))}
    volume = {"coordinates": rng.uniform(-1, 1, (nv, 3)), "fields": rng.uniform(0, 10, (nv, 5)),
              "sdf": rng.uniform(0, 1, nv), "closest": rng.uniform(-1, 1, (nv, 3))}
    return surface, volume


def test_a_combined_item_has_domino_s_inputs_with_positions_from_the_centre_of_mass():
    rng = np.random.default_rng(0)
    surface, volume = _parts(rng, ns=5, nv=7, k=3)
    grids = {"surf_grid": constant_grid(BOX_SURFACE, (4, 3, 2)), "grid": constant_grid(BOX_VOLUME, (4, 3, 2)),
             "sdf_surf_grid": rng.uniform(size=(4, 3, 2)), "sdf_grid": rng.uniform(size=(4, 3, 2))}
    item = build_item(settings=SETTINGS, scalars=SCALARS, geometry_coordinates=rng.uniform(size=(9, 3)),
                      grids=grids, surface=surface, volume=volume, scaling_factors=FACTORS)
    shapes = {name: tuple(value.shape) for name, value in item.items()}
    assert shapes == {
        "geometry_coordinates": (9, 3), "surf_grid": (4, 3, 2, 3), "sdf_surf_grid": (4, 3, 2),
        "global_params_values": (2, 1), "global_params_reference": (2, 1), "surface_min_max": (2, 3),
        "surface_mesh_centers": (5, 3), "surface_normals": (5, 3), "surface_areas": (5,),
        "pos_surface_center_of_mass": (5, 3), "surface_mesh_neighbors": (5, 3, 3),
        "surface_neighbors_normals": (5, 3, 3), "surface_neighbors_areas": (5, 3), "surface_fields": (5, 4),
        "grid": (4, 3, 2, 3), "sdf_grid": (4, 3, 2), "volume_mesh_centers": (7, 3), "sdf_nodes": (7, 1),
        "pos_volume_closest": (7, 3), "pos_volume_center_of_mass": (7, 3), "volume_min_max": (2, 3),
        "volume_fields": (7, 5)}
    assert all(value.dtype == torch.float32 for value in item.values())
    # the centre of mass (2, 0, 0.5) normalised: surface box -> (0, 0, 0), volume box -> (0, 0, -0.5)
    np.testing.assert_allclose(item["pos_surface_center_of_mass"], surface["coordinates"], atol=1e-6)
    np.testing.assert_allclose(item["pos_volume_center_of_mass"], volume["coordinates"] - [0, 0, -0.5], atol=1e-6)
    np.testing.assert_allclose(item["pos_volume_closest"], volume["coordinates"] - volume["closest"], atol=1e-6)
    # min-max: min -> -1, max -> 1
    np.testing.assert_allclose(item["surface_fields"], surface["fields"] / 2, atol=1e-6)
    np.testing.assert_allclose(item["volume_fields"], volume["fields"] / 5 - 1, atol=1e-6)
    assert item["surf_grid"] is grids["surf_grid"]


def test_a_surface_item_has_no_volume_inputs_and_unscaled_targets_without_factors():
    rng = np.random.default_rng(1)
    surface, _ = _parts(rng, ns=4, nv=1, k=2)
    grids = {"surf_grid": constant_grid(BOX_SURFACE, (2, 2, 2)), "sdf_surf_grid": np.zeros((2, 2, 2))}
    item = build_item(settings=SETTINGS, scalars=SCALARS, geometry_coordinates=np.zeros((3, 3)),
                      grids=grids, surface=surface, volume=None, scaling_factors=None)
    assert not any(name.startswith(("volume", "pos_volume")) or name in ("grid", "sdf_grid") for name in item)
    np.testing.assert_allclose(item["surface_fields"], surface["fields"].astype(np.float32))


def test_the_constant_grid_is_built_once_and_spans_the_box():
    grid = constant_grid(BOX_VOLUME, (5, 3, 2))
    assert constant_grid(BOX_VOLUME, (5, 3, 2)) is grid
    assert grid.shape == (5, 3, 2, 3)
    np.testing.assert_allclose(grid[0, 0, 0], [-1, -1, -1])
    np.testing.assert_allclose(grid[-1, -1, -1], [1, 1, 1])
    np.testing.assert_allclose(grid[2, 1, 0], [0, 0, -1], atol=1e-6)  # the middle of x and y


def test_parts_of_each_model_type():
    assert [parts_of(m) for m in MODEL_TYPES] == [("surface",), ("volume",), ("surface", "volume")]
    with pytest.raises(ValueError, match="unknown model_type 'wing'"):
        parts_of("wing")
