"""The cache at DrivAerML scale: build time and memory, size, files and draws, warm and cold.

For each preset (``bench``: 1M surface cells; ``full``: DrivAerML's 8.8M surface cells and 600k
STL triangles, 20M volume points) it generates and processes one synthetic run (reused when
present under ``--work``), builds the cache once per neighbour layout with ``cache_data.py`` in
a child process (wall time and the child's peak RSS), and measures in a fresh process per layout
``CachedDoMINODataset`` draws (model type combined, 8192 / 8192 / 300,000 points): ``warm`` with
every cache file in the page cache, ``cold`` with every cache file evicted
(``posix_fadvise(DONTNEED)``) before each draw, medians, and the bytes each draw reads. For the
largest preset it also builds the default layout from a copy of the processed run with twice
the volume points (the build's peak must not grow with the volume), and it measures the RSS of
a process drawing from 400 small runs in turn against one drawing from 4 (``max_open_runs``).
Prints one Markdown table and the acceptance checks; writes JSON and a PNG.

    python benchmarks/benchmark_scale.py --presets bench full --work /tmp/scale \
        --json docs/benchmark_scale.json --png docs/benchmark_scale.png
    python benchmarks/benchmark_scale.py --presets tiny --draws 3 --work /tmp/scale_tiny   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = ("indices", "features")
SAMPLES = {"tiny": dict(surface_points=256, volume_points=512, geometry_points=400),
           "bench": dict(surface_points=8192, volume_points=8192, geometry_points=300_000),
           "full": dict(surface_points=8192, volume_points=8192, geometry_points=300_000)}
GRID = {"tiny": "[16,8,8]", "bench": "[128,64,64]", "full": "[128,64,64]"}


def _python(*args: str, cwd: Path = ROOT) -> tuple[float, float, str]:
    """Run ``python args`` in a child; (wall s, peak RSS MB of the child, output). Raises on failure."""
    started = time.time()
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}):\n{output[-3000:]}")
    return time.time() - started, usage.ru_maxrss / 1024, output


def ensure_processed(work: Path, preset: str) -> Path:
    """One synthetic run of ``preset``, generated and processed under ``work`` unless there."""
    raw, processed = work / preset / "raw", work / preset / "processed"
    if not (processed / "run_1.zarr").is_dir():
        if not (raw / "run_1").is_dir():
            _python("synthetic_data.py", "--preset", preset, "--runs", "1", "--seed", "0", "--out", str(raw))
        _python("process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={processed}",
                "process.num_processes=1")
    return processed


def processed_bytes(processed: Path) -> int:
    """Bytes of the processed run's arrays once loaded into memory (shape x item size)."""
    import numpy as np
    import zarr

    group = zarr.open_group(str(processed / "run_1.zarr"), mode="r")
    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for _, a in group.arrays())


GEOMETRY_DEVICE = {"device": "auto"}  # --geometry-device: where the builds run Warp


def build(processed: Path, cache: Path, layout: str, grid: str) -> dict:
    """Build the cache of one layout from scratch in a child; its wall time and peak RSS."""
    shutil.rmtree(cache, ignore_errors=True)
    wall, peak, _ = _python("cache_data.py", "--config-name=cached", f"data.processed_dir={processed}",
                            f"cache.dir={cache}", f"geometry.neighbor_layout={layout}",
                            f"geometry.interp_res={grid}", f"geometry.device={GEOMETRY_DEVICE['device']}")
    entry = json.loads((cache / "manifest.json").read_text())["runs"]["run_1"]
    return {"build_s": wall, "build_peak_rss_mb": peak, "mb_per_run": entry["bytes"] / 1e6,
            "files_per_run": entry["files"]}


