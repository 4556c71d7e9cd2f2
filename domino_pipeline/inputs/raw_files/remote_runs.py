"""Raw run folders where they are published (``s3://``, ``gs://``, ``az://`` prefixes or
``hf://datasets/<owner>/<name>``), found by listing, their files resolved by the dataset profile
as on local disk, each piece with its size, ETag and published checksum (docs/remote_reading.md,
"What is checked, source by source")."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection

from domino_pipeline.configuration.config import PROCESS_PARTS, check_choice
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.storage.hub import HubFolder, is_hub, tree
from domino_pipeline.inputs.raw_files.concat_bytes import pieces_among
from domino_pipeline.processed.run_layout import natural_key
from domino_pipeline.inputs.raw_files.remote_files import Origin, RemoteFile, RemoteObject, RemoteRun
from domino_pipeline.inputs.raw_files.run_folder import RunFiles, resolve_name, run_index
from domino_pipeline.storage.object_store import (
    RETRY_DEADLINE_S,
    anonymous_for,
    folder_contents,
    list_objects,
    split_url,
)

_MD5 = re.compile(r"[0-9a-f]{32}")


def _listing(url: str, anonymous: bool, recursive: bool = False, retry_deadline_s: float = RETRY_DEADLINE_S
             ) -> tuple[Origin, list[str], dict[str, RemoteObject]]:
    """(origin, sub-folder names, objects by path) under ``url``: directly in it, or all (``recursive``)."""
    if is_hub(url):
        return _hub_listing(HubFolder.parse(url), anonymous, recursive, retry_deadline_s)
    root, prefix = split_url(url)
    if recursive:
        folders, infos = [], list_objects(url, anonymous=anonymous, retry_deadline_s=retry_deadline_s)
    else:
        folders, infos = folder_contents(url, anonymous=anonymous, retry_deadline_s=retry_deadline_s)
    md5 = root.lower().startswith(("s3://", "s3a://"))
    base = f"{prefix.rstrip('/')}/" if prefix else ""
    objects = {name: RemoteObject(f"{url.rstrip('/')}/{name}", base + name, info.size,
                                  _md5_checksum(info.e_tag) if md5 else None, info.e_tag)
               for name, info in infos.items()}
    return Origin(root, anonymous, retry_deadline_s=retry_deadline_s), folders, objects


def _md5_checksum(e_tag: str | None) -> str | None:
    """``md5:<hex>`` of an S3 ETag that is a plain MD5 digest, else None."""
    tag = (e_tag or "").strip('"').lower()
    return f"md5:{tag}" if _MD5.fullmatch(tag) else None


def _hub_listing(folder: HubFolder, anonymous: bool, recursive: bool, retry_deadline_s: float
                 ) -> tuple[Origin, list[str], dict[str, RemoteObject]]:
    entries = tree(folder, recursive=recursive, anonymous=anonymous)
    inside = len(folder.path) + 1 if folder.path else 0
    folders = [e["path"][inside:] for e in entries if e.get("type") == "directory" and not recursive]
    objects = {}
    for entry in entries:
        if entry.get("type") != "file":
            continue
        name = entry["path"][inside:]
        lfs = entry.get("lfs")
        checksum = f"sha256:{lfs['oid']}" if lfs else f"git-sha1:{entry['oid']}" if entry.get("oid") else None
        objects[name] = RemoteObject(folder.child(name).url, entry["path"], int(entry["size"]), checksum)
    return Origin(folder.resolve_base, anonymous, hub=True, retry_deadline_s=retry_deadline_s), folders, objects


def find_remote_runs(raw_url: str, profile: DatasetConfig, anonymous: bool | None,
                     retry_deadline_s: float = RETRY_DEADLINE_S) -> list[RemoteRun]:
    """The run folders directly under ``raw_url``, naturally sorted; FileNotFoundError for none."""
    raw_url = raw_url.rstrip("/")
    # the Hub: HF_TOKEN is sent where it is set, unless anonymous (a public dataset needs none)
    unsigned = bool(anonymous) if is_hub(raw_url) else anonymous_for(raw_url, anonymous)
    origin, folders, objects = _listing(raw_url, unsigned, retry_deadline_s=retry_deadline_s)
    if not folders and not objects:
        raise FileNotFoundError(f"{raw_url}: no such raw-data prefix (nothing is listed there)")
    runs = [RemoteRun(name, f"{raw_url}/{name}", origin) for name in folders if profile.run_index(name)]
    return sorted(runs, key=lambda run: natural_key(run.name))


def remote_run_files(run: RemoteRun, profile: DatasetConfig, parts: str = "all") -> RunFiles:
    """The run's files (RemoteFiles) by the profile among its listed objects; FileNotFoundError naming one."""
    check_choice("process.parts", parts, PROCESS_PARTS)
    index = run_index(run.url, profile)
    origin, _, objects = _listing(run.url, run.origin.anonymous, recursive=True,
                                  retry_deadline_s=run.origin.retry_deadline_s)

    def remote(pattern: str, key: str) -> RemoteFile:
        names = objects if "/" in pattern else [n for n in objects if "/" not in n]  # as in the folder
        name = resolve_name(names, pattern, index, key, run.url)
        pieces = pieces_among(name, names, run.url)
        return RemoteFile(name, f"{run.url}/{name}", tuple(objects[p] for p in pieces), origin)

    files = profile.files
    areas = files.surface_areas.replace("{index}", index) if files.surface_areas and parts != "volume" else None
    return RunFiles(
        name=run.name, index=index,
        stl=remote(files.stl, "dataset.files.stl"),
        surface=remote(files.surface, "dataset.files.surface") if parts != "volume" else None,
        volume=remote(files.volume, "dataset.files.volume") if parts != "surface" else None,
        surface_areas=RemoteFile(areas, f"{run.url}/{areas}", (objects[areas],), origin) if areas in objects else None,
        folder=run.url,
        published=tuple(RemoteFile(name, f"{run.url}/{name}", (objects[name],), origin)
                        for name in published_names(objects, profile, index)),
    )


def published_names(names: Collection[str], profile: DatasetConfig, index: str) -> list[str]:
    """The paths among ``names`` that the profile's published files (coefficients, references) match."""
    patterns = [p.replace("{index}", index) for p in (profile.coefficients.own, profile.coefficients.constant,
                                                      profile.references.file) if p]
    return sorted({name for name in names for pattern in patterns
                   if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern.replace("**/", ""))})
