"""How the ranks of a multi-process cache build finish without waiting for one another: each leaves a record in
``<cache>/.ranks/<job>/``; the rank that finds them all alone writes the manifest (docs/cache_format.md). On object
storage it claims the job's end by a create-only put of ``<job>/finished``, kept until ``remove_finished_jobs``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from domino_pipeline.storage.atomic_store import exclusive_lock, read_json, write_json_atomic
from domino_pipeline.storage.object_store import delete_objects, objects_by_folder
from domino_pipeline.storage.byte_reader import ConflictError, Request, reader_and_key
from domino_pipeline.storage.object_store import is_url, join
from domino_pipeline.store.object_cache import untouched_for

RANKS_DIR = ".ranks"
FINISHED = "finished"  # the object whose create-only put claims a job's end (object storage)
T = TypeVar("T")


def finish_rank(cache_dir: str | Path, job: str, rank: int, world_size: int, record: dict,
                on_last: Callable[[list[dict]], T]) -> T | None:
    """Leave this rank's ``record``; the last of ``world_size`` returns ``on_last(records)`` and removes them."""
    folder = join(cache_dir, RANKS_DIR, job)  # the job's records: a folder, or a URL prefix
    if is_url(cache_dir):
        return _finish_remote(str(folder), rank, world_size, record, on_last)
    folder = Path(folder)
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


def _finish_remote(folder: str, rank: int, world_size: int, record: dict,
                   on_last: Callable[[list[dict]], T]) -> T | None:
    """``finish_rank`` on object storage: create-only puts, a listing, a create-only claim."""
    source, key = reader_and_key(folder)
    names = [f"rank-{r}.json" for r in range(world_size)]
    source.put(f"{key}/{names[rank]}", json.dumps(record).encode(), mode="create")
    listed = {o["path"].rsplit("/", 1)[-1] for o in source.list(key)[1]}
    if not listed.issuperset(names):
        return None  # another rank is still building; the last one lists every record
    try:
        source.put(f"{key}/{FINISHED}", f"rank {rank}\n".encode(), mode="create")
    except ConflictError:
        return None  # another rank saw every record too, and finishes the job
    fetched = source.fetch([Request(f"{key}/{name}") for name in names])
    result = on_last([json.loads(bytes(data)) for data, _ in fetched])
    for name in names:
        source.delete(f"{key}/{name}")
    return result


def remove_finished_jobs(cache_url: str, older_than_s: float) -> list[str]:
    """Delete the ``finished`` claims of jobs with no record left, older than ``older_than_s``; those jobs."""
    folder = str(join(cache_url, RANKS_DIR))
    done = [job for job, objects in objects_by_folder(folder).items()
            if list(objects) == [FINISHED] and untouched_for(objects, older_than_s)]
    if done:
        delete_objects(folder, [f"{job}/{FINISHED}" for job in done])
    return done
