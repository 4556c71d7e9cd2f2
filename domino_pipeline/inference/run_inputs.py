"""What predict.py is given, read into one ``PredictionRun`` (docs/predict.md, "Inputs"): a raw run folder, a processed
run or an STL alone, as arrays in the processed-run layout, the mesh predictions are written onto, and the truth."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyvista as pv

from domino_pipeline.inference.forces import mesh_vector_areas
from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.meshes.vtk_reader import read_mesh, read_stl
from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.inputs.processing.process_runs import process_in_memory
from domino_pipeline.processed.run_layout import ProcessedRunError, arrays_for
from domino_pipeline.inputs.processing.published_forces import Published
from domino_pipeline.inputs.raw_files.run_folder import run_files
from domino_pipeline.processed.runs import load_run as load_run_arrays
from domino_pipeline.processed.runs import open_run, require_parts, run_name
from domino_pipeline.storage.object_store import as_location, is_url, join, name_of


@dataclass(frozen=True)
class Physics:
    """The references that make fields non-dimensional (config ``physics``)."""

    stream_velocity: float
    air_density: float
    reference_length: float | None = None  # None: each car's length (nondimensional.car_length)

    def for_car(self, stl_vertices: np.ndarray) -> Physics:
        """These references with the length resolved for the car of ``stl_vertices``."""
        return self if self.reference_length is not None else dataclasses.replace(
            self, reference_length=car_length(stl_vertices))

    def divisors(self, fields: Mapping[str, str], dtype: type = np.float32) -> np.ndarray:
        """The divisors of fields given as role -> name (nondimensional.field_divisors)."""
        if self.reference_length is None:
            raise ValueError("the length scale is per car: call Physics.for_car first")
        return field_divisors(fields, self.stream_velocity, self.air_density, self.reference_length, dtype)

    def global_params(self) -> np.ndarray:
        return np.array([self.stream_velocity, self.air_density], dtype=np.float32)


@dataclass
class PredictionRun:
    """One run to predict, in the processed-run layout, with the mesh to write the surface into."""

    name: str
    kind: str                                  # raw | processed | stl
    arrays: dict[str, np.ndarray]              # the model's inputs; surface_fields / volume_fields: the truth (zeros when unknown)
    surface_mesh: pv.PolyData                  # its cells are the surface rows, in order
    has_truth: bool
    divisors: dict[str, np.ndarray]            # per part: physical = non-dimensional * divisor
    cell_vector_areas: np.ndarray              # (Ns, 3) float64: area x unit normal, oriented as the data's normals
    cell_centres: np.ndarray                   # (Ns, 3) float64: the cells' centres (OpenFOAM's face centres), for the moments
    true_surface: np.ndarray | None            # (Ns, C) float64 non-dimensional true fields, for the forces
    volume_mesh: pv.DataSet | None = None      # its points are the volume rows, in order
    published: Published | None = None         # the published coefficients and references, where known
    notes: list[str] = field(default_factory=list)
    surface_location: str = "cells"            # the surface rows are the mesh's cells or its points


def run_kind(path: str | os.PathLike) -> str:
    """"stl" (.stl), "processed" (<run>.zarr, or any URL) or "raw" (a run folder)."""
    if is_url(path):
        if name_of(path).lower().endswith(".stl"):
            raise ValueError(f"{path}: an STL file on object storage; copy it to a local folder "
                             "(object storage is read for processed runs only)")
        return "processed"
    path = Path(path)
    if path.suffix.lower() == ".stl":
        return "stl"
    if path.suffix == ".zarr" or (path / "zarr.json").is_file():
        return "processed"
    if path.is_dir():
        return "raw"
    raise FileNotFoundError(f"{path}: neither an STL file, a processed run (.zarr) nor a run folder")


def split_runs_of(train_dir: Path, split: str, raw_dir: str | os.PathLike, processed_dir: str | os.PathLike,
                  source: str | None = None) -> list[Path | str]:
    """The runs train.py put in ``split`` (``<train_dir>/split.json``; over a mixture, those of ``source``): each run's
    raw folder when a local ``raw_dir`` has one, else its processed run (a URL under a URL ``processed_dir``)."""
    path = train_dir / "split.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no split; train with output_dir={train_dir} first, or list predict.runs")
    record = json.loads(path.read_text())
    if source is None:
        names = record.get(split)
        if not names:
            held = "train.test_fraction or train.test_runs" if split == "test" else "train.val_fraction"
            raise ValueError(f"{path}: the {split} split is empty (train with {held})")
    else:
        sources = record.get("sources", {})
        if source not in sources:
            raise ValueError(f"{path}: no source {source!r} (it has {sorted(sources)}): train over these data.sources")
        names = sources[source][split]
    raw = None if is_url(raw_dir) else Path(raw_dir)
    return [raw / run_name(name) if raw is not None and (raw / run_name(name)).is_dir()
            else join(processed_dir, name) for name in names]


def load_prediction_run(path: str | os.PathLike, *, dataset: DatasetConfig, physics: Physics, volume: bool,
                        volume_source: str = "points") -> PredictionRun:
    """Read ``path`` (a raw run, a processed run or an STL: ``run_kind``) for prediction as the ``dataset`` profile
    names its files and fields."""
    kind = run_kind(path)
    if kind == "raw":
        return load_raw_run(Path(path), dataset, physics, volume, volume_source)
    if kind == "processed":
        return load_processed(path, volume)
    if volume:
        raise ValueError(f"{path}: an STL alone has no volume points to predict at; set predict.volume=false")
    return load_stl(Path(path), dataset, physics, dataset.flow.normals == "out_of_body")


def load_raw_run(run_dir: Path, dataset: DatasetConfig, physics: Physics, volume: bool,
                 volume_source: str = "points") -> PredictionRun:
    """A raw run read as process_data.py reads it, published values included, its VTP whole."""
    rows = dataset.surface_rows
    options = ProcessOptions(dataset=dataset, surface_fields=dict(dataset.fields.surface),
                             volume_fields=dict(dataset.fields.volume), stream_velocity=physics.stream_velocity,
                             air_density=physics.air_density, reference_length=physics.reference_length,
                             volume_source=volume_source, parts="all" if volume else "surface",
                             surface_location=rows.location, surface_normals=rows.normals)
    arrays, attrs, notes = process_in_memory(run_dir, options)
    mesh = surface_polydata(read_mesh(run_files(run_dir, dataset, options.parts).surface))
    vector_areas = mesh_vector_areas(mesh) if rows.location == "cells" else None
    run = _prediction_run(run_dir.name, "raw", arrays, attrs, (mesh, vector_areas), volume, run_dir)
    run.notes, run.surface_location = notes, rows.location
    return run


def load_processed(path: str | os.PathLike, volume: bool) -> PredictionRun:
    """A processed run (a folder or a URL) with its recorded published coefficients and references."""
    opened = open_run(as_location(path))
    if opened.format != "processed":
        raise ProcessedRunError(f"{opened.path}: a {opened.format} run; predict.py reads the runs "
                                "process_data.py writes (their attributes name the fields)")
    require_parts(opened, ("surface", "volume") if volume else ("surface",),
                  "predict.volume=true" if volume else "predict.py (the surface it writes predictions onto)")
    arrays = load_run_arrays(opened.path, arrays_for(("surface", "volume") if volume else ("surface",)), opened=opened)
    mesh = point_cloud(arrays["surface_mesh_centers"], "poly")
    return _prediction_run(run_name(opened.path), "processed", arrays, opened.attrs, (mesh, None), volume, opened.path)


def _prediction_run(name: str, kind: str, arrays: dict[str, np.ndarray], attrs: Mapping, surface: tuple,
                    volume: bool, where: Path | str) -> PredictionRun:
    """The run to predict of a processed run's ``arrays`` and attributes (``surface``: mesh, vector areas; None:
    the rows' normals times their areas)."""
    if "surface_field_roles" not in attrs:
        raise ProcessedRunError(f"{where}: processed before dataset profiles (no field roles recorded); "
                                "process it again with process_data.py")
    length = attrs.get("nut_length_scale", attrs.get("reference_length"))
    physics = Physics(float(attrs["stream_velocity"]), float(attrs["air_density"]),
                      None if length is None else float(length)).for_car(arrays["stl_coordinates"])
    divisors = {part: physics.divisors(attrs[f"{part}_field_roles"]) for part in ("surface", "volume")}
    mesh, vector_areas = surface
    if vector_areas is None:
        vector_areas = arrays["surface_normals"].astype(np.float64) * arrays["surface_areas"][:, None]
    return PredictionRun(name=name, kind=kind, arrays=arrays, surface_mesh=mesh, has_truth=True, divisors=divisors,
                         cell_vector_areas=vector_areas, cell_centres=arrays["surface_mesh_centers"].astype(np.float64),
                         true_surface=arrays["surface_fields"].astype(np.float64),
                         published=Published.from_attrs(attrs["published"]) if attrs.get("published") else None,
                         volume_mesh=point_cloud(arrays["volume_mesh_centers"], "unstructured") if volume else None)


