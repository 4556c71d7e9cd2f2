"""The processed-run layout: round trip, chunking and codecs, listing, and validation errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from domino_pipeline.processed.run_layout import (
    ARRAY_NAMES,
    ProcessedRunError,
    write_processed_run,
)
from domino_pipeline.processed.runs import load_run, open_run


def _arrays(rng: np.random.Generator, n_volume: int = 50) -> dict[str, np.ndarray]:
    f32 = np.float32
    return {
        "stl_coordinates": rng.random((6, 3), dtype=f32),
        "stl_faces": rng.integers(0, 6, 12).astype(f32),  # the curator stores indices as float
        "stl_centers": rng.random((4, 3), dtype=f32),
        "stl_areas": rng.random(4, dtype=f32),
        "surface_mesh_centers": rng.random((10, 3), dtype=f32),
        "surface_normals": rng.random((10, 3), dtype=f32),
        "surface_areas": rng.random(10, dtype=f32),
        "surface_fields": rng.random((10, 4), dtype=f32),
        "volume_mesh_centers": rng.random((n_volume, 3), dtype=f32),
        "volume_fields": rng.random((n_volume, 5), dtype=f32),
        "global_params_values": np.array([30.0, 1.205], dtype=f32),
        "global_params_reference": np.array([30.0, 1.205], dtype=f32),
    }


@pytest.fixture()
def copied_run(tiny_processed_dir: Path, tmp_path: Path) -> Path:
    """A private copy of a processed tiny run, free to damage."""
    target = tmp_path / "run_1.zarr"
    shutil.copytree(tiny_processed_dir / "run_1.zarr", target)
    return target


def test_round_trip_keeps_values_and_makes_faces_int32(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng(0))
    write_processed_run(tmp_path / "run_1.zarr", arrays, {"filename": "run_1"})
    loaded = load_run(tmp_path / "run_1.zarr")
    assert list(loaded) == list(ARRAY_NAMES)
    assert loaded["stl_faces"].dtype == np.int32
    for name, value in arrays.items():
        np.testing.assert_array_equal(loaded[name], value)
    assert open_run(tmp_path / "run_1.zarr").attrs["filename"] == "run_1"


def test_partial_load_reads_only_the_named_arrays(tiny_processed_dir: Path) -> None:
    loaded = load_run(tiny_processed_dir / "run_1.zarr", ["surface_areas", "stl_faces"])
    assert list(loaded) == ["surface_areas", "stl_faces"]


def test_large_arrays_are_sharded_one_mib_chunks_blosc_zstd(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng(1), n_volume=200_000)  # 4 MB of volume fields
    write_processed_run(tmp_path / "run_1.zarr", arrays, {})
    fields = open_run(tmp_path / "run_1.zarr").arrays["volume_fields"]
    assert fields.chunks[0] * 5 * 4 <= 1 << 20 and fields.chunks[0] * 5 * 4 > 1 << 19
    codecs = str(fields.metadata.to_dict()["codecs"])
    assert "zstd" in codecs and "'clevel': 1" in codecs and "'shuffle': 'shuffle'" in codecs
    np.testing.assert_array_equal(fields[123_456:123_999], arrays["volume_fields"][123_456:123_999])


def test_invalid_arrays_are_not_written(tmp_path: Path) -> None:
    arrays = _arrays(np.random.default_rng(2))
    arrays["surface_areas"][3] = np.nan
    with pytest.raises(ProcessedRunError, match="surface_areas has 1 non-finite"):
        write_processed_run(tmp_path / "run_1.zarr", arrays, {})
    assert list(tmp_path.iterdir()) == []


def test_missing_array_is_named(copied_run: Path) -> None:
    shutil.rmtree(copied_run / "surface_fields")
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: missing arrays \['surface_fields'\]"):
        load_run(copied_run)
    assert "surface_areas" in load_run(copied_run, ["surface_areas"])


def test_nan_is_named(copied_run: Path) -> None:
    group = zarr.open_group(str(copied_run), mode="r+")
    group["volume_fields"][7, 2] = np.nan
    with pytest.raises(ProcessedRunError, match="run_1.zarr: array volume_fields has 1 non-finite"):
        load_run(copied_run)


@pytest.mark.parametrize(
    ("name", "shape", "message"),
    [
        ("surface_normals", lambda n: (n, 2), r"surface_normals has shape \(\d+, 2\), expected"),
        ("surface_areas", lambda n: (5,), r"arrays \w+ and surface_areas have different lengths \(surface_cells\): \d+ and 5 rows, \d+ apart"),
        ("stl_faces", lambda n: (7,), "stl_faces has 7 indices"),
    ],
)
def test_wrong_shape_is_named(copied_run: Path, name: str, shape, message: str) -> None:
    group = zarr.open_group(str(copied_run), mode="r+")
    shape = shape(group[name].shape[0])
    del group[name]
    group.create_array(name, shape=shape, dtype=np.float32)[...] = 1.0
    with pytest.raises(ProcessedRunError, match=message):
        load_run(copied_run)


def test_face_indices_out_of_range_are_rejected(copied_run: Path) -> None:
    group = zarr.open_group(str(copied_run), mode="r+")
    group["stl_faces"][0] = group["stl_coordinates"].shape[0]
    with pytest.raises(ProcessedRunError, match="stl_faces indexes outside"):
        load_run(copied_run, ["stl_faces", "stl_coordinates"])


def test_missing_run_and_unknown_array(tmp_path: Path, tiny_processed_dir: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run_9.zarr: no processed run"):
        load_run(tmp_path / "run_9.zarr")
    with pytest.raises(ValueError, match="unknown arrays"):
        load_run(tiny_processed_dir / "run_1.zarr", ["surface_pressure"])


def test_a_rewrite_with_other_values_changes_the_cache_source_fingerprint(tmp_path: Path) -> None:
    from domino_pipeline.processed.runs import source_fingerprint

    arrays = _arrays(np.random.default_rng(0))
    path = tmp_path / "run_1.zarr"
    write_processed_run(path, arrays, {"filename": "run_1"})
    first = source_fingerprint(path)
    copy = tmp_path / "copy" / "run_1.zarr"
    shutil.copytree(path, copy)
    assert source_fingerprint(copy) == first  # a copy is the same source
    arrays["surface_fields"] = arrays["surface_fields"] * 2  # same shapes, other values
    write_processed_run(path, arrays, {"filename": "run_1"})
    assert source_fingerprint(path) != first


def test_missing_chunks_finds_absent_shards_and_inner_chunks(tmp_path):
    import crc32c

    from domino_pipeline.processed.chunk_completeness import missing_chunks

    group = zarr.create_group(store=str(tmp_path / "run.zarr"), zarr_format=3)
    array = group.create_array("a", shape=(100, 3), dtype="float32", chunks=(10, 3), shards=(40, 3),
                               config={"write_empty_chunks": True})
    array[...] = 0.0  # fill-valued, written all the same
    assert missing_chunks(tmp_path / "run.zarr" / "a") == []
    shard = tmp_path / "run.zarr" / "a" / "c" / "1" / "0"
    raw = bytearray(shard.read_bytes())
    index = np.frombuffer(bytes(raw[-68:-4]), dtype="<u8").reshape(4, 2).copy()
    index[2] = 2**64 - 1
    body = index.tobytes()
    raw[-68:] = body + crc32c.crc32c(body).to_bytes(4, "little")
    shard.write_bytes(bytes(raw))
    (tmp_path / "run.zarr" / "a" / "c" / "2" / "0").unlink()
    assert missing_chunks(tmp_path / "run.zarr" / "a") == ["c/1/0 inner chunk 2", "c/2/0"]


def test_a_run_of_an_earlier_format_is_refused_with_what_differs_and_how_to_reprocess(
    copied_run: Path, tiny_raw_dir: Path
) -> None:
    from conftest import PROCESS_OPTIONS

    from domino_pipeline.inputs.processing.process_runs import process_all

    zarr.open_group(str(copied_run), mode="r+").attrs["format_version"] = 1
    message = (r"run_1\.zarr: format_version 1, this reader reads 2 \(surface areas, normals and centres by "
               r"VTK's filters.*\); reprocess it with process_data\.py process\.overwrite=true")
    with pytest.raises(ProcessedRunError, match=message):
        load_run(copied_run)
    with pytest.raises(ProcessedRunError, match=message):
        open_run(copied_run)
    results = {r.name: r for r in process_all(tiny_raw_dir, copied_run.parent, PROCESS_OPTIONS)}
    assert results["run_1"].status == "failed" and "format_version 1" in results["run_1"].message
    assert results["run_2"].status == "processed"
    zarr.open_group(str(copied_run), mode="r+").attrs["format_version"] = 3
    with pytest.raises(ProcessedRunError, match=r"run_1\.zarr: format_version 3, this reader reads 2$"):
        load_run(copied_run)
