"""Direct chunk reads: the same rows as zarr-python for every slice and gather, a corrupt or
truncated chunk named, any other layout left to zarr-python, and the cache's own layout read."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import zarr
from cache_fixtures import flip_byte, tiny_settings
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec

from domino_pipeline.store.cache_format import (
    ARRAYS,
    FORMAT_VERSION,
    CacheError,
    CacheRun,
    write_cache_run,
)
from domino_pipeline.store.chunk_reader import ChunkedArray, CorruptChunkError

# name -> (shape, dtype, chunk rows, fill value); row counts are not multiples of the chunks.
ARRAY_SPECS = {
    "points": ((103, 3), "float32", 16, 0.0),
    "ids": ((50,), "int32", 8, 7),
    "grid": ((4, 5, 6), "float32", 4, 0.0),
    "flags": ((21,), "uint8", 4, 0),
}
FILL_CHUNK = 2  # every array's chunk 2 holds only its fill value, so it is not written


def _create(group: zarr.Group, name: str, shape, dtype, chunks, fill_value=0, **codecs) -> zarr.Array:
    """An array with ``write_cache_run``'s codecs unless ``codecs`` says otherwise."""
    codecs = {"serializer": BytesCodec(), "compressors": [Crc32cCodec()], **codecs}
    return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks,
                              fill_value=fill_value, **codecs)


def _data(shape, dtype, chunk_rows: int, fill_value, rng: np.random.Generator) -> np.ndarray:
    data = (rng.normal(size=shape) * 100).astype(dtype)
    data[FILL_CHUNK * chunk_rows:(FILL_CHUNK + 1) * chunk_rows] = fill_value
    return data


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    """A group with the cache's run attributes holding the arrays of ARRAY_SPECS."""
    path = tmp_path_factory.mktemp("chunks") / "run.zarr"
    group = zarr.create_group(store=str(path), zarr_format=3)
    rng = np.random.default_rng(0)
    for name, (shape, dtype, rows, fill) in ARRAY_SPECS.items():
        chunks = (rows, *shape[1:])
        _create(group, name, shape, dtype, chunks, fill)[...] = _data(shape, dtype, rows, fill, rng)
    group.attrs.update({"format": "domino-cache", "format_version": FORMAT_VERSION})
    return path


def _selections(length: int, rng: np.random.Generator) -> list:
    """Slices (open, negative, past the end, empty) and index arrays (sorted, unsorted,
    repeated, negative, empty, edge rows)."""
    slices = [slice(None), Ellipsis, slice(0, length), slice(length - 1, None), slice(-5, None),
              slice(length + 3, length + 9), slice(7, 3), slice(0, length + 50)]
    for _ in range(40):
        a, b = sorted(rng.integers(0, length + 1, size=2))
        slices.append(slice(int(a), int(b)))
    gathers = [np.array([], dtype=np.int64), np.array([length - 1, 0, length - 1]),
               np.arange(length)[::-1].astype(np.int32), np.array([-1, -length])]
    for size in (1, 5, length, 3 * length):
        gathers.append(rng.integers(0, length, size=size))
        gathers.append(np.sort(rng.integers(0, length, size=size)))
        gathers.append(np.unique(rng.integers(0, length, size=size)).astype(np.int32))
    return slices + gathers


@pytest.mark.parametrize("name", ARRAY_SPECS)
def test_reads_match_zarr_for_slices_and_gathers(run_path, name):
    shape, dtype, rows, fill = ARRAY_SPECS[name]
    reference = zarr.open_array(str(run_path / name), mode="r")
    reader = ChunkedArray.open(run_path / name)
    assert reader is not None
    layout = (reader.shape, reader.dtype, reader.chunk_rows, reader.fill_value)
    assert layout == (shape, np.dtype(dtype), rows, fill)
    for selection in _selections(shape[0], np.random.default_rng(1)):
        assert reader.supports(selection)
        got = reader.read(selection)
        expected = (reference.get_orthogonal_selection(selection.copy())  # zarr wraps negatives in place
                    if isinstance(selection, np.ndarray) else reference[selection])
        assert got.dtype == expected.dtype and got.shape == expected.shape, selection
        np.testing.assert_array_equal(got, expected, err_msg=f"{name}[{selection}]")


def test_an_absent_chunk_reads_as_the_fill_value(run_path):
    assert not (run_path / "ids" / "c" / str(FILL_CHUNK)).exists()
    assert not (run_path / "points" / "c" / str(FILL_CHUNK) / "0").exists()
    ids = ChunkedArray.open(run_path / "ids")
    np.testing.assert_array_equal(ids.rows(15, 25)[1:9], np.full(8, 7))
    np.testing.assert_array_equal(ids.take(np.array([23, 16, 40]))[:2], [7, 7])


def test_rows_out_of_range_raise_index_error_naming_the_array(run_path):
    points = ChunkedArray.open(run_path / "points")
    with pytest.raises(IndexError, match="points: row 103 out of range for 103 rows"):
        points.take(np.array([0, 103]))
    with pytest.raises(IndexError, match="points: row -104 out of range"):
        points.take(np.array([-104]))
    with pytest.raises(IndexError, match=r"points: rows 100:104 out of range"):
        points.rows(100, 104)


def test_a_flipped_byte_names_the_array_and_the_chunk(run_path, tmp_path):
    path = _copy(run_path, tmp_path)
    flip_byte(path / "points" / "c" / "1" / "0")
    points = ChunkedArray.open(path / "points")
    points.rows(0, 16)  # chunk 0 is intact
    with pytest.raises(CorruptChunkError, match=r"points: chunk c/1/0 failed its CRC32C check "
                                                r"\(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)"):
        points.take(np.array([3, 20]))
    with pytest.raises(CacheError, match=r"run\.zarr: array 'points' is corrupt or unreadable: "
                                         r"points: chunk c/1/0 failed its CRC32C"):
        CacheRun(path).read("points", slice(10, 40))


