"""The statistics table of a processed folder written (processed/statistics_table.py): each run's
row from its attributes, from the table before while the run is unchanged, or from its arrays; and
process_data.py's closing summary of the table and the runs quality would drop."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from domino_pipeline.configuration.config import DataConfig, PhysicsConfig
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.processing.published_forces import read_published
from domino_pipeline.inputs.statistics.array_statistics import statistics_of_run
from domino_pipeline.inputs.statistics.run_statistics import STATISTICS_VERSION
from domino_pipeline.processed.run_layout import ProcessedRunError
from domino_pipeline.processed.run_quality import quality_selection
from domino_pipeline.processed.runs import ReadOptions, list_runs, open_run, read_options_from_config, run_name, stat_fingerprint
from domino_pipeline.processed.statistics_table import flatten, read_statistics_table, save_table, table_location
from domino_pipeline.storage.object_store import is_url


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


def quality_summary(data: DataConfig, physics: PhysicsConfig, dataset: DatasetConfig) -> str:
    """process_data.py's last lines: the statistics table written, and the runs quality would drop."""
    table = write_statistics_table(data.processed_dir, dataset, read_options_from_config(data, physics), data.raw_dir)
    rows = read_statistics_table(data.processed_dir)
    passed = sum(bool(row.get("source")) for row in rows)
    selection = quality_selection(list_runs(data.processed_dir), data, dataset)
    return (f"statistics: {table} ({len(rows) - passed} runs from their attributes, {passed} from a pass "
            f"over their arrays)\n{selection.summary()}")
