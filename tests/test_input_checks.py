"""Bad inputs named at their source: a corrupt compressed chunk or zarr.json, integer
coordinates, a body outside the box, a changed volume source on a rerun; raw VTU and VTP files
with crafted headers (crafted_faults.RAW_CRAFTS), each failing its run in one line naming the
file, in little memory, with nothing written."""

from __future__ import annotations

import shutil
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr
from cache_fixtures import tiny_settings
from conftest import PROCESS_OPTIONS, import_benchmark, parametrize_tiered

from domino_pipeline.compute.rows import prepare_rows
from domino_pipeline.processed.run_layout import ProcessedRunError
from domino_pipeline.processed.runs import load_run
from domino_pipeline.store.build import cache_run
from domino_pipeline.runtime.run_report import summarize
from domino_pipeline.inputs.processing.process_runs import process_all


@pytest.fixture
def processed(tiny_processed_dir, tmp_path) -> Path:
    """A writable copy of the tiny processed runs."""
    return shutil.copytree(tiny_processed_dir, tmp_path / "processed")


def _first_chunk_file(array_dir: Path) -> Path:
    return sorted(p for p in (array_dir / "c").rglob("*") if p.is_file())[0]


def test_a_corrupt_compressed_chunk_names_the_run_and_the_array(processed, tmp_path):
    chunk = _first_chunk_file(processed / "run_1.zarr" / "volume_fields")
    data = bytearray(chunk.read_bytes())
    for k in range(1, 8):  # zeros inside the compressed stream (some blosc blocks are stored as they are)
        at = len(data) * k // 8
        data[at:at + 64] = bytes(64)
    chunk.write_bytes(bytes(data))
    with pytest.raises(ProcessedRunError, match=r"run_1\.zarr: array volume_fields \(processed\) is unreadable"):
        load_run(processed / "run_1.zarr", ["volume_fields"])
    result = cache_run(processed / "run_1.zarr", tmp_path / "cache", tiny_settings(), rebuild=False)
    assert result.status == "failed"
    assert "run_1.zarr: array volume_fields (processed) is unreadable" in result.message
    ok = cache_run(processed / "run_2.zarr", tmp_path / "cache", tiny_settings(), rebuild=False)
    assert ok.status == "built"  # the other run goes on


def test_a_corrupt_zarr_json_is_named(processed):
    meta = processed / "run_1.zarr" / "zarr.json"
    meta.write_text(meta.read_text()[:-20])
    with pytest.raises(ProcessedRunError, match=r"run_1\.zarr: not a readable Zarr group \(JSONDecodeError"):
        load_run(processed / "run_1.zarr")


def test_integer_coordinates_are_refused_by_name(processed):
    group = zarr.open_group(str(processed / "run_2.zarr"), mode="r+")
    centers = group["surface_mesh_centers"][...]
    del group["surface_mesh_centers"]
    group.create_array("surface_mesh_centers", data=np.round(centers).astype(np.int32))
    with pytest.raises(ProcessedRunError, match=r"run_2\.zarr: array surface_mesh_centers holds int32 values"):
        load_run(processed / "run_2.zarr", ["surface_mesh_centers"])


def test_a_body_outside_the_box_says_so(processed):
    arrays = load_run(processed / "run_1.zarr")
    for name in ("surface_mesh_centers", "volume_mesh_centers"):
        arrays[name] = arrays[name] + np.float32(100.0)
    with pytest.raises(ValueError, match=r"toy: no surface cell lies inside the volume box min \[-3\.5"):
        prepare_rows(arrays, tiny_settings(), source="toy")
    with pytest.raises(ValueError, match=r"toy: no volume point lies inside the volume box min"):
        prepare_rows(arrays, tiny_settings(), parts=("volume",), source="toy")


def test_a_changed_volume_source_is_reported_on_a_rerun(tiny_raw_dir, tmp_path):
    first = process_all(tiny_raw_dir, tmp_path, PROCESS_OPTIONS)
    assert [r.status for r in first] == ["processed"] * 2
    again = process_all(tiny_raw_dir, tmp_path, replace(PROCESS_OPTIONS, volume_source="cells"))
    assert [r.status for r in again] == ["failed"] * 2
    assert "volume_source: stored 'points', configured 'cells'" in again[0].message


