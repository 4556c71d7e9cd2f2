"""Side-by-side speed, size and memory of the uncached and the cached DoMINO datasets.

For a size preset it generates synthetic runs and processes them into a work directory (reused
when present), builds our cache from scratch (``--reuse-cache`` keeps a current one), then measures in fresh
processes, one after the other: the uncached ``__getitem__`` (median of a few); the cached
``__getitem__`` (median of many after a warm-up) with the bytes each draw reads and the peak RSS,
interleaved with the same draw on a copy of the first run with 4x the volume points; epoch time
with 0, 1 and 2 persistent DataLoader workers and with 2 workers under torch's default collate
(interleaved repeats, medians), with the CPU time per item of the main process and of the workers.
``--compare-physicsnemo`` also measures physicsnemo 2.2.2's own cache path on the same processed runs (benchmark_physicsnemo_cache.py). Prints a
Markdown table with the ratios; writes JSON and a PNG bar chart.

    python benchmarks/benchmark_dataloader.py --preset tiny --json /tmp/bench_tiny.json
    python benchmarks/benchmark_dataloader.py --preset bench --runs 1 --compare-physicsnemo \
        --work /tmp/domino_bench --json bench.json --png bench.png
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry points (process_data.py, cache_data.py, ...), as from the repository
# Per preset: sample sizes, grid, number of draws to time, and the epoch length in draws.
PRESETS = {
    "tiny": dict(surface_points=256, volume_points=512, geometry_points=400, interp_res=(16, 8, 8),
                 uncached_draws=2, cached_draws=10, epoch_items=4),
    "demo": dict(surface_points=1024, volume_points=1024, geometry_points=4096, interp_res=(32, 16, 16),
                 uncached_draws=3, cached_draws=30, epoch_items=12),
    "bench": dict(surface_points=8192, volume_points=8192, geometry_points=300_000, interp_res=(128, 64, 64),
                  uncached_draws=3, cached_draws=20, epoch_items=48),
}


def ensure_processed(work: Path, preset: str, runs: int, *, volume_scale: int = 1) -> Path:
    """Generate and process ``runs`` synthetic runs into ``work`` unless they are there."""
    from domino_pipeline.inputs.processing.process_runs import process_all
    from synthetic_data import PRESETS as SIZES
    from synthetic_data import generate_runs

    suffix = "" if volume_scale == 1 else f"_volume{volume_scale}x"
    raw, processed = work / f"raw{suffix}", work / f"processed{suffix}"
    if len(list(processed.glob("run_*.zarr"))) < runs:
        generate_runs(raw, runs, preset=preset, seed=0,
                      volume_points=volume_scale * SIZES[preset]["volume_points"])
        failed = [r for r in process_all(raw, processed, process_options(), num_processes=1)
                  if r.status == "failed"]
        if failed:
            raise RuntimeError(f"processing failed: {failed}")
    return processed


def process_options():
    """process_data.py's options from conf/config.yaml."""
    from domino_pipeline.inputs.processing.process_options import ProcessOptions

    config, _ = settings_for({"interp_res": (128, 64, 64)})
    return ProcessOptions.from_config(config.dataset, config.physics, config.process)


def fewest_stl_points(processed: Path) -> int:
    """The smallest STL vertex count among the processed runs (a draw takes at most that many
    geometry points without replacement)."""
    from domino_pipeline.processed.runs import open_run
    from domino_pipeline.processed.runs import list_runs

    return min(open_run(p).arrays["stl_coordinates"].shape[0] for p in list_runs(processed))


def settings_for(params: dict):
    """Our preprocessing settings: conf/config.yaml with the preset's grid."""
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.configuration.config import load_config

    from domino_pipeline.configuration.config_files import compose_files

    cfg = compose_files(ROOT / "conf", "config")
    cfg.geometry.interp_res = list(params["interp_res"])
    config = load_config(cfg)
    return config, settings_from_config(config.geometry, config.variables)


