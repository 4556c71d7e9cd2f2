"""DrivAerML run folders -> one processed ``<run>.zarr`` per run (layout: processed_run.py).

Per run ``run_<i>/``: the STL (triangulated if needed) gives stl_*; the boundary VTP (polygon
cells with any vertex counts) gives cell centres, unit normals, areas and the wall fields from
cell data; the volume VTU gives points with point data, or cell centres with cell data
(``process.volume_source``), in a random row permutation. Fields are non-dimensionalised with
the physics references. Runs are processed in parallel, each written atomically; finished runs are
skipped on a rerun; a bad run gets one line naming the file and the problem, and the command
exits non-zero when any run failed.

    python process_data.py data.raw_dir=/data/drivaerml data.processed_dir=/data/processed
    python process_data.py --config-name=demo process.num_processes=2 process.overwrite=true
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import zlib
from collections.abc import Collection, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import numpy as np
import pyvista as pv
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from vtkmodules.vtkCommonCore import vtkLogger
from vtkmodules.vtkIOGeometry import vtkSTLReader
from vtkmodules.vtkIOXML import vtkXMLPolyDataReader, vtkXMLUnstructuredGridReader

from atomic_store import remove_stale_temporaries
from processed_run import _natural_key, write_processed_run

VOLUME_SOURCES = ("points", "cells")
KIND_WIDTH = {"scalar": 1, "vector": 3}
# How each DrivAerML field is made dimensionless: its divisor in terms of U, rho and L.
FIELD_SCALES = {
    "pMeanTrim": "rho_u2",
    "wallShearStressMeanTrim": "rho_u2",
    "pPrime2MeanTrim": "rho_u2_squared",
    "UMeanTrim": "u",
    "nutMeanTrim": "u_l",
    "CpMeanTrim": "one",
    "magUMeanNormTrim": "one",
}


class RunError(ValueError):
    """A run folder whose files are missing, unreadable or lack a field."""


@dataclass(frozen=True)
class RunFiles:
    """The three files of one DrivAerML run folder."""

    name: str
    stl: Path
    surface: Path
    volume: Path


@dataclass
class RunResult:
    """Outcome of one run: status is processed, skipped or failed."""

    name: str
    status: str
    message: str = ""
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- reading VTK


def run_files(run_dir: Path) -> RunFiles:
    """The run's files by their DrivAerML names; raise FileNotFoundError naming a missing one."""
    index = run_dir.name.removeprefix("run_")
    files = RunFiles(
        run_dir.name,
        run_dir / f"drivaer_{index}.stl",
        run_dir / f"boundary_{index}.vtp",
        run_dir / f"volume_{index}.vtu",
    )
    for path in (files.stl, files.surface, files.volume):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing file")
    return files


_READERS = {".stl": vtkSTLReader, ".vtp": vtkXMLPolyDataReader,
            ".vtu": vtkXMLUnstructuredGridReader}


def _run_reader(reader, path: Path, step: str) -> None:
    """Run a VTK reader step ("UpdateInformation" or "Update"); its first error is a RunError.

    VTK's own stderr logging is switched off, so a bad file gives one clear line.
    """
    vtkLogger.SetStderrVerbosity(vtkLogger.VERBOSITY_OFF)
    with pv.VtkErrorCatcher(raise_errors=False, send_to_logging=False) as catcher:
        getattr(reader, step)()
    errors = [event.alert.splitlines()[0] for event in catcher.events if event.kind == "ERROR"]
    if errors:
        raise RunError(f"{path}: unreadable ({errors[0]})")


def open_reader(path: Path):
    """A VTK reader for an STL, VTP or VTU file, with its header read."""
    if path.suffix.lower() not in _READERS:
        raise RunError(f"{path}: unsupported file type, expected one of {sorted(_READERS)}")
    reader = _READERS[path.suffix.lower()]()
    reader.SetFileName(str(path))
    _run_reader(reader, path, "UpdateInformation")
    return reader


def array_names(reader) -> dict[str, list[str]]:
    """Names of the point and cell data arrays an XML reader's file holds."""
    names = {}
    for where, selection in (("points", reader.GetPointDataArraySelection()),
                             ("cells", reader.GetCellDataArraySelection())):
        names[where] = [selection.GetArrayName(i) for i in range(selection.GetNumberOfArrays())]
    return names


