"""A capacity model for caching the whole of DrivAerML, from benchmark_scale.py's measured figures.

From the `full` preset (8.8M surface cells, 20M volume points) and the same run with twice the
volume points, it separates each figure into a per-run part and a per-volume-point part, then
extrapolates to DrivAerML's runs (``--volume-points``, 150M by default) and ``--runs`` (484):
cache terabytes, build hours on the measured machine, bytes a draw reads, the read bandwidth a
node of ``--gpus`` GPUs needs at a given step time, and the page cache that keeps the part every
draw reads (grids, STL vertices, and in the `indices` layout the neighbour-source arrays) in
memory. Prints Markdown (docs/scaling.md holds its output).

    python benchmarks/capacity_model.py --json docs/benchmark_scale.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

STEP_TIMES = (0.16, 0.5, 1.0)  # seconds of GPU work per sample (0.16: DESIGN.md's H100 figure)


def per_point(full: dict, doubled: dict, key: str, volume_points: int) -> tuple[float, float]:
    """(fixed part, part per volume point) of ``key`` from the full run and its doubled volume."""
    slope = (doubled[key] - full[key]) / volume_points
    return full[key] - slope * volume_points, slope


def hot_mb(layout: str, counts: dict, interp_res=(128, 64, 64), k: int = 6) -> float:
    """MB every draw of a run reads whatever its rows: both grid SDFs and all STL vertices, and
    in the `indices` layout the three neighbour-source arrays (28 bytes per surface cell)."""
    grids = 2 * interp_res[0] * interp_res[1] * interp_res[2] * 4
    geometry = counts["geometry"] * 12
    sources = counts["surface"] * 28 if layout == "indices" else 0
    return (grids + geometry + sources) / 1e6


def model(result: dict, runs: int, volume_points: int, gpus: int, workers: int) -> str:
    full = result["presets"]["full"]
    measured_volume = result.get("full_volume_points", 20_000_000)
    counts = {"geometry": 300_372, "surface": 8_803_756}
    lines = [f"Extrapolated to {runs} runs of {volume_points / 1e6:.0f}M volume points and "
             f"{counts['surface'] / 1e6:.1f}M surface cells:", "",
             "| layout | cache GB/run | cache TB, all runs | build h, all runs (this CPU, one process) "
             "| MB read/draw | page cache for the per-run hot part, all runs |",
             "|---|---|---|---|---|---|"]
    doubled, features = result["volume2x"], full["layouts"]["features"]  # doubled: features layout
    _, mb_per_point = per_point(features, doubled, "mb_per_run", measured_volume)
    _, s_per_point = per_point(features, doubled, "build_s", measured_volume)
    for layout, row in full["layouts"].items():  # the volume arrays are the same in every layout
        run_mb = row["mb_per_run"] + mb_per_point * (volume_points - measured_volume)
        run_s = row["build_s"] + s_per_point * (volume_points - measured_volume)
        lines.append(f"| `{layout}` | {run_mb / 1e3:.1f} | {runs * run_mb / 1e6:.1f} | "
                     f"{runs * run_s / 3600:.0f} | {row['warm_mb_per_draw']:.1f} | "
                     f"{runs * hot_mb(layout, counts) / 1e3:.1f} GB |")
    lines += ["", f"Read bandwidth a node needs ({gpus} GPUs, batch 1, one draw per GPU per step), "
                  "and whether a worker keeps up cold:", "",
              "| layout | step s | node GB/s | draws/s per GPU needed | cold draw s x "
              f"{workers} workers per GPU: draws/s supplied |", "|---|---|---|---|---|"]
    for layout, row in full["layouts"].items():
        for step in STEP_TIMES:
            need = 1 / step
            supply = workers / (row["cold_draw_ms"] / 1000)
            lines.append(f"| `{layout}` | {step} | {gpus * row['warm_mb_per_draw'] / step / 1e3:.2f} | "
                         f"{need:.1f} | {supply:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="benchmark_scale.py's JSON")
    parser.add_argument("--runs", type=int, default=484)
    parser.add_argument("--volume-points", type=int, default=150_000_000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--workers", type=int, default=12)
    args = parser.parse_args(argv)
    print(model(json.loads(args.json.read_text()), args.runs, args.volume_points, args.gpus, args.workers))


if __name__ == "__main__":
    main()
