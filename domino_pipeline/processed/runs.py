"""Every accepted form of a processed run behind one interface: list, open, load, fingerprint.
The forms, what ``load_run`` checks and the fingerprints: docs/processed_runs.md."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from domino_pipeline.configuration.config import PARTS, DataConfig, PhysicsConfig, TrainConfig, parts_named, parts_setting
from domino_pipeline.processed.chunk_completeness import missing_chunks
from domino_pipeline.processed.curator_forms import npz_names, read_npy, read_npz, read_zarr_group
from domino_pipeline.processed.run_layout import (ARRAY_NAMES, ARRAY_SHAPES, FORMAT, PART_ARRAYS, ProcessedRunError,
                                                  arrays_for, check_format_version, check_shapes, check_values,
                                                  natural_key)
from domino_pipeline.storage.byte_reader import read_in_order
from domino_pipeline.configuration.run_selection import select_items
from domino_pipeline.storage.object_store import (ObjectInfo, as_location, exists, folder_contents, head, is_url, join,
                                                  list_objects, name_of)

RUN_SUFFIXES = (".zarr", ".npz", ".npy")
GEOMETRY_ARRAYS = ("stl_coordinates", "stl_faces", "stl_centers", "stl_areas")
GLOBAL_PARAMS = ("global_params_values", "global_params_reference")
_HASH_BLOCK = 1 << 20


class NoRunsError(FileNotFoundError):
    """A processed-data folder without any run in an accepted form."""


@dataclass(frozen=True)
class ReadOptions:
    """How runs are read: data.allow_pickle, data.allow_missing_chunks, the configured constants."""

    allow_pickle: bool = False
    global_params: tuple[float, ...] = (30.0, 1.205)
    allow_missing_chunks: bool = False


DEFAULT_OPTIONS = ReadOptions()


def read_options_from_config(data: DataConfig, physics: PhysicsConfig) -> ReadOptions:
    """ReadOptions from the ``data`` and ``physics`` sections."""
    return ReadOptions(allow_pickle=data.allow_pickle, global_params=(physics.stream_velocity, physics.air_density),
                       allow_missing_chunks=data.allow_missing_chunks)


@dataclass(frozen=True)
class OpenedRun:
    """A run opened for reading: its form, its arrays (lazy where the form allows) and attributes."""

    path: Path | str  # a URL for a run on object storage
    format: str  # one of FORMATS
    arrays: Mapping[str, Any]
    attrs: dict


def run_name(path: str | os.PathLike) -> str:
    """The run's name: the file or folder name without its form's suffix (run_1.zarr: run_1)."""
    name = name_of(path)
    for suffix in RUN_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _entries(directory: Path | str) -> list[tuple[str, str, Path | str]]:
    """(name, "folder" | "file" | "other", location) of a folder's or prefix's visible entries."""
    if is_url(directory):
        folders, objects = folder_contents(directory)
        found = [(n, "folder", join(directory, n)) for n in folders] + [(n, "file", join(directory, n)) for n in objects]
        if not found:
            raise FileNotFoundError(f"{directory}: no such processed-data prefix (nothing there)")
    elif directory.is_dir():
        found = [(p.name, "folder" if p.is_dir() else "file" if p.is_file() else "other", p)
                 for p in directory.iterdir()]
    else:
        raise FileNotFoundError(f"{directory}: no such processed-data directory")
    return [entry for entry in found if not entry[0].startswith(".")]


def list_runs(directory: str | os.PathLike) -> list[Path | str]:
    """The runs in ``directory`` (a folder or URL prefix), naturally sorted, hidden names left out;
    FileNotFoundError, NoRunsError (naming what it holds), ValueError for a name held twice."""
    directory = as_location(directory)
    entries = _entries(directory)
    runs = sorted((where for name, kind, where in entries if (name.endswith(".zarr") and kind == "folder")
                   or (name.endswith((".npz", ".npy")) and kind == "file")), key=natural_key)
    if not runs:
        names = sorted(name + ("/" if kind == "folder" else "") for name, kind, _ in entries)
        held = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise NoRunsError(f"{directory}: no run found (expected <run>.zarr groups in Zarr v2 or v3, "
                          f"<run>.npz or <run>.npy files); it holds {held or 'nothing'}")
    names: dict[str, Path] = {}
    for path in runs:
        if run_name(path) in names:
            raise ValueError(f"{directory}: run {run_name(path)} is there twice: "
                             f"{name_of(names[run_name(path)])} and {name_of(path)}; keep one")
        names[run_name(path)] = path
    return runs


@dataclass(frozen=True)
class RunSplit:
    """train.py's three roles: training, validation (chooses the checkpoint) and test (chooses nothing)."""

    train: list[Path | str]
    val: list[Path | str]
    test: list[Path | str]


