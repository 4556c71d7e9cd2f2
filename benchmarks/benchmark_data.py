"""Time and peak memory to generate and to process one synthetic DrivAerML run.

Each stage runs in a fresh child process, so its peak resident memory (``ru_maxrss``, which sees
numpy and VTK allocations, unlike tracemalloc) is its own; the table gives the median wall time
over the repeats, the peak memory, and the memory right after the imports.

    python benchmarks/benchmark_data.py                       # one `bench` run: ~1M cells, 2M points
    python benchmarks/benchmark_data.py --preset demo --repeats 3 --json outputs/benchmark_data_demo.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry point synthetic_data.py, as from the repository; spawned children inherit it
CONFIG = ROOT / "conf" / "config.yaml"


def _kib_to_mib(kib: int) -> float:
    return kib / 1024.0


def _run_stage(stage: str, preset: str, work: Path, repeat: int, conn) -> None:
    """In a child process: import, run one stage, send back seconds and memory figures."""
    import synthetic_data
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.configuration.config_files import compose_files
    from domino_pipeline.inputs.processing.process_options import ProcessOptions
    from domino_pipeline.inputs.processing.process_runs import process_run

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if stage == "generate":
        synthetic_data.generate_runs(work / f"raw_{repeat}", 1, preset=preset, seed=0)
    else:
        config = load_config(compose_files(CONFIG.parent, CONFIG.stem))
        options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
        process_run(work / "raw_0" / "run_1", work / f"run_1_{repeat}.zarr", options)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send({"seconds": seconds, "peak_mib": _kib_to_mib(peak),
               "baseline_mib": _kib_to_mib(baseline)})
    conn.close()


def measure(stage: str, preset: str, work: Path, repeat: int) -> dict[str, float]:
    """Run ``stage`` once in a fresh spawned process and return its figures."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run_stage, args=(stage, preset, work, repeat, send))
    child.start()
    send.close()
    result = receive.recv()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"stage {stage} failed with exit code {child.exitcode}")
    return result


def _size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def run_benchmark(preset: str, repeats: int, work: Path) -> dict:
    """Generate then process one run ``repeats`` times each; return the figures."""
    rows = {}
    for stage in ("generate", "process"):
        runs = [measure(stage, preset, work, r) for r in range(repeats)]
        rows[stage] = {
            "median_s": statistics.median(r["seconds"] for r in runs),
            "min_s": min(r["seconds"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs),
            "baseline_mib": statistics.median(r["baseline_mib"] for r in runs),
            "repeats": repeats,
        }
    raw = work / "raw_0" / "run_1"
    sizes = {p.name: round(_size_mib(p), 1) for p in sorted(raw.iterdir())}
    sizes["run_1.zarr"] = round(_size_mib(work / "run_1_0.zarr"), 1)
    return {"preset": preset, "stages": rows, "sizes_mib": sizes, "counts": _counts(work),
            "machine": {"cpus": multiprocessing.cpu_count(), "python": platform.python_version()}}


def _counts(work: Path) -> dict[str, int]:
    from domino_pipeline.processed.runs import open_run

    return dict(open_run(work / "run_1_0.zarr").attrs["counts"])


def format_table(result: dict) -> str:
    """The figures as a plain-text table."""
    counts = ", ".join(f"{k} {v:,}" for k, v in result["counts"].items())
    lines = [f"preset {result['preset']}: {counts}",
             f"{'stage':<10}{'median s':>10}{'min s':>10}{'peak MiB':>10}{'import MiB':>12}"]
    for stage, row in result["stages"].items():
        lines.append(f"{stage:<10}{row['median_s']:>10.2f}{row['min_s']:>10.2f}"
                     f"{row['peak_mib']:>10.0f}{row['baseline_mib']:>12.0f}")
    lines.append("sizes MiB: " + ", ".join(f"{k} {v}" for k, v in result["sizes_mib"].items()))
    return "\n".join(lines)


def main() -> None:
    """Command line: run the benchmark, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("outputs/benchmark_data.json"))
    parser.add_argument("--workdir", type=Path, default=None, help="scratch space (default: tmp)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="benchmark_data_", dir=args.workdir))
    try:
        result = run_benchmark(args.preset, args.repeats, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(format_table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
