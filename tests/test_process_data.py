"""process_data.py against independent recomputations, and its batch behaviour: bad runs named,
good runs processed, non-zero exit; a killed run leaves nothing partial and a rerun finishes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import pyvista as pv
from cell_references import openfoam_face, shoelace
from conftest import PROCESS_OPTIONS, import_benchmark
from vtkmodules.util.numpy_support import vtk_to_numpy

from domino_pipeline.inputs.meshes.run_errors import RunError
from domino_pipeline.inputs.meshes.vtk_reader import read_stl, read_surface
from domino_pipeline.processed.runs import load_run, open_run
from domino_pipeline.processed.runs import list_runs
from domino_pipeline.inputs.processing.process_runs import process_all, process_run
from synthetic_data import join_pieces

ROOT = Path(__file__).resolve().parents[1]
U = PROCESS_OPTIONS.stream_velocity
RHO_U2 = PROCESS_OPTIONS.air_density * U**2


def _polygons(mesh: pv.PolyData) -> list[tuple[np.ndarray, np.ndarray]]:
    """(cell ids, vertex ids (m, k)) for each polygon size k, from the raw VTK cell array."""
    offsets = vtk_to_numpy(mesh.GetPolys().GetOffsetsArray())
    connectivity = vtk_to_numpy(mesh.GetPolys().GetConnectivityArray())
    sizes = np.diff(offsets)
    groups = []
    for k in np.unique(sizes):
        cells = np.flatnonzero(sizes == k)
        groups.append((cells, connectivity[offsets[cells][:, None] + np.arange(k)]))
    return groups


def _newell(mesh: pv.PolyData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenFOAM's face centres (one polygon at a time, ``cell_references``), unit normals and
    areas by Newell's vector area, per cell."""
    points = np.asarray(mesh.points, dtype=np.float64)
    centres, area_vectors = np.zeros((mesh.n_cells, 3)), np.zeros((mesh.n_cells, 3))
    for cells, ids in _polygons(mesh):
        p = points[ids]
        centres[cells] = [openfoam_face(corners)[0] for corners in p]
        area_vectors[cells] = 0.5 * np.cross(p, np.roll(p, -1, axis=1)).sum(axis=1)
    areas = np.linalg.norm(area_vectors, axis=1)
    return centres, area_vectors / areas[:, None], areas


def _ascii_stl_triangles(path: Path) -> np.ndarray:
    """The (F, 3, 3) triangles of an ASCII STL, parsed from its vertex lines."""
    rows = [line.split()[1:] for line in path.read_text().splitlines()
            if line.strip().startswith("vertex")]
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3, 3)


def _copy_run(src_root: Path, src: int, dst_root: Path, dst: int) -> Path:
    """Copy run_<src> to run_<dst>, renaming its files the DrivAerML way; the volume (published
    in pieces) joined into one file."""
    target = dst_root / f"run_{dst}"
    target.mkdir(parents=True)
    for stem, suffix in (("drivaer", "stl"), ("boundary", "vtp")):
        source = src_root / f"run_{src}" / f"{stem}_{src}.{suffix}"
        shutil.copy(source, target / f"{stem}_{dst}.{suffix}")
    join_pieces(src_root / f"run_{src}" / f"volume_{src}.vtu", target / f"volume_{dst}.vtu")
    return target


def _whole_volume(raw_dir: Path, index: int, tmp: Path) -> pv.UnstructuredGrid:
    """The run's volume read by VTK (which reads one file: its pieces joined first)."""
    return pv.read(join_pieces(raw_dir / f"run_{index}" / f"volume_{index}.vtu", tmp / f"volume_{index}.vtu"))


def _command(raw: Path, processed: Path, tmp: Path, *extra: str) -> list[str]:
    return [sys.executable, "process_data.py", f"data.raw_dir={raw}",
            f"data.processed_dir={processed}", f"hydra.run.dir={tmp / 'hydra'}", *extra]


