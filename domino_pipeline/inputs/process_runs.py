"""Raw run folders -> one processed ``<run>.zarr`` per run (layout: processed_run.py): process_data.py's work.

Per run (files found through the dataset profile, run_folder.py): the STL (triangulated if needed)
gives stl_*; the boundary surface (polygon cells with any vertex counts) gives cell centres, unit
normals, areas (OpenFOAM's face geometry, cell_geometry.py) and the wall fields from cell data; the
volume VTU gives points with point data, or cell centres (OpenFOAM's volume centroids, polyhedra
included) with cell data (``process.volume_source``), in the file's order, as
physicsnemo-curator writes them (the cache and the uncached datapipe put rows in a random order
themselves). Fields are made dimensionless by role (nondimensional.py): with the stream velocity U,
the air density rho and, for the turbulent viscosity, the car's length L (the largest extent of the
STL) unless ``physics.reference_length`` gives one. The surface and the volume are read and written
a block of cells or rows at a time (surface_stream.py, volume_stream.py); a file in an encoding
that cannot be read so is read whole with VTK, after a warning naming the memory it takes. Runs
are processed in parallel (executors.py: a local pool or Dask), each written atomically; finished
runs are skipped on a rerun; a bad run gets one line naming the file and the problem.

    results = process_all(raw_dir, processed_dir, options, num_processes=2)
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from domino_pipeline.atomic_store import exclusive_lock, remove_stale_temporaries
from domino_pipeline.config import ExecutorConfig
from domino_pipeline.executors import LOCAL_POOL, run_tasks
from domino_pipeline.inputs.concat_bytes import file_pieces
from domino_pipeline.inputs.drivaerml_reader import (
    SURFACE_ARRAYS,
    RunError,
    drop_zero_area,
    read_stl_triangles,
    stl_defects,
)
from domino_pipeline.inputs.nondimensional import car_length, field_divisors
from domino_pipeline.inputs.process_options import ProcessOptions
from domino_pipeline.inputs.processed_run import (
    ProcessedRunError,
    StreamedRows,
    natural_key,
    open_processed_run,
    write_processed_run,
)
from domino_pipeline.inputs.run_folder import find_runs, run_files
from domino_pipeline.inputs.surface_stream import open_surface
from domino_pipeline.inputs.volume_stream import open_volume
from domino_pipeline.run_report import RunResult
from domino_pipeline.run_selection import select_runs

# ----------------------------------------------------------------------------- one run

VOLUME_BLOCK_ROWS = 1 << 21  # volume rows read, checked and scaled at a time
SURFACE_BLOCK_CELLS = 1 << 18  # surface cells read at a time (their geometry is computed cell_geometry.CHUNK_CELLS at a time)


def _bounds(points: np.ndarray) -> list[list[float]]:
    return [points.min(axis=0).tolist(), points.max(axis=0).tolist()]


def process_run(run_dir: str | os.PathLike, out_path: str | os.PathLike, options: ProcessOptions,
                block_rows: int = VOLUME_BLOCK_ROWS,
                surface_block: int = SURFACE_BLOCK_CELLS) -> tuple[Path, list[str]]:
    """Read one DrivAerML run folder and write it as a processed Zarr group at ``out_path``.

    The volume is read and written ``block_rows`` rows at a time and the boundary surface
    ``surface_block`` cells at a time, so memory does not grow with them (the STL is read
    whole). Returns the written path and notes (such as a volume-source fallback). Raises
    FileNotFoundError or RunError naming the file and the problem.
    """
    run_dir = Path(run_dir)
    files = run_files(run_dir, options.dataset)
    stl, dropped = drop_zero_area(read_stl_triangles(files.stl))
    surface = open_surface(files.surface, options.surface_variables)
    volume = open_volume(files.volume, options.volume_variables, options.volume_source)
    notes = stl_defects(stl["stl_faces"], stl["stl_areas"], files.stl, dropped) + volume.notes
    length = car_length(stl["stl_coordinates"]) if options.reference_length is None else options.reference_length
    refs = (options.stream_velocity, options.air_density, length)
    params = np.array([options.stream_velocity, options.air_density], dtype=np.float32)
    arrays = stl | {"global_params_values": params, "global_params_reference": params.copy()}
    attrs = {
        "filename": files.name,
        "dataset": options.dataset.name,
        **options.recorded(),
        "physics_constants": {"stream_velocity": options.stream_velocity, "air_density": options.air_density},
        "nut_length_scale": float(length),
        "volume_source": volume.source,
        "counts": {
            "stl_points": len(stl["stl_coordinates"]),
            "stl_triangles": len(stl["stl_centers"]),
            "surface_cells": surface.n_cells,
            "volume_points": volume.n_rows,
        },
        "sources": {kind: {"name": p.name, "bytes": source_bytes(p)} for kind, p in files.sources().items()},
    }
    bounds = {"stl": _bounds(stl["stl_coordinates"])}
    surface_divisors = field_divisors(options.surface_fields, *refs)
    volume_divisors = field_divisors(options.volume_fields, *refs)
    streamed = [
        _streamed_rows(surface_shapes(surface.n_cells, len(surface_divisors)),
                       _scaled(surface.blocks(surface_block), surface_divisors), bounds, "surface"),
        _streamed_rows({"volume_mesh_centers": (volume.n_rows, 3),
                        "volume_fields": (volume.n_rows, len(volume_divisors))},
                       _scaled(volume.blocks(block_rows), volume_divisors), bounds, "volume"),
    ]
    return write_processed_run(out_path, arrays, attrs, streamed), notes


def source_bytes(path: Path) -> int:
    """The size of a source file, or of its pieces together."""
    return sum(p.stat().st_size for p in file_pieces(path))


def surface_shapes(n_cells: int, n_fields: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the surface arrays (SURFACE_ARRAYS) of ``n_cells`` cells."""
    return dict(zip(SURFACE_ARRAYS, ((n_cells, 3), (n_cells, 3), (n_cells,), (n_cells, n_fields))))