def read_arrays(
    reader, path: Path, point_arrays: Collection[str] | None, cell_arrays: Collection[str] | None
) -> pv.DataSet:
    """Read the mesh of an opened reader with only the named point and cell arrays (None: all).

    Selecting arrays saves time and memory on DrivAerML's large VTP and VTU files.
    """
    if path.suffix.lower() != ".stl":
        for wanted, selection in ((point_arrays, reader.GetPointDataArraySelection()),
                                  (cell_arrays, reader.GetCellDataArraySelection())):
            if wanted is not None:
                selection.DisableAllArrays()
                for name in wanted:
                    selection.EnableArray(name)
    _run_reader(reader, path, "Update")
    mesh = pv.wrap(reader.GetOutput())
    if mesh.n_points == 0 or mesh.n_cells == 0:
        raise RunError(f"{path}: no points or cells")
    return mesh


def read_mesh(
    path: Path, point_arrays: Collection[str] | None = None, cell_arrays: Collection[str] | None = None
) -> pv.DataSet:
    """Read an STL, VTP or VTU file; read errors and empty results become RunError."""
    return read_arrays(open_reader(path), path, point_arrays, cell_arrays)


def _require(available: list[str], names: Collection[str], path: Path, where: str) -> None:
    missing = [name for name in names if name not in available]
    if missing:
        raise RunError(f"{path}: no {where} data {missing} (has {sorted(available)})")


def field_columns(data: Mapping, variables: Mapping[str, str], path: Path, where: str) -> np.ndarray:
    """Stack the named fields of ``data`` (point or cell data) as float32 columns, in order."""
    columns = []
    for name, kind in variables.items():
        if kind not in KIND_WIDTH:
            raise ValueError(f"variable {name}: kind {kind!r}, expected one of {list(KIND_WIDTH)}")
        if name not in data:
            raise RunError(f"{path}: no {where} data {name} (has {sorted(data.keys())})")
        values = np.asarray(data[name], dtype=np.float32)
        values = values.reshape(len(values), -1)
        if values.shape[1] != KIND_WIDTH[kind]:
            raise RunError(f"{path}: {where} data {name} has {values.shape[1]} components, "
                           f"expected {KIND_WIDTH[kind]} ({kind})")
        columns.append(values)
    return np.concatenate(columns, axis=1)


def field_divisors(
    variables: Mapping[str, str], stream_velocity: float, air_density: float, reference_length: float
) -> np.ndarray:
    """Per column divisors that make the fields dimensionless (DoMINO's convention)."""
    rho_u2 = air_density * stream_velocity**2
    scales = {"rho_u2": rho_u2, "rho_u2_squared": rho_u2**2, "u": stream_velocity,
              "u_l": stream_velocity * reference_length, "one": 1.0}
    divisors = []
    for name, kind in variables.items():
        if name not in FIELD_SCALES:
            raise ValueError(f"no non-dimensionalisation for {name}; known: {sorted(FIELD_SCALES)}")
        divisors += [scales[FIELD_SCALES[name]]] * KIND_WIDTH[kind]
    return np.asarray(divisors, dtype=np.float32)


def read_stl(path: Path) -> dict[str, np.ndarray]:
    """STL vertices, flattened triangle indices, triangle centres and areas."""
    mesh = read_mesh(path)
    if not isinstance(mesh, pv.PolyData):
        mesh = mesh.extract_surface()
    if not mesh.is_all_triangles:
        mesh = mesh.triangulate()
    faces = mesh.faces.reshape(-1, 4)[:, 1:]
    areas = mesh.compute_cell_sizes(length=False, area=True, volume=False).cell_data["Area"]
    return {
        "stl_coordinates": np.asarray(mesh.points, dtype=np.float32),
        "stl_faces": faces.astype(np.int32).ravel(),
        "stl_centers": np.asarray(mesh.cell_centers().points, dtype=np.float32),
        "stl_areas": np.asarray(areas, dtype=np.float32),
    }