def ensure_cache(processed: Path, cache: Path, params: dict, *, fresh: bool) -> dict:
    """Build our cache (from scratch when ``fresh``, else reusing current runs); return build
    seconds (as recorded when each run was built) and bytes per run."""
    import shutil

    from cache_data import build_cache
    from domino_pipeline.processed.runs import list_runs
    from domino_pipeline.store.build import manifest_runs
    from domino_pipeline.store.manifest import write_manifest

    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    _, settings = settings_for(params)
    runs = list_runs(processed)
    results = build_cache(runs, cache, settings, rebuild=True)
    bad = [r for r in results if r.status == "failed"]
    if bad:
        raise RuntimeError(f"cache build failed: {bad}")
    entries = manifest_runs(runs, cache, settings)
    write_manifest(cache, settings, entries)
    return {"build_s_per_run": statistics.median(e["build_seconds"] for e in entries.values()),
            "bytes_per_run": statistics.median(e["bytes"] for e in entries.values())}


def _peak_rss_mb() -> float:
    """Peak resident memory of this process image (VmHWM; unlike ru_maxrss it does not carry
    over the parent's peak through fork and exec)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _timed_draws(dataset, count: int, warmup: int) -> list[float]:
    """Seconds of ``count`` draws over the runs and epochs, after ``warmup`` untimed draws."""
    times = []
    for k in range(warmup + count):
        dataset.set_epoch(k // len(dataset))
        start = time.perf_counter()
        dataset[k % len(dataset)]
        if k >= warmup:
            times.append(time.perf_counter() - start)
    return times


def phase_uncached(params: dict, processed: str, factors: dict) -> dict:
    from domino_pipeline.loading.uncached import DoMINODataPipe

    _, settings = settings_for(params)
    ds = DoMINODataPipe(processed, model_type=params["model_type"], surface_points=params["surface_points"],
                        volume_points=params["volume_points"], geometry_points=params["geometry_points"],
                        bounding_box_volume=settings.bounding_box_volume,
                        bounding_box_surface=settings.bounding_box_surface, interp_res=settings.interp_res,
                        num_neighbors_surface=settings.num_neighbors_surface,
                        surface_variables=settings.surface_variables, volume_variables=settings.volume_variables,
                        scaling_factors=factors, device="cpu")
    times = _timed_draws(ds, params["uncached_draws"], warmup=0)
    return {"getitem_s": statistics.median(times), "getitem_all_s": times, "peak_rss_mb": _peak_rss_mb()}


def _cached_dataset(params: dict, cache: str, factors: dict, runs=None):
    from domino_pipeline.loading.cached import CachedDoMINODataset
    from read_bytes import KEEP_ALL_OPEN

    return CachedDoMINODataset(cache, runs=runs, model_type=params["model_type"],
                               surface_points=params["surface_points"], volume_points=params["volume_points"],
                               geometry_points=params["geometry_points"], scaling_factors=factors,
                               max_open_runs=KEEP_ALL_OPEN)


def phase_cached(params: dict, caches: dict[str, str], factors: dict) -> dict:
    """Cached draws from each cache, interleaved (so that load from other processes hits all
    alike), after a warm-up: median seconds, bytes read per draw, peak RSS."""
    from read_bytes import bytes_read

    datasets = {name: _cached_dataset(params, cache, factors) for name, cache in caches.items()}
    for ds in datasets.values():
        _timed_draws(ds, 0, warmup=3)
    before = {name: bytes_read(ds) for name, ds in datasets.items()}
    times = {name: [] for name in datasets}
    for k in range(params["cached_draws"]):
        for name, ds in datasets.items():
            ds.set_epoch(1 + k // len(ds))
            start = time.perf_counter()
            ds[k % len(ds)]
            times[name].append(time.perf_counter() - start)
    return {name: {"getitem_s": statistics.median(times[name]), "getitem_all_s": times[name],
                   "bytes_per_draw": (bytes_read(datasets[name]) - before[name]) / len(times[name]),
                   "peak_rss_mb": _peak_rss_mb()} for name in datasets}


EPOCH_LOADERS = {"0": (0, "collate_items"), "1": (1, "collate_items"), "2": (2, "collate_items"),
                 "2_default_collate": (2, "default_collate")}


def phase_epochs(params: dict, cache: str, factors: dict, repeats: int = 9) -> dict:
    """Seconds of one epoch with 0, 1 and 2 persistent DataLoader workers (``collate_items``),
    and with 2 workers and torch's default collate (fresh shared memory per batch): after a
    warm-up epoch each, ``repeats`` epochs per loader, interleaved; medians. Also the CPU
    milliseconds per item of the main process and of the workers together (Linux /proc)."""
    from torch.utils.data import DataLoader, default_collate

    from domino_pipeline.loading.collate import collate_items
    from domino_pipeline.store.manifest import read_manifest

    names = list(read_manifest(cache)["runs"])
    runs = [names[i % len(names)] for i in range(params["epoch_items"])]
    collates = {"collate_items": collate_items, "default_collate": default_collate}
    loaders = {}
    for label, (workers, collate) in EPOCH_LOADERS.items():
        ds = _cached_dataset(params, cache, factors, runs=runs)
        loaders[label] = (ds, DataLoader(ds, batch_size=1, num_workers=workers, persistent_workers=workers > 0,
                                         collate_fn=collates[collate]))
    times = {label: [] for label in loaders}
    cpu = {label: [] for label in loaders}
    for epoch in range(repeats + 1):
        for label, (ds, loader) in loaders.items():
            ds.set_epoch(epoch)
            iterator = iter(loader)
            pids = [None] + [w.pid for w in getattr(iterator, "_workers", [])]
            cpu_before = [_cpu_seconds(pid) for pid in pids]
            start = time.perf_counter()
            for _ in iterator:
                pass
            if epoch:
                times[label].append(time.perf_counter() - start)
                cpu[label].append([_cpu_seconds(pid) - c for pid, c in zip(pids, cpu_before)])
    result = {f"epoch_s_workers_{label}": statistics.median(t) for label, t in times.items()}
    result |= {f"epoch_s_workers_{label}_all": t for label, t in times.items()}
    for label, samples in cpu.items():
        per_item = [(c[0], sum(c[1:])) for c in samples]
        result[f"cpu_ms_per_item_workers_{label}"] = {
            "main": 1e3 * statistics.median(m for m, _ in per_item) / len(runs),
            "workers": 1e3 * statistics.median(w for _, w in per_item) / len(runs)}
    return result


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process (None: this one) so far; NaN without /proc."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase_physicsnemo(params: dict, processed: str, runs: list[str], work: str) -> dict:
    from benchmark_physicsnemo_cache import measure_physicsnemo_cache

    _, s = settings_for(params)
    box = lambda b: {"min": list(b[0]), "max": list(b[1])}  # noqa: E731
    return measure_physicsnemo_cache(
        processed, runs, work, model_type=params["model_type"], surface_points=params["surface_points"],
        volume_points=params["volume_points"], geometry_points=params["geometry_points"],
        interp_res=params["interp_res"], bounding_box_volume=box(s.bounding_box_volume),
        bounding_box_surface=box(s.bounding_box_surface), repeats=5)


PHASES = {"uncached": phase_uncached, "cached": phase_cached, "epochs": phase_epochs,
          "physicsnemo": phase_physicsnemo}


def _child(name: str, args: tuple, out: str) -> None:
    import datapipe  # noqa: F401  (the libraries' own memory, reported apart from the draws')

    baseline = _peak_rss_mb()
    result = PHASES[name](*args)
    result["baseline_rss_mb"] = baseline
    Path(out).write_text(json.dumps(result, default=str))


def in_fresh_process(name: str, *args) -> dict:
    """Run one phase in a spawned process (clean memory, its own peak RSS); JSON back."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        proc = multiprocessing.get_context("spawn").Process(target=_child, args=(name, args, str(out)))
        proc.start()
        proc.join()
        if proc.exitcode != 0 or not out.exists():
            raise RuntimeError(f"benchmark phase {name} failed (exit code {proc.exitcode})")
        return json.loads(out.read_text())