def test_a_flipped_checksum_byte_is_caught(run_path, tmp_path):
    path = _copy(run_path, tmp_path)
    chunk = path / "ids" / "c" / "0"
    flip_byte(chunk, chunk.stat().st_size - 1)
    with pytest.raises(CorruptChunkError, match="ids: chunk c/0 failed its CRC32C check"):
        ChunkedArray.open(path / "ids").rows(0, 8)


@pytest.mark.parametrize("change", [lambda b: b[:-1], lambda b: b[:10], lambda b: b + b"\0"])
def test_a_chunk_file_of_the_wrong_size_is_caught(run_path, tmp_path, change):
    path = _copy(run_path, tmp_path)
    chunk = path / "points" / "c" / "6" / "0"  # the padded edge chunk
    chunk.write_bytes(change(chunk.read_bytes()))
    with pytest.raises(CorruptChunkError, match=r"points: chunk c/6/0 has \d+ bytes, expected 196"):
        ChunkedArray.open(path / "points").read(slice(100, None))
    with pytest.raises(CacheError, match="array 'points' is corrupt or unreadable"):
        CacheRun(path).read("points", np.array([101]))


@pytest.mark.parametrize("name, chunks, codecs", [
    ("zstd", (16, 3), {"compressors": [ZstdCodec(), Crc32cCodec()]}),
    ("blosc", (16, 3), {"compressors": [BloscCodec()]}),
    ("no_checksum", (16, 3), {"compressors": None}),
    ("big_endian", (16, 3), {"serializer": BytesCodec(endian="big")}),
    ("columns", (16, 1), {}),
])
def test_other_layouts_are_left_to_zarr(tmp_path, name, chunks, codecs):
    group = zarr.create_group(store=str(tmp_path / "run.zarr"), zarr_format=3)
    group.attrs.update({"format": "domino-cache", "format_version": FORMAT_VERSION})
    data = _data((40, 3), "float32", 16, 0.0, np.random.default_rng(2))
    _create(group, name, data.shape, data.dtype, chunks, **codecs)[...] = data
    run = CacheRun(tmp_path / "run.zarr")
    assert ChunkedArray.open(tmp_path / "run.zarr" / name) is None and run.reader(name) is None
    np.testing.assert_array_equal(run.read(name, slice(5, 30)), data[5:30])
    np.testing.assert_array_equal(run.read(name, np.array([39, 2, 2])), data[[39, 2, 2]])


@pytest.mark.parametrize("change", [
    {"storage_transformers": [{"name": "sharding"}]}, {"data_type": "complex64"},
    {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}},
    {"fill_value": "0x7fc00000"}, {"zarr_format": 2}, {"must_understand_me": True},
])
def test_unknown_metadata_is_left_to_zarr(run_path, tmp_path, change):
    meta = json.loads((run_path / "points" / "zarr.json").read_text())
    (tmp_path / "zarr.json").write_text(json.dumps({**meta, **change}))
    assert ChunkedArray.open(tmp_path) is None
    assert ChunkedArray.open(tmp_path / "missing") is None


def test_other_selections_are_left_to_zarr(run_path):
    run = CacheRun(run_path)
    expected = zarr.open_array(str(run_path / "points"), mode="r")[...]
    assert run.reader("points") is not None
    for selection in (slice(1, 90, 3), np.arange(103) % 2 == 0):
        assert not ChunkedArray.supports(selection)
        np.testing.assert_array_equal(run.read("points", selection), expected[selection])
    with pytest.raises(CacheError, match="array 'absent' is missing"):
        run.read("absent")


def test_bytes_read_count_metadata_and_whole_chunk_files(run_path):
    run = CacheRun(run_path, count_bytes=True)
    opened = run.bytes_read
    run.read("points", slice(0, 20))  # chunks 0 and 1
    metadata = (run_path / "points" / "zarr.json").stat().st_size
    assert run.bytes_read - opened == metadata + 2 * (16 * 3 * 4 + 4)
    run.read("points", np.array([40, 1]))  # chunk 2 is absent: only chunk 0 is read
    assert run.bytes_read - opened == metadata + 3 * (16 * 3 * 4 + 4)
    assert CacheRun(run_path).bytes_read == 0


def test_the_cache_layout_is_read_directly(tmp_path):
    rng = np.random.default_rng(3)
    counts = {"geometry": 70_000, "surface": 1000, "volume": 9000}  # 3 chunks, 1, 2
    contents = {"scalars": {"center_of_mass": [0.0, 0.0, 0.0]}}
    for name, (dtype, chunk) in ARRAYS.items():
        shape = (6, 4, 2) if chunk is None else (counts[name.split("_")[0]], 3)
        contents[name] = (rng.normal(size=shape) * 1000).astype(dtype)
    write_cache_run(tmp_path / "run_1.zarr", contents, settings=tiny_settings(),
                    source_path=tmp_path, source="0" * 64)
    run = CacheRun(tmp_path / "run_1.zarr")
    for name in ARRAYS:
        assert run.reader(name) is not None, name
        np.testing.assert_array_equal(run.read(name), contents[name], err_msg=name)
    gather = np.unique(rng.integers(0, 70_000, size=5000))
    np.testing.assert_array_equal(run.read("geometry_coordinates", gather),
                                  contents["geometry_coordinates"][gather])


def _copy(run_path, tmp_path):
    """A writable copy of the run at ``run_path``."""
    return shutil.copytree(run_path, tmp_path / "run.zarr")
