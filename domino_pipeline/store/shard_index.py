"""Checks of a cache array's shards from plain numbers (any byte source can use them): a shard's index, and its size
against the array's metadata. Arithmetic is in Python ints or bounded before uint64, so a crafted offset near 2**64
cannot wrap past a bound check (docs/cache_format.md, "Reading chunks directly")."""

from __future__ import annotations

import numpy as np

from domino_pipeline.processed.chunk_completeness import ABSENT, CHECKSUM_BYTES, INDEX_ENTRY_BYTES  # Zarr's layout
MAX_CHUNK_BYTES = 1 << 28  # the largest inner chunk a cache writes is a whole grid SDF
MAX_CHUNKS_PER_SHARD = 1 << 16  # a cache's shards hold at most a few hundred inner chunks


class ShardIndexError(ValueError):
    """A shard index or shard size that cannot be what the cache wrote."""


def check_index(index: np.ndarray, data_nbytes: int, chunk_nbytes: int, written: int) -> None:
    """ShardIndexError naming the first bad inner chunk unless a shard's (n, 2) uint64 ``index`` is whole: ``written``
    entries, each ``chunk_nbytes`` inside the ``data_nbytes`` of data, none overlapping or half absent."""
    offsets, sizes = index[:, 0], index[:, 1]
    absent = (offsets == ABSENT) & (sizes == ABSENT)
    _first("has only one of offset and size absent", (offsets == ABSENT) ^ (sizes == ABSENT))
    _first("is missing (a cache writes every inner chunk)", absent[:written])
    present = ~absent & (offsets != ABSENT) & (sizes != ABSENT)
    _first(f"has {{}} bytes, expected {chunk_nbytes}", present & (sizes != np.uint64(chunk_nbytes)), sizes)
    last_start = data_nbytes - chunk_nbytes  # a Python int: offsets above it end past the data
    past = present & ((offsets > np.uint64(max(last_start, 0))) | (last_start < 0))
    _first(f"starts at byte {{}}, past the {data_nbytes} data bytes of its shard", past, offsets)
    chunks = np.flatnonzero(present)
    order = chunks[np.argsort(offsets[chunks], kind="stable")]
    starts = offsets[order]  # each <= last_start, so start + chunk_nbytes cannot wrap
    overlap = np.flatnonzero(starts[1:] < starts[:-1] + np.uint64(chunk_nbytes))
    if overlap.size:
        a, b = int(order[overlap[0]]), int(order[overlap[0] + 1])
        raise ShardIndexError(f"inner chunk {b} overlaps inner chunk {a} (bytes {int(starts[overlap[0] + 1])} "
                              f"and {int(starts[overlap[0]])})")


def _first(problem: str, bad: np.ndarray, values: np.ndarray | None = None) -> None:
    """ShardIndexError for the first True entry of ``bad`` (``problem`` formatted with its value)."""
    hits = np.flatnonzero(bad)
    if hits.size:
        i = int(hits[0])
        more = f" (and {hits.size - 1} more)" if hits.size > 1 else ""
        raise ShardIndexError(f"inner chunk {i} " + problem.format(None if values is None else int(values[i])) + more)


def chunks_in_shard(rows: int, shard: int, shard_rows: int, chunk_rows: int) -> int:
    """How many inner chunks of shard ``shard`` lie inside an array of ``rows`` rows."""
    inside = min(shard_rows, max(rows - shard * shard_rows, 0))
    return -(-inside // chunk_rows)


def shard_nbytes(rows: int, shard: int, shard_rows: int, chunk_rows: int, chunk_nbytes: int) -> int:
    """The exact size of a shard as the cache writes it: its chunks with checksums, then index and checksum."""
    per_shard = shard_rows // chunk_rows
    return (chunks_in_shard(rows, shard, shard_rows, chunk_rows) * chunk_nbytes
            + per_shard * INDEX_ENTRY_BYTES + CHECKSUM_BYTES)


def check_shards(rows: int, chunk_rows: int, shard_rows: int, chunk_nbytes: int, sizes: dict[int, int]) -> None:
    """ShardIndexError unless the shard sizes (shard -> bytes) are what shape and chunking imply."""
    if not 0 < chunk_rows <= shard_rows or shard_rows % chunk_rows:
        raise ShardIndexError(f"inner chunks of {chunk_rows} rows do not divide shards of {shard_rows} rows")
    if chunk_nbytes > MAX_CHUNK_BYTES + CHECKSUM_BYTES:
        raise ShardIndexError(f"inner chunks of {chunk_nbytes} bytes, more than the format's {MAX_CHUNK_BYTES}")
    if shard_rows // chunk_rows > MAX_CHUNKS_PER_SHARD:
        raise ShardIndexError(f"{shard_rows // chunk_rows} inner chunks per shard, more than the "
                              f"format's {MAX_CHUNKS_PER_SHARD}")
    expected = -(-rows // shard_rows)
    if expected != len(sizes):  # compared first: ``expected`` may be crafted to be huge
        raise ShardIndexError(f"{rows} rows need {expected} shards, the store holds {len(sizes)}")
    absent = sorted(set(range(expected)) - set(sizes))
    if absent:
        raise ShardIndexError(f"{rows} rows need shards 0..{expected - 1}; shard {absent[0]} is absent")
    for shard, size in sorted(sizes.items()):
        want = shard_nbytes(rows, shard, shard_rows, chunk_rows, chunk_nbytes)
        if size != want:
            raise ShardIndexError(f"shard {shard} has {size} bytes; {rows} rows in this chunking make it {want}")