def split_with_test(runs: list[Path | str], val_fraction: float, seed: int, *, test_fraction: float = 0.0,
                    test_runs: Sequence[int | str] | None = None) -> RunSplit:
    """A seeded split: test runs (``test_runs``, else ceil(``test_fraction`` * n) after the validation runs) held out;
    validation takes the first ceil(``val_fraction`` * n) of the rest, at least one, never all."""
    if not runs:
        raise ValueError("no processed runs to train on")
    order = [runs[i] for i in np.random.default_rng(seed).permutation(len(runs))]
    n_val = math.ceil(val_fraction * len(runs)) if val_fraction > 0 else 0
    if test_runs is not None:
        test = select_items(runs, run_name, test_runs, None, source="train.test_runs")
    else:
        n_test = math.ceil(test_fraction * len(runs)) if test_fraction > 0 else 0
        test = order[min(n_val, len(runs) - 1):][:n_test]
    rest = [run for run in order if run not in test]
    if not rest:
        raise ValueError(f"train.test_fraction / train.test_runs hold {len(test)} of {len(runs)} runs out: "
                         "none would be left to train on")
    val = rest[:min(n_val, len(rest) - 1)]
    in_order = lambda chosen: [run for run in runs if run in chosen]  # noqa: E731
    return RunSplit(train=[run for run in runs if run not in val and run not in test], val=in_order(val),
                    test=in_order(test))


def run_split_from_config(runs: list[Path | str], train: TrainConfig, seed: int) -> RunSplit:
    """train.py's ``split_with_test`` from the ``train`` section, seeded by ``train.split_seed`` or ``seed``."""
    return split_with_test(runs, train.val_fraction, seed if train.split_seed is None else train.split_seed,
                           test_fraction=train.test_fraction, test_runs=train.test_runs)


def _zarr_run(path: Path | str) -> OpenedRun:
    form, arrays, attrs = read_zarr_group(path)
    found = attrs.get("format")
    if found == FORMAT:
        check_format_version(attrs, path)
        return OpenedRun(path, "processed", arrays, attrs)
    if found is not None:
        raise ProcessedRunError(f"{path}: a {found!r} group, not a processed run")
    return OpenedRun(path, f"curator-{form}", arrays, attrs)


def open_run(path: str | os.PathLike, options: ReadOptions = DEFAULT_OPTIONS) -> OpenedRun:
    """Open one run of any accepted form; ProcessedRunError naming the file, or FileNotFoundError."""
    path = as_location(path)
    if not exists(path):
        raise FileNotFoundError(f"{path}: no processed run there")
    suffix = _suffix(path)
    if suffix == ".npz":
        run = OpenedRun(path, "curator-npz", *read_npz(path)[1:])
    elif suffix == ".npy":
        run = OpenedRun(path, "curator-npy", *read_npy(path, allow_pickle=options.allow_pickle)[1:])
    elif suffix == ".zarr" or (any(folder_contents(path)) if is_url(path) else Path(path).is_dir()):  # a folder
        run = _zarr_run(path)
    else:
        raise ProcessedRunError(f"{path}: not a run (expected a .zarr group, .npz or .npy file)")
    if not any(name in run.arrays for name in ARRAY_NAMES):
        raise ProcessedRunError(f"{path}: a {run.format} store without any DoMINO array; it holds "
                                f"arrays {sorted(run.arrays)} and attributes {sorted(run.attrs)}")
    check_all_chunks(run, options.allow_missing_chunks)
    return run


def _suffix(path: Path | str) -> str:
    """The run name's suffix (".zarr", ".npz", ...), for paths and URLs alike."""
    name = name_of(path)
    return name[name.rfind("."):] if "." in name else ""


