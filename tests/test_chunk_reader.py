"""Direct shard reads: the same rows as zarr-python for every slice and gather, every corrupt,
truncated or missing shard, index or inner chunk named, any other layout left to zarr-python,
and the cache's own layout read."""

from __future__ import annotations

import json
import shutil

import crc32c
import numpy as np
import pytest
import zarr
from cache_fixtures import flip_byte, tiny_settings, write_run
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

from domino_pipeline.store import cache_format
from domino_pipeline.store.cache_format import FORMAT_VERSION, ArraySpec, CacheError
from domino_pipeline.store.cache_run import CacheRun
from domino_pipeline.store.chunk_reader import ChunkedArray, CorruptChunkError

# name -> (shape, dtype, inner chunk rows, shard rows); row counts are not multiples of either,
# so edge shards hold inner chunks past the end (never written) and edge chunks are padded.
ARRAY_SPECS = {
    "points": ((103, 3), "float32", 16, 48),
    "ids": ((50,), "int32", 8, 64),
    "grid": ((4, 5, 6), "float32", 4, 4),
    "flags": ((21,), "uint8", 4, 8),
}
FILL_CHUNK = 2  # every array's inner chunk 2 holds only the fill value: written all the same


def _create(group: zarr.Group, name: str, shape, dtype, chunks, shards, **codecs) -> zarr.Array:
    """An array with ``RunWriter``'s codecs unless ``codecs`` says otherwise."""
    codecs = {"serializer": BytesCodec(), "compressors": [Crc32cCodec()], **codecs}
    return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks, shards=shards,
                              fill_value=0, config={"write_empty_chunks": True}, **codecs)


def _data(shape, dtype, chunk_rows: int, rng: np.random.Generator) -> np.ndarray:
    data = (rng.normal(size=shape) * 100).astype(dtype)
    data[FILL_CHUNK * chunk_rows:(FILL_CHUNK + 1) * chunk_rows] = 0
    return data


