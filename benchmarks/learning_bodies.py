"""Each body of a family as the learning benchmark's baselines need it, read once from its raw run
folder the way predict.py reads it (``load_prediction_run``): its shape descriptors and points drawn
on its STL (shape_geometry.py), and its surface cells' centres, areas and true fields in the
non-dimensional form predict.py scores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import shape_geometry

SURFACE_SAMPLES = 4096  # points drawn on each STL for the surface distance
SAMPLE_SEED = 0


@dataclass(frozen=True)
class Body:
    """One body: DESCRIPTORS (shape_geometry's order), points on its STL, and its surface cells."""

    name: str
    descriptors: np.ndarray
    stl_points: np.ndarray
    centres: np.ndarray   # (N, 3) cell centres
    fields: np.ndarray    # (N, C) true surface fields, non-dimensional (predict.py's truth)
    areas: np.ndarray     # (N,) cell areas (predict.py's weights)


def read_body(path: Path, config) -> Body:
    """``path`` (a raw run folder, or anything predict.py reads) as a Body, under ``config``'s
    dataset profile and physics (a PipelineConfig)."""
    from domino_pipeline.inference.run_inputs import Physics, load_prediction_run
    physics = Physics(config.physics.stream_velocity, config.physics.air_density, config.physics.reference_length)
    run = load_prediction_run(path, dataset=config.dataset, physics=physics, volume=False)
    if not run.has_truth:
        raise ValueError(f"{path}: no true surface fields to score a baseline against")
    corners = run.arrays["stl_coordinates"].astype(np.float64)[run.arrays["stl_faces"].reshape(-1, 3)]
    found = shape_geometry.descriptors(corners)
    return Body(name=run.name, descriptors=np.array([found[k] for k in shape_geometry.DESCRIPTORS]),
                stl_points=shape_geometry.sample_surface(corners, SURFACE_SAMPLES, np.random.default_rng(SAMPLE_SEED)),
                centres=np.asarray(run.cell_centres, dtype=np.float64), fields=np.asarray(run.true_surface),
                areas=np.linalg.norm(run.cell_vector_areas, axis=1))


def read_bodies(folders: dict[str, Path], config) -> dict[str, Body]:
    """Every run folder of ``folders`` (name -> folder) as a Body."""
    return {name: read_body(folder, config) for name, folder in folders.items()}
