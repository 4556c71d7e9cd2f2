"""Build a family of OpenFOAM car-like bodies as `dataset=openfoam` run folders.

Samples the bodies' shape parameters by a seeded Latin hypercube (sampling.py), writes each
case with tools/openfoam_fixture/make_case.py at the family's one set of mesh and solver
settings, meshes (blockMesh, snappyHexMesh), solves (simpleFoam), exports (foamToVTK), judges
convergence (convergence.py) and writes run_<i>/ (converged) or not_converged/run_<i>/.
Cases build in parallel; a rerun after a kill skips finished cases (bookkeeping.py).

    WM_PROJECT_DIR=/usr/share/openfoam nice -n 5 python tools/openfoam_family/build_family.py \\
        /work/data/openfoam_family --n 36 --seed 0 --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import bookkeeping
import convergence
import drag_shares
import sampling

make_case = sampling.make_case
CRITERIA = convergence.Criteria(residual_tol=1e-4, cd_tol=0.005, window=0.2)
BODY_PATCHES = "(body_upper body_lower)"
STEPS = (
    ("blockMesh", ["blockMesh"]),
    ("snappyHexMesh", ["snappyHexMesh", "-overwrite"]),
    ("simpleFoam", ["simpleFoam"]),
    ("foamToVTK.internal", ["foamToVTK", "-latestTime", "-no-boundary", "-fields", "(p U nut)",
                            "-name", "VTK_internal"]),
    ("foamToVTK.boundary", ["foamToVTK", "-latestTime", "-no-internal", "-one-boundary", "-patches",
                            BODY_PATCHES, "-fields", "(p nut wallShearStress)", "-name", "VTK_boundary"]),
)


class StepFailed(RuntimeError):
    """An OpenFOAM application of a case exited with an error."""


def _die_with_parent() -> None:
    """In the child, before exec: be killed when the thread that started it dies (Linux), so a
    killed build leaves no solver running behind it."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_step(case: Path, log: str, command: list[str]) -> None:
    """Run one OpenFOAM application in ``case``, its output in log.<log>; StepFailed if it fails."""
    with (case / f"log.{log}").open("w") as out:
        code = subprocess.call(command, cwd=case, stdout=out, stderr=subprocess.STDOUT,
                               preexec_fn=_die_with_parent)
    if code != 0:
        raise StepFailed(f"{case}/log.{log}: {command[0]} exited with {code}")


def cell_count(case: Path) -> int:
    """Cells of the snapped mesh, from snappyHexMesh's log."""
    counts = re.findall(r"cells:(\d+)", (case / "log.snappyHexMesh").read_text())
    return int(counts[-1]) if counts else -1


def copy_zero_nut(case: Path) -> None:
    """A laminar case writes no nut: its zero initial field into the last time, so that the run
    folders hold the same fields in every flow."""
    times = [d for d in case.iterdir() if d.is_dir() and re.fullmatch(r"[0-9.]+", d.name)]
    last = max(times, key=lambda d: float(d.name))
    if last.name != "0":
        shutil.copy(case / "0" / "nut", last / "nut")


def stage_outputs(case: Path, staging: Path) -> None:
    """Copy the run folder's four files (as tests/data/openfoam/run_1) into ``staging``."""
    staging.mkdir(parents=True)
    shutil.copy(case / "body.stl", staging / "body.stl")
    shutil.copy(next((case / "VTK_internal").glob("*/internal.vtu")), staging / "internal.vtu")
    shutil.copy(next((case / "VTK_boundary").glob("*/boundary.vtp")), staging / "boundary.vtp")
    shutil.copy(case / "postProcessing/forceCoeffs1/0/coefficient.dat", staging / "coefficient.dat")