def _scaled(blocks: Iterator[tuple[np.ndarray, ...]], divisors: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The blocks with their last array (the raw fields) divided by ``divisors``."""
    for *rows, fields in blocks:
        yield (*rows, fields / divisors)


def _streamed_rows(shapes: dict[str, tuple[int, ...]], blocks: Iterator[tuple[np.ndarray, ...]],
                   bounds: dict, key: str) -> StreamedRows:
    """Arrays ``shapes`` written from ``blocks``; the bounds of the first (the positions) are
    gathered on the way and stored as ``bounds[key]`` once every row is seen."""
    positions = next(iter(shapes))
    low = np.full(3, np.inf)
    high = -low

    def observe(name: str, rows: np.ndarray) -> None:
        if name == positions and len(rows):
            np.minimum(low, rows.min(axis=0), out=low)
            np.maximum(high, rows.max(axis=0), out=high)

    def attrs() -> dict:
        bounds[key] = [np.float32(low).tolist(), np.float32(high).tolist()]
        return {"bounds": bounds}

    return StreamedRows(shapes, blocks, observe, attrs)


def _process_one(run_dir: Path, out_path: Path, options: ProcessOptions, overwrite: bool = False) -> RunResult:
    """Process one run in a worker, as the run's only writer (a run another writer finished
    meanwhile is skipped, unless ``overwrite``); failures come back as a result, not an
    exception."""
    try:
        with exclusive_lock(out_path.parent / ".locks" / f"{out_path.name}.lock", f"processed run {out_path}"):
            if out_path.exists() and not overwrite:
                return RunResult(run_dir.name, "skipped", "already processed")
            _, notes = process_run(run_dir, out_path, options)
    except (RunError, OSError, ValueError, MemoryError) as err:  # bad input: one line naming the file
        return RunResult(run_dir.name, "failed", str(err).splitlines()[0] or type(err).__name__)
    except Exception as err:  # a fault of the program or a library: one run's failure, with its traceback
        first = str(err).splitlines()[0] if str(err) else ""
        return RunResult(run_dir.name, "failed", f"{run_dir}: internal error {type(err).__name__}: {first}",
                         detail=traceback.format_exc())
    return RunResult(run_dir.name, "processed", notes=notes)


# ----------------------------------------------------------------------------- the batch


def process_all(raw_dir: str | os.PathLike, processed_dir: str | os.PathLike, options: ProcessOptions, *,
                num_processes: int = 1, overwrite: bool = False, executor: ExecutorConfig = LOCAL_POOL,
                runs: list[int | str] | None = None, shard: str | None = None) -> list[RunResult]:
    """Process the run folders of ``raw_dir`` that ``runs`` and ``shard`` choose (all by
    default; run_selection.py) into ``processed_dir``, ``num_processes`` at a time on
    ``executor``; return one result per run.

    Finished runs are skipped unless ``overwrite`` (refused when processed with other
    ``options``); temporaries left by killed writers are removed first.
    """
    processed_dir = Path(processed_dir)
    processed_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(processed_dir)
    results, jobs = [], {}
    run_dirs = {p.name: p for p in find_runs(raw_dir, options.dataset)}
    for name in select_runs(list(run_dirs), runs, shard, source=str(raw_dir)):
        run_dir, out = run_dirs[name], processed_dir / f"{name}.zarr"
        if out.exists() and not overwrite:
            differences = settings_differences(out, options)
            results.append(RunResult(run_dir.name, "skipped", "already processed") if not differences else
                           RunResult(run_dir.name, "failed", f"{out}: processed with other settings "
                                     f"({'; '.join(differences)}); rerun with process.overwrite=true"))
        else:
            jobs[name] = (run_dir, out, options, overwrite)
    results += run_tasks(_process_one, jobs, executor, workers=num_processes, progress="processing runs")
    return sorted(results, key=lambda r: natural_key(Path(r.name)))


def settings_differences(out: Path, options: ProcessOptions) -> list[str]:
    """``key: stored X, configured Y`` for each recorded setting of the processed run ``out``
    that differs from ``options``; an unreadable run is one difference."""
    try:
        attrs = open_processed_run(out).attrs
    except (ProcessedRunError, OSError, ValueError) as err:
        return [f"unreadable: {err}"]
    return options.differences(attrs)
