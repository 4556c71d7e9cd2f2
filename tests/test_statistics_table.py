"""A processed folder's statistics table: rows from the runs' attributes or from a pass over their
arrays, written exactly and read back, rows of unchanged runs reused, unreadable runs named."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import DEFAULTS
from curator_fixtures import write_curator_npz

import domino_pipeline.inputs.statistics.table_writer as table_writer
from domino_pipeline.inputs.statistics.table_writer import write_statistics_table
from domino_pipeline.processed.run_quality import judge
from domino_pipeline.inputs.statistics.run_statistics import STATISTICS_VERSION
from domino_pipeline.processed.runs import DEFAULT_OPTIONS, load_run, open_run
from domino_pipeline.processed.statistics_table import TABLE_NAME, flatten, read_statistics_table


@pytest.fixture()
def folder(tiny_processed_dir: Path, tmp_path: Path) -> Path:
    """run_1 as processed, run_2 in the curator's npz form."""
    out = tmp_path / "processed"
    out.mkdir()
    shutil.copytree(tiny_processed_dir / "run_1.zarr", out / "run_1.zarr")
    write_curator_npz(out / "run_2.npz", load_run(tiny_processed_dir / "run_2.zarr"))
    return out


def test_rows_round_trip_exactly_and_passes_fill_in_other_forms(folder, tiny_processed_dir, tiny_raw_dir):
    path = write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS, tiny_raw_dir)
    assert path == folder / TABLE_NAME
    first, second = read_statistics_table(folder)
    assert (first["run"], first["format"], second["run"], second["format"]) == \
        ("run_1", "processed", "run_2", "curator-npz")
    stored = flatten(open_run(folder / "run_1.zarr").attrs["statistics"])
    assert {k: v for k, v in first.items() if v is not None and k not in ("run", "format")} == \
        {k: float(v) for k, v in stored.items() if v is not None}
    streamed = flatten(open_run(tiny_processed_dir / "run_2.zarr").attrs["statistics"])
    assert second["source"] and second["published.own.cd"] == streamed["published.own.cd"]  # from the raw folder
    assert second["surface.fields.pMeanTrim.std"] == pytest.approx(streamed["surface.fields.pMeanTrim.std"], rel=1e-9)
    assert second.get("surface.cells.aspect_ratio_max") is None  # no polygons stored


def test_unchanged_runs_are_not_passed_over_again(folder, monkeypatch):
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    before = read_statistics_table(folder)
    calls = []
    real = table_writer.statistics_of_run
    monkeypatch.setattr(table_writer, "statistics_of_run", lambda *a, **k: calls.append(1) or real(*a, **k))
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    assert calls == [] and read_statistics_table(folder) == before
    arrays = dict(np.load(folder / "run_2.npz"))
    arrays["volume_fields"] = arrays["volume_fields"] * 2
    np.savez(folder / "run_2.npz", **arrays)
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    after = read_statistics_table(folder)[1]
    assert calls == [1] and after["volume.fields.pMeanTrim.std"] == pytest.approx(
        2 * before[1]["volume.fields.pMeanTrim.std"], rel=1e-9)


def test_an_unreadable_published_file_is_a_reason_to_reject(folder, tiny_raw_dir, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw_dir / "run_2", raw / "run_2")
    (raw / "run_2" / "force_mom_2.csv").write_text("Cd, Cl\nx, 1\n")
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS, raw)
    row = read_statistics_table(folder)[1]
    assert row["published.error"].endswith("force_mom_2.csv: column Cd holds 'x', not a number")
    verdicts = judge([row], DEFAULTS.data.quality, DEFAULTS.dataset)
    assert verdicts.rejected["run_2"][0].startswith("published coefficients unreadable: ")


def test_an_unreadable_run_gets_a_row_naming_the_problem(folder):
    (folder / "run_3.npz").write_bytes(b"not a zip")
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    row = read_statistics_table(folder)[2]
    assert row["run"] == "run_3" and "run_3.npz" in row["error"]


def test_pandas_reads_the_table(folder):
    pandas = pytest.importorskip("pandas")
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    frame = pandas.read_csv(folder / TABLE_NAME)
    assert list(frame["run"]) == ["run_1", "run_2"]
    assert frame["volume.count"].tolist() == [r["volume.count"] for r in read_statistics_table(folder)]


def test_no_table_and_not_a_table(tmp_path):
    assert read_statistics_table(tmp_path) is None
    (tmp_path / TABLE_NAME).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=rf"{TABLE_NAME}: not a statistics table \(no run column\)"):
        read_statistics_table(tmp_path)
    (tmp_path / TABLE_NAME).write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(ValueError, match=rf"{TABLE_NAME}: not a statistics table \('utf-8' codec can't decode"):
        read_statistics_table(tmp_path)
    with pytest.raises(ValueError, match="s3://bucket/p: the statistics table is written into a local processed"):
        write_statistics_table("s3://bucket/p", DEFAULTS.dataset, DEFAULT_OPTIONS)


def test_statistics_of_an_older_version_are_gathered_again(folder):
    group = zarr.open_group(folder / "run_1.zarr", mode="r+")
    current = dict(group.attrs["statistics"])
    older = {**current, "version": STATISTICS_VERSION - 1}
    older["surface"] = {**older["surface"], "fields": {column: {k: v for k, v in values.items() if k in ("min", "max")}
                                                       for column, values in older["surface"]["fields"].items()}}
    group.attrs["statistics"] = older
    write_statistics_table(folder, DEFAULTS.dataset, DEFAULT_OPTIONS)
    row = read_statistics_table(folder)[0]
    assert row["source"] and row["version"] == STATISTICS_VERSION  # from a pass over the arrays
    assert row["surface.fields.pMeanTrim.p99"] == pytest.approx(
        current["surface"]["fields"]["pMeanTrim"]["p99"], rel=1e-6)
