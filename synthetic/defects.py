"""Known defects injected into synthetic runs already written (synthetic_data.py, ``--defects``), so that the data
quality checks (domino_pipeline/processed/run_quality.py) and their report have known answers.

Each defect rewrites files of one run folder, named by the dataset profile; the file stays valid
and plausible on its own, the run is wrong as a run:

| defect | what it does to run i |
|---|---|
| ``scaled_fields`` | every field of its boundary and volume files times 10 |
| ``foreign_boundary`` | its boundary file (and surface areas) replaced by another run's |
| ``reversed_boundary`` | every boundary polygon wound the other way (normals flipped) |
| ``truncated_volume`` | its volume cut to the first 10% of its cells and their points |
| ``foreign_forces`` | its force coefficient files replaced by another run's |
| ``offset_field`` | its boundary pressure shifted by one free-stream dynamic pressure (Cp + 1) |

The other run is the next one of the folder (the last takes the first). Meshes are read and
written with VTK (pyvista), at the small sizes tests use; ``<out>/defects.json`` records which
run got which defect.

    python synthetic_data.py --preset tiny --runs 30 --out /tmp/raw --defects all    # runs 3, 8, 13, 18, 23, 28
    python synthetic_data.py --preset tiny --runs 8 --out /tmp/raw --defects reversed_boundary:3,scaled_fields:5
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pyvista as pv

from domino_pipeline.configuration.dataset_profile import DatasetConfig
from domino_pipeline.inputs.raw_files.concat_bytes import file_pieces
from domino_pipeline.inputs.raw_files.run_folder import find_runs, run_files
from synthetic.writers import join_pieces, split_into_pieces

SCALE = 10.0
KEEP_FRACTION = 0.1
DEFECTS_FILE = "defects.json"


def _rewritten(path: Path, change: Callable[[pv.DataSet], pv.DataSet]) -> None:
    """Read the mesh ``path`` (joined first where it is in pieces), write ``change``'s result in
    its place, in as many pieces again (each cut at the same fraction of the file)."""
    pieces = file_pieces(path)
    sizes = [p.stat().st_size for p in pieces]
    mesh = change(pv.read(join_pieces(path)))
    mesh.save(path)
    if len(pieces) > 1:
        total, size = sum(sizes), path.stat().st_size
        split_into_pieces(path, [int(size * sum(sizes[:k]) / total) for k in range(1, len(sizes))])


def _scaled(mesh: pv.DataSet) -> pv.DataSet:
    for data in (mesh.point_data, mesh.cell_data):
        for name in list(data):
            data[name] = np.asarray(data[name]) * np.asarray(SCALE, dtype=data[name].dtype)
    return mesh


def scaled_fields(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """Every field of the boundary and volume files times SCALE."""
    files = run_files(run_dir, profile)
    for path in (files.surface, files.volume):
        _rewritten(path, _scaled)


def foreign_boundary(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """The boundary file (and the surface areas, if published) of ``donor`` under this run's names."""
    mine, theirs = run_files(run_dir, profile), run_files(donor, profile)
    shutil.copyfile(theirs.surface, mine.surface)
    if mine.surface_areas is not None and theirs.surface_areas is not None:
        shutil.copyfile(theirs.surface_areas, mine.surface_areas)