def build_case(root: Path, work: Path, index: int, shape: dict[str, float], keep: bool,
               settings: sampling.Settings = sampling.RANS) -> dict:
    """Write, mesh, solve, export and judge case ``index`` at ``settings``; commit it; return its record."""
    bookkeeping.clear_half_done(root, index, work)
    case = work / f"case_{index}"
    start = time.monotonic()
    info = make_case.write_case(case, sampling.variant(shape, settings))
    record = {"index": index, "shape": shape, "angles": sampling.derived_angles(shape),
              "Aref": info["Aref"], "triangles": int(info["triangles"])}
    staging = bookkeeping.staging_folder(root, index)
    try:
        for log, command in STEPS:
            run_step(case, log, command)
            if log == "simpleFoam" and settings.turbulence == "laminar":
                copy_zero_nut(case)
    except StepFailed as failed:
        record.update(converged=False, reason=str(failed), seconds=round(time.monotonic() - start, 1))
        staging.mkdir(parents=True)
        bookkeeping.commit_case(root, index, record)
        return record
    log = (case / "log.simpleFoam").read_text()
    verdict = convergence.judge(log, (case / "postProcessing/forceCoeffs1/0/coefficient.dat").read_text(), CRITERIA)
    stage_outputs(case, staging)
    record.update(dataclasses.asdict(verdict), **drag_shares.log_split(log).record(),
                  reynolds=round(drag_shares.reynolds(make_case.U_INF, shape["length"], settings.nu), 1),
                  cells=cell_count(case), seconds=round(time.monotonic() - start, 1))
    bookkeeping.commit_case(root, index, record)
    if not keep:
        shutil.rmtree(case, ignore_errors=True)
    return record


def family_settings(settings: sampling.Settings = sampling.RANS,
                    ranges: tuple[sampling.Range, ...] = sampling.PARAMETERS) -> dict:
    """Everything that fixes the family besides N and the seed: ranges, mesh, solver, criteria."""
    return {"parameters": [dataclasses.asdict(p) for p in ranges],
            "mesh": {k: list(v) if isinstance(v, tuple) else v for k, v in sampling.mesh(settings).items()},
            "criteria": dataclasses.asdict(CRITERIA), "openfoam": f"v1912 simpleFoam {settings.describe()}"}


def check_family(root: Path, n: int, seed: int, settings: sampling.Settings = sampling.RANS,
                 ranges: tuple[sampling.Range, ...] = sampling.PARAMETERS) -> None:
    """Write family.json on a new family; refuse a folder built with other settings."""
    wanted = {"n": n, "seed": seed, **family_settings(settings, ranges)}
    path = root / "family.json"
    if path.is_file():
        found = json.loads(path.read_text())
        differ = sorted(k for k in set(wanted) | set(found) if wanted.get(k) != found.get(k))
        if differ:
            sys.exit(f"{path}: family built with other settings ({', '.join(differ)} differ); use another folder")
        return
    bookkeeping.write_atomic(path, json.dumps(wanted, indent=1) + "\n")


def progress_line(done: int, total: int, record: dict, started: float) -> str:
    """One line of progress for a finished case."""
    state = "converged" if record["converged"] else f"NOT converged ({record['reason']})"
    cd = f"Cd {record['cd']:.4f}" if "cd" in record else "no Cd"
    return (f"[{done}/{total}] run_{record['index']}: {state}, {cd}, {record.get('cells', '?')} cells, "
            f"{record['seconds']:.0f} s (elapsed {time.monotonic() - started:.0f} s)")


RESIDUAL_FIELDS = ("Ux", "Uy", "Uz", "p", "k", "omega")
# The drag's parts go to convergence.csv, not parameters.csv: a parameter table's every column
# but run, Cd, Cl, Aref, cells and angles is read as a shape parameter by the learning benchmark.
DRAG_COLUMNS = {"cd_pressure": "Cd_pressure", "cd_viscous": "Cd_viscous", "cd_pressure_share": "Cd_pressure_share"}


def write_tables(root: Path, indices: list[int]) -> list[dict]:
    """parameters.csv (the family: converged runs' shape parameters) and convergence.csv (every
    sampled case's verdict); return the records."""
    records = [r for r in (bookkeeping.read_record(root, i) for i in indices) if r is not None]
    names = [p.field for p in sampling.PARAMETERS]
    with (root / "parameters.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", *names, "windscreen_angle_deg", "slant_angle_deg", "Aref", "cells", "Cd"])
        for r in (r for r in records if r["converged"]):
            out.writerow([f"run_{r['index']}", *(r["shape"][k] for k in names), r["angles"]["windscreen_angle_deg"],
                          r["angles"]["slant_angle_deg"], f"{r['Aref']:.6g}", r["cells"], f"{r['cd']:.6g}"])
    with (root / "convergence.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", "converged", "iterations", "Cd", "Cd_rel_range_last_20pct",
                      *(f"residual_{k}" for k in RESIDUAL_FIELDS), *DRAG_COLUMNS.values(), "Re", "cells", "seconds",
                      "reason"])
        for r in records:
            res = r.get("residuals", {})
            out.writerow([f"run_{r['index']}", r["converged"], r.get("iterations", ""),
                          f"{r['cd']:.6g}" if "cd" in r else "", f"{r.get('cd_rel_range', float('nan')):.3e}",
                          *(f"{res[k]:.2e}" if k in res else "" for k in RESIDUAL_FIELDS),
                          *(f"{r[k]:.6g}" if k in r else "" for k in DRAG_COLUMNS), r.get("reynolds", ""),
                          r.get("cells", ""), r["seconds"], r["reason"]])
    return records