def test_stl_matches_the_ascii_file(tiny_raw_dir: Path, tiny_processed_dir: Path) -> None:
    run = load_run(tiny_processed_dir / "run_1.zarr")
    triangles = _ascii_stl_triangles(tiny_raw_dir / "run_1" / "drivaer_1.stl")
    stored = run["stl_coordinates"][run["stl_faces"].reshape(-1, 3)]
    np.testing.assert_allclose(stored, triangles, atol=1e-5)
    np.testing.assert_allclose(run["stl_centers"], triangles.mean(axis=1), atol=1e-5)
    edges = np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0])
    np.testing.assert_allclose(run["stl_areas"], 0.5 * np.linalg.norm(edges, axis=1), rtol=1e-4)
    assert len(run["stl_coordinates"]) == len(np.unique(triangles.reshape(-1, 3), axis=0))


def test_multi_solid_ascii_stl_reads_as_one_body(tiny_raw_dir: Path, tmp_path: Path) -> None:
    lines = (tiny_raw_dir / "run_1" / "drivaer_1.stl").read_text().splitlines()[1:-1]
    half = len(lines) // 14 * 7  # DrivAerML's STLs hold several solids (body, wheels, ...)
    two = ["solid body", *lines[:half], "endsolid body", "solid wheels", *lines[half:],
           "endsolid wheels"]
    (tmp_path / "two.stl").write_text("\n".join(two) + "\n")
    one, split = read_stl(tiny_raw_dir / "run_1" / "drivaer_1.stl"), read_stl(tmp_path / "two.stl")
    for name in one:
        np.testing.assert_array_equal(split[name], one[name])


def test_surface_matches_an_independent_recomputation(
    tiny_raw_dir: Path, tiny_processed_dir: Path
) -> None:
    run = load_run(tiny_processed_dir / "run_2.zarr")
    mesh = pv.read(tiny_raw_dir / "run_2" / "boundary_2.vtp")
    centres, normals, areas = _newell(mesh)
    np.testing.assert_allclose(run["surface_mesh_centers"], centres, atol=1e-5)
    np.testing.assert_allclose(run["surface_normals"], normals, atol=1e-3)
    np.testing.assert_allclose(run["surface_areas"], areas, rtol=1e-3, atol=1e-7)
    expected = np.column_stack(
        [mesh.cell_data["pMeanTrim"], mesh.cell_data["wallShearStressMeanTrim"]]
    ) / RHO_U2
    np.testing.assert_allclose(run["surface_fields"], expected, rtol=1e-6, atol=1e-9)


def test_volume_rows_are_the_vtu_points_and_nut_is_scaled_by_the_car_length(
    tiny_raw_dir: Path, tiny_processed_dir: Path, tmp_path: Path
) -> None:
    """As the curator writes them: file order; nutMeanTrim / (U L), L the largest STL extent."""
    run = load_run(tiny_processed_dir / "run_1.zarr")
    grid = _whole_volume(tiny_raw_dir, 1, tmp_path)
    points = np.asarray(grid.points, dtype=np.float32)
    triangles = _ascii_stl_triangles(tiny_raw_dir / "run_1" / "drivaer_1.stl").reshape(-1, 3)
    length = (triangles.max(axis=0) - triangles.min(axis=0)).max()
    assert 3.0 < length < 6.0  # a car, in metres
    data = grid.point_data
    fields = np.column_stack(
        [data["UMeanTrim"] / U, data["pMeanTrim"] / RHO_U2, data["nutMeanTrim"] / (U * length)]
    )
    np.testing.assert_array_equal(run["volume_mesh_centers"], points)
    np.testing.assert_allclose(run["volume_fields"], fields, rtol=1e-5)
    attrs = open_run(tiny_processed_dir / "run_1.zarr").attrs
    assert attrs["reference_length"] is None and abs(attrs["nut_length_scale"] - length) < 1e-5


def test_a_configured_reference_length_replaces_the_car_length(tiny_raw_dir: Path, tmp_path: Path) -> None:
    process_run(tiny_raw_dir / "run_1", tmp_path / "l2.zarr", replace(PROCESS_OPTIONS, reference_length=2.0))
    fixed = load_run(tmp_path / "l2.zarr", ["volume_fields"])["volume_fields"]
    grid = _whole_volume(tiny_raw_dir, 1, tmp_path)
    np.testing.assert_allclose(fixed[:, 4], grid.point_data["nutMeanTrim"] / (U * 2.0), rtol=1e-5)


