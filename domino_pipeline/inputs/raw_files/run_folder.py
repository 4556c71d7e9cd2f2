"""A raw run folder's files, found through the dataset profile's patterns (dataset_profile.py)."""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from domino_pipeline.configuration.config import PROCESS_PARTS, check_choice
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.raw_files.concat_bytes import folder_names, present_among
from domino_pipeline.inputs.raw_files.remote_files import RemoteFile
from domino_pipeline.inputs.meshes.run_errors import MissingFieldError
from domino_pipeline.processed.run_layout import natural_key

# What the error for a missing mesh adds: the setting that leaves it out
LEAVE_OUT = {"dataset.files.volume": "process.parts=surface leaves the volume out",
             "dataset.files.surface": "process.parts=volume leaves the surface out"}


@dataclass(frozen=True)
class RunFiles:
    """One run folder's files, local paths or RemoteFiles (a mesh None: not read; ``surface_areas``
    None: none published); ``published``: a remote run's coefficient and reference files."""

    name: str
    index: str
    stl: Path | RemoteFile
    surface: Path | RemoteFile | None
    volume: Path | RemoteFile | None
    surface_areas: Path | RemoteFile | None = None
    folder: Path | str | None = None
    published: tuple[RemoteFile, ...] = ()

    def sources(self) -> dict[str, Path | RemoteFile]:
        """The meshes read, by kind (stl, surface, volume)."""
        found = {"stl": self.stl, "surface": self.surface, "volume": self.volume}
        return {kind: path for kind, path in found.items() if path is not None}


def run_index(run_dir: Path | str, profile: DatasetConfig) -> str:
    """The ``{index}`` of a run folder (a path or a URL); ValueError when its name is not the profile's."""
    index = profile.run_index(Path(run_dir).name)
    if index is None:
        raise ValueError(f"{run_dir}: not a run folder of dataset {profile.name} "
                         f"(dataset.run_folders is {profile.run_folders})")
    return index


def find_runs(raw_dir: str | os.PathLike, profile: DatasetConfig) -> list[Path]:
    """The run folders in ``raw_dir`` (named as ``dataset.run_folders`` says), naturally sorted."""
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise FileNotFoundError(f"{raw_dir}: no such raw-data directory")
    runs = [p for p in raw_dir.glob(profile.run_folders.replace("{index}", "*"))
            if p.is_dir() and profile.run_index(p.name)]
    return sorted(runs, key=natural_key)


def resolve(run_dir: Path, pattern: str, index: str, key: str) -> Path:
    """The one file of ``run_dir`` ``pattern`` names; FileNotFoundError naming ``key`` otherwise."""
    if "/" in pattern:  # a pattern into sub-folders: matched against paths relative to the run
        names = [p.relative_to(run_dir).as_posix() for p in run_dir.glob(pattern.replace("{index}", index))
                 if p.is_file()]
    else:
        names = folder_names(run_dir)
    return run_dir / resolve_name(names, pattern, index, key, str(run_dir))


def resolve_name(names: Collection[str], pattern: str, index: str, key: str, folder: str) -> str:
    """``resolve`` among a folder's file ``names`` (a file in pieces by its whole name)."""
    name = pattern.replace("{index}", index)
    if not glob.has_magic(name):
        if not present_among(name, names):
            raise FileNotFoundError(f"{folder}/{name}: missing file ({_described(key)})")
        return name
    matches = sorted(fnmatch.filter(names, name))
    if not matches:
        raise FileNotFoundError(f"{folder}/{name}: no file matches ({_described(key)})")
    if len(matches) > 1:
        raise FileNotFoundError(f"{folder}/{name}: expected one file matching {key}, found {matches}")
    return matches[0]


def _described(key: str) -> str:
    """The profile key of a missing file, with the setting that leaves that mesh out."""
    return f"{key}; {LEAVE_OUT[key]}" if key in LEAVE_OUT else key


def run_files(run_dir: Path, profile: DatasetConfig, parts: str = "all") -> RunFiles:
    """The run's files by the profile (a mesh ``parts`` leaves out may be absent); FileNotFoundError."""
    check_choice("process.parts", parts, PROCESS_PARTS)
    index = run_index(run_dir, profile)
    files = profile.files
    areas = None
    if files.surface_areas is not None and parts != "volume":
        candidate = run_dir / files.surface_areas.replace("{index}", index)
        areas = candidate if candidate.is_file() else None
    return RunFiles(
        name=run_dir.name, index=index,
        stl=resolve(run_dir, files.stl, index, "dataset.files.stl"),
        surface=resolve(run_dir, files.surface, index, "dataset.files.surface") if parts != "volume" else None,
        volume=resolve(run_dir, files.volume, index, "dataset.files.volume") if parts != "surface" else None,
        surface_areas=areas, folder=run_dir,
    )


@contextmanager
def profile_field_hints(fields: Mapping[str, str | list[str]], part: str) -> Iterator[None]:
    """Within: a file lacking a field of ``part`` is refused naming the profile key to set."""
    try:
        yield
    except MissingFieldError as err:
        keys = {array: f"dataset.fields.{part}.{role}" for role, name in fields.items()
                for array in ([name] if isinstance(name, str) else name)}
        raise err.hinted(keys) from None