def read_surface(path: Path, variables: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Boundary cell centres, unit normals (from the cell winding), areas and raw fields."""
    reader = open_reader(path)
    _require(array_names(reader)["cells"], variables, path, "cell")
    mesh = read_arrays(reader, path, point_arrays=[], cell_arrays=list(variables))
    if not isinstance(mesh, pv.PolyData):
        mesh = mesh.extract_surface()
    fields = field_columns(mesh.cell_data, variables, path, "cell")
    normals = mesh.compute_normals(
        cell_normals=True, point_normals=False, split_vertices=False,
        consistent_normals=False, auto_orient_normals=False,
    ).cell_data["Normals"]
    normals = normals / np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-30)
    areas = mesh.compute_cell_sizes(length=False, area=True, volume=False).cell_data["Area"]
    return {
        "surface_mesh_centers": np.asarray(mesh.cell_centers().points, dtype=np.float32),
        "surface_normals": np.asarray(normals, dtype=np.float32),
        "surface_areas": np.asarray(areas, dtype=np.float32),
        "surface_fields": fields,
    }


def read_volume(
    path: Path, variables: Mapping[str, str], source: str
) -> tuple[dict[str, np.ndarray], str, list[str]]:
    """Volume points and raw fields from ``source`` ("points" or "cells").

    When the VTU lacks a requested field at that source but has all of them at the other one,
    the other is used and a note says so. Returns the arrays, the source used and the notes.
    """
    if source not in VOLUME_SOURCES:
        raise ValueError(f"volume_source {source!r}, expected one of {list(VOLUME_SOURCES)}")
    reader = open_reader(path)
    available = array_names(reader)
    notes = []
    missing = [name for name in variables if name not in available[source]]
    if missing:
        other = next(s for s in VOLUME_SOURCES if s != source)
        if any(name not in available[other] for name in variables):
            raise RunError(f"{path}: fields {missing} missing as {source} data, and not all of "
                           f"{list(variables)} are {other} data either")
        notes.append(f"{path}: fields {missing} missing as {source} data, using {other} data")
        source = other
    if source == "points":
        mesh = read_arrays(reader, path, point_arrays=list(variables), cell_arrays=[])
        fields, centres = field_columns(mesh.point_data, variables, path, "point"), mesh.points
    else:
        mesh = read_arrays(reader, path, point_arrays=[], cell_arrays=list(variables))
        fields = field_columns(mesh.cell_data, variables, path, "cell")
        centres = mesh.cell_centers().points
    return {"volume_mesh_centers": np.asarray(centres, dtype=np.float32),
            "volume_fields": fields}, source, notes


# ----------------------------------------------------------------------------- one run


def _bounds(points: np.ndarray) -> list[list[float]]:
    return [points.min(axis=0).tolist(), points.max(axis=0).tolist()]


def _permutation_rng(seed: int, name: str) -> np.random.Generator:
    """A generator fixed by the seed and the run name, whatever the order runs are processed."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def process_run(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    surface_variables: Mapping[str, str],
    volume_variables: Mapping[str, str],
    stream_velocity: float,
    air_density: float,
    reference_length: float = 1.0,
    volume_source: str = "points",
    permutation_seed: int = 0,
) -> tuple[Path, list[str]]:
    """Read one DrivAerML run folder and write it as a processed Zarr group at ``out_path``.

    Returns the written path and notes (such as a volume-source fallback). Raises
    FileNotFoundError or RunError naming the file and the problem.
    """
    run_dir = Path(run_dir)
    files = run_files(run_dir)
    arrays = read_stl(files.stl) | read_surface(files.surface, surface_variables)
    volume, used_source, notes = read_volume(files.volume, volume_variables, volume_source)
    order = _permutation_rng(permutation_seed, files.name).permutation(len(volume["volume_fields"]))
    arrays["volume_mesh_centers"] = volume["volume_mesh_centers"][order]
    arrays["volume_fields"] = volume["volume_fields"][order]
    refs = (stream_velocity, air_density, reference_length)
    arrays["surface_fields"] = arrays["surface_fields"] / field_divisors(surface_variables, *refs)
    arrays["volume_fields"] = arrays["volume_fields"] / field_divisors(volume_variables, *refs)
    params = np.array([stream_velocity, air_density], dtype=np.float32)
    arrays["global_params_values"] = params
    arrays["global_params_reference"] = params.copy()
    attrs = {
        "filename": files.name,
        "stream_velocity": float(stream_velocity),
        "air_density": float(air_density),
        "reference_length": float(reference_length),
        "volume_source": used_source,
        "permutation_seed": int(permutation_seed),
        "surface_variables": dict(surface_variables),
        "volume_variables": dict(volume_variables),
        "counts": {
            "stl_points": len(arrays["stl_coordinates"]),
            "stl_triangles": len(arrays["stl_centers"]),
            "surface_cells": len(arrays["surface_mesh_centers"]),
            "volume_points": len(arrays["volume_mesh_centers"]),
        },
        "bounds": {
            "stl": _bounds(arrays["stl_coordinates"]),
            "surface": _bounds(arrays["surface_mesh_centers"]),
            "volume": _bounds(arrays["volume_mesh_centers"]),
        },
        "sources": {
            kind: {"name": p.name, "bytes": p.stat().st_size}
            for kind, p in (("stl", files.stl), ("surface", files.surface), ("volume", files.volume))
        },
    }
    return write_processed_run(out_path, arrays, attrs), notes


