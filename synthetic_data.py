"""Synthetic runs of DrivAerML, AhmedML or WindsorML: car-like bodies with smooth, plausible flow
fields, in each dataset's real files, names and conventions (its profile, conf/dataset/<name>.yaml,
and synthetic/layouts.py; the facts: docs/datasets.md).

    drivaerml: run_<i>/ (i from 1)
      drivaer_<i>.stl            watertight triangulated body, ASCII STL, outward-wound
      boundary_<i>.vtp           a finer tessellation of the same body: quads, triangles and warped
                                 pentagons and hexagons, wound into the body as OpenFOAM writes it; cell
                                 data pMeanTrim, CpMeanTrim, pPrime2MeanTrim, wallShearStressMeanTrim
                                 (kinematic, the shear on the fluid)
      boundary_cell_area_<i>.npy each cell's area (OpenFOAM's), float32
      volume_<i>.vtu.00.part, .01.part   the volume VTU cut inside an array's data: points outside
                                 the body (VTK_VERTEX cells) with UMeanTrim, pMeanTrim, nutMeanTrim,
                                 CpMeanTrim, CptMeanTrim, magUMeanNormTrim as point and cell data
      force_mom_<i>.csv, force_mom_constref_<i>.csv   Cd, Cl, Clf, Clr, Cs over the variant's own and
                                 the constant references, integrated here over the boundary cells
      geo_ref_<i>.csv            lRef, aRef, forcesCoR and the constant lRefRef, aRefRef, forcesCoRRef
    ahmedml: run_<i>/ (i from 1): ahmed_<i>.stl, boundary_<i>.vtp (cell data pMean,
      wallShearStressMean, static(p)_coeffMean, yPlusMean, also as point data; OpenFOAM's orientation),
      boundary_cell_area_<i>.npy, volume_<i>.vtu (one file; UMean, pMean, nutMean, static(p)_coeffMean,
      total(p)_coeffMean, vorticityMean, UPrime2Mean as cell and point data), force_mom_<i>.csv
      (cd, cl over 0.112032 m^2) and force_mom_varref_<i>.csv (over the variant's own area); U 1 m/s
    windsorml: run_<i>/ (i from 0), y up, ground y = 0: windsor_<i>.stl, boundary_<i>.vtu (polygon
      cells; point data cpavg, cfxavg, cfyavg, cfzavg, cpvar, yplusavg, Normals; cell data faceid),
      boundary_dual_area_<i>.npy (per point), volume_<i>.vtu (cell data only: velocityxavg, ...,
      pressureavg, reynoldsstressxx, ...), force_mom_<i>.csv (cd, cs, cl, cmy over 0.112 m^2),
      force_mom_varref_<i>.csv

The body is a closed parametric surface (synthetic/body.py) sized to the dataset; fields are
potential-flow-like: stagnation at the nose, suction over the roof, wall shear along the flow,
and a wake behind the body.

    python synthetic_data.py --preset demo --runs 6 --seed 0 --out outputs/demo/raw
    python synthetic_data.py --dataset windsorml --preset tiny --runs 2 --out /tmp/windsor
    python synthetic_data.py --preset bench --runs 1 --out /tmp/bench --surface-cells 500000
    python synthetic_data.py --preset full --runs 1 --volume-points 150000000 --out /tmp/full
    python synthetic_data.py --preset tiny --runs 1 --data-mode appended-raw --compressor none --header-bits 64 --out /tmp/z
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tqdm import tqdm

from domino_pipeline.runtime.entry_point import refusals_in_one_line
from synthetic import body
from synthetic.body import CarShape, boundary_mesh, stl_mesh
from synthetic.faces import face_geometry, ragged_face_geometry
from synthetic.layouts import DATASETS, GROUND_Z, LAYOUTS, Frame, load_profile
from synthetic.volume_points import Box
from synthetic.volume_points import volume_points as _volume_points
from synthetic.vtk_xml_writer import COMPRESSORS, DATA_MODES, Encoding
from synthetic.defects import inject_defects, parse_defects
from synthetic.writers import (
    RunLayout,
    join_pieces,
    split_into_pieces,
    write_ascii_stl,
    write_boundary,
    write_published,
    write_volume,
)

__all__ = ["DATASETS", "GROUND_Z", "PRESETS", "STREAM_VELOCITY", "VOLUME_BOX", "CarShape", "boundary_mesh",
           "face_geometry", "generate_run", "generate_runs", "join_pieces", "load_profile", "main",
           "ragged_face_geometry", "random_shape", "split_into_pieces", "stl_mesh", "volume_points"]

STREAM_VELOCITY = 38.889  # DrivAerML's free stream along +x, m/s
VOLUME_BOX: Box = ((-3.5, -2.25, GROUND_Z), (8.5, 2.25, 3.0))  # DrivAerML's volume box above the ground

PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"stl_triangles": 1_500, "surface_cells": 3_000, "volume_points": 8_000},
    "demo": {"stl_triangles": 16_000, "surface_cells": 50_000, "volume_points": 200_000},
    # bench: 600,740 triangles and 300,372 STL vertices, so 300,000 geometry points need no replacement
    "bench": {"stl_triangles": 600_400, "surface_cells": 1_000_000, "volume_points": 2_000_000},
    # full: DrivAerML's surface (8.8M mixed polygons) and STL sizes; 20M volume points of DrivAerML's
    # ~150M, as many as a 2-core machine processes and caches in minutes
    "full": {"stl_triangles": 600_400, "surface_cells": 8_800_000, "volume_points": 20_000_000},
}
_PROGRESS_MIN_POINTS = 500_000


def random_shape(rng: np.random.Generator, dataset: str = "drivaerml") -> CarShape:
    """A body of ``dataset``'s sizes (synthetic/layouts.py), in the body frame."""
    if dataset not in LAYOUTS:
        raise ValueError(f"unknown dataset {dataset!r}; the generator writes {list(DATASETS)}")
    return body.random_shape(rng, LAYOUTS[dataset].shapes)


