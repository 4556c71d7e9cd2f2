"""The target scaling factors of an uncached training run, computed by every rank in parts.

train.py needs the factors before its first step. Reading them means streaming every training
run (hours at DrivAerML size), so no rank does it alone while the others wait behind a barrier:
rank r computes the statistics of every world-size-th run from r, the ranks exchange them in a
``work_group`` (whose wait is bounded by ``distributed.work_timeout_s``, not by training's
collective timeout) and merge them in run order, which gives exactly
``compute_scaling_factors``'s result. Every rank then has the factors; each writes the file
(the same bytes, atomically), so a rank on another machine finds it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from domino_pipeline.compute.scaling import (
    load_scaling_factors,
    merge_statistics,
    processed_run_statistics,
    save_scaling_factors,
)
from domino_pipeline.processed.runs import ReadOptions, run_name

Gather = Callable[[Any], list[Any]]


def factors_in_parts(train_runs: Sequence[Path], *, rank: int, world_size: int, gather: Gather,
                     normalization: str, options: ReadOptions, variables: dict) -> dict:
    """Scaling factors over ``train_runs``: this rank reads its share, ``gather`` (every rank's
    object, in rank order) brings the others', the merge follows the runs' order."""
    mine = {i: processed_run_statistics(path, options=options)
            for i, path in enumerate(train_runs) if i % world_size == rank}
    per_run: dict[int, dict] = {}
    for part in gather(mine):
        per_run.update(part)
    return merge_statistics([per_run[i] for i in range(len(train_runs))],
                            [run_name(p) for p in train_runs], normalization=normalization,
                            variables=variables)


def ensure_scaling_factors(train_runs: Sequence[Path], path: Path, *, rank: int, world_size: int,
                           gather: Gather, normalization: str, options: ReadOptions,
                           variables: dict, allow_other_split: bool, log: Callable[[str], None]) -> None:
    """Compute the factors file at ``path`` in parts when any rank lacks it; refuse an existing
    one computed from other runs than ``train_runs`` unless ``allow_other_split``. Every rank
    calls it; ``gather`` exchanges objects between them (a ``work_group``'s, in train.py)."""
    if any(gather(not path.exists())):
        if rank == 0:
            log(f"computing {normalization} scaling factors from {len(train_runs)} training runs "
                f"({world_size} ranks in parts) -> {path}")
        save_scaling_factors(path, factors_in_parts(
            train_runs, rank=rank, world_size=world_size, gather=gather, normalization=normalization,
            options=options, variables=variables))
        return
    names = [run_name(r) for r in train_runs]
    if load_scaling_factors(path, allow_pickle=options.allow_pickle).get("runs", names) != names:
        if not allow_other_split:
            raise ValueError(f"{path}: the scaling factors were computed from other runs than this "
                             "training split (see its 'runs'); recompute them (delete the file, or "
                             "rerun cache_data.py with this train.val_fraction and train.split_seed), "
                             "or set sampling.allow_other_split=true to use them anyway")
        if rank == 0:
            log(f"note: {path} was computed from other runs than this training split (allowed)")
