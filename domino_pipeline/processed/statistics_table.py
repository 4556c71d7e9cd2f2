"""The statistics of every run of a processed folder, one row per run, in ``<processed_dir>/statistics.csv`` (columns:
docs/data_quality.md), read and saved; process_data.py writes it and run_quality.py finds the outliers in it."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from domino_pipeline.storage.atomic_store import write_bytes_atomic
from domino_pipeline.storage.byte_reader import read_bytes
from domino_pipeline.storage.object_store import join

TABLE_NAME = "statistics.csv"
AXES = ("x", "y", "z")  # a list of three values is a column per axis
TEXT_COLUMNS = ("run", "format", "source", "error", "published.error")


def table_location(processed_dir: str | os.PathLike) -> Path | str:
    """Where a processed folder's table is."""
    return join(processed_dir, TABLE_NAME)


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted names; a list of three named by axis (x, y, z), other lists by index."""
    found: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found |= flatten(value, f"{name}.")
        elif isinstance(value, (list, tuple)):
            labels = AXES if len(value) == 3 else range(len(value))
            found |= flatten(dict(zip(map(str, labels), value)), f"{name}.")
        else:
            found[name] = value
    return found


def save_table(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as CSV at the local ``path`` (atomically), text columns first; floats as ``repr`` (exact), None
    as an empty cell; return the path."""
    columns = [c for c in TEXT_COLUMNS if any(c in row for row in rows)]
    for row in rows:
        columns += [c for c in row if c not in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    return write_bytes_atomic(path, out.getvalue().encode())


def read_statistics_table(processed_dir: str | os.PathLike) -> list[dict] | None:
    """A processed folder's table rows (None: no table); ValueError naming a file that is not one."""
    location = table_location(processed_dir)
    data = read_bytes(location)
    if data is None:
        return None
    try:
        reader = csv.DictReader(io.StringIO(data.decode()))
        if reader.fieldnames is None or "run" not in reader.fieldnames:
            raise ValueError(f"{location}: not a statistics table (no run column)")
        return [{key: _value(key, text) for key, text in row.items()} for row in reader]
    except (UnicodeDecodeError, csv.Error) as err:
        raise ValueError(f"{location}: not a statistics table ({err})") from err


def _value(key: str, text: str | None) -> Any:
    if text is None or text == "":
        return None
    if key in TEXT_COLUMNS:
        return text
    try:
        return float(text)
    except ValueError:
        return text
