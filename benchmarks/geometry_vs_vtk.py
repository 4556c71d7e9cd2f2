"""Cell geometry by OpenFOAM's definitions (``cell_geometry``, what process_data.py stores since
processed format_version 2) against VTK's filters (``compute_cell_sizes``, ``cell_centers``,
``compute_normals``: what physicsnemo-curator's ETL stores, and process_data.py did before).

On a boundary VTP: per-cell relative area differences, centre shifts over the cell's size
(sqrt of its area), normal angles, and both total areas. ``--warp`` moves every point by up to
that fraction of its cells' size along a random direction, and ``--edge-points`` gives that
share of the polygons a raised point on one or two edges (pentagons, hexagons): warped,
non-planar cells, as OpenFOAM's boundary layers have them (the synthetic generator's boundary
has some warped pentagons and hexagons of its own among nearly planar quads and triangles). ``--hexahedra`` adds warped hexahedra (each vertex of a unit
cube moved up to ``--distortion``): VTK's parametric centre against the volume centroid, over
the cell's diagonal.

    python benchmarks/geometry_vs_vtk.py --preset tiny
    python benchmarks/geometry_vs_vtk.py --preset demo --warp 0.15 --edge-points 0.1 --json out.json
    python benchmarks/geometry_vs_vtk.py --vtp /data/run_1/boundary_1.vtp --hexahedra 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyvista as pv
from vtkmodules.util.numpy_support import vtk_to_numpy
from vtkmodules.vtkCommonDataModel import vtkHexahedron

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domino_pipeline.inputs.meshes.cell_geometry import CellBlock, cell_centres  # noqa: E402
from domino_pipeline.inputs.meshes.cell_geometry import surface_geometry as openfoam_surface  # noqa: E402


def polygons(mesh: pv.PolyData) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (n+1,), connectivity) of a PolyData's polygons."""
    polys = mesh.GetPolys()
    return (vtk_to_numpy(polys.GetOffsetsArray()).astype(np.int64),
            vtk_to_numpy(polys.GetConnectivityArray()).astype(np.int64))