def summary(records: list[dict]) -> str:
    """Counts, the Cd spread of the converged cases, and their pressure share of drag and Reynolds numbers
    (the last two where every converged case has them: families built before they were recorded have not)."""
    converged = [r for r in records if r["converged"]]
    cds = [r["cd"] for r in converged]
    text = f"{len(cds)} of {len(records)} cases converged"
    if cds:
        mean = sum(cds) / len(cds)
        text += (f"; Cd min {min(cds):.4f}, mean {mean:.4f}, max {max(cds):.4f} "
                 f"({(min(cds) - mean) / mean:+.1%} .. {(max(cds) - mean) / mean:+.1%} around the mean)")
    shares = [r["cd_pressure_share"] for r in converged if "cd_pressure_share" in r]
    if shares and len(shares) == len(converged):
        share = drag_shares.spread(shares)
        numbers = [r["reynolds"] for r in converged]
        text += (f"; pressure share of drag min {share['min']:.1%}, median {share['median']:.1%}, "
                 f"max {share['max']:.1%}; Re (U length / nu) {min(numbers):,.0f} .. {max(numbers):,.0f}")
    return text


def build(root: Path, work: Path, n: int, seed: int, jobs: int, keep: bool,
          settings: sampling.Settings = sampling.RANS,
          ranges: tuple[sampling.Range, ...] = sampling.PARAMETERS) -> list[dict]:
    """Build every unfinished case of the family (shapes drawn over ``ranges``) at ``settings``
    with ``jobs`` cases at a time."""
    root.mkdir(parents=True, exist_ok=True)
    check_family(root, n, seed, settings, ranges)
    shapes = sampling.sample_parameters(n, seed, ranges)
    indices = list(range(1, n + 1))
    todo = bookkeeping.pending(root, indices)
    print(f"{root}: {n - len(todo)} of {n} cases finished, building {len(todo)} with {jobs} processes", flush=True)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(build_case, root, work, i, shapes[i - 1], keep, settings) for i in todo]
        for done, future in enumerate(as_completed(futures), start=n - len(todo) + 1):
            print(progress_line(done, n, future.result(), started), flush=True)
    return write_tables(root, indices)


def main() -> None:
    """Parse the command line and build the family."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the family's folder (run_<i>/ written here)")
    parser.add_argument("--n", type=int, default=36, help="bodies sampled (default 36, so that >= 32 converge)")
    parser.add_argument("--seed", type=int, default=0, help="the Latin hypercube's seed")
    parser.add_argument("--jobs", type=int, default=2, help="cases built at once (one core each)")
    parser.add_argument("--work", type=Path, default=None,
                        help="case folders (default: <root>/.cases); each removed once its case is done")
    parser.add_argument("--keep-cases", action="store_true", help="keep each OpenFOAM case folder")
    parser.add_argument("--laminar-nu", type=float, default=None,
                        help="laminar flow at this kinematic viscosity (m^2/s); default: kOmegaSST at 1.5e-5")
    parser.add_argument("--base-factor", type=float, default=1.0,
                        help="the base grid's cells multiplied by this in each direction (default 1: 28 x 12 x 7)")
    parser.add_argument("--ranges", choices=sorted(sampling.RANGES), default="car",
                        help="the shape parameters' bounds (sampling.py): car (default), wide (Cd spread further) "
                             "or five (five of them varied, the rest fixed)")
    args = parser.parse_args()
    os.environ.setdefault("WM_PROJECT_DIR", "/usr/share/openfoam")
    work = args.work or args.root / ".cases"
    settings = sampling.Settings(base_factor=args.base_factor)
    if args.laminar_nu is not None:
        settings = dataclasses.replace(settings, turbulence="laminar", nu=args.laminar_nu)
    records = build(args.root.resolve(), work.resolve(), args.n, args.seed, args.jobs, args.keep_cases, settings,
                    sampling.RANGES[args.ranges])
    print(summary(records), flush=True)


if __name__ == "__main__":
    main()