def measure(preset: str, runs: int, work: Path, model_type: str, compare: bool, fresh: bool) -> dict:
    """All measurements for one preset; returns the JSON-able results."""
    from domino_pipeline.compute.scaling import compute_scaling_factors
    from domino_pipeline.processed.runs import list_runs

    params = dict(PRESETS[preset], model_type=model_type)
    processed = ensure_processed(work, preset, runs)
    processed4x = ensure_processed(work, preset, 1, volume_scale=4)
    params["geometry_points"] = min(params["geometry_points"], fewest_stl_points(processed))
    factors = compute_scaling_factors(list_runs(processed))
    cache, cache4x = work / "cache", work / "cache_volume4x"
    result = {"preset": preset, "runs": runs, "params": params,
              "cache": ensure_cache(processed, cache, params, fresh=fresh),
              "cache_volume4x": ensure_cache(processed4x, cache4x, params, fresh=False)}
    result["uncached"] = in_fresh_process("uncached", params, str(processed), factors)
    for path in (cache, cache4x):  # both from memory, whichever was written (or read) last
        read_every_file(path)
    cached = in_fresh_process("cached", params, {"base": str(cache), "volume4x": str(cache4x)}, factors)
    result["cached"], result["cached_volume4x"] = cached["base"], cached["volume4x"]
    result["cached"]["baseline_rss_mb"] = cached["baseline_rss_mb"]
    result["epochs"] = in_fresh_process("epochs", params, str(cache), factors)
    if compare:
        names = [p.stem for p in list_runs(processed)]
        result["physicsnemo"] = in_fresh_process("physicsnemo", params, str(processed), names,
                                                 str(work / "physicsnemo"))
    return result


