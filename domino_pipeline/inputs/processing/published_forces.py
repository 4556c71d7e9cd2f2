"""The force coefficients and reference values a run folder publishes beside its meshes, read
through the dataset profile (``dataset.coefficients``, ``dataset.references``) from CSV or
OpenFOAM forceCoeffs files (docs/raw_inputs.md, "Published coefficients")."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from domino_pipeline.configuration.dataset_profile import DatasetConfig, ReferencesProfile


@dataclass(frozen=True)
class References:
    """What coefficients are made dimensionless with: area (m^2), length (m), the moments' centre (m)."""

    area: float
    length: float
    centre: tuple[float, float, float]


@dataclass(frozen=True)
class Published:
    """A run's published coefficients (own, constant references), those references and its speed."""

    own: dict[str, float] | None
    constant: dict[str, float] | None
    own_references: References | None
    constant_references: References
    velocity: float | None = None

    def as_attrs(self) -> dict:
        """The record a processed run keeps in its attributes (plain JSON values)."""
        def refs(value: References | None) -> dict | None:
            return None if value is None else {"area": value.area, "length": value.length, "centre": list(value.centre)}

        return {"own": self.own, "constant": self.constant, "own_references": refs(self.own_references),
                "constant_references": refs(self.constant_references), "velocity": self.velocity}

    @classmethod
    def from_attrs(cls, record: dict) -> Published:
        """The inverse of ``as_attrs``."""
        def refs(value: dict | None) -> References | None:
            return None if value is None else References(float(value["area"]), float(value["length"]),
                                                         tuple(float(v) for v in value["centre"]))

        return cls(own=record["own"], constant=record["constant"], own_references=refs(record["own_references"]),
                   constant_references=refs(record["constant_references"]), velocity=record.get("velocity"))


def read_first_row(path: Path) -> dict[str, str]:
    """The one data row of a CSV, keyed by lower-case column name, as strings; ValueError naming the file."""
    with open(path, newline="") as file:
        rows = [row for row in csv.reader(file, skipinitialspace=True) if row]
    if len(rows) < 2 or len(rows[1]) != len(rows[0]):
        raise ValueError(f"{path}: expected a header and one row of as many values, got {rows[:2]}")
    return {name.strip().lower(): value.strip() for name, value in zip(rows[0], rows[1])}


def read_openfoam_row(path: Path) -> dict[str, str]:
    """A forceCoeffs file's header entries and last line as one row; ValueError naming a file cut short."""
    header, names, last, comment = {}, None, None, None
    with open(path) as file:
        for line in file:
            text = line.strip()
            if text.startswith("#"):
                comment = text.lstrip("#").strip()
                key, colon, value = comment.partition(":")
                if colon and key.strip():
                    header[key.strip().lower()] = value.strip()
            elif text:
                names = comment.split() if names is None and comment else names
                last = text.split()
    if names is None or last is None:
        raise ValueError(f"{path}: no values under a comment line naming the columns (a forceCoeffs file)")
    if len(last) != len(names):
        raise ValueError(f"{path}: the last line has {len(last)} values for the {len(names)} columns "
                         f"{names} (a line cut short?)")
    return header | {name.lower(): value for name, value in zip(names, last)}


def read_row(path: Path, format: str) -> dict[str, str]:
    """The one row of a published file of ``format`` (csv, openfoam); ValueError naming a file not text."""
    try:
        return read_first_row(path) if format == "csv" else read_openfoam_row(path)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not text (byte {err.start} is not {err.encoding})") from None


def _number(row: dict[str, str], column: str, path: Path) -> float:
    text = _cell(row, column, path)
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{path}: column {column} holds {text!r}, not a number") from None


