"""How reproducible the family's data is at its one mesh setting: a body solved several times,
moved along the flow by fractions of the finest surface cell, so that the flow is the same and
only the mesh's alignment with the body changes.

The spread of Cd and Cl over the shifts, and the area-weighted relative L2 between the surface
pressures of two shifts (each face of one solution against the nearest face of the other, both
moved back to the body's frame), bound what a model that sees only the geometry can reach on
this data: the solver's answer itself varies that much with where the mesh happens to fall.

    WM_PROJECT_DIR=/usr/share/openfoam .venv/bin/python tools/openfoam_family/alignment_study.py \\
        /tmp/alignment --bodies 1 2 3 --shifts 0 0.25 0.5 0.75 [--jobs 2] [--base-factor 1.5] [--layers 3] [--laminar-nu 0.4] [--ranges five] [--json F]

Pressure needs pyvista and scipy (the project's .venv); without them only Cd and Cl are compared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import build_family
import convergence
import drag_shares
import mesh_study
import sampling


def finest_cell(variant) -> float:
    """The edge (m, along x) of the cells at the body's finest surface level."""
    span = sampling.make_case.DOMAIN_MAX[0] - sampling.make_case.DOMAIN_MIN[0]
    return span / variant.base_cells[0] / 2 ** max(variant.surface_levels)


def solve(case: Path, variant) -> dict:
    """Mesh, solve and export one case; its Cd, Cl, convergence and seconds."""
    shutil.rmtree(case, ignore_errors=True)
    start = time.monotonic()
    sampling.make_case.write_case(case, variant)
    for log, command in (build_family.STEPS[:3] + build_family.STEPS[4:]):  # no internal export
        build_family.run_step(case, log, command)
    coefficients = (case / "postProcessing/forceCoeffs1/0/coefficient.dat").read_text()
    log = (case / "log.simpleFoam").read_text()
    verdict = convergence.judge(log, coefficients, build_family.CRITERIA)
    return {"cd": verdict.cd, "cl": last_column(coefficients, "Cl"), "converged": verdict.converged,
            "reason": verdict.reason, **drag_shares.log_split(log).record(),
            "cells": build_family.cell_count(case), "seconds": round(time.monotonic() - start, 1)}


def last_column(coefficient_dat: str, name: str) -> float:
    """The last line's value of column ``name`` in forceCoeffs' coefficient.dat."""
    lines = [ln for ln in coefficient_dat.splitlines() if ln.strip()]
    header = next(ln for ln in reversed(lines) if ln.startswith("#") and "Cd" in ln)
    columns = header.lstrip("#").split()
    return float(lines[-1].split()[columns.index(name)])


def surface_pressure(case: Path, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Face centres (moved back by ``shift`` along x), areas and kinematic pressure of the body."""
    import pyvista

    mesh = pyvista.read(next((case / "VTK_boundary").glob("*/boundary.vtp")))
    sized = mesh.compute_cell_sizes(length=False, area=True, volume=False)
    centres = np.asarray(mesh.cell_centers().points, dtype=np.float64) - np.array([shift, 0.0, 0.0])
    return centres, np.asarray(sized.cell_data["Area"], dtype=np.float64), np.asarray(mesh.cell_data["p"], np.float64)


def pressure_difference(a: tuple, b: tuple) -> float:
    """Area-weighted relative L2 of a's pressure against b's at a's faces (nearest face of b)."""
    from scipy.spatial import cKDTree

    centres, areas, p = a
    _, nearest = cKDTree(b[0]).query(centres)
    return float(np.sqrt(np.sum(areas * (p - b[2][nearest]) ** 2) / np.sum(areas * p ** 2)))


def study_body(work: Path, body: int, shape: dict, fractions: list[float], jobs: int, factor: float = 1.0,
               layers: int = 0, laminar_nu: float | None = None) -> dict:
    """Solve one body at each shift, its base grid refined by ``factor``, ``layers`` prism layers on
    the body (laminar flow at viscosity ``laminar_nu`` where given); its table rows and spreads."""
    base = sampling.variant(shape)
    if factor != 1.0:
        base = mesh_study.refined(shape, factor, base.end_time)
    base = sampling.with_settings(base, layers=layers)
    if laminar_nu is not None:
        base = sampling.with_settings(base, turbulence="laminar", nu=laminar_nu)
    cell = finest_cell(base)
    shifts = [f * cell for f in fractions]
    tag = (("" if factor == 1.0 else f"_x{factor:g}") + (f"_layers{layers}" if layers else "")
           + ("" if laminar_nu is None else f"_laminar{laminar_nu:g}"))
    cases = [work / f"run_{body}{tag}_shift{f:g}" for f in fractions]
    variants = [sampling.with_settings(base, x_nose=base.x_nose + s) for s in shifts]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(solve, cases, variants))
    for row, f, s in zip(rows, fractions, shifts):
        row.update(body=body, fraction=f, shift_m=round(s, 5))
    cds, cls = [r["cd"] for r in rows], [r["cl"] for r in rows]
    result = {"body": body, "base_factor": factor, "layers": layers, "finest_cell_m": cell, "rows": rows,
              "cd_std_over_mean": statistics.pstdev(cds) / abs(statistics.fmean(cds)),
              "cd_range_over_mean": (max(cds) - min(cds)) / abs(statistics.fmean(cds)),
              "cl_std": statistics.pstdev(cls), "cl_mean": statistics.fmean(cls)}
    try:
        fields = [surface_pressure(c, s) for c, s in zip(cases, shifts)]
    except ImportError:
        return result
    pairs = [pressure_difference(fields[i], fields[j]) for i, j in itertools.permutations(range(len(cases)), 2)]
    result["p_rel_l2_pairs_median"] = statistics.median(pairs)
    result["p_rel_l2_pairs_max"] = max(pairs)
    return result