def run_format(path: str | os.PathLike) -> str:
    """The form of a run (FORMATS), from its name and a Zarr group's metadata only: cheap, for reports."""
    path = as_location(path)
    if _suffix(path) in (".npz", ".npy"):
        return f"curator-{_suffix(path)[1:]}"
    return _zarr_run(path).format


def physics_constants(attrs: Mapping[str, Any]) -> tuple[float, float] | None:
    """(stream_velocity, air_density) from a run's attributes, or None where it has none."""
    nested = attrs.get("physics_constants")
    for source in (nested if isinstance(nested, Mapping) else {}, attrs):
        if "stream_velocity" in source and "air_density" in source:
            return float(source["stream_velocity"]), float(source["air_density"])
    return None


def _as_stored(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape an array is checked with: faces and global parameters flattened."""
    if name == "stl_faces" or name in GLOBAL_PARAMS:
        return (int(np.prod(shape, dtype=np.int64)),)
    return tuple(shape)


def load_run(path: str | os.PathLike, arrays: Sequence[str] | None = None, *,
             options: ReadOptions = DEFAULT_OPTIONS, opened: OpenedRun | None = None) -> dict[str, np.ndarray]:
    """``arrays`` (None: the run's parts') of a run of any form, validated, float32 (stl_faces int32)."""
    run = opened if opened is not None else open_run(path, options)
    names = arrays_for(run_parts(run)) if arrays is None else list(arrays)
    unknown = sorted(set(names) - set(ARRAY_SHAPES))
    if unknown:
        raise ValueError(f"unknown arrays {unknown}; choose from {list(ARRAY_NAMES)}")
    present = {name: run.arrays[name] for name in ARRAY_NAMES if name in run.arrays}
    missing = [n for n in names if n not in present and n not in GLOBAL_PARAMS]
    if missing:
        lacking = [part for part in PARTS if set(PART_ARRAYS[part]) & set(missing) and part not in run_parts(run)]
        why = _without(run.format, run_parts(run), lacking) if lacking else run.format
        raise ProcessedRunError(f"{run.path}: missing arrays {missing} ({why}; it holds {sorted(run.arrays)})")
    check_shapes({name: _as_stored(name, tuple(a.shape)) for name, a in present.items()}, run.path)
    n_points = present["stl_coordinates"].shape[0] if "stl_coordinates" in present else None
    loaded = {}
    for name in names:
        if name in present:
            data = _read(run, name, present[name], ...).reshape(_as_stored(name, tuple(present[name].shape)))
        else:
            data = np.asarray(physics_constants(run.attrs) or options.global_params, dtype=np.float32)
        loaded[name] = check_values(name, data, run.path, n_points)
    return loaded


def run_parts(run: OpenedRun) -> tuple[str, ...]:
    """The parts (config.PARTS) a run holds besides the STL (docs/processed_runs.md)."""
    if run.format == "processed":
        return parts_named(run.attrs.get("parts", "all"))
    return _parts_with_arrays(run.arrays)


def _parts_with_arrays(names) -> tuple[str, ...]:
    """The parts of which ``names`` hold any array."""
    return tuple(part for part in PARTS if any(name in names for name in PART_ARRAYS[part]))


def require_parts(run: OpenedRun | str | os.PathLike, parts: Sequence[str], needed_by: str,
                  options: ReadOptions = DEFAULT_OPTIONS) -> None:
    """ProcessedRunError naming the run, the parts it lacks and what needs them (``needed_by``), when it lacks any."""
    if isinstance(run, OpenedRun):
        path, form, held = run.path, run.format, run_parts(run)
    elif _suffix(path := as_location(run)) == ".npz":  # a path: its parts from metadata only (not a legacy .npy's)
        form, held = "curator-npz", _parts_with_arrays(npz_names(path))
    else:
        opened = open_run(path, options) if _suffix(path) == ".npy" else _zarr_run(path)
        form, held = opened.format, run_parts(opened)
    lacking = [part for part in parts if part not in held]
    if lacking:
        arrays = ", ".join(name for part in lacking for name in PART_ARRAYS[part])
        raise ProcessedRunError(f"{path}: {_without(form, held, lacking)}; {needed_by} needs {arrays}")


def _without(form: str, held: tuple[str, ...], lacking: Sequence[str]) -> str:
    """``processed with process.parts=surface, without volume arrays``, or a curator run's form."""
    how = f"processed with process.parts={parts_setting(held)}" if form == "processed" else f"a {form} run"
    return f"{how}, without {' and '.join(lacking)} arrays"


class NamedArray:
    """One array of an opened run read by slices, any reader error named with the run, form and array."""

    def __init__(self, run: OpenedRun, name: str) -> None:
        self.run, self.name, self.array = run, name, run.arrays[name]
        self.shape = tuple(self.array.shape)

    def __getitem__(self, selection) -> np.ndarray:
        return _read(self.run, self.name, self.array, selection)


def _read(run: OpenedRun, name: str, array: Any, selection) -> np.ndarray:
    """``array[selection]`` of a run; any reader error is ProcessedRunError naming run, form and array."""
    try:
        return np.asarray(array[selection])
    except Exception as err:  # zarr, numcodecs and numpy raise many types
        raise ProcessedRunError(f"{run.path}: array {name} ({run.format}) is unreadable: "
                                f"{type(err).__name__}: {err}") from err


def check_all_chunks(run: OpenedRun, allow_missing: bool = False) -> None:
    """ProcessedRunError naming the first absent chunks of a Zarr run (docs/processed_runs.md)."""
    if not run.format.startswith(("processed", "curator-zarr")):
        return
    if allow_missing and not run.attrs.get("all_chunks_written"):
        return
    for name in sorted(n for n in run.arrays if n in ARRAY_NAMES):
        try:
            missing = missing_chunks(join(run.path, name), limit=6)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ProcessedRunError(f"{run.path}: array {name} ({run.format}): unreadable chunk "
                                    f"layout ({type(err).__name__}: {err})") from err
        if missing:
            more = " and more" if len(missing) > 5 else ""
            raise ProcessedRunError(f"{run.path}: array {name} ({run.format}) lacks chunks {missing[:5]}{more}, which "
                                    "zarr would read as fill values (zeros); rewrite the run, or set "
                                    "data.allow_missing_chunks=true if its writer omits fill-valued chunks on purpose")


def _run_files(path: Path | str) -> tuple[bool, list[tuple[str, Path | str, Any]]]:
    """(whether the run is a folder, (name, location, stat) of its files); FileNotFoundError for none."""
    if is_url(path):
        files = [(n, join(path, n), info) for n, info in sorted(list_objects(path).items())]
        single = head(path) if not files else None
        folder, files = single is None, files or [(name_of(path), path, single)]
    else:
        root, folder = Path(path), Path(path).is_dir()
        found = sorted(p for p in root.rglob("*") if p.is_file()) if folder else [root]
        files = [(p.relative_to(root).as_posix() if folder else p.name, p, p) for p in found if p.exists()]
    if not files or files[0][2] is None:
        raise FileNotFoundError(f"{path}: no processed run there (no files)")
    return folder, files


def source_fingerprint(path: str | os.PathLike) -> str:
    """SHA-256 of a run's stored bytes, names included (docs/processed_runs.md, "Fingerprints")."""
    folder, files = _run_files(as_location(path))
    remote = iter(read_in_order([where for _, where, _ in files if is_url(where)]))
    digest = hashlib.sha256()
    for name, location, _ in files:
        if folder:
            digest.update(name.encode() + b"\0")
        if is_url(location):
            digest.update(next(remote) or b"")
        else:
            with open(location, "rb") as handle:
                while block := handle.read(_HASH_BLOCK):
                    digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def stat_fingerprint(path: str | os.PathLike) -> str:
    """SHA-256 of a run's file names, sizes, times and inodes, no data read (docs/processed_runs.md)."""
    digest = hashlib.sha256()
    for name, _, stat in _run_files(as_location(path))[1]:
        if isinstance(stat, ObjectInfo):
            digest.update(f"{name}\0{stat.size}\0{stat.e_tag}\0{stat.last_modified}\0".encode())
        else:
            info = stat.stat()
            digest.update(f"{name}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\0{info.st_ino}\0".encode())
    return digest.hexdigest()
