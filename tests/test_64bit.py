"""64-bit sizes on the data path, kept cheap with sparse files: arrays of more than 2^31
elements and bytes, read offsets beyond 2^32 bytes, .part pieces split beyond 2^32 bytes, shard
indexes with offsets beyond 2^32, and the layout of a 150M-point run's volume computed from the
format's rules without materialising it."""

from __future__ import annotations

import json
from pathlib import Path

import crc32c
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec

from domino_pipeline.compute.volume_order import VOLUME_BLOCK_ROWS, bucket_sizes, deal_block, labels_rng
from domino_pipeline.processed.run_layout import row_chunking
from domino_pipeline.inputs.vtk.xml_stream import VtkXmlFile
from synthetic.vtk_xml_writer import ArraySpec as VtkArray
from synthetic.vtk_xml_writer import Encoding, VtkBlockWriter
from domino_pipeline.store.cache_format import ARRAYS
from domino_pipeline.store.chunk_reader import ChunkedArray

BIG_ROWS = 2**31 + 1000  # rows of a 4-byte array: more than 2^31 elements, 2^33 bytes


def _sparse_vtu(path: Path, values: np.ndarray, at_row: int) -> None:
    """A VTU whose one point array (Float32, BIG_ROWS rows, UInt64 header, appended raw) holds
    ``values`` from row ``at_row`` on and a hole (zeros) elsewhere: 8 GiB that take no disk."""
    header = (f'<?xml version="1.0"?>\n<VTKFile type="UnstructuredGrid" version="0.1" '
              f'byte_order="LittleEndian" header_type="UInt64">\n  <UnstructuredGrid>\n'
              f'    <Piece NumberOfPoints="{BIG_ROWS}" NumberOfCells="0">\n'
              f'      <PointData>\n        <DataArray type="Float32" Name="p" format="appended" offset="0"/>\n'
              f'      </PointData>\n    </Piece>\n  </UnstructuredGrid>\n'
              f'  <AppendedData encoding="raw">\n   _').encode()
    n_bytes = BIG_ROWS * 4
    with open(path, "wb") as out:
        out.write(header + np.array([n_bytes], "<u8").tobytes())
        data_at = out.tell()
        out.seek(data_at + at_row * 4)
        out.write(values.astype("<f4").tobytes())
        out.seek(data_at + n_bytes)
        out.write(b"\n  </AppendedData>\n</VTKFile>\n")


def test_vtu_array_beyond_2_31_rows_read_at_offsets_beyond_2_32(tmp_path: Path) -> None:
    values = np.arange(2000, dtype=np.float32) + 0.5
    at = BIG_ROWS - 2000  # bytes (2^33) far beyond 2^32
    path = tmp_path / "volume_1.vtu"
    _sparse_vtu(path, values, at)
    source = VtkXmlFile.open(path)
    assert source.n_points == BIG_ROWS
    assert source.rows("PointData", "p") == BIG_ROWS
    np.testing.assert_array_equal(source.read("PointData", "p", at, BIG_ROWS)[:, 0], values)
    np.testing.assert_array_equal(source.read("PointData", "p", at - 3, at + 2)[:, 0], [0, 0, 0, 0.5, 1.5])


def test_part_pieces_split_beyond_2_32_bytes(tmp_path: Path) -> None:
    values = np.arange(2000, dtype=np.float32) - 7.25
    at = BIG_ROWS - 2000
    whole = tmp_path / "whole.vtu"
    _sparse_vtu(whole, values, at)
    size = whole.stat().st_size
    cut = size - 4 * 1500  # the second piece starts inside the values, beyond 2^32 bytes
    run = tmp_path / "run_1"
    run.mkdir()
    with open(whole, "rb") as src:
        head = src.read(4096)
        for name, start, stop in (("part1", 0, cut), ("part2", cut, size)):
            with open(run / f"volume_1.vtu.{name}", "wb") as out:
                if start == 0:
                    out.write(head)
                    out.truncate(cut)  # the hole of the whole file, kept sparse
                    src.seek(cut - 8192)  # the values before the cut
                    out.seek(cut - 8192)
                    out.write(src.read(8192))
                else:
                    src.seek(start)
                    out.write(src.read(stop - start))
    source = VtkXmlFile.open(run / "volume_1.vtu")
    assert source.source.starts[1] == cut > 2**32
    np.testing.assert_array_equal(source.read("PointData", "p", at, BIG_ROWS)[:, 0], values)