def _process_one(run_dir: Path, out_path: Path, options: dict) -> RunResult:
    """Process one run in a worker; expected failures come back as a result, not an exception."""
    try:
        _, notes = process_run(run_dir, out_path, **options)
    except (RunError, FileNotFoundError, OSError, ValueError) as err:
        return RunResult(run_dir.name, "failed", str(err).splitlines()[0])
    return RunResult(run_dir.name, "processed", notes=notes)


# ----------------------------------------------------------------------------- the batch


def find_runs(raw_dir: str | os.PathLike) -> list[Path]:
    """``run_*`` folders in ``raw_dir``, naturally sorted."""
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise FileNotFoundError(f"{raw_dir}: no such raw-data directory")
    return sorted((p for p in raw_dir.glob("run_*") if p.is_dir()), key=_natural_key)


def _run_pool(jobs: list[tuple[Path, Path]], options: dict, num_processes: int) -> list[RunResult]:
    """Process ``jobs`` in a spawn pool (or in this process for one worker) with a progress bar."""
    bar = tqdm(total=len(jobs), desc="processing runs", unit="run", disable=not jobs)
    results = []
    if num_processes <= 1 or len(jobs) <= 1:
        for run_dir, out in jobs:
            results.append(_process_one(run_dir, out, options))
            bar.update()
        bar.close()
        return results
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(num_processes, len(jobs)), mp_context=context) as pool:
        futures = {pool.submit(_process_one, r, o, options): r for r, o in jobs}
        for future in as_completed(futures):
            try:
                results.append(future.result())
            except BrokenProcessPool:
                results.append(RunResult(futures[future].name, "failed", "worker process died"))
            bar.update()
    bar.close()
    return results


def process_all(
    raw_dir: str | os.PathLike,
    processed_dir: str | os.PathLike,
    *,
    num_processes: int = 1,
    overwrite: bool = False,
    **options,
) -> list[RunResult]:
    """Process every run folder of ``raw_dir`` into ``processed_dir``; return one result per run.

    ``options`` are process_run's keyword arguments. Finished runs are skipped unless
    ``overwrite``; temporaries left by killed writers are removed first.
    """
    processed_dir = Path(processed_dir)
    processed_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(processed_dir)
    results, jobs = [], []
    for run_dir in find_runs(raw_dir):
        out = processed_dir / f"{run_dir.name}.zarr"
        if out.exists() and not overwrite:
            results.append(RunResult(run_dir.name, "skipped", "already processed"))
        else:
            jobs.append((run_dir, out))
    results += _run_pool(jobs, options, num_processes)
    return sorted(results, key=lambda r: _natural_key(Path(r.name)))


def summarize(results: list[RunResult]) -> str:
    """One line per failed run and per note, then the counts."""
    lines = [f"FAILED {r.name}: {r.message}" for r in results if r.status == "failed"]
    lines += [f"note {r.name}: {note}" for r in results for note in r.notes]
    counts = {s: sum(r.status == s for r in results) for s in ("processed", "skipped", "failed")}
    lines.append(
        f"{len(results)} runs: {counts['processed']} processed, {counts['skipped']} skipped, "
        f"{counts['failed']} failed"
    )
    return "\n".join(lines)


def run_options(cfg: DictConfig) -> dict:
    """process_run's keyword arguments from the Hydra config (physics, variables, process)."""
    variables = OmegaConf.to_container(cfg.variables, resolve=True)
    return {
        "surface_variables": variables["surface"],
        "volume_variables": variables["volume"],
        "stream_velocity": float(cfg.physics.stream_velocity),
        "air_density": float(cfg.physics.air_density),
        "reference_length": float(cfg.physics.reference_length),
        "volume_source": str(cfg.process.volume_source),
        "permutation_seed": int(cfg.process.permutation_seed),
    }


def _main(cfg: DictConfig) -> int:
    """Wire the Hydra config into process_all; return the exit code."""
    results = process_all(
        cfg.data.raw_dir,
        cfg.data.processed_dir,
        num_processes=int(cfg.process.num_processes),
        overwrite=bool(cfg.process.overwrite),
        **run_options(cfg),
    )
    print(summarize(results), flush=True)
    return 1 if any(r.status == "failed" for r in results) else 0


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry: process the runs of data.raw_dir into data.processed_dir."""
    code = _main(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