def reversed_boundary(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """Every boundary polygon's vertices in the reverse order (its cell data unchanged)."""
    def reversed_polygons(mesh: pv.DataSet) -> pv.DataSet:
        faces = mesh.faces.copy()
        start = 0
        while start < len(faces):
            n = faces[start]
            faces[start + 1:start + 1 + n] = faces[start + 1:start + 1 + n][::-1]
            start += n + 1
        mesh.faces = faces
        return mesh

    _rewritten(run_files(run_dir, profile).surface, reversed_polygons)


def truncated_volume(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """The volume's first KEEP_FRACTION of cells, with their points and both kinds of data."""
    def truncated(grid: pv.DataSet) -> pv.DataSet:
        kept = grid.extract_cells(np.arange(max(1, int(KEEP_FRACTION * grid.n_cells))))
        for data in (kept.point_data, kept.cell_data):
            for name in ("vtkOriginalPointIds", "vtkOriginalCellIds"):
                if name in data:
                    del data[name]
        return kept

    _rewritten(run_files(run_dir, profile).volume, truncated)


def foreign_forces(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """The force coefficient files of ``donor`` under this run's names."""
    index, other = (profile.run_index(p.name) for p in (run_dir, donor))
    for pattern in (profile.coefficients.own, profile.coefficients.constant):
        if pattern is not None:
            shutil.copyfile(donor / pattern.replace("{index}", other), run_dir / pattern.replace("{index}", index))


def offset_field(run_dir: Path, profile: DatasetConfig, donor: Path) -> None:
    """The boundary pressure plus one free-stream dynamic pressure, in the file's units."""
    name = profile.field("surface", "pressure")
    density = 1.0 if profile.flow.kinematic else profile.flow.density

    def offset(mesh: pv.DataSet) -> pv.DataSet:
        dtype = mesh.cell_data[name].dtype
        mesh.cell_data[name] = mesh.cell_data[name] + np.asarray(0.5 * density * profile.flow.velocity**2, dtype=dtype)
        return mesh

    _rewritten(run_files(run_dir, profile).surface, offset)


DEFECTS: dict[str, Callable[[Path, DatasetConfig, Path], None]] = {
    "scaled_fields": scaled_fields, "foreign_boundary": foreign_boundary, "reversed_boundary": reversed_boundary,
    "truncated_volume": truncated_volume, "foreign_forces": foreign_forces, "offset_field": offset_field,
}


def parse_defects(text: str, n_runs: int) -> dict[int, str]:
    """run number -> defect from ``all`` (each defect once) or ``name[:run],...``; a defect without
    a run goes to the middle of its share of the folder (30 runs, all: runs 3, 8, 13, 18, 23, 28),
    or the first run still without one. ValueError naming an unknown defect, a run outside
    1..n_runs or one given two defects."""
    entries = [(name, run) for name, _, run in (part.strip().partition(":") for part in
               (DEFECTS if text.strip() == "all" else text.split(",")) if part.strip())]
    for name, _ in entries:
        if name not in DEFECTS:
            raise ValueError(f"unknown defect {name!r}; the defects are {list(DEFECTS)} (or all)")
    chosen: dict[int, str] = {}
    for name, run in entries:
        if run and (not 1 <= int(run) <= n_runs or int(run) in chosen):
            raise ValueError(f"defect {name}:{run}: run {run} is not one of 1..{n_runs} without a defect")
        if run:
            chosen[int(run)] = name
    for k, (name, run) in enumerate(entries):
        if not run:
            middle = 1 + (2 * k + 1) * n_runs // (2 * len(entries))
            free = [middle] + [r for r in range(1, n_runs + 1) if r not in chosen]
            place = next((r for r in free if r not in chosen and r <= n_runs), None)
            if place is None:
                raise ValueError(f"{len(entries)} defects for {n_runs} runs: one defect per run")
            chosen[place] = name
    return dict(sorted(chosen.items()))


def inject_defects(out_dir: Path, defects: Mapping[int, str], profile: DatasetConfig) -> dict[str, str]:
    """Apply ``defects`` (run number -> defect) to the runs of ``out_dir``; write and return
    ``defects.json`` ({run folder name: defect})."""
    runs = find_runs(out_dir, profile)
    by_number = {int(profile.run_index(r.name)): r for r in runs}
    order = sorted(by_number)
    done = {}
    for number, name in sorted(defects.items()):
        donor = by_number[order[(order.index(number) + 1) % len(order)]]
        DEFECTS[name](by_number[number], profile, donor)
        done[by_number[number].name] = name
    (Path(out_dir) / DEFECTS_FILE).write_text(json.dumps(done, indent=2) + "\n")
    return done
