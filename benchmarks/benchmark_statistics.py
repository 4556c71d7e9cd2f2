"""What gathering each run's statistics (domino_pipeline/inputs/statistics/run_statistics.py) adds to
process_data.py's time: one run processed with ``process.statistics`` off and on, side by side.

    python benchmarks/benchmark_statistics.py --out outputs/bench_statistics            # a bench run
    python benchmarks/benchmark_statistics.py --raw /data/drivaerml --run run_1 --out /tmp/s --repeats 3

Without ``--raw`` it writes one synthetic run of the ``bench`` preset (about 1M surface cells, 2M
volume points, a 600k-triangle STL) under ``--out``. After a warm-up of each, it processes the
run ``--repeats`` times with statistics off and on in turn, each into a fresh folder, and prints
the median wall time of each and their ratio. The statistics' own time is also measured inside
the runs with them on (the time spent in their hooks: the STL's and the published files'
statistics, each block's observer, the cells' quality and the summary, less the STL's defect
counts, which the run's notes need either way), which a loaded machine blurs less than the wall
times, since both sides of the ratio are measured in the same run. Writes ``statistics_benchmark.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import domino_pipeline.inputs.processing.process_runs as process_runs  # noqa: E402
import domino_pipeline.inputs.statistics.run_statistics as run_statistics  # noqa: E402
from domino_pipeline.configuration.config import load_config  # noqa: E402
from domino_pipeline.configuration.config_files import compose_files  # noqa: E402
from domino_pipeline.inputs.statistics.cell_quality import CellQuality  # noqa: E402
from domino_pipeline.inputs.processing.process_options import ProcessOptions  # noqa: E402
from domino_pipeline.inputs.statistics.run_statistics import PartStatistics, RunStatistics  # noqa: E402


@contextmanager
def timed_hooks(spent: list[float]):
    """Add the seconds spent in the statistics' hooks to ``spent[0]`` while the block runs, less
    those of the STL's defect counts, which process_run computes for its notes either way (with
    statistics on, the notes take the statistics' counts)."""
    originals = [(PartStatistics, "observe", 1.0), (CellQuality, "add", 1.0), (RunStatistics, "summary", 1.0),
                 (process_runs, "start_run_statistics", 1.0), (run_statistics, "stl_defect_counts", -1.0)]
    saved = [getattr(owner, name) for owner, name, _ in originals]

    def wrap(function, sign):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[0] += sign * (time.perf_counter() - start)
        return timed

    for (owner, name, sign), function in zip(originals, saved):
        setattr(owner, name, wrap(function, sign))
    try:
        yield
    finally:
        for (owner, name, _), function in zip(originals, saved):
            setattr(owner, name, function)


def process_once(run_dir: Path, out: Path, options: ProcessOptions) -> tuple[float, float]:
    """(wall seconds, seconds in the statistics' hooks) of processing ``run_dir`` into ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    spent = [0.0]
    with timed_hooks(spent):
        start = time.perf_counter()
        process_runs.process_run(run_dir, out, options)
        wall = time.perf_counter() - start
    return wall, spent[0]


def measure(run_dir: Path, work: Path, options: ProcessOptions, repeats: int) -> dict:
    """Warm up, then ``repeats`` alternating runs with statistics off and on."""
    settings = {"off": replace(options, statistics=False), "on": replace(options, statistics=True)}
    for key, setting in settings.items():
        process_once(run_dir, work / f"warmup_{key}.zarr", setting)
    times: dict[str, list[float]] = {"off": [], "on": [], "hooks": []}
    for repeat in range(repeats):
        for key, setting in settings.items():
            wall, hooks = process_once(run_dir, work / f"{key}.zarr", setting)
            times[key].append(wall)
            if key == "on":
                times["hooks"].append(hooks)
            inside = f" ({hooks:.2f} s in them)" if key == "on" else ""
            print(f"repeat {repeat + 1}: statistics {key:3s} {wall:7.2f} s{inside}", flush=True)
    off, on, hooks = (statistics.median(times[k]) for k in ("off", "on", "hooks"))
    on_share = [h / w for h, w in zip(times["hooks"], times["on"])]
    return {"run": str(run_dir), "repeats": repeats, "seconds": times, "median_off_s": off, "median_on_s": on,
            "wall_ratio": on / off, "median_hooks_s": hooks, "hooks_share_of_off": hooks / off,
            "hooks_share_of_on": statistics.median(on_share)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--raw", type=Path, help="a folder of raw runs (default: one bench run written under --out)")
    parser.add_argument("--run", default="run_1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="config overrides (key=value), e.g. dataset=ahmedml")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.raw
    if raw is None:
        from synthetic_data import generate_runs
        raw = args.out / "raw"
        if not (raw / args.run).is_dir():
            generate_runs(raw, 1, preset="bench", seed=0)
    config = load_config(compose_files(ROOT / "conf", "config", args.overrides))
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    result = measure(raw / args.run, args.out / "processed", options, args.repeats)
    (args.out / "statistics_benchmark.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"| statistics | median wall s |\n|---|---|\n| off | {result['median_off_s']:.2f} |\n"
          f"| on | {result['median_on_s']:.2f} |\n")
    print(f"on / off: {result['wall_ratio']:.3f}; in the statistics' hooks: {result['median_hooks_s']:.2f} s, "
          f"{100 * result['hooks_share_of_off']:.1f}% of the time without them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