def test_writer_refuses_a_uint32_header_for_a_4_gib_array(tmp_path: Path) -> None:
    arrays = [VtkArray("PointData", "p", "f4", 2**30)]
    with pytest.raises(ValueError, match="needs a UInt64 header"):
        VtkBlockWriter(tmp_path / "v.vtu", "UnstructuredGrid", {"NumberOfPoints": 2**30, "NumberOfCells": 0},
                       arrays, Encoding("appended-raw", "none", 32))
    assert not list(tmp_path.iterdir()) or all(p.name.startswith(".") for p in tmp_path.iterdir())


def _cache_array(path: Path, rows: int) -> zarr.Array:
    """An empty array with the cache's volume_sdf layout (inner chunks of 8192 rows, crc32c,
    shards of VOLUME_BLOCK_ROWS rows) and ``rows`` rows."""
    spec = ARRAYS["volume_sdf"]
    return zarr.create_array(store=str(path), shape=(rows,), dtype=spec.dtype, chunks=(spec.chunk_rows,),
                             shards=(spec.shard_rows,), serializer=BytesCodec(), compressors=[Crc32cCodec()],
                             fill_value=0, config={"write_empty_chunks": True})


def test_cache_array_beyond_2_31_rows_reads_its_last_rows(tmp_path: Path) -> None:
    array = _cache_array(tmp_path / "volume_sdf", BIG_ROWS)
    last_shard = (BIG_ROWS - 1) // VOLUME_BLOCK_ROWS
    start = last_shard * VOLUME_BLOCK_ROWS
    values = np.random.default_rng(0).normal(size=BIG_ROWS - start).astype(np.float32)
    array[start:] = values  # only the last shard is written
    reader = ChunkedArray.open(tmp_path / "volume_sdf")
    assert reader is not None and len(reader) == BIG_ROWS
    np.testing.assert_array_equal(reader.read(slice(BIG_ROWS - 10, BIG_ROWS)), values[-10:])
    picks = np.array([BIG_ROWS - 1, start, 2**31 + 3, BIG_ROWS - 500])
    np.testing.assert_array_equal(reader.read(picks), values[picks - start])
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "volume_sdf"))[picks], values[picks - start])


def test_shard_beyond_2_32_bytes(tmp_path: Path) -> None:
    """A shard of 1100 inner chunks of 4 MiB (4.6 GB, index offsets beyond 2^32), laid out as
    zarr lays it out: zero chunks as holes (their checksums written), the last two chunks with
    values; read by zarr and by the cache's chunk reader."""
    rows, width, chunk_rows, chunks = 1100 * 1024, 1024, 1024, 1100
    zarr.create_array(store=str(tmp_path / "a"), shape=(rows, width), dtype="float32",
                      chunks=(chunk_rows, width), shards=(rows, width), serializer=BytesCodec(),
                      compressors=[Crc32cCodec()], fill_value=0, config={"write_empty_chunks": True})
    size = chunk_rows * width * 4
    values = np.random.default_rng(1).normal(size=(2 * chunk_rows, width)).astype(np.float32)
    zero_crc = crc32c.crc32c(bytes(size)).to_bytes(4, "little")
    index = np.zeros((chunks, 2), dtype="<u8")
    shard = tmp_path / "a" / "c" / "0" / "0"
    shard.parent.mkdir(parents=True)
    with open(shard, "wb") as out:
        out.truncate(chunks * (size + 4))
        for i in range(chunks):
            index[i] = (i * (size + 4), size + 4)
            k = i - (chunks - 2)
            data = values[k * chunk_rows:(k + 1) * chunk_rows].tobytes() if k >= 0 else None
            out.seek(i * (size + 4) + (0 if data is not None else size))
            out.write(data + crc32c.crc32c(data).to_bytes(4, "little") if data is not None else zero_crc)
        raw = index.tobytes()
        out.seek(chunks * (size + 4))
        out.write(raw + crc32c.crc32c(raw).to_bytes(4, "little"))
    assert shard.stat().st_size > 2**32 and index[-1, 0] > 2**32
    reader = ChunkedArray.open(tmp_path / "a")
    np.testing.assert_array_equal(reader.read(slice(rows - 2 * chunk_rows, rows)), values)
    np.testing.assert_array_equal(reader.read(slice(0, 3)), np.zeros((3, width), np.float32))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"))[rows - 5:], values[-5:])