def volume_points(shape: CarShape, n_points: int, rng: np.random.Generator, box: Box = VOLUME_BOX) -> np.ndarray:
    """All ``n_points`` volume points of a body at once, in ``box`` (for small runs and benchmarks)."""
    return _volume_points(shape, n_points, rng, box)


def _file_names(profile, index: int) -> dict[str, str | None]:
    return {key: getattr(profile.files, key) and getattr(profile.files, key).replace("{index}", str(index))
            for key in ("stl", "surface", "volume", "surface_areas")}


def generate_run(run_dir: Path, index: int, seed: int, stl_triangles: int, surface_cells: int, volume_points: int,
                 encoding: Encoding | None = None, dataset: str = "drivaerml") -> Path:
    """Write the STL, boundary surface, volume and published files of run ``index`` of
    ``dataset`` into ``run_dir``, in the dataset's layout and names; return it.

    The VTP/VTU files are stored in ``encoding`` (None: the dataset's, layouts.py); the volume is
    written block by block. The body shape and every random draw come from
    ``np.random.default_rng([seed, index])``.
    """
    profile = load_profile(dataset)
    layout = LAYOUTS[dataset]
    run = RunLayout(profile, layout, Frame.of(profile), layout.volume_encoding(encoding))
    rng = np.random.default_rng([seed, index])
    shape = body.random_shape(rng, layout.shapes)
    run_dir.mkdir(parents=True, exist_ok=True)
    name = _file_names(profile, index)
    large = max(surface_cells, volume_points) >= _PROGRESS_MIN_POINTS
    with tqdm(total=3, desc=f"{run_dir.name}", unit="file", disable=not large, leave=False) as bar:
        vertices, faces = stl_mesh(shape, stl_triangles)
        write_ascii_stl(run_dir / name["stl"], run.frame.vectors(vertices), faces, Path(name["stl"]).stem)
        bar.update()
        areas = run_dir / name["surface_areas"] if name["surface_areas"] else None
        totals = write_boundary(run_dir / name["surface"], boundary_mesh(shape, surface_cells, rng), shape, run, areas)
        write_published(run_dir, index, run, totals, shape)
        bar.update()
        write_volume(run_dir / name["volume"], shape, volume_points, rng, run)
        bar.update()
    return run_dir