def double_volume(processed: Path, out: Path) -> Path:
    """A copy of the processed run with its volume rows twice over (the second copy nudged):
    the same surface and STL, twice the volume points."""
    import numpy as np
    import zarr

    from domino_pipeline.processed.run_layout import write_processed_run
    from domino_pipeline.processed.runs import load_run

    if not (out / "run_1.zarr").is_dir():
        arrays = load_run(processed / "run_1.zarr")
        for name in ("volume_mesh_centers", "volume_fields"):
            nudge = np.float32(1e-4) if name == "volume_mesh_centers" else np.float32(0)
            arrays[name] = np.concatenate([arrays[name], arrays[name] + nudge])
        attrs = dict(zarr.open_group(str(processed / "run_1.zarr"), mode="r").attrs)
        write_processed_run(out / "run_1.zarr", arrays, attrs)
    return out


def draws(cache: Path, preset: str, n: int) -> dict:
    """Warm and cold draw figures of a cache, measured in a fresh process."""
    _, _, output = _python(str(Path(__file__).resolve()), "--child-draws", str(cache), preset, str(n))
    return json.loads(output.strip().splitlines()[-1])


def _evict(cache: Path) -> None:
    for path in cache.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _read_all(cache: Path) -> None:
    for path in cache.rglob("*"):
        if path.is_file():
            with path.open("rb", buffering=0) as f:
                while f.read(1 << 22):
                    pass


def child_draws(cache: Path, preset: str, n: int) -> dict:
    """In this process: ``n`` timed draws warm and ``n`` cold after one warm-up, medians, and
    how many bytes of the cache a draw reads."""
    from domino_pipeline.loading.cached import CachedDoMINODataset
    from read_bytes import KEEP_ALL_OPEN, bytes_read

    ds = CachedDoMINODataset(cache, model_type="combined", seed=0, max_open_runs=KEEP_ALL_OPEN,
                             **SAMPLES[preset])
    ds.set_epoch(0)
    ds[0]  # opens the run: metadata and shard indexes are read once per process
    out = {}
    for mode in ("warm", "cold"):
        times, nbytes = [], []
        for epoch in range(1, n + 1):
            ds.set_epoch(epoch + (0 if mode == "warm" else 1000))
            _read_all(cache) if mode == "warm" else _evict(cache)
            before = bytes_read(ds)
            started = time.perf_counter()
            ds[0]
            times.append(time.perf_counter() - started)
            nbytes.append(bytes_read(ds) - before)
        out[f"{mode}_draw_ms"] = 1000 * statistics.median(times)
        out[f"{mode}_mb_per_draw"] = statistics.median(nbytes) / 1e6
    return out


def worker_rss(work: Path, n_many: int = 400) -> dict:
    """RSS of a process that drew from 4 small runs in turn against one that drew from
    ``n_many`` (the same tiny runs copied), each drawing ``n_many`` times."""
    few = work / "rss" / "few"
    if not (few / "manifest.json").is_file():
        _python("synthetic_data.py", "--preset", "tiny", "--runs", "4", "--seed", "1", "--out", str(work / "rss" / "raw"))
        _python("process_data.py", f"data.raw_dir={work / 'rss' / 'raw'}", f"data.processed_dir={work / 'rss' / 'processed'}",
                "process.num_processes=1")
        _python("cache_data.py", "--config-name=cached", f"data.processed_dir={work / 'rss' / 'processed'}",
                f"cache.dir={few}", f"geometry.interp_res={GRID['tiny']}")
    many = work / "rss" / "many"
    if not (many / "manifest.json").is_file():
        manifest = json.loads((few / "manifest.json").read_text())
        runs = {}
        for i in range(n_many):
            source = f"run_{i % 4 + 1}"
            entry = dict(manifest["runs"][source])
            shutil.copytree(few / source, many / f"run_{i + 1}", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".lock"))
            entry["path"] = f"run_{i + 1}/" + entry["path"].split("/", 1)[1]
            entry["metadata_sha256"] = _relabel(many / entry["path"], f"run_{i + 1}")
            runs[f"run_{i + 1}"] = entry
        manifest["runs"] = runs
        from domino_pipeline.store.manifest import manifest_digest

        manifest["sha256"] = manifest_digest(manifest)
        (many / "manifest.json").write_text(json.dumps(manifest))
    out = {}
    for label, cache in (("4_runs", few), (f"{n_many}_runs", many)):
        _, _, output = _python(str(Path(__file__).resolve()), "--child-rss", str(cache), str(n_many))
        out[f"rss_mb_{label}"] = json.loads(output.strip().splitlines()[-1])["rss_mb"]
    return out


