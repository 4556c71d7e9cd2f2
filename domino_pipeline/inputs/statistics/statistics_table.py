"""The statistics of every run of a processed folder, one row per run, in
``<processed_dir>/statistics.csv`` (its columns: docs/data_quality.md), which process_data.py
writes after processing and run_quality.py reads to find the outliers."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from domino_pipeline.storage.atomic_store import write_bytes_atomic
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.statistics.array_statistics import statistics_of_run
from domino_pipeline.processed.run_layout import ProcessedRunError
from domino_pipeline.inputs.processing.published_forces import read_published
from domino_pipeline.inputs.statistics.run_statistics import AXES, STATISTICS_VERSION
from domino_pipeline.processed.runs import ReadOptions, list_runs, open_run, run_name, stat_fingerprint
from domino_pipeline.storage.byte_source import read_bytes
from domino_pipeline.storage.object_store import is_url, join

TABLE_NAME = "statistics.csv"
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


def statistics_row(path: Path | str, profile: DatasetConfig, options: ReadOptions,
                   raw_dir: str | os.PathLike | None = None, previous: Mapping[str, dict] | None = None) -> dict:
    """A run's row: from its attributes, from ``previous`` while the run is unchanged, or from its arrays."""
    name = run_name(path)
    try:
        run = open_run(path, options)
    except (ProcessedRunError, OSError, ValueError) as err:
        return {"run": name, "format": "", "error": str(err).splitlines()[0]}
    stored = run.attrs.get("statistics")
    if isinstance(stored, Mapping) and stored.get("version") == STATISTICS_VERSION:
        return {"run": name, "format": run.format, **flatten(stored)}
    source = stat_fingerprint(path)
    old = (previous or {}).get(name)
    if old is not None and old.get("source") == source and not old.get("error") \
            and old.get("version") == STATISTICS_VERSION:
        return dict(old)
    try:
        statistics = statistics_of_run(run, profile, options.global_params, *_published(name, profile, raw_dir))
    except (ProcessedRunError, OSError, ValueError) as err:
        return {"run": name, "format": run.format, "source": source, "error": str(err).splitlines()[0]}
    return {"run": name, "format": run.format, "source": source, **flatten(statistics)}


def _published(name: str, profile: DatasetConfig, raw_dir: str | os.PathLike | None) -> tuple:
    """(what the raw folder of run ``name`` publishes, the error reading it); (None, None) without one."""
    index = profile.run_index(name)
    if raw_dir is None or is_url(raw_dir) or index is None or not (Path(raw_dir) / name).is_dir():
        return None, None
    try:
        return read_published(Path(raw_dir) / name, index, profile), None
    except (ValueError, OSError) as err:
        return None, str(err).splitlines()[0]


def collect_statistics(processed_dir: str | os.PathLike, profile: DatasetConfig, options: ReadOptions,
                       raw_dir: str | os.PathLike | None = None) -> list[dict]:
    """One row per run of ``processed_dir``, in order, the existing table's rows reused where they hold."""
    previous = {row["run"]: row for row in read_statistics_table(processed_dir) or []}
    return [statistics_row(path, profile, options, raw_dir, previous) for path in list_runs(processed_dir)]


def write_statistics_table(processed_dir: str | os.PathLike, profile: DatasetConfig, options: ReadOptions,
                           raw_dir: str | os.PathLike | None = None) -> Path:
    """Write the table of every run of the local folder ``processed_dir`` (atomically); its path."""
    if is_url(processed_dir):
        raise ValueError(f"{processed_dir}: the statistics table is written into a local processed folder")
    return save_table(table_location(processed_dir), collect_statistics(processed_dir, profile, options, raw_dir))


def save_table(path: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as a table at the local ``path`` (atomically); return the path."""
    return write_bytes_atomic(path, table_text(rows).encode())


def table_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV: text columns first; floats as ``repr`` (exact), None as an empty cell."""
    columns = [c for c in TEXT_COLUMNS if any(c in row for row in rows)]
    for row in rows:
        columns += [c for c in row if c not in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    return out.getvalue()


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
