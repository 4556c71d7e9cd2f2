"""Peak memory and time of reading a VTU's cell centres by blocks (``volume_stream``, what
process_data.py does for ``process.volume_source=cells``), on volumes of N and 4N cells (or on
given VTU files, ``--vtu``): the peak should not grow with the volume.

Each volume is a warped structured grid of hexahedra, every ``--polyhedra``-th cell written as a
VTK_POLYHEDRON of its six faces in foamToVTK's faces / faceoffsets layout, with one cell field;
it is read in a fresh process, ``--rows`` rows at a time, and that process's peak RSS printed.

    python benchmarks/cell_centres_memory.py --cells 250000 --rows 65536
    python benchmarks/cell_centres_memory.py --cells 2000 --rows 512   # smoke
    python benchmarks/cell_centres_memory.py --rows 512 --vtu tests/data/openfoam/run_*/internal.vtu   # given files
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from domino_pipeline.inputs.meshes.cell_geometry import solid_faces  # noqa: E402
from synthetic.vtk_xml_writer import ArraySpec, Encoding, VtkBlockWriter  # noqa: E402


def hexahedral_grid(side: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Points (float32) and hexahedra (side^3, 8) of a unit-spaced grid, points moved up to 0.2."""
    axis = np.arange(side + 1, dtype=np.float64)
    points = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    points += rng.uniform(-0.2, 0.2, points.shape)
    i, j, k = (a.ravel() for a in np.meshgrid(*[np.arange(side)] * 3, indexing="ij"))

    def at(di, dj, dk):
        return ((i + di) * (side + 1) + (j + dj)) * (side + 1) + (k + dk)

    corners = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]
    return points.astype(np.float32), np.stack([at(*c) for c in corners], axis=1)


def write_volume(path: Path, side: int, every: int, rng: np.random.Generator) -> int:
    """A VTU of side^3 cells, every ``every``-th one a polyhedron; its cell count."""
    points, cells = hexahedral_grid(side, rng)
    n = len(cells)
    polyhedron = np.arange(n) % every == 0
    faces = solid_faces(12)
    record = np.concatenate([[len(faces)], *[[len(f), *f] for f in faces]])  # places, mapped per cell
    is_place = np.concatenate([[False], *[[False, *[True] * len(f)] for f in faces]])
    records = np.tile(record, (int(polyhedron.sum()), 1))
    records[:, is_place] = cells[polyhedron][:, record[is_place]]
    ends = np.full(n, -1, np.int64)
    ends[polyhedron] = np.arange(1, polyhedron.sum() + 1) * records.shape[1]
    arrays = {("CellData", "p"): np.arange(n, dtype=np.float32), ("Points", "Points"): points,
              ("Cells", "connectivity"): cells.ravel(), ("Cells", "offsets"): np.arange(1, n + 1) * 8,
              ("Cells", "types"): np.where(polyhedron, 42, 12), ("Cells", "faces"): records.ravel(),
              ("Cells", "faceoffsets"): ends}
    dtypes = {"p": "f4", "Points": "f4", "types": "u1"}
    specs = [ArraySpec(s, name, dtypes.get(name, "i8"), len(v), 3 if name == "Points" else 1)
             for (s, name), v in arrays.items()]
    with VtkBlockWriter(path, "UnstructuredGrid", {"NumberOfPoints": len(points), "NumberOfCells": n},
                        specs, Encoding()) as vtu:
        for (section, name), values in arrays.items():
            vtu.append(section, name, values)
    return n


def peak_rss_mb() -> float:
    """This process's peak RSS: Linux's VmHWM, which starts afresh at exec (``ru_maxrss`` keeps
    the forking parent's peak across it), else ``ru_maxrss``."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_centres(path: Path, rows: int) -> dict:
    """In this process: stream the cell centres; seconds, peak RSS and a checksum."""
    from domino_pipeline.inputs.meshes.volume_stream import open_volume

    start = time.perf_counter()
    volume = open_volume(path, {"p": "scalar"}, "cells")
    total = np.zeros(3)
    for centres, _ in volume.blocks(rows):
        total += centres.sum(axis=0, dtype=np.float64)
    return {"seconds": time.perf_counter() - start, "rows": volume.n_rows, "streamed": volume.file is not None,
            "peak_rss_mb": peak_rss_mb(),
            "mean_centre": (total / volume.n_rows).tolist()}


def measure_file(path: Path, rows: int) -> dict:
    """Read the cell centres of the VTU ``path`` in a fresh process, ``rows`` rows at a time."""
    out = subprocess.run([sys.executable, __file__, "--read", str(path), "--rows", str(rows)],
                         check=True, capture_output=True, text=True).stdout
    return {"file": str(path), "file_mb": path.stat().st_size / 2**20, **json.loads(out)}


def measure(cells: int, rows: int, every: int, seed: int) -> list[dict]:
    """Write volumes of about ``cells`` and 4x ``cells`` cells and read each in a fresh process."""
    results = []
    with tempfile.TemporaryDirectory(prefix="cell_centres_") as tmp:
        for factor in (1, 4):
            side = max(2, round((factor * cells) ** (1 / 3)))
            path = Path(tmp) / f"volume_{factor}.vtu"
            n = write_volume(path, side, every, np.random.default_rng(seed))
            results.append({"cells": n, **measure_file(path, rows)})
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    """Measure, print a table and the JSON (``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=250_000)
    parser.add_argument("--rows", type=int, default=1 << 16)
    parser.add_argument("--polyhedra", type=int, default=4, help="every n-th cell a polyhedron")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--read", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--vtu", type=Path, nargs="+", help="measure these VTU files instead (foamToVTK's, say)")
    args = parser.parse_args(argv)
    if args.read:
        print(json.dumps(read_centres(args.read, args.rows)))
        return []
    if args.vtu:
        results = [{"cells": r["rows"], **r} for r in (measure_file(path, args.rows) for path in args.vtu)]
    else:
        results = measure(args.cells, args.rows, args.polyhedra, args.seed)
    print("| cells | file MiB | rows a block | seconds | peak RSS MiB |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['cells']} | {r['file_mb']:.1f} | {args.rows} | {r['seconds']:.2f} | {r['peak_rss_mb']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
