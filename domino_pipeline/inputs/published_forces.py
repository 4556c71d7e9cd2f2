"""The force coefficients and reference values a DrivAerML run folder publishes beside its meshes.

    run_<i>/force_mom_<i>.csv   one row: Cd, Cl, Cs, ... (coefficients with the variant's own A_ref)
    run_<i>/geo_ref_<i>.csv     one row: lRef, aRef, ... (the variant's wheelbase and frontal area)

Columns are found by name, case-insensitive, surrounding spaces ignored (the published headers
put a space after each comma); other columns are kept out of the way.

    published_coefficients(Path("run_7"))  # {"cd": 0.30, "cl": -0.05} or None without the file
    published_reference_area(Path("run_7"))  # 2.22 or None
"""

from __future__ import annotations

import csv
from pathlib import Path

FORCE_FILE = "force_mom_{index}.csv"
GEOMETRY_REFERENCE_FILE = "geo_ref_{index}.csv"
COEFFICIENTS = ("cd", "cl")


def run_index(run_dir: Path) -> str:
    """The ``<i>`` of a ``run_<i>`` folder."""
    return run_dir.name.removeprefix("run_")


def read_first_row(path: Path) -> dict[str, float]:
    """The first data row of a one-row CSV, keyed by lower-case column name; ValueError naming
    the file when it has no data row or a value is not a number."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file, skipinitialspace=True))
    if len(rows) < 2 or len(rows[1]) != len(rows[0]):
        raise ValueError(f"{path}: expected a header and one row of as many values, got {rows[:2]}")
    try:
        return {name.strip().lower(): float(value) for name, value in zip(rows[0], rows[1])}
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def published_coefficients(run_dir: Path) -> dict[str, float] | None:
    """``{"cd", "cl"}`` of the run's ``force_mom_<i>.csv``; None when the run has none."""
    path = run_dir / FORCE_FILE.format(index=run_index(run_dir))
    if not path.is_file():
        return None
    row = read_first_row(path)
    missing = [name for name in COEFFICIENTS if name not in row]
    if missing:
        raise ValueError(f"{path}: no column {missing}; columns {sorted(row)}")
    return {name: row[name] for name in COEFFICIENTS}


def published_reference_area(run_dir: Path) -> float | None:
    """The variant's frontal area aRef (m^2) of the run's ``geo_ref_<i>.csv``; None without one."""
    path = run_dir / GEOMETRY_REFERENCE_FILE.format(index=run_index(run_dir))
    if not path.is_file():
        return None
    row = read_first_row(path)
    if not row.get("aref", 0.0) > 0:
        raise ValueError(f"{path}: needs a positive aRef column; got {row}")
    return row["aref"]