def _vector(row: dict[str, str], columns: str | list[str], path: Path) -> tuple[float, float, float]:
    """Three numbers: from three columns, or from one holding ``(x y z)`` / ``x y z``."""
    if isinstance(columns, list):
        values = [_number(row, column, path) for column in columns]
    else:
        text = _cell(row, columns, path)
        try:
            values = [float(v) for v in re.split(r"[\s,]+", text.strip().strip("()[]").strip())]
        except ValueError:
            values = []
    if len(values) != 3:
        raise ValueError(f"{path}: column {columns} must hold 3 numbers (x y z), not {row.get(str(columns).lower())!r}")
    return values[0], values[1], values[2]


def _cell(row: dict[str, str], column: str, path: Path) -> str:
    if column.lower() not in row:
        raise ValueError(f"{path}: no column {column}; columns {sorted(row)}")
    return row[column.lower()]


def _run_file(run_dir: Path, pattern: str | None, index: str, key: str) -> Path | None:
    """The run's file of ``pattern`` (None: absent); ValueError naming ``key`` when several match."""
    if pattern is None:
        return None
    matches = sorted(p for p in run_dir.glob(pattern.replace("{index}", index)) if p.is_file())
    if len(matches) > 1:
        names = [str(p.relative_to(run_dir)) for p in matches]
        raise ValueError(f"{run_dir}: {key} ({pattern}) matches {len(matches)} files {names}; keep one "
                         f"(the one of the exported time) or set {key} to it")
    return matches[0] if matches else None


def read_coefficients(path: Path, columns: dict[str, str], format: str = "csv") -> dict[str, float]:
    """The coefficients of a published file by the profile's columns; ValueError naming the file."""
    row = read_row(path, format)
    return {name: _number(row, column, path) for name, column in columns.items()}


def read_velocity(path: Path, profile: ReferencesProfile) -> float | None:
    """The speed a references file states (None: no such column); ValueError unless positive."""
    if "velocity" not in profile.columns:
        return None
    velocity = _number(read_row(path, profile.format), profile.columns["velocity"], path)
    if not velocity > 0:
        raise ValueError(f"{path}: the free-stream speed ({profile.columns['velocity']}) must be positive, "
                         f"not {velocity}")
    return velocity


def read_references(path: Path, profile: ReferencesProfile, which: str = "own") -> References:
    """A run's own or constant (``which``) references from its file (absent columns: the profile's)."""
    row = read_row(path, profile.format)
    columns = profile.columns if which == "own" else profile.constant_columns
    return References(
        area=_number(row, columns["area"], path) if "area" in columns else profile.area,
        length=_number(row, columns["length"], path) if "length" in columns else profile.length,
        centre=_vector(row, columns["centre"], path) if "centre" in columns else tuple(profile.centre),
    )


def constant_references(profile: ReferencesProfile) -> References:
    """The dataset's constant references."""
    return References(profile.area, profile.length, tuple(profile.centre))


def read_published(run_dir: Path, index: str, profile: DatasetConfig) -> Published:
    """What run ``run_dir`` publishes (absent: None); ValueError naming a file of bad references."""
    coefficients, references = profile.coefficients, profile.references
    own, constant = (_run_file(run_dir, pattern, index, f"dataset.coefficients.{key}")
                     for key, pattern in (("own", coefficients.own), ("constant", coefficients.constant)))
    reference_file = _run_file(run_dir, references.file, index, "dataset.references.file")
    own_references = read_references(reference_file, references) if reference_file else None
    if own_references is not None and not (own_references.area > 0 and own_references.length > 0):
        raise ValueError(f"{reference_file}: the reference area and length must be positive, not "
                         f"{own_references.area} and {own_references.length}")
    constant_refs = (read_references(reference_file, references, "constant") if reference_file
                     else constant_references(references))
    return Published(
        own=read_coefficients(own, coefficients.columns, coefficients.format) if own else None,
        constant=read_coefficients(constant, coefficients.columns, coefficients.format) if constant else None,
        own_references=own_references,
        constant_references=constant_refs,
        velocity=read_velocity(reference_file, references) if reference_file else None,
    )
