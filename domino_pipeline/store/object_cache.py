"""A cache on object storage: uploading a local cache folder, listing and checking what a
prefix holds. The manifest is uploaded last: it is the commit that makes the runs it names
readable."""

from __future__ import annotations

import json
import os
from pathlib import Path

from domino_pipeline.store.byte_source import ConflictError, join, source_and_key
from domino_pipeline.store.cache_format import GENERATION
from domino_pipeline.store.manifest import MANIFEST

UPLOAD_BATCH_BYTES = 256 << 20
CLAIM = ".claim"  # the object whose create-only put claims a generation number


def upload_folder(folder: str | os.PathLike, location: str) -> int:
    """Upload every file under the local cache ``folder`` to the URL ``location`` (same
    relative keys; hidden temporaries and locks left out), the manifest last; return the
    number of objects written."""
    folder = Path(folder)
    source, prefix = source_and_key(location)
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
    """Upload each (key, file), several at a time, holding at most about ``UPLOAD_BATCH_BYTES``
    of them in memory (a full-size run is gigabytes)."""
    batch: list[tuple[str, bytes]] = []
    held = 0
    for key, path in items:
        batch.append((key, path.read_bytes()))
        held += len(batch[-1][1])
        if held >= UPLOAD_BATCH_BYTES:
            source.put_many(batch)
            batch, held = [], 0
    source.put_many(batch)


def _generation_numbers(source, folder_key: str) -> list[int]:
    """Numbers of every generation prefix under a run's folder, complete or not."""
    return [int(m.group(1)) for n in source.list(folder_key)[0] if (m := GENERATION.match(n))]


def claim_generation(cache_url: str, name: str) -> tuple[int, str]:
    """Claim the next free generation number of run ``name`` with a create-only put of its
    ``.claim`` object (two builders never get the same one): (number, its URL)."""
    folder = join(cache_url, name)
    source, key = source_and_key(folder)
    number = max(_generation_numbers(source, key), default=0) + 1
    while True:
        try:
            source.put(f"{key}/g{number}.zarr/{CLAIM}", f"pid {os.getpid()}\n".encode(), mode="create")
            return number, join(folder, f"g{number}.zarr")
        except ConflictError:
            number += 1


def publish_generation(local: str | os.PathLike, cache_url: str, name: str) -> str:
    """Upload the local run generation ``local`` as the next generation of run ``name`` under
    ``cache_url``: every object under its own claimed prefix, the group's ``zarr.json`` (its
    ``generation`` attribute set to the claimed number) last, so the generation is listed only
    once whole; return its URL. An interrupted upload leaves a prefix no listing or manifest
    names."""
    local = Path(local)
    number, url = claim_generation(cache_url, name)
    source, key = source_and_key(url)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    source.put_many([(f"{key}/{f}", (local / f).read_bytes()) for f in files if f != "zarr.json"])
    group = json.loads((local / "zarr.json").read_bytes())
    group.setdefault("attributes", {})["generation"] = number
    source.put(f"{key}/zarr.json", json.dumps(group, indent=2).encode(), mode="create")
    return url
