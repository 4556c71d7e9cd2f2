"""The kNN of this checkout beside that of an earlier commit, in one process: launches and wall time.

The earlier ``domino_pipeline/compute/geometry.py`` is read with ``git show REF:...`` and loaded as
a module of its own, so both run side by side on the same inputs (a synthetic car's surface cell
centres, as benchmark_geometry.py's): all-points searches of 1,000 to 1M points and a draw's
search (1,024 and 8,192 queries in 1M points, the index built as an uncached draw builds it).
Launches are counted on one thread, where each is one round of the grid search (a grid build, a
launch, a read back); times are medians on all threads. Every case checks that both return the
same rows, bit for bit.

    python benchmarks/knn_rounds.py --against 12b0b0c --device cpu
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def earlier_module(ref: str, folder: Path):
    """``geometry.py`` as at ``ref``, loaded as the module ``geometry_at_ref``."""
    text = subprocess.run(["git", "show", f"{ref}:domino_pipeline/compute/geometry.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    path = folder / "geometry_at_ref.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("geometry_at_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(search, repeats: int) -> tuple[float, tuple]:
    """The median wall time of ``repeats`` calls of ``search``, and its last result."""
    times, out = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        out = search()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> list[dict]:
    """Print one table row per search; the rows as dicts (launches, medians, whether the rows agree)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="12b0b0c", help="the earlier commit")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 5_000, 100_000, 1_000_000])
    args = parser.parse_args(argv)
    import warp as wp

    import synthetic_data as sd
    from benchmark_geometry import _surface_centres
    from domino_pipeline.compute import geometry as now
    wp.config.quiet = True
    rng = np.random.default_rng(0)
    cloud = _surface_centres(sd, sd.random_shape(rng), max(args.sizes), rng).astype(np.float32)
    launches = []
    launch = wp.launch

    def counting(*a, **k):
        launches.append(1)
        return launch(*a, **k)

    wp.launch = counting
    with tempfile.TemporaryDirectory() as folder:
        before = earlier_module(args.against, Path(folder))
        for module in (before, now):
            module.knn(cloud[:3000], 7, device=args.device)  # kernels built and loaded
        cases = [(f"all {n:,} points", cloud[rng.permutation(len(cloud))[:n]], None) for n in args.sizes]
        rows = lambda q: cloud[np.sort(rng.choice(len(cloud), q, replace=False))]  # noqa: E731
        cases += [(f"{q:,} queries in {len(cloud):,} points, index built", cloud, rows(q))
                  for q in (1024, 8192) if q < len(cloud)]
        results = []
        print(f"kNN k = 7 on {args.device}: {args.against} -> this checkout")
        for name, points, queries in cases:
            figures = {}
            for label, module in (("before", before), ("now", now)):
                launches.clear()
                module.KnnIndex(points, device=args.device, cpu_threads=1).query(7, queries)
                count = len(launches)
                seconds, out = timed(lambda m=module: m.KnnIndex(points, device=args.device).query(7, queries),
                                     3 if len(points) >= 1_000_000 else 5)
                figures[label] = (count, seconds, out)
            (c0, s0, o0), (c1, s1, o1) = figures["before"], figures["now"]
            same = np.array_equal(o0[0], o1[0]) and np.array_equal(o0[1], o1[1])
            print(f"| {name} | {c0} -> {c1} | {s0 * 1e3:,.1f} -> {s1 * 1e3:,.1f} ms | {s0 / s1:.2f}x | same rows: {same} |",
                  flush=True)
            results.append({"case": name, "launches": (c0, c1), "seconds": (s0, s1), "same_rows": same})
    wp.launch = launch
    return results


if __name__ == "__main__":
    main()
