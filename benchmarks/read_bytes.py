"""Bytes a CachedDoMINODataset has read from its cache in this process, for the benchmarks:
the sum over its open runs of what their chunk readers read (metadata, shard indexes, chunks).

A run the dataset closes takes its count with it, so a dataset counted here keeps every run
open: build it with ``max_open_runs=KEEP_ALL_OPEN``.
"""

from __future__ import annotations

KEEP_ALL_OPEN = 1 << 30


def bytes_read(dataset) -> int:
    """Bytes the dataset's runs have read in this process (ValueError when it may close runs)."""
    if dataset.max_open_runs < len(dataset):
        raise ValueError(f"{dataset.cache_dir}: counting bytes needs every run kept open "
                         f"(max_open_runs={dataset.max_open_runs} < {len(dataset)} runs)")
    return sum(dataset.run(i).bytes_read for i in dataset.open_run_indices())
