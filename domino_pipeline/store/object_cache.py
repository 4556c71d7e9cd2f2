"""A cache on object storage: uploading a cache folder or one run generation, and removing the generations no reader
needs (docs/cache_format.md, "On object storage"). The manifest goes last: it commits the runs it names."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from domino_pipeline.storage.object_store import delete_objects, objects_by_folder
from domino_pipeline.storage.byte_reader import ConflictError, reader_and_key
from domino_pipeline.storage.object_store import join
from domino_pipeline.store.cache_format import GENERATION
from domino_pipeline.store.manifest import MANIFEST
from domino_pipeline.store.run_writer import KEEP_GENERATIONS
from domino_pipeline.store.staleness import manifest_records

UPLOAD_BATCH_BYTES = 256 << 20
CLAIM = ".claim"  # the object whose create-only put claims a generation number
ABANDONED_AFTER_S = 3600.0  # an unfinished generation untouched this long: its builder is gone


def upload_folder(folder: str | os.PathLike, location: str) -> int:
    """Upload a cache ``folder`` to ``location`` (hidden files left out), the manifest last; the object count."""
    folder = Path(folder)
    source, prefix = reader_and_key(location)
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    files.sort(key=lambda p: p.relative_to(folder).as_posix() == MANIFEST)
    if not files:
        return 0
    keys = [f"{prefix}/{p.relative_to(folder).as_posix()}" for p in files]
    _put_in_batches(source, list(zip(keys[:-1], files[:-1])))
    source.put(keys[-1], files[-1].read_bytes())
    return len(files)


def _put_in_batches(source, items: list[tuple[str, Path]]) -> None:
    """Upload each (key, file), several at a time, with at most about ``UPLOAD_BATCH_BYTES`` in memory."""
    batch: list[tuple[str, bytes]] = []
    held = 0
    for key, path in items:
        batch.append((key, path.read_bytes()))
        held += len(batch[-1][1])
        if held >= UPLOAD_BATCH_BYTES:
            source.put_many(batch)
            batch, held = [], 0
    source.put_many(batch)


def claim_generation(cache_url: str, name: str) -> tuple[int, str]:
    """Claim run ``name``'s next generation number by a create-only put of its ``.claim``: (number, URL)."""
    folder = join(cache_url, name)
    source, key = reader_and_key(folder)
    numbers = [int(m.group(1)) for n in source.list(key)[0] if (m := GENERATION.match(n))]  # complete or not
    number = max(numbers, default=0) + 1
    while True:
        try:
            source.put(f"{key}/g{number}.zarr/{CLAIM}", f"pid {os.getpid()}\n".encode(), mode="create")
            return number, join(folder, f"g{number}.zarr")
        except ConflictError:
            number += 1


def publish_generation(local: str | os.PathLike, cache_url: str, name: str, *,
                       abandoned_after_s: float = ABANDONED_AFTER_S) -> str:
    """Upload ``local`` as run ``name``'s next generation (``zarr.json`` last), remove old ones; its URL."""
    local = Path(local)
    number, url = claim_generation(cache_url, name)
    source, key = reader_and_key(url)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    _put_in_batches(source, [(f"{key}/{f}", local / f) for f in files if f != "zarr.json"])
    group = json.loads((local / "zarr.json").read_bytes())
    group.setdefault("attributes", {})["generation"] = number
    source.put(f"{key}/zarr.json", json.dumps(group, indent=2).encode(), mode="create")
    remove_old_generations(cache_url, name, abandoned_after_s=abandoned_after_s)
    return url


def untouched_for(objects: dict, seconds: float) -> bool:
    """Whether no object of ``objects`` was written in the last ``seconds``."""
    now = time.time()
    return all(o.last_modified is not None and now - o.last_modified.timestamp() > seconds for o in objects.values())


def remove_old_generations(cache_url: str, name: str, *, abandoned_after_s: float = ABANDONED_AFTER_S) -> list[str]:
    """Delete run ``name``'s generations no reader needs, each ``zarr.json`` first; their names."""
    by_generation = {folder: objects for folder, objects in objects_by_folder(str(join(cache_url, name))).items()
                     if GENERATION.match(folder)}  # the objects of each generation, complete or not
    complete = sorted((n for n, files in by_generation.items() if "zarr.json" in files),
                      key=lambda n: int(GENERATION.match(n).group(1)))
    entry = manifest_records(cache_url).get(name)  # the generation the manifest names is kept too
    keep = set(complete[-KEEP_GENERATIONS:]) | {entry["path"].rsplit("/", 1)[-1] if entry else None}
    old = [n for n in complete if n not in keep] + [
        n for n, files in by_generation.items() if n not in complete and untouched_for(files, abandoned_after_s)]
    for generation in old:
        files = sorted(by_generation[generation], key=lambda f: f != "zarr.json")
        delete_objects(str(join(cache_url, name, generation)), files[:1])
        delete_objects(str(join(cache_url, name, generation)), files[1:])
    return old