def load_stl(path: Path, dataset: DatasetConfig, physics: Physics, normals_out_of_body: bool) -> PredictionRun:
    """An STL alone: its triangles are the surface cells; fields unknown (zeros)."""
    arrays = read_stl(path)
    physics = physics.for_car(arrays["stl_coordinates"])
    divisors = {part: physics.divisors(getattr(dataset.fields, part)) for part in ("surface", "volume")}
    faces = arrays["stl_faces"].reshape(-1, 3)
    vector_areas = triangle_vector_areas(arrays["stl_coordinates"], faces, out_of_body=normals_out_of_body)
    normals = vector_areas / np.maximum(np.linalg.norm(vector_areas, axis=1, keepdims=True), 1e-30)
    width = len(divisors["surface"])
    arrays |= {"surface_mesh_centers": arrays["stl_centers"], "surface_normals": normals.astype(np.float32),
               "surface_areas": arrays["stl_areas"], "surface_fields": np.zeros((len(faces), width), dtype=np.float32),
               "global_params_values": physics.global_params(), "global_params_reference": physics.global_params()}
    mesh = pv.PolyData(arrays["stl_coordinates"], np.column_stack([np.full(len(faces), 3), faces]).ravel())
    return PredictionRun(name=path.stem, kind="stl", arrays=arrays, surface_mesh=mesh, has_truth=False,
                         divisors=divisors, cell_vector_areas=vector_areas,
                         cell_centres=arrays["stl_centers"].astype(np.float64), true_surface=None)


