"""Print the text OpenFOAM itself wrote about a solved fixture case, for tests to compare with.

Collects, verbatim from the case's logs: the commands run (their 'Exec' lines), checkMesh's
statistics (cell counts by type, patch face counts, total volume), the patch integrals of
postProcess -dict system/referenceIntegrals (total patch area, area integrals of p and
wallShearStress), and the forces / forceCoeffs output at the final time.
Usage: python write_reference.py CASE_DIR LAST_TIME ELAPSED_SECONDS > openfoam_reference.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

LOGS = ("blockMesh", "snappyHexMesh", "checkMesh", "simpleFoam", "writeCellCentres",
        "referenceIntegrals", "foamToVTK.internal", "foamToVTK.boundary")


def _lines(case: Path, log: str) -> list[str]:
    return (case / f"log.{log}").read_text().splitlines()


def _between(lines: list[str], start: str, stop: str) -> list[str]:
    """Lines from the first starting with `start` up to and including the next starting with `stop`."""
    i = next(k for k, line in enumerate(lines) if line.startswith(start))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith(stop))
    return lines[i:j + 1]


def _final_time(lines: list[str], last: str) -> list[str]:
    """simpleFoam's function-object output of the final iteration (after its ExecutionTime)."""
    i = max(k for k, line in enumerate(lines) if line == f"Time = {last}")
    k = next(k for k in range(i, len(lines)) if lines[k].startswith("ExecutionTime"))
    return [line for line in lines[k + 1:] if line.strip() and line != "End"]


def report(case: Path, last: str, elapsed: str) -> str:
    """Assemble the reference text of one case."""
    exec_lines = [line.split(":", 1)[1].strip() for log in LOGS
                  for line in _lines(case, log) if line.startswith("Exec ")]
    build = next(line for line in _lines(case, "simpleFoam") if line.startswith("Build "))
    out = [
        f"OpenFOAM output of this run ({build.strip()}), final time {last}.",
        f"Made by tools/openfoam_fixture/run.sh in {elapsed} s (mesh, solve, post-process, export).",
        "Commands, in order (their Exec lines):",
        *[f"    {cmd}" for cmd in exec_lines],
        "",
        "== checkMesh",
        *_between(_lines(case, "checkMesh"), "Mesh stats", "Mesh OK"),
        "",
        "== postProcess -dict system/referenceIntegrals -latestTime -fields '(p wallShearStress)'",
        *[line for line in _between(_lines(case, "referenceIntegrals"), "Executing functionObjects", "End")
          if line.strip()],
        "",
        f"== simpleFoam, function objects at the final time {last}",
        *_final_time(_lines(case, "simpleFoam"), last),
    ]
    for name in ("force.dat", "moment.dat"):
        lines = (case / "postProcessing/forces1/0" / name).read_text().splitlines()
        out += ["", f"== postProcessing/forces1/0/{name} (header and last line)",
                *[line for line in lines if line.startswith("#")], lines[-1]]
    return "\n".join(out) + "\n"


def main() -> None:
    """Print the report of the case named on the command line."""
    case, last, elapsed = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    sys.stdout.write(report(case, last, elapsed))


if __name__ == "__main__":
    main()
