"""The stored order of the kept volume rows: a uniformly random permutation that a cache build applies block by block in
bounded memory (``deal_block`` in the first pass, ``bucket_permutation`` in the second) and the uncached path in memory
(``volume_order``), identically. The draw is specified in docs/cache_format.md ("Arrays of a run", row order)."""

from __future__ import annotations

import numpy as np

VOLUME_BLOCK_ROWS = 1 << 22  # rows per bucket: a cache build's volume block, a volume shard
_STREAM = 2  # the volume rows' random stream (0: STL vertices, 1: surface rows)


def bucket_sizes(n_kept: int, block_rows: int = VOLUME_BLOCK_ROWS) -> np.ndarray:
    """The sizes of the buckets ``n_kept`` rows are dealt into: full ones, then the rest."""
    full, rest = divmod(int(n_kept), int(block_rows))
    return np.array([block_rows] * full + ([rest] if rest else []), dtype=np.int64)


def labels_rng(seed: int) -> np.random.Generator:
    """The generator of the bucket labels, shared by every block of a run in order."""
    return np.random.default_rng([int(seed), _STREAM])


def deal_block(rng: np.random.Generator, remaining: np.ndarray, n_rows: int) -> np.ndarray:
    """Bucket labels of the next ``n_rows`` kept rows, drawn from the buckets' ``remaining`` places (updated)."""
    if n_rows == 0:
        return np.zeros(0, dtype=np.int64)
    counts = rng.multivariate_hypergeometric(remaining, n_rows)
    remaining -= counts
    return rng.permutation(np.repeat(np.arange(len(remaining)), counts))


def bucket_permutation(seed: int, bucket: int, size: int) -> np.ndarray:
    """The order of bucket ``bucket``'s ``size`` rows (taken in source order) in storage."""
    return np.random.default_rng([int(seed), _STREAM, int(bucket)]).permutation(int(size))


def volume_order(inside: np.ndarray, seed: int, block_rows: int = VOLUME_BLOCK_ROWS) -> np.ndarray:
    """The source rows of the kept volume points (``inside``) in stored order, as a block-wise build stores them."""
    kept = np.flatnonzero(inside)
    sizes = bucket_sizes(len(kept), block_rows)
    remaining, rng = sizes.copy(), labels_rng(seed)
    per_block = np.bincount(kept // block_rows, minlength=-(-len(inside) // block_rows))
    labels = np.concatenate([deal_block(rng, remaining, int(m)) for m in per_block] or [np.zeros(0, dtype=np.int64)])
    grouped = kept[np.argsort(labels, kind="stable")]
    parts = np.split(grouped, np.cumsum(sizes)[:-1])
    return np.concatenate([part[bucket_permutation(seed, b, len(part))] for b, part in enumerate(parts)] or [kept])