def read_every_file(root: Path) -> None:
    """Read every file under ``root`` once, so that the page cache holds it: cached draws are
    then timed from memory for every cache alike (a cache built in an earlier run may have
    been evicted by the physicsnemo measurement)."""
    for path in root.rglob("*"):
        if path.is_file():
            with path.open("rb", buffering=0) as f:
                while f.read(1 << 22):
                    pass


def ratios(r: dict) -> dict:
    """The acceptance ratios (None where a figure is missing)."""
    pn = r.get("physicsnemo", {})
    e = r["epochs"]
    out = {
        "uncached_over_cached_getitem": r["uncached"]["getitem_s"] / r["cached"]["getitem_s"],
        "cached_volume4x_over_cached_getitem": r["cached_volume4x"]["getitem_s"] / r["cached"]["getitem_s"],
        "epoch_workers2_over_workers0": e["epoch_s_workers_2"] / e["epoch_s_workers_0"],
        "epoch_workers1_over_workers0": e["epoch_s_workers_1"] / e["epoch_s_workers_0"],
        "epoch_default_collate_over_collate_items_workers2":
            e["epoch_s_workers_2_default_collate"] / e["epoch_s_workers_2"],
    }
    if pn.get("cached_getitem_s"):
        out["physicsnemo_cached_over_ours_cached_getitem"] = pn["cached_getitem_s"] / r["cached"]["getitem_s"]
    if pn.get("cache_bytes_per_run"):
        out["ours_over_physicsnemo_cache_bytes"] = r["cache"]["bytes_per_run"] / pn["cache_bytes_per_run"]
    return out


