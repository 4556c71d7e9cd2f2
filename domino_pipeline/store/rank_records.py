"""How the ranks of a multi-process cache build finish without waiting for one another.

Under torchrun each rank builds its share of the runs; ranks finish at very different times
(runs already current, fast failures, smaller runs, DrivAerML runs of tens of minutes), so no
rank waits in a collective. Each writes a small record of its outcome to
``<cache>/.ranks/<job>/rank-<r>.json``; under a lock, the rank that finds every rank's record
there is the last one: it alone finishes the job (writes the manifest) and removes the records.
A rank that finds its own record gone knows the last rank has done so.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from domino_pipeline.atomic_store import exclusive_lock, read_json, write_json_atomic

RANKS_DIR = ".ranks"
T = TypeVar("T")


def job_folder(cache_dir: str | Path, job: str) -> Path:
    """Where the ranks of job ``job`` leave their records."""
    return Path(cache_dir) / RANKS_DIR / job


def finish_rank(cache_dir: str | Path, job: str, rank: int, world_size: int, record: dict,
                on_last: Callable[[list[dict]], T]) -> T | None:
    """Leave this rank's ``record``; when it is the last of the ``world_size`` ranks of ``job``,
    return ``on_last(records in rank order)`` and remove the job's records; else None."""
    folder = job_folder(cache_dir, job)
    mine = folder / f"rank-{rank}.json"
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(mine, record)
    with exclusive_lock(Path(cache_dir) / RANKS_DIR / ".lock", f"the rank records of {cache_dir}"):
        paths = [folder / f"rank-{r}.json" for r in range(world_size)]
        if not mine.exists() or not all(p.exists() for p in paths):
            return None  # another rank is still building, or the last one has finished already
        result = on_last([read_json(p, "no rank record") for p in paths])
        shutil.rmtree(folder, ignore_errors=True)
    return result