def _group(path):
    group = zarr.create_group(store=str(path), zarr_format=3)
    group.attrs.update({"format": "domino-cache", "format_version": FORMAT_VERSION})
    return group


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    """A group with the cache's run attributes holding the arrays of ARRAY_SPECS."""
    path = tmp_path_factory.mktemp("chunks") / "run.zarr"
    group = _group(path)
    rng = np.random.default_rng(0)
    for name, (shape, dtype, rows, shard) in ARRAY_SPECS.items():
        array = _create(group, name, shape, dtype, (rows, *shape[1:]), (shard, *shape[1:]))
        array[...] = _data(shape, dtype, rows, rng)
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
    shape, dtype, rows, shard = ARRAY_SPECS[name]
    reference = zarr.open_array(str(run_path / name), mode="r")
    reader = ChunkedArray.open(run_path / name)
    assert reader is not None
    layout = (reader.shape, reader.dtype, reader.chunk_rows, reader.chunks_per_shard)
    assert layout == (shape, np.dtype(dtype), rows, shard // rows)
    for selection in _selections(shape[0], np.random.default_rng(1)):
        assert reader.supports(selection)
        got = reader.read(selection)
        expected = (reference.get_orthogonal_selection(selection.copy())  # zarr wraps negatives in place
                    if isinstance(selection, np.ndarray) else reference[selection])
        assert got.dtype == expected.dtype and got.shape == expected.shape, selection
        np.testing.assert_array_equal(got, expected, err_msg=f"{name}[{selection}]")


def _index(shard_file, chunks_per_shard: int) -> tuple[bytearray, np.ndarray]:
    raw = bytearray(shard_file.read_bytes())
    start = len(raw) - chunks_per_shard * 16 - 4
    return raw, np.frombuffer(bytes(raw[start:-4]), dtype="<u8").reshape(-1, 2).copy()


def _write_index(shard_file, raw: bytearray, index: np.ndarray) -> None:
    body = index.astype("<u8").tobytes()
    raw[len(raw) - len(body) - 4:] = body + crc32c.crc32c(body).to_bytes(4, "little")
    shard_file.write_bytes(bytes(raw))


def test_fill_valued_chunks_are_written_and_a_missing_one_is_named(run_path, tmp_path):
    ids = ChunkedArray.open(run_path / "ids")
    np.testing.assert_array_equal(ids.read(slice(16, 24)), np.zeros(8))
    assert ids.bytes_read > 8 * 4  # read from disk, not assumed
    path = _copy(run_path, tmp_path)
    shard = path / "ids" / "c" / "0"
    raw, index = _index(shard, 8)
    index[FILL_CHUNK] = 2**64 - 1  # as if the chunk had not been written
    _write_index(shard, raw, index)
    ids = ChunkedArray.open(path / "ids")
    # the index is checked as a whole when first read: reading any chunk of the shard names it
    with pytest.raises(CorruptChunkError, match=r"ids: the index of shard c/0: inner chunk 2 is missing"):
        ids.read(slice(0, 16))


def test_a_missing_shard_file_is_named(run_path, tmp_path):
    path = _copy(run_path, tmp_path)
    (path / "points" / "c" / "1" / "0").unlink()
    points = ChunkedArray.open(path / "points")
    points.read(slice(0, 48))
    with pytest.raises(CorruptChunkError, match=r"points: shard c/1/0 is missing"):
        points.read(slice(40, 60))
    with pytest.raises(CacheError, match=r"run\.zarr: array 'points' is corrupt or unreadable: "
                                         r"points: shard c/1/0 is missing"):
        CacheRun(path).read("points", np.array([50]))


def test_rows_out_of_range_raise_index_error_naming_the_array(run_path):
    points = ChunkedArray.open(run_path / "points")
    with pytest.raises(IndexError, match="points: row 103 out of range for 103 rows"):
        points.read(np.array([0, 103]))
    with pytest.raises(IndexError, match="points: row -104 out of range"):
        points.read(np.array([-104]))


def test_a_flipped_byte_names_the_array_the_shard_and_the_chunk(run_path, tmp_path):
    path = _copy(run_path, tmp_path)
    shard = path / "points" / "c" / "0" / "0"
    raw, index = _index(shard, 3)
    flip_byte(shard, int(index[1, 0]) + 5)  # inner chunk 1
    points = ChunkedArray.open(path / "points")
    points.read(slice(0, 16))  # inner chunk 0 is intact
    with pytest.raises(CorruptChunkError, match=r"points: inner chunk 1 of shard c/0/0 failed its "
                                                r"CRC32C check \(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)"):
        points.read(np.array([3, 20]))
    with pytest.raises(CacheError, match=r"run\.zarr: array 'points' is corrupt or unreadable: "
                                         r"points: inner chunk 1 of shard c/0/0 failed its CRC32C"):
        CacheRun(path).read("points", slice(10, 40))


def test_a_flipped_index_byte_is_caught(run_path, tmp_path):
    path = _copy(run_path, tmp_path)
    shard = path / "ids" / "c" / "0"
    flip_byte(shard, shard.stat().st_size - 20)
    with pytest.raises(CorruptChunkError, match="ids: the index of shard c/0 failed its CRC32C check"):
        ChunkedArray.open(path / "ids").read(slice(0, 8))


@pytest.mark.parametrize("change", [lambda b: b[:-1], lambda b: b[:10], lambda b: b[:100] + b[101:],
                                    lambda b: b + b"\0"])
def test_a_shard_file_of_the_wrong_size_is_caught(run_path, tmp_path, change):
    path = _copy(run_path, tmp_path)
    shard = path / "points" / "c" / "2" / "0"  # the edge shard: one inner chunk, padded
    shard.write_bytes(change(shard.read_bytes()))
    with pytest.raises(CorruptChunkError, match=r"points: (the index of )?shard c/2/0"):
        ChunkedArray.open(path / "points").read(slice(100, None))
    with pytest.raises(CacheError, match="array 'points' is corrupt or unreadable"):
        CacheRun(path).read("points", np.array([101]))


@pytest.mark.parametrize("name, shards, codecs", [
    ("unsharded", None, {}),
    ("zstd", (32, 3), {"compressors": [ZstdCodec(), Crc32cCodec()]}),
    ("blosc", (32, 3), {"compressors": [BloscCodec()]}),
    ("no_checksum", (32, 3), {"compressors": None}),
    ("big_endian", (32, 3), {"serializer": BytesCodec(endian="big")}),
])
def test_other_layouts_are_left_to_zarr(tmp_path, name, shards, codecs):
    group = _group(tmp_path / "run.zarr")
    data = _data((40, 3), "float32", 16, np.random.default_rng(2))
    _create(group, name, data.shape, data.dtype, (16, 3), shards, **codecs)[...] = data
    run = CacheRun(tmp_path / "run.zarr")
    assert ChunkedArray.open(tmp_path / "run.zarr" / name) is None and run.reader(name) is None
    np.testing.assert_array_equal(run.read(name, slice(5, 30)), data[5:30])
    np.testing.assert_array_equal(run.read(name, np.array([39, 2, 2])), data[[39, 2, 2]])


def test_an_index_at_the_start_is_left_to_zarr(tmp_path):
    group = _group(tmp_path / "run.zarr")
    sharding = ShardingCodec(chunk_shape=(16, 3), codecs=[BytesCodec(), Crc32cCodec()],
                             index_location="start")
    array = group.create_array("start", shape=(40, 3), dtype="float32", chunks=(32, 3),
                               serializer=sharding, compressors=None)
    assert ChunkedArray.open(tmp_path / "run.zarr" / "start") is None
    array[...] = 1.0
    np.testing.assert_array_equal(CacheRun(tmp_path / "run.zarr").read("start", slice(0, 3)), 1.0)


@pytest.mark.parametrize("change", [
    {"storage_transformers": [{"name": "sharding"}]}, {"data_type": "complex64"},
    {"chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}},
    {"zarr_format": 2}, {"must_understand_me": True},
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


def test_bytes_read_count_metadata_indexes_and_inner_chunks(run_path):
    run = CacheRun(run_path)
    opened = run.bytes_read
    run.read("points", slice(0, 20))  # inner chunks 0 and 1 of shard 0
    metadata = (run_path / "points" / "zarr.json").stat().st_size
    index, chunk = 3 * 16 + 4, 16 * 3 * 4 + 4
    assert run.bytes_read - opened == metadata + index + 2 * chunk
    run.read("points", np.array([40, 1]))  # inner chunk 2 (fill-valued, read) and 0 again
    assert run.bytes_read - opened == metadata + index + 4 * chunk
    assert CacheRun(run_path).bytes_read == 0


def test_the_cache_layout_is_read_directly(tmp_path, monkeypatch):
    monkeypatch.setitem(cache_format.ARRAYS, "volume_fields", ArraySpec("float32", 1024, 4096))
    rng = np.random.default_rng(3)
    counts = {"geometry": 70_000, "surface": 1000, "volume": 9000}  # 3 chunks, 1, 9 in 3 shards
    contents = {"scalars": {"center_of_mass": [0.0, 0.0, 0.0]}}
    for name, spec in cache_format.ARRAYS.items():
        shape = (6, 4, 2) if spec.chunk_rows is None else (counts[name.split("_")[0]], 3)
        contents[name] = (rng.normal(size=shape) * 1000).astype(spec.dtype)
    path = write_run(tmp_path, "run_1", contents, tiny_settings())
    run = CacheRun(path)
    assert len(list((path / "volume_fields" / "c").iterdir())) == 3
    for name in cache_format.ARRAYS:
        assert run.reader(name) is not None, name
        np.testing.assert_array_equal(run.read(name), contents[name], err_msg=name)
        np.testing.assert_array_equal(run.read(name), zarr.open_array(str(path / name))[...])
    gather = np.unique(rng.integers(0, 70_000, size=5000))
    np.testing.assert_array_equal(run.read("geometry_coordinates", gather),
                                  contents["geometry_coordinates"][gather])


def _copy(run_path, tmp_path):
    """A writable copy of the run at ``run_path``."""
    return shutil.copytree(run_path, tmp_path / "run.zarr")