def print_results(results: list[dict]) -> None:
    """One row per solve, then one per body."""
    print("| body | shift (cells) | shift m | cells | Cd | pressure share of Cd | Cl | converged | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in (row for res in results for row in res["rows"]):
        verdict = "yes" if r["converged"] else f"no ({r['reason']})"
        print(f"| run_{r['body']} | {r['fraction']:g} | {r['shift_m']:.4f} | {r['cells']} | {r['cd']:.4f} | "
              f"{r['cd_pressure_share']:.1%} | {r['cl']:.4f} | {verdict} | {r['seconds']:.0f} |")
    print("\n| body | Cd std / mean | Cd (max - min) / mean | Cl std | p rel. L2 between shifts (median, max) |")
    print("|---|---|---|---|---|")
    for res in results:
        pressure = (f"{res['p_rel_l2_pairs_median']:.3f}, {res['p_rel_l2_pairs_max']:.3f}"
                    if "p_rel_l2_pairs_median" in res else "-")
        print(f"| run_{res['body']} | {res['cd_std_over_mean']:.2%} | {res['cd_range_over_mean']:.2%} | "
              f"{res['cl_std']:.4f} | {pressure} |")


def main() -> None:
    """Solve each body at each shift and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path, help="folder for the cases")
    parser.add_argument("--bodies", type=int, nargs="+", default=[1, 2, 3], help="which bodies (run_<i>)")
    parser.add_argument("--n", type=int, default=36, help="the family's N (its Latin hypercube)")
    parser.add_argument("--seed", type=int, default=0, help="the family's seed")
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75],
                        help="shifts along x, in finest surface cells")
    parser.add_argument("--jobs", type=int, default=2, help="cases solved at once")
    parser.add_argument("--base-factor", type=float, default=1.0,
                        help="the base grid's cells multiplied by this in each direction (mesh_study.py's factor)")
    parser.add_argument("--layers", type=int, default=0, help="prism layers snappyHexMesh adds on the body")
    parser.add_argument("--laminar-nu", type=float, default=None,
                        help="solve laminar flow at this kinematic viscosity (m^2/s) instead of kOmegaSST")
    parser.add_argument("--ranges", choices=sorted(sampling.RANGES), default="car",
                        help="the family's shape parameter bounds (build_family.py's --ranges)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("WM_PROJECT_DIR", "/usr/share/openfoam")
    shapes = sampling.sample_parameters(args.n, args.seed, sampling.RANGES[args.ranges])
    results = [study_body(args.work, b, shapes[b - 1], args.shifts, args.jobs, args.base_factor, args.layers,
                          args.laminar_nu) for b in args.bodies]
    print_results(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