def _relabel(generation: Path, name: str) -> str:
    """Make a copied run generation record the processed run ``name`` (a cache refuses a
    generation that records another run than the one it sits under); its new metadata SHA-256."""
    from domino_pipeline.store.cache_format import metadata_sha256

    meta_path = generation / "zarr.json"
    meta = json.loads(meta_path.read_text())
    source = meta["attributes"]["source"]
    source["path"] = str(Path(source["path"]).with_name(f"{name}.zarr"))
    meta_path.write_text(json.dumps(meta, indent=2))
    return metadata_sha256(generation)


def child_rss(cache: Path, n: int) -> dict:
    """Draw ``n`` items, index ``i % len`` in turn; this process's RSS at the end."""
    from domino_pipeline.loading.cached import CachedDoMINODataset

    ds = CachedDoMINODataset(cache, model_type="combined", seed=0, scaling_factors=None, **SAMPLES["tiny"])
    for i in range(n):
        ds[i % len(ds)]
    rss = int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmRSS")).split()[1])
    return {"rss_mb": rss / 1024}


def _resolved_device(device: str) -> str:
    """The Warp device the builds used (``geometry.resolve_device``'s answer in a child)."""
    _, _, output = _python("-c", "from domino_pipeline.compute.geometry import resolve_device; "
                           f"print(resolve_device({device!r}))")
    return output.strip().splitlines()[-1]


def _step(work: Path, key: str, compute) -> dict:
    """The figures of one step, measured once per ``work`` folder: kept in ``steps.json``, so
    an interrupted benchmark resumes after its last finished step (delete the file to remeasure)."""
    path = work / "steps.json"
    done = json.loads(path.read_text()) if path.is_file() else {}
    if key not in done:
        done[key] = compute()
        path.write_text(json.dumps(done, indent=2) + "\n")
    return done[key]


def measure(presets: list[str], work: Path, n: int) -> dict:
    result = {"presets": {}}
    for preset in presets:
        processed = ensure_processed(work, preset)
        figures = {"processed_mb_in_memory": processed_bytes(processed) / 1e6, "layouts": {}}
        for layout in LAYOUTS:
            cache = work / preset / f"cache_{layout}"
            row = _step(work, f"build {preset} {layout}", lambda: build(processed, cache, layout, GRID[preset]))
            row |= _step(work, f"draws {preset} {layout}", lambda: draws(cache, preset, n))
            figures["layouts"][layout] = row
        result["presets"][preset] = figures
    largest = presets[-1]
    doubled = double_volume(work / largest / "processed", work / largest / "processed_volume2x")
    result["volume2x"] = _step(work, "build volume2x", lambda: build(
        doubled, work / largest / "cache_volume2x", "features", GRID[largest]))
    result["worker"] = _step(work, "worker rss", lambda: worker_rss(work))
    return result