def test_polygons_with_any_vertex_count(tmp_path: Path) -> None:
    hexagon = [[0, 0, 0], [1, 0, 0], [2, 0.5, 0], [1.5, 1.5, 0], [0.5, 1.8, 0], [-0.5, 1, 0]]
    points = np.array(hexagon + [[0, -1, 0], [1, -1, 0.2], [2, -1, 0]], dtype=np.float32)
    faces = np.array([6, 0, 1, 2, 3, 4, 5, 4, 6, 7, 1, 0, 3, 7, 8, 1])
    mesh = pv.PolyData(points, faces=faces)
    mesh.cell_data["pMeanTrim"] = np.arange(3, dtype=np.float32)
    mesh.save(tmp_path / "boundary_1.vtp")
    surface = read_surface(tmp_path / "boundary_1.vtp", {"pMeanTrim": "scalar"})
    centres, normals, areas = _newell(mesh)
    np.testing.assert_allclose(surface["surface_areas"], areas, rtol=1e-5)
    np.testing.assert_allclose(surface["surface_normals"], normals, atol=1e-6)
    np.testing.assert_allclose(surface["surface_fields"][:, 0], [0, 1, 2])
    np.testing.assert_allclose(surface["surface_mesh_centers"], centres, atol=1e-6)
    area, centroid = shoelace(np.array(hexagon)[:, :2])  # the planar convex hexagon's own centroid
    assert surface["surface_areas"][0] == pytest.approx(area, rel=1e-6)
    np.testing.assert_allclose(surface["surface_mesh_centers"][0], [*centroid, 0.0], atol=1e-6)