def generate_runs(out_dir: str | Path, n_runs: int, preset: str = "tiny", seed: int = 0,
                  encoding: Encoding | None = None, dataset: str = "drivaerml", **overrides: int) -> list[Path]:
    """Write ``n_runs`` run folders of ``dataset`` under ``out_dir`` (run_1 ..., or run_0 ... where
    the dataset counts from 0); return them.

    ``overrides`` replace preset sizes: stl_triangles, surface_cells, volume_points. The same
    (dataset, preset, seed, overrides) always writes the same files.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    unknown = set(overrides) - set(PRESETS[preset])
    if unknown:
        raise ValueError(f"unknown size overrides {sorted(unknown)}; use {sorted(PRESETS[preset])}")
    if dataset not in LAYOUTS:
        raise ValueError(f"unknown dataset {dataset!r}; the generator writes {list(DATASETS)}")
    sizes = {**PRESETS[preset], **{k: int(v) for k, v in overrides.items() if v is not None}}
    out_dir = Path(out_dir)
    profile = load_profile(dataset)
    first = LAYOUTS[dataset].first_run
    show = n_runs > 1 and sizes["volume_points"] >= 100_000
    return [generate_run(out_dir / profile.run_folders.replace("{index}", str(i)), i, seed, **sizes,
                         encoding=encoding, dataset=dataset)
            for i in tqdm(range(first, first + n_runs), desc="synthetic runs", disable=not show)]


def main(argv: list[str] | None = None) -> None:
    """Command line: write synthetic runs of a dataset with a preset's sizes, any of them overridden."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="drivaerml", choices=DATASETS,
                        help="whose files, names and conventions the runs are written in")
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stl-triangles", type=int)
    parser.add_argument("--surface-cells", type=int)
    parser.add_argument("--volume-points", type=int)
    default = Encoding()
    parser.add_argument("--data-mode", choices=DATA_MODES,
                        help="how the VTP and VTU store arrays (default: the dataset's; DrivAerML and AhmedML: "
                             "as VTK's XML writers, appended base64 in zlib blocks with UInt32 headers)")
    parser.add_argument("--compressor", choices=sorted(COMPRESSORS))
    parser.add_argument("--header-bits", type=int, choices=(32, 64))
    parser.add_argument("--defects", help="inject known defects into the written runs (synthetic/defects.py): "
                                          "all, or name[:run],... of scaled_fields, foreign_boundary, "
                                          "reversed_boundary, truncated_volume, foreign_forces, offset_field")
    args = parser.parse_args(argv)
    chosen = (args.data_mode, args.compressor, args.header_bits)
    encoding = None
    if any(value is not None for value in chosen):
        base = LAYOUTS[args.dataset].encoding or default
        encoding = Encoding(args.data_mode or base.mode, args.compressor or base.compressor,
                            args.header_bits or base.header_bits)
    with refusals_in_one_line():  # an output folder that cannot be written, a bad size: one line
        runs = generate_runs(args.out, args.runs, args.preset, args.seed, encoding, args.dataset,
                             stl_triangles=args.stl_triangles, surface_cells=args.surface_cells,
                             volume_points=args.volume_points)
        if args.defects:
            injected = inject_defects(args.out, parse_defects(args.defects, args.runs), load_profile(args.dataset))
            print(f"injected {len(injected)} defects: {injected}")
    print(f"wrote {len(runs)} {args.preset} {args.dataset} runs to {args.out}")


if __name__ == "__main__":
    main()