def table(r: dict) -> str:
    """The Markdown table of figures and ratios."""
    pn, e, q = r.get("physicsnemo", {}), r["epochs"], r["ratios"]
    f = lambda v, fmt="{:.4g}": "n/a" if v is None else fmt.format(v)  # noqa: E731
    rows = [
        ("`__getitem__` s (median)", f(r["uncached"]["getitem_s"]), f(r["cached"]["getitem_s"]),
         f(pn.get("cached_getitem_s")),
         f"uncached/cached {f(q['uncached_over_cached_getitem'], '{:.0f}')}x; physicsnemo/ours "
         f"{f(q.get('physicsnemo_cached_over_ours_cached_getitem'), '{:.1f}')}x"),
        ("uncached `__getitem__` s, physicsnemo", "", "", f(pn.get("uncached_getitem_s")), ""),
        ("cache build s/run", "", f(r["cache"]["build_s_per_run"]), f(pn.get("cache_build_s_per_run")), ""),
        ("cache MB/run", "", f(r["cache"]["bytes_per_run"] / 1e6),
         f(pn.get("cache_bytes_per_run") and pn["cache_bytes_per_run"] / 1e6),
         f"ours/physicsnemo {f(q.get('ours_over_physicsnemo_cache_bytes'), '{:.2f}')}"),
        ("MB read per cached draw", "", f(r["cached"]["bytes_per_draw"] / 1e6), "", ""),
        ("peak RSS MB of the drawing process", f(r["uncached"]["peak_rss_mb"]), f(r["cached"]["peak_rss_mb"]), "",
         f"after imports: {f(r['cached']['baseline_rss_mb'])}"),
        ("cached `__getitem__` s, 4x volume points", "", f(r["cached_volume4x"]["getitem_s"]), "",
         f"4x volume / base {q['cached_volume4x_over_cached_getitem']:.2f}x"),
        ("epoch s, 0 workers", "", f(e["epoch_s_workers_0"]), "", ""),
        ("epoch s, 1 worker", "", f(e["epoch_s_workers_1"]), "", f"1/0 workers {q['epoch_workers1_over_workers0']:.2f}x"),
        ("epoch s, 2 workers", "", f(e["epoch_s_workers_2"]), "", f"2/0 workers {q['epoch_workers2_over_workers0']:.2f}x"),
        ("epoch s, 2 workers, torch default collate", "", f(e["epoch_s_workers_2_default_collate"]), "",
         f"default/collate_items {q['epoch_default_collate_over_collate_items_workers2']:.2f}x"),
        ("CPU ms per item, main process / workers", "", _cpu_pair(e, "0"), "",
         f"2 workers: {_cpu_pair(e, '2')}; default collate: {_cpu_pair(e, '2_default_collate')}"),
    ]
    head = ["| measure | ours uncached | ours cached | physicsnemo cached | ratio |", "|---|---|---|---|---|"]
    return "\n".join(head + ["| " + " | ".join(row) + " |" for row in rows])


def _cpu_pair(epochs: dict, label: str) -> str:
    cpu = epochs[f"cpu_ms_per_item_workers_{label}"]
    return f"{cpu['main']:.2f} / {cpu['workers']:.2f}"


def plot(r: dict, path: Path) -> None:
    """Bar chart: draw times (log scale) and cache MB per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pn = r.get("physicsnemo", {})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    labels = ["ours uncached", "ours cached", "ours cached 4x vol", "physicsnemo uncached", "physicsnemo cached"]
    values = [r["uncached"]["getitem_s"], r["cached"]["getitem_s"], r["cached_volume4x"]["getitem_s"],
              pn.get("uncached_getitem_s") or 0, pn.get("cached_getitem_s") or 0]
    ax1.bar(labels, values, color=["#999", "#2a7", "#5c9", "#c88", "#c44"])
    ax1.set_yscale("log")
    ax1.set_ylabel("__getitem__ s (median)")
    ax1.tick_params(axis="x", rotation=30)
    ax2.bar(["ours", "physicsnemo"], [r["cache"]["bytes_per_run"] / 1e6, (pn.get("cache_bytes_per_run") or 0) / 1e6],
            color=["#2a7", "#c44"])
    ax2.set_ylabel("cache MB per run")
    fig.suptitle(f"DoMINO data loading, preset {r['preset']} ({r['params']['model_type']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--model-type", default="combined", choices=["surface", "volume", "combined"])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "domino_bench")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--compare-physicsnemo", action="store_true")
    parser.add_argument("--reuse-cache", action="store_true",
                        help="reuse a current cache instead of timing a fresh build")
    args = parser.parse_args(argv)
    work = args.work / args.preset
    result = measure(args.preset, args.runs, work, args.model_type, args.compare_physicsnemo,
                     fresh=not args.reuse_cache)
    result["ratios"] = ratios(result)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if args.png:
        plot(result, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
