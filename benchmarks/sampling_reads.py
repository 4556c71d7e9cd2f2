"""What each sampling law costs a cached draw: milliseconds and bytes read, by part.

Builds (or reuses) one synthetic run of ``--preset`` and its cache under ``--work`` with
benchmark_dataloader.py's helpers, then draws from ``CachedDoMINODataset`` (model type
``combined``, the preset's sample sizes) under each law, all in this process with the cache files
in the page cache: 3 untimed draws, then ``--draws`` timed ones per law, the laws interleaved.
Prints the median milliseconds per draw and the MB read per draw by part (chunk files with
their checksums); writes the figures as JSON.

    python benchmarks/sampling_reads.py --preset bench --work /tmp/domino_bench --json reads.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_dataloader as bd

LAWS = {
    "default (surface 8x, volume 8x)": {},
    "volume window 1x": {"volume_window_factor": 1},
    "volume window 100x (upstream's block)": {"volume_window_factor": 100},
    "exact": {"exact": True},
}
PARTS = ("geometry", "surface", "volume", "grid")


def part_of(array: str) -> str:
    if array.endswith("grid_sdf"):
        return "grid"
    return "geometry" if array.startswith("geometry") else array.split("_", 1)[0]


def bytes_by_part(dataset) -> dict[str, int]:
    """Bytes read so far by this process's chunk readers of the dataset's open runs, per part."""
    from domino_pipeline.store.cache_format import layout_arrays

    totals = dict.fromkeys(PARTS, 0)
    for index in dataset.open_run_indices():
        run = dataset.run(index)
        for name in layout_arrays(dataset.neighbor_layout):
            reader = run.reader(name)
            if reader is not None:
                totals[part_of(name)] += reader.bytes_read
    return totals


def measure(cache: Path, params: dict, draws: int) -> dict[str, dict]:
    from domino_pipeline.loading.cached import CachedDoMINODataset

    sizes = {k: params[k] for k in ("surface_points", "volume_points", "geometry_points")}
    sets = {law: CachedDoMINODataset(cache, model_type="combined", scaling_factors=None,
                                     **sizes, **changes) for law, changes in LAWS.items()}
    for ds in sets.values():
        for epoch in range(3):  # warm-up: opens the run, reads metadata, fills the page cache
            ds.set_epoch(epoch)
            ds[0]
    times = {law: [] for law in LAWS}
    before = {law: bytes_by_part(ds) for law, ds in sets.items()}
    for k in range(draws):
        for law, ds in sets.items():
            ds.set_epoch(100 + k)
            start = time.perf_counter()
            ds[0]
            times[law].append(time.perf_counter() - start)
    result = {}
    for law, ds in sets.items():
        after = bytes_by_part(ds)
        result[law] = {"ms": 1e3 * statistics.median(times[law]),
                       "mb": {p: (after[p] - before[law][p]) / draws / 1e6 for p in PARTS}}
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="bench", choices=list(bd.PRESETS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/domino_bench"))
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    params = dict(bd.PRESETS[args.preset])
    processed = bd.ensure_processed(args.work, args.preset, 1)
    params["geometry_points"] = min(params["geometry_points"], bd.fewest_stl_points(processed))
    cache = args.work / "cache_sampling"
    bd.ensure_cache(processed, cache, params, fresh=False)
    result = measure(cache, params, args.draws)
    print(f"| law | ms per draw | MB read: {' | '.join(PARTS)} | total |")
    print("|---|---:|" + "---:|" * (len(PARTS) + 1))
    for law, r in result.items():
        mbs = [r["mb"][p] for p in PARTS]
        print(f"| {law} | {r['ms']:.1f} | " + " | ".join(f"{v:.2f}" for v in mbs) + f" | {sum(mbs):.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"preset": args.preset, "params": params, "laws": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
