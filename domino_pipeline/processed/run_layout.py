"""The processed-run layout (one Zarr v3 group per run, written whole or not at all), its writer
and its checks; the layout, attributes and chunking are specified in docs/processed_runs.md."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from domino_pipeline.storage.atomic_store import atomic_directory
from domino_pipeline.configuration.config import PARTS, parts_named
from domino_pipeline.storage.object_store import name_of
from domino_pipeline.configuration.run_selection import name_key

FORMAT = "drivaerml-processed"
FORMAT_VERSION = 2
# What the runs of each earlier format_version hold otherwise, for the line that refuses them
OLDER_FORMATS = {1: "surface areas, normals and centres by VTK's filters and volume cell centres at VTK's "
                    "parametric centres, not OpenFOAM's face and cell geometry"}
CHUNK_BYTES = 1 << 20
CHUNKS_PER_SHARD = 64
CLEVEL = 1  # zstd level

# Array name -> symbolic shape: a string a length shared across arrays, an int fixed, None any width (field columns);
# stl_faces is handled apart: its length is 3 * stl_triangles.
ARRAY_SHAPES: dict[str, tuple[str | int | None, ...]] = {
    "stl_coordinates": ("stl_points", 3),
    "stl_faces": ("stl_face_indices",),
    "stl_centers": ("stl_triangles", 3),
    "stl_areas": ("stl_triangles",),
    "surface_mesh_centers": ("surface_cells", 3),
    "surface_normals": ("surface_cells", 3),
    "surface_areas": ("surface_cells",),
    "surface_fields": ("surface_cells", "surface_columns"),
    "volume_mesh_centers": ("volume_points", 3),
    "volume_fields": ("volume_points", "volume_columns"),
    "global_params_values": ("global_params",),
    "global_params_reference": ("global_params",),
}
ARRAY_NAMES: tuple[str, ...] = tuple(ARRAY_SHAPES)
# The arrays of each part (config.PARTS); the STL's and the global parameters belong to every run
PART_ARRAYS: dict[str, tuple[str, ...]] = {part: tuple(n for n in ARRAY_NAMES if n.startswith(f"{part}_"))
                                           for part in PARTS}


def arrays_for(parts: Sequence[str]) -> list[str]:
    """The arrays (ARRAY_NAMES order) of a run of ``parts``: the STL's, global parameters, parts'."""
    left_out = {name for part in PARTS if part not in parts for name in PART_ARRAYS[part]}
    return [name for name in ARRAY_NAMES if name not in left_out]


class ProcessedRunError(ValueError):
    """A processed run that is missing an array or holds one of the wrong shape or values."""


def row_chunking(shape: tuple[int, ...], itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(chunk shape, shard shape or None): row chunks of about CHUNK_BYTES, sharded when many."""
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64))
    rows = max(1, min(max(shape[0], 1), CHUNK_BYTES // max(row_bytes, 1)))
    return (rows, *shape[1:]), None if shape[0] <= rows * CHUNKS_PER_SHARD else (rows * CHUNKS_PER_SHARD, *shape[1:])


def write_processed_run(path: str | os.PathLike, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any],
                        streamed: "Sequence[StreamedRows]" = ()) -> Path:
    """Validate and write ``arrays``, ``attrs`` and ``streamed`` rows as ``path`` atomically; the path."""
    path = Path(path)
    arrays = _checked_arrays(path, arrays, attrs, streamed)
    with atomic_directory(path) as tmp:
        group = zarr.create_group(store=str(tmp), zarr_format=3)
        for name in ARRAY_NAMES:
            if name in arrays:
                _create_array(group, name, arrays[name].shape, arrays[name].dtype)[...] = arrays[name]
        extra = {}
        for rows in streamed:
            extra |= rows.write(group, path)
        group.attrs.update(_group_attrs(attrs, extra))
    return path


def processed_in_memory(where: str | os.PathLike, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any],
                        streamed: "Sequence[StreamedRows]" = ()) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What ``write_processed_run`` would store, in memory, checked alike; ``where`` names the run."""
    where = Path(where)
    arrays = dict(_checked_arrays(where, arrays, attrs, streamed))
    extra = {}
    for rows in streamed:
        collected, more = rows.collect(where)
        arrays |= collected
        extra |= more
    return {name: arrays[name] for name in ARRAY_NAMES if name in arrays}, _group_attrs(attrs, extra)


def _checked_arrays(path: Path, arrays: Mapping[str, np.ndarray], attrs: Mapping[str, Any],
                    streamed: "Sequence[StreamedRows]") -> dict[str, np.ndarray]:
    """``arrays`` contiguous, checked (names, shapes, finite values, face indices) with the shapes ``streamed`` will
    write against the layout and parts."""
    arrays = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
    later = {name: shape for rows in streamed for name, shape in rows.shapes.items()}
    required = arrays_for(parts_named(attrs.get("parts", "all")))
    other = [name for name in [*arrays, *later] if name in ARRAY_SHAPES and name not in required]
    if other:
        raise ProcessedRunError(f"{path}: arrays {other} given, but the run records parts={attrs.get('parts')!r}")
    unknown = sorted(set(arrays) - set(ARRAY_SHAPES))
    if unknown:
        raise ProcessedRunError(f"{path}: unknown arrays {unknown}; expected {list(ARRAY_NAMES)}")
    missing = [name for name in required if name not in arrays and name not in later]
    if missing:
        raise ProcessedRunError(f"{path}: missing arrays {missing}")
    check_shapes({name: tuple(value.shape) for name, value in arrays.items()}, path)
    n_points = len(arrays["stl_coordinates"]) if "stl_coordinates" in arrays else None
    for name, value in arrays.items():
        check_values(name, value, path, n_points)
    if later:
        check_shapes({**{n: tuple(v.shape) for n, v in arrays.items()}, **later}, path)
    return arrays


def _group_attrs(attrs: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The format's attributes (``write_id`` new at each write), then ``attrs``, then ``extra``."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "write_id": uuid.uuid4().hex,
            "all_chunks_written": True, **attrs, **extra}


def _create_array(group: zarr.Group, name: str, shape: tuple[int, ...], dtype: np.dtype) -> zarr.Array:
    chunks, shards = row_chunking(shape, np.dtype(dtype).itemsize)
    return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks, shards=shards,
                              compressors=BloscCodec(cname="zstd", clevel=CLEVEL, shuffle="shuffle"),
                              config={"write_empty_chunks": True})


class StreamedRows:
    """Arrays written from row blocks (in ``shapes`` order), each shown to ``observe``; ``attrs()`` last."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], blocks, observe=None, attrs=None) -> None:
        self.shapes = {name: tuple(int(n) for n in shape) for name, shape in shapes.items()}
        self.blocks, self.observe, self.attrs = blocks, observe, attrs

    def write(self, group: zarr.Group, path: Path) -> dict[str, Any]:
        """Write every block into new arrays of ``group``, shards written in a thread; return ``attrs()``."""
        with ThreadPoolExecutor(1, thread_name_prefix="shard-writes") as writes:
            return self._drain([_ShardWriter(_create_array(group, name, shape, np.float32), name, writes)
                                for name, shape in self.shapes.items()], path)

    def collect(self, path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Every block into whole float32 arrays, checked as ``write`` checks; (arrays, ``attrs()``)."""
        writers = [_ShardWriter(np.empty(shape, dtype=np.float32), name) for name, shape in self.shapes.items()]
        attrs = self._drain(writers, path)
        return {writer.name: writer.array for writer in writers}, attrs

    def _drain(self, writers: "list[_ShardWriter]", path: Path) -> dict[str, Any]:
        """Every block, checked, into ``writers`` (one per array, in ``shapes`` order); ``attrs()``."""
        for block in self.blocks:
            for writer, rows in zip(writers, block):
                rows = check_values(writer.name, np.asarray(rows), path, None)
                if self.observe is not None:
                    self.observe(writer.name, rows)
                writer.append(rows)
        for writer in writers:
            writer.close(path)
        return {} if self.attrs is None else dict(self.attrs())


class _ShardWriter:
    """Appends rows to a Zarr array a shard at a time (one in flight), or to a numpy array."""

    def __init__(self, array: zarr.Array | np.ndarray, name: str, writes: Executor | None = None) -> None:
        self.array, self.name, self.writes = array, name, writes
        # rows written at a time: whole shards of a Zarr array; whatever came, into a numpy array
        self.step = (array.shards or array.chunks)[0] if isinstance(array, zarr.Array) else None
        self.pending: list[np.ndarray] = []
        self.held = self.written = 0
        self.in_flight: Future | None = None

    def append(self, rows: np.ndarray) -> None:
        self.pending.append(rows)
        self.held += len(rows)
        if self.step is None:
            self._flush(self.held)
        while self.step is not None and self.held >= self.step:
            self._flush(self.step)

    def _flush(self, n: int) -> None:
        joined = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        rows = slice(self.written, self.written + n)
        if self.writes is None:
            self.array[rows] = joined[:n]
        else:
            self._wait()
            self.in_flight = self.writes.submit(self.array.__setitem__, rows, joined[:n])
        self.pending = [joined[n:]] if len(joined) > n else []
        self.held -= n
        self.written += n

    def _wait(self) -> None:
        if self.in_flight is not None:
            self.in_flight.result()
            self.in_flight = None

    def close(self, path: Path) -> None:
        if self.held:
            self._flush(self.held)
        self._wait()
        if self.written != self.array.shape[0]:
            raise ProcessedRunError(f"{path}: array {self.name} got {self.written} rows, "
                                    f"expected {self.array.shape[0]}")


def check_shapes(shapes: Mapping[str, tuple[int, ...]], path: Path) -> None:
    """Each array has its rank and fixed widths, and shared lengths agree across arrays."""
    sizes: dict[str, tuple[int, str]] = {}
    for name, shape in shapes.items():
        expected = ARRAY_SHAPES[name]
        if len(shape) != len(expected):
            raise ProcessedRunError(f"{path}: array {name} has shape {shape}, expected {expected}")
        for size, want in zip(shape, expected):
            if isinstance(want, int) and size != want:
                raise ProcessedRunError(f"{path}: array {name} has shape {shape}, expected {expected}")
            if isinstance(want, str):
                seen = sizes.setdefault(want, (size, name))
                if seen[0] != size:
                    raise ProcessedRunError(f"{path}: arrays {seen[1]} and {name} have different lengths ({want}): "
                                            f"{seen[0]} and {size} rows, {abs(size - seen[0])} apart")
    if "stl_face_indices" in sizes:
        n_indices, _ = sizes["stl_face_indices"]
        n_triangles = sizes.get("stl_triangles", (n_indices // 3, ""))[0]
        if n_indices != 3 * n_triangles:
            raise ProcessedRunError(f"{path}: array stl_faces has {n_indices} indices, expected 3 x {n_triangles}")


def check_values(name: str, data: np.ndarray, path: Path, n_points: int | None) -> np.ndarray:
    """Floating values, finite, face indices integral and in range; the array as float32 (faces: int32)."""
    if name != "stl_faces" and data.dtype.kind not in "f":
        raise ProcessedRunError(f"{path}: array {name} holds {data.dtype} values; coordinates, "
                                "normals, areas and fields must be floating point")
    if not np.all(np.isfinite(data)):
        bad = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
        raise ProcessedRunError(f"{path}: array {name} has {bad} non-finite values (NaN or inf)")
    if name != "stl_faces":
        return data.astype(np.float32, copy=False)
    faces = data.astype(np.int32)
    if not np.array_equal(faces, data):
        raise ProcessedRunError(f"{path}: array stl_faces holds non-integer indices")
    if faces.size and (faces.min() < 0 or (n_points is not None and faces.max() >= n_points)):
        raise ProcessedRunError(f"{path}: array stl_faces indexes outside 0..{n_points} STL points")
    return faces


def check_format_version(attrs: Mapping[str, Any], path: str | os.PathLike) -> None:
    """ProcessedRunError naming ``path`` for another format_version (earlier: what differs)."""
    found = attrs.get("format_version")
    if found == FORMAT_VERSION:
        return
    older = f" ({OLDER_FORMATS[found]}); reprocess it with process_data.py process.overwrite=true" \
        if found in OLDER_FORMATS else ""
    raise ProcessedRunError(f"{path}: format_version {found}, this reader reads {FORMAT_VERSION}{older}")


def natural_key(path: Path | str) -> list[int | str]:
    """Sort key that orders digits by value: run_2 before run_10 (paths and URLs alike)."""
    return name_key(name_of(path))