def checks(result: dict, default: str) -> list[str]:
    """The scale issue's acceptance checks, with the figures they compare."""
    p = result["presets"]
    small, large = p.get("bench"), p.get("full") or list(p.values())[-1]
    d = large["layouts"][default]
    lines = []
    if small is not None:
        b = small["layouts"][default]
        lines.append(f"warm draw full/bench {d['warm_draw_ms'] / b['warm_draw_ms']:.2f}x (<= 1.5)")
        lines.append(f"MB read per draw full/bench {d['warm_mb_per_draw'] / b['warm_mb_per_draw']:.2f}x (<= 1.5)")
    lines.append(f"cold/warm draw {d['cold_draw_ms'] / d['warm_draw_ms']:.2f}x (<= 3)")
    lines.append(f"files per run {d['files_per_run']} (<= 200)")
    lines.append(f"build peak RSS / processed run in memory "
                 f"{d['build_peak_rss_mb'] / large['processed_mb_in_memory']:.2f}x (<= 2.5)")
    lines.append(f"build peak RSS with twice the volume {result['volume2x']['build_peak_rss_mb'] / large['layouts']['features']['build_peak_rss_mb']:.2f}x (<= 1.3)")
    w = result["worker"]
    many = next(v for k, v in w.items() if k != "rss_mb_4_runs")
    lines.append(f"worker RSS many runs / 4 runs {many / w['rss_mb_4_runs']:.2f}x (<= 1.2)")
    return lines


def table(result: dict) -> str:
    head = ("| preset | layout | build s | build peak RSS MB | processed MB in memory | MB/run | files/run "
            "| warm draw ms | cold draw ms | MB read/draw warm | MB read/draw cold |")
    lines = [head, "|---" * 11 + "|"]
    for preset, figures in result["presets"].items():
        for layout, r in figures["layouts"].items():
            lines.append(f"| {preset} | {layout} | {r['build_s']:.0f} | {r['build_peak_rss_mb']:.0f} | "
                         f"{figures['processed_mb_in_memory']:.0f} | {r['mb_per_run']:.0f} | {r['files_per_run']} | "
                         f"{r['warm_draw_ms']:.1f} | {r['cold_draw_ms']:.1f} | {r['warm_mb_per_draw']:.2f} | "
                         f"{r['cold_mb_per_draw']:.2f} |")
    v = result["volume2x"]
    lines.append(f"\nTwice the volume points (features layout): build {v['build_s']:.0f} s, peak RSS "
                 f"{v['build_peak_rss_mb']:.0f} MB, {v['mb_per_run']:.0f} MB/run, {v['files_per_run']} files.")
    lines.append("Worker RSS: " + ", ".join(f"{k} {v:.0f}" for k, v in result["worker"].items()))
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{p}\n{layout}", r) for p, f in result["presets"].items() for layout, r in f["layouts"].items()]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, keys, title in ((axes[0], ("warm_draw_ms", "cold_draw_ms"), "draw ms (median)"),
                            (axes[1], ("warm_mb_per_draw",), "MB read per draw"),
                            (axes[2], ("mb_per_run",), "cache MB per run")):
        for i, key in enumerate(keys):
            ax.bar([j + 0.4 * i for j in range(len(rows))], [r[key] for _, r in rows], width=0.4, label=key)
        ax.set_xticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["bench", "full"], choices=sorted(SAMPLES))
    parser.add_argument("--work", type=Path, default=Path("/tmp/domino_scale"))
    parser.add_argument("--draws", type=int, default=9)
    parser.add_argument("--default-layout", default="features", choices=LAYOUTS)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--geometry-device", default="auto", help="geometry.device of the builds: auto | cpu | cuda")
    parser.add_argument("--child-draws", nargs=3, metavar=("CACHE", "PRESET", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--child-rss", nargs=2, metavar=("CACHE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_draws:
        print(json.dumps(child_draws(Path(args.child_draws[0]), args.child_draws[1], int(args.child_draws[2]))))
        return
    if args.child_rss:
        print(json.dumps(child_rss(Path(args.child_rss[0]), int(args.child_rss[1]))))
        return
    GEOMETRY_DEVICE["device"] = args.geometry_device
    result = measure(args.presets, args.work, args.draws)
    result["geometry_device"] = _resolved_device(args.geometry_device)
    result["checks"] = checks(result, args.default_layout)
    print(table(result))
    print("\n".join(f"check: {line}" for line in result["checks"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.png:
        plot(result, args.png)


if __name__ == "__main__":
    main()