def triangle_vector_areas(vertices: np.ndarray, faces: np.ndarray, *, out_of_body: bool) -> np.ndarray:
    """Area times unit normal (F, 3) of a closed mesh's triangles, oriented by the sign of the enclosed volume."""
    v0, v1, v2 = (vertices[faces[:, k]].astype(np.float64) for k in range(3))
    vector_areas = 0.5 * np.cross(v1 - v0, v2 - v0)
    enclosed = np.einsum("ij,ij->", v0, np.cross(v1, v2)) / 6.0
    return vector_areas if (enclosed > 0) == out_of_body else -vector_areas


def point_cloud(points: np.ndarray, kind: str) -> pv.DataSet:
    """Points with one vertex cell each: PolyData ("poly") or an UnstructuredGrid ("unstructured")."""
    points = np.asarray(points, dtype=np.float32)
    if kind == "poly":
        return pv.PolyData(points)
    return pv.UnstructuredGrid({pv.CellType.VERTEX: np.arange(len(points)).reshape(-1, 1)}, points)


def surface_polydata(mesh: pv.DataSet) -> pv.PolyData:
    """A surface as PolyData with points, cells and arrays in their order (VTK's surface filter renumbers them)."""
    if isinstance(mesh, pv.PolyData):
        return mesh
    poly = pv.PolyData(np.asarray(mesh.points), faces=np.asarray(mesh.cells))
    for data, copy in ((mesh.point_data, poly.point_data), (mesh.cell_data, poly.cell_data)):
        for name in data.keys():
            copy[name] = data[name]
    return poly