def vtk_surface(mesh: pv.PolyData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centres, unit normals and areas by VTK's filters, as physicsnemo-curator computes them."""
    normals = mesh.compute_normals(cell_normals=True, point_normals=False, split_vertices=False,
                                   consistent_normals=False, auto_orient_normals=False).cell_data["Normals"]
    areas = mesh.compute_cell_sizes(length=False, area=True, volume=False).cell_data["Area"]
    return np.asarray(mesh.cell_centers().points), np.asarray(normals), np.asarray(areas)


def warped(mesh: pv.PolyData, warp: float, edge_points: float, rng: np.random.Generator) -> pv.PolyData:
    """``mesh`` with points moved and edge points raised (module docstring)."""
    offsets, ids = polygons(mesh)
    points = np.asarray(mesh.points, dtype=np.float64)
    _, _, areas = openfoam_surface(points, offsets[:-1], offsets[1:], ids)
    scale = np.zeros(len(points))
    np.maximum.at(scale, ids, np.repeat(np.sqrt(areas), np.diff(offsets)))
    directions = rng.normal(size=points.shape)
    points = points + warp * scale[:, None] * rng.uniform(0, 1, (len(points), 1)) * \
        directions / np.linalg.norm(directions, axis=1, keepdims=True)
    cells, extra = [], []
    for i in range(len(offsets) - 1):
        cell = list(ids[offsets[i]:offsets[i + 1]])
        if rng.random() < edge_points:
            for edge in ([0] if rng.random() < 0.5 else [len(cell) // 2, 0]):  # the later edge first
                a, b = points[cell[edge]], points[cell[(edge + 1) % len(cell)]]
                lift = rng.uniform(0.1, 0.3) * np.linalg.norm(b - a) * rng.choice([-1, 1])
                extra.append((a + b) / 2 + lift * rng.normal(size=3) / np.sqrt(3))
                cell.insert(edge + 1, len(points) + len(extra) - 1)
        cells.append(cell)
    all_points = np.vstack([points, *extra]) if extra else points
    return pv.PolyData(all_points.astype(np.float32), faces=np.concatenate([[len(c), *c] for c in cells]))


def surface_differences(mesh: pv.PolyData) -> dict:
    """VTK's surface geometry against OpenFOAM's, cell by cell and in total."""
    offsets, ids = polygons(mesh)
    centres, normals, areas = (np.asarray(a, np.float64) for a in
                               openfoam_surface(np.asarray(mesh.points), offsets[:-1], offsets[1:], ids))
    vtk_centres, vtk_normals, vtk_areas = vtk_surface(mesh)
    relative = np.abs(vtk_areas - areas) / areas
    shift = np.linalg.norm(vtk_centres - centres, axis=1) / np.sqrt(areas)
    cosine = np.clip(np.einsum("ij,ij->i", vtk_normals, normals), -1.0, 1.0)
    counts = np.diff(offsets)
    return {"cells": int(len(areas)),
            "cells_by_vertex_count": {int(k): int((counts == k).sum()) for k in np.unique(counts)},
            "area_relative_difference": {"max": float(relative.max()), "p99": float(np.quantile(relative, 0.99)),
                                         "cells_over_0.1%": int((relative > 1e-3).sum())},
            "total_area": {"vtk": float(vtk_areas.sum()), "openfoam": float(areas.sum()),
                           "relative": float(vtk_areas.sum() / areas.sum() - 1)},
            "centre_shift_over_cell_size": {"max": float(shift.max()), "p99": float(np.quantile(shift, 0.99))},
            "normal_angle_degrees_max": float(np.degrees(np.arccos(cosine)).max())}


def parametric_weights(cell) -> np.ndarray:
    """The weights of a VTK cell's vertices at its parametric centre (what vtkCellCenters takes)."""
    centre, weights = [0.0] * 3, [0.0] * cell.GetNumberOfPoints()
    cell.GetParametricCenter(centre)
    cell.InterpolateFunctions(centre, weights)
    return np.array(weights)


def hexahedra_differences(n: int, distortion: float, rng: np.random.Generator) -> dict:
    """VTK's parametric centres of ``n`` warped hexahedra against their volume centroids."""
    cube = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
    cells = cube + rng.uniform(-distortion, distortion, (n, 8, 3))
    block = CellBlock(np.full(n, 12, np.uint8), np.arange(n) * 8, np.arange(1, n + 1) * 8, np.arange(8 * n))
    centroids = cell_centres(cells.reshape(-1, 3), block)
    parametric = np.einsum("k,mkd->md", parametric_weights(vtkHexahedron()), cells)
    diagonal = np.linalg.norm(cells[:, 6] - cells[:, 0], axis=1)
    shift = np.linalg.norm(parametric - centroids, axis=1) / diagonal
    return {"cells": n, "distortion": distortion,
            "centre_shift_over_diagonal": {"max": float(shift.max()), "p99": float(np.quantile(shift, 0.99)),
                                           "median": float(np.median(shift))}}


def boundary(args: argparse.Namespace, tmp: Path) -> pv.PolyData:
    """The VTP to measure: the given one or run_1's of a synthetic preset."""
    if args.vtp:
        return pv.read(args.vtp)
    from synthetic_data import generate_runs

    generate_runs(tmp, 1, preset=args.preset, seed=args.seed)
    return pv.read(tmp / "run_1" / "boundary_1.vtp")


def main(argv: list[str] | None = None) -> dict:
    """Measure and print (and write ``--json``) the differences."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vtp", type=Path, help="a boundary VTP (default: a synthetic run of --preset)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warp", type=float, default=0.0)
    parser.add_argument("--edge-points", type=float, default=0.0)
    parser.add_argument("--hexahedra", type=int, default=0)
    parser.add_argument("--distortion", type=float, default=0.2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        mesh = boundary(args, Path(tmp))
    result = {"source": str(args.vtp or f"synthetic {args.preset} run_1, seed {args.seed}"),
              "as_given": surface_differences(mesh)}
    if args.warp or args.edge_points:
        result["warped"] = {"warp": args.warp, "edge_points": args.edge_points,
                            **surface_differences(warped(mesh, args.warp, args.edge_points, rng))}
    if args.hexahedra:
        result["hexahedra"] = hexahedra_differences(args.hexahedra, args.distortion, rng)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
