"""A cache on object storage: uploading a local cache folder, listing and checking what a
prefix holds. The manifest is uploaded last: it is the commit that makes the runs it names
readable."""

from __future__ import annotations

import os
from pathlib import Path

from domino_pipeline.store.byte_source import source_and_key
from domino_pipeline.store.manifest import MANIFEST


def upload_folder(folder: str | os.PathLike, location: str) -> int:
    """Upload every file under the local cache ``folder`` to the URL ``location`` (same
    relative keys; hidden temporaries and locks left out), the manifest last; return the
    number of objects written."""
    folder = Path(folder)
    source, prefix = source_and_key(location)
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    files.sort(key=lambda p: p.relative_to(folder).as_posix() == MANIFEST)
    for path in files:
        source.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())
    return len(files)