def test_150m_point_volume_layout_is_what_the_format_says(tmp_path: Path) -> None:
    """A 150M-point run (every point kept): 36 volume shards of 4,194,304 rows (the last one
    3,199,360), 512 inner chunks of 8192 rows each (391 in the last one); from metadata and
    counts, not rows."""
    n = 150_000_000
    sizes = bucket_sizes(n)
    assert len(sizes) == 36 and sizes[:-1].tolist() == [VOLUME_BLOCK_ROWS] * 35
    assert sizes[-1] == n - 35 * VOLUME_BLOCK_ROWS == 3_199_360 and sizes.sum() == n
    array = _cache_array(tmp_path / "volume_sdf", n)
    meta = json.loads((tmp_path / "volume_sdf" / "zarr.json").read_text())
    assert meta["shape"] == [n]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [VOLUME_BLOCK_ROWS]
    assert array.nchunks == 35 * 512 + 391 == -(-n // 8192) and not list((tmp_path / "volume_sdf").rglob("c/*"))
    reader = ChunkedArray.open(tmp_path / "volume_sdf")
    assert reader.chunks_per_shard == 512 and reader.key(35) == "c/35"
    assert -(-int(sizes[-1]) // 8192) == 391
    assert 36 * 4 * VOLUME_BLOCK_ROWS * 4 > 2**31  # the volume arrays' bytes: beyond 2^31


def test_150m_point_processed_run_layout_is_what_the_format_says(tmp_path: Path) -> None:
    """process_data's volume arrays for a 150M-point run: about 1 MiB row chunks, 64 to a shard
    (27 shards of positions, 45 of five field columns: 3 GB, beyond 2^31 bytes); the last rows,
    3 GB into the array, written and read back through zarr with that layout."""
    n = 150_000_000
    assert row_chunking((n, 3), 4) == ((87_381, 3), (5_592_384, 3))
    assert row_chunking((n, 5), 4) == ((52_428, 5), (3_355_392, 5))
    assert -(-n // 5_592_384) == 27 and -(-n // 3_355_392) == 45 and n * 5 * 4 > 2**31
    chunks, shards = row_chunking((n, 5), 4)
    array = zarr.create_array(store=str(tmp_path / "volume_fields"), shape=(n, 5), dtype="float32",
                              chunks=chunks, shards=shards, fill_value=0)
    values = np.arange(50, dtype=np.float32).reshape(10, 5)
    array[n - 10:] = values
    assert sorted(p.name for p in (tmp_path / "volume_fields" / "c").iterdir()) == ["44"]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "volume_fields"))[n - 10:], values)


@pytest.mark.slow
def test_150m_point_volume_rows_are_all_dealt_to_the_shards() -> None:
    """Every one of the 36 source blocks of a 150M-point run deals its rows to the shards
    (labels int64), and the shards end up exactly full."""
    n = 150_000_000
    sizes = bucket_sizes(n)
    remaining, rng = sizes.copy(), labels_rng(0)
    dealt = np.zeros(len(sizes), dtype=np.int64)
    for block in range(-(-n // VOLUME_BLOCK_ROWS)):
        rows = min(VOLUME_BLOCK_ROWS, n - block * VOLUME_BLOCK_ROWS)
        labels = deal_block(rng, remaining, rows)
        assert labels.dtype == np.int64 and len(labels) == rows
        dealt += np.bincount(labels, minlength=len(sizes))
    assert remaining.sum() == 0 and np.array_equal(dealt, sizes)
