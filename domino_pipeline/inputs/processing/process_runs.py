"""Raw run folders -> one processed ``<run>.zarr`` per run, a block of rows at a time: process_data.py's
work (docs/raw_inputs.md, "One run"; the layout: docs/processed_runs.md)."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domino_pipeline.storage.atomic_store import exclusive_lock, remove_stale_temporaries
from domino_pipeline.configuration.config import ExecutorConfig
from domino_pipeline.runtime.executors import LOCAL_POOL, report, run_tasks
from domino_pipeline.inputs.statistics.column_moments import ColumnBounds
from domino_pipeline.inputs.meshes.mesh_rows import SURFACE_ARRAYS
from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import drop_zero_area, stl_defects
from domino_pipeline.inputs.raw_files.fetch_progress import FetchBars
from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.processed.run_layout import (
    ProcessedRunError,
    StreamedRows,
    natural_key,
    processed_in_memory,
    write_processed_run,
)
from domino_pipeline.inputs.processing.published_forces import Published
from domino_pipeline.inputs.processing.read_ahead import ReadAhead
from domino_pipeline.inputs.raw_files.raw_reading import LocalReading, RemoteAccess, RemoteReading, run_reading
from domino_pipeline.inputs.raw_files.remote_files import RemoteFile, RemoteRun, is_remote
from domino_pipeline.inputs.raw_files.remote_runs import find_remote_runs, remote_run_files
from domino_pipeline.inputs.raw_files.run_folder import RunFiles, find_runs, profile_field_hints, run_files
from domino_pipeline.inputs.statistics.run_statistics import RunStatistics, start_run_statistics
from domino_pipeline.processed.runs import open_run
from domino_pipeline.inputs.meshes.surface_stream import CellsObserver, SurfaceRows, SurfaceStream, open_surface
from domino_pipeline.inputs.meshes.volume_stream import VolumeStream, open_volume
from domino_pipeline.runtime.run_report import RunResult
from domino_pipeline.configuration.run_selection import select_items
from domino_pipeline.configuration.variables import arrays_of

VOLUME_BLOCK_ROWS = 1 << 21  # volume rows read, checked and scaled at a time
SURFACE_BLOCK_CELLS = 1 << 18  # surface cells read at a time (their geometry is computed cell_geometry.CHUNK_CELLS at a time)


def process_run(run_dir: str | os.PathLike | RemoteRun | RunFiles, out_path: str | os.PathLike, options: ProcessOptions,
                block_rows: int = VOLUME_BLOCK_ROWS, surface_block: int = SURFACE_BLOCK_CELLS, *,
                access: RemoteAccess = RemoteAccess(),
                progress: Callable[[int], None] | None = None) -> tuple[Path, list[str]]:
    """Read one raw run (a folder, a RemoteRun or its files) and write it as a processed Zarr group at
    ``out_path``, a block at a time; (the path, notes). FileNotFoundError or RunError naming the file."""
    if isinstance(run_dir, RemoteRun):
        run_dir = remote_run_files(run_dir, options.dataset, options.parts)
    files = run_dir if isinstance(run_dir, RunFiles) else run_files(Path(run_dir), options.dataset, options.parts)
    with run_reading(files, Path(out_path), access, progress) as reading:  # a remote run's temporaries live as long
        contents = read_run(files, options, block_rows, surface_block, reading)
        with closing(contents):
            return write_processed_run(out_path, contents.arrays, contents.attrs, contents.streamed), contents.notes


def process_in_memory(run_dir: str | os.PathLike,
                      options: ProcessOptions) -> tuple[dict[str, np.ndarray], dict, list[str]]:
    """The arrays, attributes and notes ``process_run`` would write for ``run_dir``, in memory."""
    contents = read_run(run_dir, options)
    with closing(contents):
        arrays, attrs = processed_in_memory(run_dir, contents.arrays, contents.attrs, contents.streamed)
    return arrays, attrs, contents.notes


@dataclass
class RunContents:
    """A raw run opened for processing: STL arrays, attributes, the meshes as StreamedRows, notes;
    ``close`` stops the reading ahead (a remote run's fetching first) and removes its temporaries."""

    arrays: dict[str, np.ndarray]
    attrs: dict
    streamed: list[StreamedRows]
    notes: list[str]
    close: Callable[[], None] = lambda: None


def read_run(run_dir: str | os.PathLike | RunFiles, options: ProcessOptions, block_rows: int = VOLUME_BLOCK_ROWS,
             surface_block: int = SURFACE_BLOCK_CELLS,
             reading: LocalReading | RemoteReading | None = None) -> RunContents:
    """Open a raw run for processing, its meshes read ahead while the STL is read; the caller closes it."""
    files = run_dir if isinstance(run_dir, RunFiles) else run_files(Path(run_dir), options.dataset, options.parts)
    reading = LocalReading() if reading is None else reading
    readers = ExitStack()

    def stop() -> None:
        reading.stop()  # a remote reader staging its arrays stops fetching, and so ends
        readers.close()

    def open_meshes() -> tuple[SurfaceStream | None, VolumeStream | None, ReadAhead | None, ReadAhead | None]:
        surface = volume = surface_blocks = volume_blocks = None
        if files.surface is not None:
            with profile_field_hints(options.surface_fields, "surface"):
                surface = open_surface(files.surface, options.surface_variables, arrays_of(options.surface_fields),
                                       surface_rows(options, files.surface_areas, reading), reading.open(files.surface))
            surface_blocks = readers.enter_context(closing(ReadAhead(_with_cells(surface, surface_block),
                                                                     name="surface blocks")))
        if files.volume is not None:
            with profile_field_hints(options.volume_fields, "volume"):
                volume = open_volume(files.volume, options.volume_variables, options.volume_source,
                                     arrays_of(options.volume_fields), reading.open(files.volume))
            volume_blocks = readers.enter_context(closing(ReadAhead(volume.blocks(block_rows), name="volume blocks")))
        return surface, volume, surface_blocks, volume_blocks

    try:
        with reading.alongside(open_meshes) as meshes:
            stl, dropped = drop_zero_area(reading.stl_triangles(files.stl))
            surface, volume, surface_blocks, volume_blocks = meshes()
        contents = _contents(files, options, reading, stl, dropped, surface, volume, surface_blocks, volume_blocks)
    except BaseException:
        stop()
        raise
    contents.close = stop
    return contents


def _contents(files: RunFiles, options: ProcessOptions, reading: LocalReading | RemoteReading,
              stl: dict[str, np.ndarray], dropped: int, surface: SurfaceStream | None, volume: VolumeStream | None,
              surface_blocks: "ReadAhead | None", volume_blocks: "ReadAhead | None") -> RunContents:
    """The run's arrays, attributes and streamed rows, once its STL is read and its meshes open."""
    def sources() -> dict[str, dict]:
        return {kind: reading.record(p) for kind, p in files.sources().items()}

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
        "volume_source": volume.source if volume else None,
        "counts": _counts(stl, surface, volume),
        "sources": sources(),
        "published": reading.published(files, options.dataset).as_attrs(),
    }
    corners = stl["stl_coordinates"]
    bounds = {"stl": [corners.min(axis=0).tolist(), corners.max(axis=0).tolist()]}
    surface_divisors = field_divisors(options.surface_fields, *refs)
    volume_divisors = field_divisors(options.volume_fields, *refs)
    statistics = start_run_statistics(options, stl, dropped, Published.from_attrs(attrs["published"]),
                                      surface_divisors if surface is not None else None,
                                      volume_divisors if volume is not None else None) \
        if options.statistics else None
    notes = stl_defects(stl["stl_faces"], stl["stl_areas"], files.stl, dropped,
                        None if statistics is None else statistics.stl) + (volume.notes if volume else [])
    streamed = []
    if surface is not None:
        cell_quality = None if statistics is None else statistics.surface.cells.add
        n = surface.n_cells
        shapes = (n, 3), (n, 3), (n,), (n, len(surface_divisors))
        streamed.append(_streamed_rows(dict(zip(SURFACE_ARRAYS, shapes)),
                                       _scaled(_cells_shown(surface_blocks, cell_quality), surface_divisors),
                                       bounds, "surface", statistics))
    if volume is not None:
        streamed.append(_streamed_rows({"volume_mesh_centers": (volume.n_rows, 3),
                                        "volume_fields": (volume.n_rows, len(volume_divisors))},
                                       _scaled(volume_blocks, volume_divisors), bounds, "volume", statistics))
    # no rows: the run's ``sources`` recorded again once every block is read (with every stretch read)
    streamed.append(StreamedRows({}, iter(()), attrs=lambda: {"sources": sources()}))
    return RunContents(arrays, attrs, streamed, notes)


