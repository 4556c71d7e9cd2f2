"""Point data on a surface (WindsorML's boundary): the two ways to integrate it into forces,
against a converged reference.

- points: one row per point, weighted by its barycentric dual area, with its own normal (what
  process_data.py does for ``dataset.surface_rows.location: points``);
- cells: the point data averaged to each cell (as VTK's point_data_to_cell_data does), weighted
  by the cell's area, with the cell's normal.

The fields are the synthetic generator's smooth wall fields on a Windsor-sized body
(synthetic/fields.py, in coefficient units), sampled at the points of a boundary mesh of
``--cells`` cells; the reference integrates the same fields at the cell centres of a mesh of
``--reference-cells`` cells. The meshes' raised edge midpoints (warped polygons, which change
the body itself) are left out unless ``--warp`` gives their share of the edges. Printed: drag
and lift coefficients (A_ref 0.112 m^2) and each way's relative error.

    python benchmarks/surface_point_rows.py --cells 3000 20000 100000 --reference-cells 2000000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # synthetic/, as from the repository

from synthetic.body import boundary_mesh, random_shape  # noqa: E402
from synthetic.faces import by_size, point_weights, ragged_face_geometry  # noqa: E402
from synthetic.fields import surface_fields  # noqa: E402
from synthetic.layouts import LAYOUTS  # noqa: E402

AREA = 0.112


def _coefficients(centres: np.ndarray, vectors: np.ndarray, cp: np.ndarray, cf: np.ndarray) -> dict[str, float]:
    force = (-cp[:, None] * vectors + cf * np.linalg.norm(vectors, axis=1)[:, None]).sum(axis=0) / AREA
    return {"cd": float(force[0]), "cl": float(force[2])}


def reference(shape, cells: int, rng: np.random.Generator, warp: float) -> dict[str, float]:
    """The fields at the cell centres of a fine mesh, each with its cell's normal."""
    mesh = boundary_mesh(shape, cells, rng, warp)
    centres, vectors = ragged_face_geometry(mesh.vertices, mesh.offsets, mesh.connectivity)
    fields = surface_fields(shape, centres, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), 1.0)
    return _coefficients(centres, vectors, fields["pressure_coefficient"].astype(np.float64),
                         fields["skin_friction_coefficient"].astype(np.float64))


def both_ways(shape, cells: int, rng: np.random.Generator, warp: float) -> dict[str, dict[str, float]]:
    """Point rows with dual areas, and point data averaged to the cells."""
    mesh = boundary_mesh(shape, cells, rng, warp)
    normals, dual = point_weights(mesh.vertices, mesh.offsets, mesh.connectivity)
    fields = surface_fields(shape, mesh.vertices, normals, 1.0)
    cp, cf = fields["pressure_coefficient"].astype(np.float64), fields["skin_friction_coefficient"].astype(np.float64)
    points = _coefficients(mesh.vertices, normals * dual[:, None], cp, cf)
    centres, vectors = ragged_face_geometry(mesh.vertices, mesh.offsets, mesh.connectivity)
    cell_cp, cell_cf = np.zeros(mesh.n_cells), np.zeros((mesh.n_cells, 3))
    for rows, ids in by_size(mesh.offsets, mesh.connectivity):
        cell_cp[rows], cell_cf[rows] = cp[ids].mean(axis=1), cf[ids].mean(axis=1)
    return {"points": points, "cells": _coefficients(centres, vectors, cell_cp, cell_cf),
            "rows": {"points": len(mesh.vertices), "cells": mesh.n_cells}}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[3000, 20000, 100000])
    parser.add_argument("--reference-cells", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warp", type=float, default=0.0, help="share of the edges given a raised midpoint")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    shape = random_shape(np.random.default_rng(args.seed), LAYOUTS["windsorml"].shapes)
    truth = reference(shape, args.reference_cells, np.random.default_rng(args.seed + 1), args.warp)
    print(f"reference ({args.reference_cells:,} cells): cd {truth['cd']:.6f}, cl {truth['cl']:.6f}")
    print(f"{'cells':>9} {'points':>9}  {'way':>6}  {'cd':>9} {'error':>9}  {'cl':>9} {'error':>9}")
    results = []
    for cells in args.cells:
        ways = both_ways(shape, cells, np.random.default_rng(args.seed + 2), args.warp)
        for way in ("points", "cells"):
            got = ways[way]
            errors = {k: abs(got[k] - truth[k]) / abs(truth[k]) for k in ("cd", "cl")}
            print(f"{ways['rows']['cells']:>9,} {ways['rows']['points']:>9,}  {way:>6}  {got['cd']:9.6f} "
                  f"{errors['cd']:9.2e}  {got['cl']:9.6f} {errors['cl']:9.2e}")
            results.append({"cells": ways["rows"]["cells"], "points": ways["rows"]["points"], "way": way,
                            **got, "relative_error": errors})
    if args.json:
        args.json.write_text(json.dumps({"reference": truth, "results": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
