"""The byte source: coalescing, and one wave of ranged, tail and whole reads of local files."""

from __future__ import annotations

from pathlib import Path

from domino_pipeline.storage.byte_reader import LocalReader, Request, coalesce
from domino_pipeline.storage.object_store import is_url, join, split_url


def test_touching_and_overlapping_ranges_are_merged_and_each_member_named():
    ranges = [(100, 10), (0, 10), (10, 5), (110, 4), (12, 1), (200, 1)]
    assert coalesce(ranges) == [(0, 15, [1, 2, 4]), (100, 14, [0, 3]), (200, 1, [5])]


def test_one_wave_reads_ranges_tails_whole_files_and_names_the_absent(tmp_path):
    data = bytes(range(256)) * 4
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "shard").write_bytes(data)
    source = LocalReader(tmp_path)
    requests = [Request("a/shard", 10, 5), Request("a/shard", 15, 5), Request("a/shard", None, 8),
                Request("a/shard"), Request("missing", 0, 4), Request("a/shard", 1020, 10)]
    got = source.fetch(requests)
    assert bytes(got[0][0]) == data[10:15] and bytes(got[1][0]) == data[15:20]
    assert bytes(got[2][0]) == data[-8:] and got[2][1] == len(data)
    assert bytes(got[3][0]) == data and got[3][1] == len(data)
    assert got[4] == (None, None)
    assert bytes(got[5][0]) == data[1020:]  # short at the end of the file: the caller checks sizes
    assert source.waves == 1 and source.requests == 5  # the two touching ranges went as one
    source.close()


def test_a_file_that_shrinks_or_grows_between_waves_is_read_as_it_now_is(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(bytes(range(200)))
    source = LocalReader(tmp_path)
    assert bytes(source.fetch([Request("shard", 100, 50)])[0][0]) == bytes(range(100, 150))
    with open(path, "r+b") as f:  # truncated in place, as an interrupted rewrite leaves it
        f.truncate(120)
    assert bytes(source.fetch([Request("shard", 100, 50)])[0][0]) == bytes(range(100, 120))
    assert bytes(source.fetch([Request("shard", 130, 5)])[0][0]) == b""
    path.write_bytes(bytes(range(250)) * 2)
    assert bytes(source.fetch([Request("shard", 400, 20)])[0][0]) == (bytes(range(250)) * 2)[400:420]
    source.close()


def test_empty_files_and_closed_sources(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "full").write_bytes(b"0123456789")
    source = LocalReader(tmp_path)
    assert bytes(source.fetch([Request("empty", 0, 4)])[0][0]) == b""
    kept = source.fetch([Request("full", 2, 3)])[0][0]
    source.close()
    assert bytes(kept) == b"234"  # a result taken before close stays readable
    assert bytes(source.fetch([Request("empty", 0, 4)])[0][0]) == b""  # reopened on use
    source.close()


def test_locations_are_paths_or_urls():
    assert is_url("s3://bucket/cache") and is_url("gs://b/c") and is_url("az://c/p")
    assert not is_url("outputs/cache") and not is_url(Path("s3:/x"))
    assert join("s3://bucket/cache/", "run_1", "g1.zarr") == "s3://bucket/cache/run_1/g1.zarr"
    assert join("outputs/cache", "run_1") == Path("outputs/cache/run_1")
    assert split_url("s3://bucket/a/b") == ("s3://bucket", "a/b")