def _with_cells(surface: SurfaceStream, cells: int) -> Iterator[tuple[tuple[np.ndarray, ...], tuple | None]]:
    """The surface's blocks, each with its polygons to show the statistics where the blocks are used."""
    shown: list[tuple] = []
    for block in surface.blocks(cells, lambda *polygons: shown.append(polygons)):
        yield block, (shown.pop() if shown else None)


def _cells_shown(blocks: Iterator[tuple[tuple[np.ndarray, ...], tuple | None]],
                 on_cells: CellsObserver | None) -> Iterator[tuple[np.ndarray, ...]]:
    """The blocks of ``_with_cells``, their polygons shown to ``on_cells`` first."""
    for block, polygons in blocks:
        if on_cells is not None and polygons is not None:
            on_cells(*polygons)
        yield block


def _counts(stl: dict[str, np.ndarray], surface: SurfaceStream | None, volume: VolumeStream | None) -> dict[str, int]:
    """The row counts a processed run records: of the STL, and of the parts read."""
    counts = {"stl_points": len(stl["stl_coordinates"]), "stl_triangles": len(stl["stl_centers"])}
    if surface is not None:
        counts["surface_cells"] = surface.n_cells
    if volume is not None:
        counts["volume_points"] = volume.n_rows
    return counts