def test_a_deleted_chunk_of_a_processed_run_is_named_not_read_as_zeros(tiny_raw_dir, tmp_path):
    process_all(tiny_raw_dir, tmp_path / "processed", PROCESS_OPTIONS)
    run = tmp_path / "processed" / "run_1.zarr"
    assert zarr.open_group(str(run), mode="r").attrs["all_chunks_written"] is True
    load_run(run)  # complete
    _first_chunk_file(run / "surface_fields").unlink()
    with pytest.raises(ProcessedRunError, match=r"run_1\.zarr: array surface_fields \(processed\) lacks chunks \['c/0/0'\]"):
        load_run(run, ["surface_fields"])
    result = cache_run(run, tmp_path / "cache", tiny_settings(), rebuild=False)
    assert result.status == "failed" and "array surface_fields (processed) lacks chunks" in result.message


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_deleted_chunk_of_a_curator_run_is_named_unless_allowed(tiny_processed_dir, tmp_path, zarr_format):
    from curator_fixtures import write_curator_zarr

    from domino_pipeline.processed.runs import load_run
    from domino_pipeline.processed.runs import ReadOptions

    run = write_curator_zarr(tmp_path / "run_1.zarr", load_run(tiny_processed_dir / "run_1.zarr"),
                             zarr_format=zarr_format)
    whole = load_run(run, ["volume_fields"])["volume_fields"]
    chunk = sorted(p for p in (run / "volume_fields").rglob("*") if p.is_file() and not p.name.startswith((".", "zarr")))[0]
    chunk.unlink()
    key = chunk.relative_to(run / "volume_fields").as_posix()
    with pytest.raises(ProcessedRunError, match=rf"run_1\.zarr: array volume_fields \(curator-zarr-v{zarr_format}\) "
                                                rf"lacks chunks \['{key}'\].*allow_missing_chunks"):
        load_run(run, ["volume_fields"])
    result = cache_run(run, tmp_path / "cache", tiny_settings(), rebuild=False)
    assert result.status == "failed" and f"lacks chunks ['{key}']" in result.message
    allowed = load_run(run, ["volume_fields"], options=ReadOptions(allow_missing_chunks=True))["volume_fields"]
    assert not np.array_equal(allowed, whole) and np.all(allowed[:len(whole) // 2] == 0)  # fill values, as asked


def test_missing_chunks_reads_v2_keys_of_either_separator(tmp_path):
    from domino_pipeline.processed.chunk_completeness import missing_chunks

    for separator in (".", "/"):
        path = tmp_path / f"sep{separator == '/'}.zarr"
        array = zarr.create_array(str(path), shape=(10, 4), chunks=(3, 2), dtype="float32", zarr_format=2,
                                  chunk_key_encoding={"name": "v2", "separator": separator})
        array[...] = 1.0
        assert missing_chunks(path) == []
        (path / separator.join(["3", "1"])).unlink()
        (path / separator.join(["0", "0"])).unlink()
        assert missing_chunks(path) == [separator.join(["0", "0"]), separator.join(["3", "1"])]


RAW_CRAFTS = import_benchmark("crafted_faults").RAW_CRAFTS
PEAK_BYTES = 200 * 2**20  # a crafted header must not make the reader allocate more than this
PIECE_FAULTS = ("gap in the pieces", "pieces in two namings")


@parametrize_tiered("fault", sorted(RAW_CRAFTS), fast_if=lambda fault: "lzma" not in fault)  # lzma: ~0.4 s
def test_a_crafted_raw_file_fails_its_run_in_one_line(tiny_raw_dir, tmp_path, fault):
    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw_dir / "run_1", raw / "run_1")
    named, phrase = RAW_CRAFTS[fault](raw / "run_1")
    tracemalloc.start()
    try:
        results = process_all(raw, tmp_path / "processed", PROCESS_OPTIONS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (result,) = results
    line = summarize(results, ("processed", "failed")).splitlines()[0]
    assert result.status == "failed" and line == f"FAILED run_1: {result.message}"
    assert result.message.startswith(f"{named}: ") and phrase in result.message, result.message
    if fault not in PIECE_FAULTS:  # those name the piece or the pieces, which are not one file
        assert result.message.startswith(f"{named}: unreadable (")
    assert "\n" not in result.message and "Traceback" not in result.message
    assert all(" " <= c <= "~" for c in result.message), result.message  # no byte of the file echoed
    assert peak < PEAK_BYTES, f"{fault}: {peak / 2**20:.0f} MiB allocated"
    left = [p.name for p in (tmp_path / "processed").iterdir() if p.name != ".locks"]
    assert left == []  # no processed run, no temporary