def test_volume_cells_and_fallback_to_the_other_source(tiny_raw_dir: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    run_dir = _copy_run(tiny_raw_dir, 1, raw, 1)
    _, notes = process_run(run_dir, tmp_path / "cells.zarr", replace(PROCESS_OPTIONS, volume_source="cells"))
    assert notes == []
    grid = pv.read(run_dir / "volume_1.vtu")
    centres = np.asarray(grid.cell_centers().points, dtype=np.float32)
    cells = load_run(tmp_path / "cells.zarr", ["volume_mesh_centers"])
    np.testing.assert_array_equal(np.sort(cells["volume_mesh_centers"], axis=0),
                                  np.sort(centres, axis=0))
    grid.point_data.clear()
    grid.save(run_dir / "volume_1.vtu")
    _, notes = process_run(run_dir, tmp_path / "fallback.zarr", PROCESS_OPTIONS)
    assert len(notes) == 1
    assert "volume_1.vtu: fields ['UMeanTrim'," in notes[0] and "using cells" in notes[0]
    nut = grid.cell_data.pop("nutMeanTrim")
    grid.save(run_dir / "volume_1.vtu")
    message = (r"volume_1.vtu: no point or cell data nutMeanTrim \(has \['CpMeanTrim', .*\]\); "
               r"set dataset.fields.volume.turbulent_viscosity to one of them")
    with pytest.raises(RunError, match=message):
        process_run(run_dir, tmp_path / "none.zarr", PROCESS_OPTIONS)
    grid.point_data["nutMeanTrim"] = np.full(grid.n_points, float(nut.mean()), dtype=np.float32)
    grid.save(run_dir / "volume_1.vtu")  # each field in one of the two, but neither has all three
    message = r"volume_1.vtu: fields \['UMeanTrim', .* not all of .* cells data either"
    with pytest.raises(RunError, match=message):
        process_run(run_dir, tmp_path / "none.zarr", PROCESS_OPTIONS)
    assert not (tmp_path / "none.zarr").exists()


def test_missing_surface_field_is_named(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(tiny_raw_dir, 2, tmp_path / "raw", 2)
    mesh = pv.read(run_dir / "boundary_2.vtp")
    mesh.cell_data.remove("wallShearStressMeanTrim")
    mesh.save(run_dir / "boundary_2.vtp")
    message = (r"boundary_2.vtp: no cell data wallShearStressMeanTrim \(has \['CpMeanTrim', 'pMeanTrim', "
               r"'pPrime2MeanTrim'\]\); set dataset.fields.surface.wall_shear_stress to one of them")
    with pytest.raises(RunError, match=message):
        process_run(run_dir, tmp_path / "run_2.zarr", PROCESS_OPTIONS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"volume_source": "faces"}, r"process.volume_source must be one of \['points', 'cells'\], not 'faces'"),
        ({"volume_fields": {"temperature": "TMeanTrim"}}, r"unknown roles \['temperature'\]"),
        ({"surface_fields": {"pressure": "pMeanTrim", "pressure_coefficient": "pMeanTrim"}},
         r"\['pMeanTrim'\] given more than one role"),
    ],
)
def test_bad_settings_stop_before_any_run(
    tiny_raw_dir: Path, tmp_path: Path, change: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        process_all(tiny_raw_dir, tmp_path, replace(PROCESS_OPTIONS, **change))
    assert list(tmp_path.iterdir()) == []


def test_volume_parts_are_read_as_one_file(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(tiny_raw_dir, 1, tmp_path / "raw", 1)
    data = (run_dir / "volume_1.vtu").read_bytes()
    (run_dir / "volume_1.vtu").unlink()
    (run_dir / "volume_1.vtu.part1").write_bytes(data[:1000])
    (run_dir / "volume_1.vtu.part2").write_bytes(data[1000:])
    process_run(run_dir, tmp_path / "parts.zarr", PROCESS_OPTIONS)
    process_run(tiny_raw_dir / "run_1", tmp_path / "whole.zarr", PROCESS_OPTIONS)
    parts, whole = (load_run(tmp_path / f"{n}.zarr") for n in ("parts", "whole"))
    for name in whole:
        np.testing.assert_array_equal(parts[name], whole[name])
    assert open_run(tmp_path / "parts.zarr").attrs["sources"]["volume"]["bytes"] == len(data)


def test_finished_runs_are_skipped_unless_overwrite(tiny_raw_dir: Path, tmp_path: Path) -> None:
    first = process_all(tiny_raw_dir, tmp_path, PROCESS_OPTIONS)
    again = process_all(tiny_raw_dir, tmp_path, PROCESS_OPTIONS)
    forced = process_all(tiny_raw_dir, tmp_path, PROCESS_OPTIONS, overwrite=True)
    assert [r.status for r in first] == ["processed"] * 2
    assert [r.status for r in again] == ["skipped"] * 2
    assert [r.status for r in forced] == ["processed"] * 2


@pytest.mark.slow
def test_bad_runs_are_named_and_good_runs_processed(tiny_raw_dir: Path, tmp_path: Path) -> None:
    raw, processed = tmp_path / "raw", tmp_path / "processed"
    for dst, src in ((1, 1), (2, 2), (3, 1), (4, 2)):
        _copy_run(tiny_raw_dir, src, raw, dst)
    vtp = raw / "run_3" / "boundary_3.vtp"
    vtp.write_bytes(vtp.read_bytes()[: vtp.stat().st_size // 2])
    (raw / "run_4" / "drivaer_4.stl").unlink()
    done = subprocess.run(_command(raw, processed, tmp_path, "process.num_processes=2"),
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    lines = done.stdout.splitlines()
    assert any("FAILED run_3" in line and "boundary_3.vtp" in line for line in lines), done.stdout
    assert any("FAILED run_4" in line and "drivaer_4.stl: missing file" in line for line in lines)
    assert "boundary_3.vtp: unreadable" in done.stdout and "ERR" not in done.stderr
    assert "4 runs: 2 processed, 0 skipped, 2 failed" in done.stdout
    assert [p.name for p in list_runs(processed)] == ["run_1.zarr", "run_2.zarr"]
    for path in list_runs(processed):
        load_run(path)


def _listed(processed: Path) -> list[Path]:
    """The runs listed in ``processed``; none while it is missing or empty."""
    try:
        return list_runs(processed)
    except FileNotFoundError:  # NoRunsError included
        return []


@pytest.mark.slow
def test_killed_run_leaves_nothing_partial_and_rerun_finishes(
    tiny_raw_dir: Path, tmp_path: Path
) -> None:
    raw, processed = tmp_path / "raw", tmp_path / "processed"
    n_runs = 6
    for dst in range(1, n_runs + 1):
        _copy_run(tiny_raw_dir, 1 + dst % 2, raw, dst)
    command = _command(raw, processed, tmp_path, "process.num_processes=1")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _listed(processed) and time.monotonic() < deadline:
        time.sleep(0.005)
    for path in _listed(processed):  # whatever is listed while the writer runs is whole
        load_run(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    finished = list_runs(processed)
    assert 1 <= len(finished) < n_runs
    for path in finished:
        load_run(path)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{n_runs - len(finished)} processed, {len(finished)} skipped, 0 failed" in done.stdout
    assert len(list_runs(processed)) == n_runs
    assert [p.name for p in processed.iterdir() if p.name.startswith(".")] in ([], [".locks"])


@pytest.mark.slow
def test_killing_the_parent_leaves_no_live_worker(tiny_raw_dir: Path, tmp_path: Path) -> None:
    raw, processed = tmp_path / "raw", tmp_path / "processed"
    for dst in range(1, 9):
        _copy_run(tiny_raw_dir, 1 + dst % 2, raw, dst)
    proc = subprocess.Popen(_command(raw, processed, tmp_path, "process.num_processes=2"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    faults = import_benchmark("fault_injection")  # its process helpers
    workers: set[int] = set()
    deadline = time.monotonic() + 120
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers |= faults.children(proc.pid)
        time.sleep(0.01)
    assert workers, "the pool had not started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(faults.alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if faults.alive(pid)], "workers outlived their parent"


@pytest.mark.slow
def test_benchmark_script_runs_on_tiny(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/benchmark_data.py", "--preset", "tiny", "--repeats", "1",
         "--json", str(out), "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=True,
    )
    assert "generate" in done.stdout and "process" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["counts"]["volume_points"] == 8_000
    assert figures["stages"]["process"]["peak_mib"] >= figures["stages"]["process"]["baseline_mib"]


def test_an_unexpected_error_fails_only_that_run_and_keeps_its_traceback(tmp_path: Path, monkeypatch) -> None:
    def explode(run_dir, out_path, options, **kwargs):
        raise RuntimeError("vtkXMLReader: bad block\nmore detail")

    from domino_pipeline.inputs.processing import process_runs
    from domino_pipeline.runtime.run_report import summarize

    monkeypatch.setattr(process_runs, "process_run", explode)
    result = process_runs._process_one(tmp_path / "run_7", tmp_path / "out" / "run_7.zarr", PROCESS_OPTIONS)
    assert result.status == "failed"
    assert "run_7" in result.message and "internal error RuntimeError: vtkXMLReader: bad block" in result.message
    assert "Traceback (most recent call last)" in result.detail and "in explode" in result.detail
    lines = summarize([result], ("failed",)).splitlines()
    assert lines[0].startswith("FAILED run_7: ") and lines[1] == "    Traceback (most recent call last):"


def test_a_run_processed_with_other_settings_is_reported_not_reused(tiny_raw_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "processed"
    process_all(tiny_raw_dir, out, PROCESS_OPTIONS, num_processes=1)
    changed = replace(PROCESS_OPTIONS, stream_velocity=40.0)
    again = process_all(tiny_raw_dir, out, changed, num_processes=1)
    assert [r.status for r in again] == ["failed"] * 2
    assert "stream_velocity: stored 30.0, configured 40.0" in again[0].message
    assert "process.overwrite=true" in again[0].message
    redone = process_all(tiny_raw_dir, out, changed, num_processes=1, overwrite=True)
    assert [r.status for r in redone] == ["processed"] * 2
    assert [r.status for r in process_all(tiny_raw_dir, out, changed, num_processes=1)] == ["skipped"] * 2


def test_nan_in_a_raw_field_names_the_input_file_and_field(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(tiny_raw_dir, 2, tmp_path / "raw", 2)
    mesh = pv.read(run_dir / "boundary_2.vtp")
    values = np.array(mesh.cell_data["pMeanTrim"])
    values[[3, 7]] = [np.nan, np.inf]
    mesh.cell_data["pMeanTrim"] = values
    mesh.save(run_dir / "boundary_2.vtp")
    with pytest.raises(RunError, match=r"boundary_2\.vtp: cell data pMeanTrim has 2 non-finite values"):
        process_run(run_dir, tmp_path / "run_2.zarr", PROCESS_OPTIONS)
    assert not (tmp_path / "run_2.zarr").exists()


def _rewrite_stl(run_dir: Path, index: int, change) -> None:
    mesh = pv.read(run_dir / f"drivaer_{index}.stl")
    faces = mesh.faces.reshape(-1, 4)[:, 1:]
    points, faces = change(np.array(mesh.points), faces)
    pv.PolyData(points, np.column_stack([np.full(len(faces), 3), faces]).ravel()).save(
        run_dir / f"drivaer_{index}.stl", binary=False)


def test_an_stl_with_a_hole_or_zero_area_triangles_is_reported(tiny_raw_dir: Path, tmp_path: Path) -> None:
    holed = _copy_run(tiny_raw_dir, 1, tmp_path / "raw", 1)
    _rewrite_stl(holed, 1, lambda p, f: (p, f[1:]))  # one triangle removed: three open edges
    _, notes = process_run(holed, tmp_path / "holed.zarr", PROCESS_OPTIONS)
    assert any(n.startswith("warning: ") and "drivaer_1.stl: 3 open edges (the surface has holes"
               in n for n in notes), notes
    flat = _copy_run(tiny_raw_dir, 1, tmp_path / "raw_flat", 1)
    line = np.array([[0.0, 0.0, 5.0], [0.1, 0.0, 5.0], [0.2, 0.0, 5.0]])  # collinear: zero area
    _rewrite_stl(flat, 1, lambda p, f: (np.vstack([p, line]), np.vstack([f, [len(p) + np.arange(3)]])))
    _, notes = process_run(flat, tmp_path / "flat.zarr", PROCESS_OPTIONS)
    assert any("drivaer_1.stl: dropped 1 zero-area triangles" in n for n in notes), notes
    assert not [n for n in notes if n.startswith("warning")]  # its open edges went with it
    _, notes = process_run(_copy_run(tiny_raw_dir, 2, tmp_path / "raw_ok", 2), tmp_path / "ok.zarr",
                           PROCESS_OPTIONS)
    assert not [n for n in notes if n.startswith("warning")]


def test_an_empty_file_says_empty(tiny_raw_dir: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(tiny_raw_dir, 1, tmp_path / "raw", 1)
    pv.PolyData().save(run_dir / "boundary_1.vtp")
    with pytest.raises(RunError, match=r"boundary_1\.vtp: (empty|no cell data)"):
        process_run(run_dir, tmp_path / "run_1.zarr", PROCESS_OPTIONS)


def test_zero_area_triangles_are_dropped_counted_and_leave_no_edge_warnings(tiny_raw_dir: Path, tmp_path: Path) -> None:
    """Slivers with their third vertex on an existing edge hold no surface but make that edge
    non-manifold and two others open: dropped before the watertightness checks, counted, and
    the stored triangles, centres and areas are those of the clean STL."""
    from domino_pipeline.inputs.meshes.vtk_reader import drop_zero_area, read_stl_triangles, stl_defects

    run_dir = _copy_run(tiny_raw_dir, 1, tmp_path / "raw", 1)
    clean = read_stl(run_dir / "drivaer_1.stl")

    def add_slivers(points, faces):
        extra_points, extra_faces = [], []
        for a, b in faces[:3, :2]:  # the first edge of three triangles
            extra_points.append((points[a] + points[b]) / 2)  # on the edge, to float32 rounding
            extra_faces.append([a, b, len(points) + len(extra_points) - 1])
        return np.vstack([points, extra_points]), np.vstack([faces, extra_faces])

    _rewrite_stl(run_dir, 1, add_slivers)
    raw = read_stl_triangles(run_dir / "drivaer_1.stl")
    assert len(raw["stl_areas"]) == len(clean["stl_areas"]) + 3
    kept, dropped = drop_zero_area(raw)
    assert dropped == 3
    for name in ("stl_faces", "stl_centers", "stl_areas"):
        np.testing.assert_allclose(kept[name], clean[name], rtol=1e-6)
    source = run_dir / "drivaer_1.stl"
    assert any("non-manifold" in n for n in stl_defects(raw["stl_faces"], raw["stl_areas"], source))
    _, notes = process_run(run_dir, tmp_path / "run_1.zarr", PROCESS_OPTIONS)
    assert notes == [f"note: {source}: dropped 3 zero-area triangles"], notes
    stored = load_run(tmp_path / "run_1.zarr")
    assert len(stored["stl_areas"]) == len(clean["stl_areas"]) and stored["stl_areas"].min() > 0