def surface_rows(options: ProcessOptions, published_areas, reading: LocalReading | RemoteReading) -> SurfaceRows:
    """What a surface row is under ``options``, with the run's published per-point areas where it has them."""
    points = options.surface_location == "points" and published_areas is not None
    return SurfaceRows(options.surface_location, options.surface_normals,
                       reading.local(published_areas) if points else None)


def _scaled(blocks: Iterator[tuple[np.ndarray, ...]], divisors: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The blocks with their last array (the raw fields) divided by ``divisors``."""
    for *rows, fields in blocks:
        yield (*rows, fields / divisors)


def _streamed_rows(shapes: dict[str, tuple[int, ...]], blocks: Iterator[tuple[np.ndarray, ...]],
                   bounds: dict, key: str, statistics: RunStatistics | None = None) -> StreamedRows:
    """Arrays ``shapes`` written from ``blocks``, the positions' bounds stored as ``bounds[key]`` and
    every block shown to the part ``key`` of ``statistics``, whose summary is stored after it."""
    positions = next(iter(shapes))
    part = None if statistics is None else getattr(statistics, key)
    box = ColumnBounds(3) if part is None else part.positions  # the statistics gather the bounds too

    def observe(name: str, rows: np.ndarray) -> None:
        if part is not None:
            part.observe(name, rows)
        elif name == positions:
            box.add(rows)

    def attrs() -> dict:
        bounds[key] = [np.float32(box.low).tolist(), np.float32(box.high).tolist()]
        return {"bounds": bounds} | ({} if statistics is None else {"statistics": statistics.summary()})

    return StreamedRows(shapes, blocks, observe, attrs)


def _process_one(run: Path | RunFiles, out_path: Path, options: ProcessOptions, overwrite: bool = False,
                 access: RemoteAccess = RemoteAccess()) -> RunResult:
    """Process one run in a worker as its only writer; failures come back as a result, bytes reported."""
    name, fetched, started = run.name, [0], time.monotonic()
    local = isinstance(run, (str, os.PathLike))
    # the bytes of a remote run's files read (meshes and published files)
    total = 0 if local else sum(f.size for f in [*run.sources().values(), *run.published] if isinstance(f, RemoteFile))

    def progress(n: int) -> None:
        fetched[0] += n
        report((name, None, n))

    if total:
        report((name, total, 0))
    try:
        with exclusive_lock(out_path.parent / ".locks" / f"{out_path.name}.lock", f"processed run {out_path}"):
            if out_path.exists() and not overwrite:
                result = RunResult(name, "skipped", "already processed")
            else:
                _, notes = process_run(run, out_path, options, access=access, progress=progress)
                result = RunResult(name, "processed", notes=notes)
    except (RunError, OSError, ValueError, MemoryError) as err:  # bad input: one line naming the file
        result = RunResult(name, "failed", str(err).splitlines()[0] or type(err).__name__)
    except Exception as err:  # a fault of the program or a library: one run's failure, with its traceback
        first = str(err).splitlines()[0] if str(err) else ""
        location = run if local else run.folder
        result = RunResult(name, "failed", f"{location}: internal error {type(err).__name__}: {first}",
                           detail=traceback.format_exc())
    if total:
        report((name, -1, 0))
    result.seconds, result.bytes, result.source_bytes = time.monotonic() - started, fetched[0], total
    return result


def process_all(raw_dir: str | os.PathLike, processed_dir: str | os.PathLike, options: ProcessOptions, *,
                num_processes: int = 1, overwrite: bool = False, executor: ExecutorConfig = LOCAL_POOL,
                runs: list[int | str] | None = None, shard: str | None = None,
                access: RemoteAccess = RemoteAccess()) -> list[RunResult]:
    """Process the runs of ``raw_dir`` (a folder or a URL) that ``runs`` and ``shard`` choose; one result
    per run. Finished runs are skipped (refused if processed with other ``options``) unless ``overwrite``."""
    processed_dir = Path(processed_dir)
    processed_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(processed_dir)
    results, jobs = [], {}
    found = (find_remote_runs(str(raw_dir), options.dataset, access.anonymous, access.retry_deadline_s)
             if is_remote(raw_dir) else find_runs(raw_dir, options.dataset))
    for run in select_items(found, lambda run: run.name, runs, shard, source=str(raw_dir)):
        out = processed_dir / f"{run.name}.zarr"
        if out.exists() and not overwrite:
            differences = settings_differences(out, options)
            results.append(RunResult(run.name, "skipped", "already processed") if not differences else
                           RunResult(run.name, "failed", f"{out}: processed with other settings "
                                     f"({'; '.join(differences)}); rerun with process.overwrite=true"))
        elif isinstance(run, RemoteRun) and isinstance(listed := _listed(run, options), RunResult):
            results.append(listed)
        else:
            jobs[run.name] = (listed if isinstance(run, RemoteRun) else run, out, options, overwrite, access)
    results += run_tasks(_process_one, jobs, executor, workers=num_processes, progress="processing runs",
                         on_report=FetchBars().take)
    return sorted(results, key=lambda r: natural_key(Path(r.name)))


def _listed(run: RemoteRun, options: ProcessOptions) -> RunFiles | RunResult:
    """A remote run's files, listed; a failed result naming what is missing or wrong."""
    try:
        return remote_run_files(run, options.dataset, options.parts)
    except (OSError, ValueError) as err:
        return RunResult(run.name, "failed", str(err).splitlines()[0])


def fetch_summary(results: list[RunResult]) -> str:
    """The line that sums up what the runs fetched: bytes, over the bytes of their files, and MB/s."""
    fetched = sum(r.bytes for r in results)
    files = sum(r.source_bytes for r in results if r.status != "skipped")
    seconds = sum(r.seconds for r in results if r.source_bytes)
    ratio = f" ({fetched / files:.3f} of their bytes)" if files else ""
    rate = f", {fetched / seconds / 1e6:.1f} MB/s per run" if seconds else ""
    return f"fetched {fetched / 1e9:.3f} GB for {files / 1e9:.3f} GB of the runs' files{ratio}{rate}"


def settings_differences(out: Path, options: ProcessOptions) -> list[str]:
    """``options.differences`` of the processed run ``out``; an unreadable run is one difference."""
    try:
        run = open_run(out)
    except (ProcessedRunError, OSError, ValueError) as err:
        return [f"unreadable: {err}"]
    if run.format != "processed":
        return [f"not written by process_data.py (a {run.format} run)"]
    return options.differences(run.attrs)
