"""How far the family's mesh is from mesh independence: one body of the family solved at the
family's mesh and at finer ones (base grid refined by a factor, the same surface and wake
levels), Cd and convergence of each printed as a table.

    WM_PROJECT_DIR=/usr/share/openfoam python tools/openfoam_family/mesh_study.py /tmp/mesh_study \\
        --body 1 --factors 1 1.5 2 [--iterations 1500]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import build_family
import convergence
import sampling


def refined(shape: dict[str, float], factor: float, iterations: int):
    """The body's Variant with the base grid's cells multiplied by ``factor`` in each direction,
    solved for ``iterations``."""
    return sampling.with_settings(sampling.variant(shape, sampling.Settings(base_factor=factor)), end_time=iterations)


def solve(case: Path, variant) -> tuple[int, convergence.Verdict, float]:
    """Mesh and solve one case; (cells, verdict, seconds)."""
    shutil.rmtree(case, ignore_errors=True)
    start = time.monotonic()
    sampling.make_case.write_case(case, variant)
    for log, command in build_family.STEPS[:3]:  # blockMesh, snappyHexMesh, simpleFoam
        build_family.run_step(case, log, command)
    verdict = convergence.judge((case / "log.simpleFoam").read_text(),
                                (case / "postProcessing/forceCoeffs1/0/coefficient.dat").read_text(),
                                build_family.CRITERIA)
    return build_family.cell_count(case), verdict, time.monotonic() - start


def main() -> None:
    """Solve the body at each factor and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path, help="folder for the cases")
    parser.add_argument("--body", type=int, default=1, help="which body of the family (run_<body>)")
    parser.add_argument("--n", type=int, default=36, help="the family's N (its Latin hypercube)")
    parser.add_argument("--seed", type=int, default=0, help="the family's seed")
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.5, 2.0])
    parser.add_argument("--iterations", type=int, default=sampling.MESH["end_time"],
                        help="simpleFoam iterations (finer meshes converge more slowly)")
    args = parser.parse_args()
    os.environ.setdefault("WM_PROJECT_DIR", "/usr/share/openfoam")
    shape = sampling.sample_parameters(args.n, args.seed)[args.body - 1]
    print(f"{args.iterations} iterations")
    print("| base grid factor | base cells | cells | Cd | Cd change vs first | converged | seconds |")
    print("|---|---|---|---|---|---|---|")
    first = None
    for factor in args.factors:
        variant = refined(shape, factor, args.iterations)
        cells, verdict, seconds = solve(args.work / f"run_{args.body}_x{factor:g}", variant)
        first = verdict.cd if first is None else first
        print(f"| {factor:g} | {variant.base_cells} | {cells} | {verdict.cd:.4f} | {verdict.cd / first - 1:+.1%} | "
              f"{verdict.converged} ({verdict.reason}) | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
