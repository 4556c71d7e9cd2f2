"""Where the cache pays: time to a validation-loss target, cached against uncached against physicsnemo's datapipe.

Per body size (``--sizes``), under ``--work/<size>``:

1. synthetic DrivAerML runs of that size (``synthetic_data.py``'s generator, one process per run),
   processed (``process.parts=surface``) and cached (the build timed: a one-off cost per dataset);
2. three training arms of the same surface DoMINO (conf/demo.yaml's CPU-sized model), the same
   seed, split and schedule (``--epochs``), each validated on the same draws (``sampling.val_exact``)
   with the cache's scaling factors:

   - ``cached``: train.py on the cache with DataLoader workers (the config's), all ``--epochs``;
     its final validation loss is the target of the other two;
   - ``uncached``: train.py with ``cache.enabled=false`` and no workers (Warp in ``__getitem__``,
     as upstream trains): the same draws as the cached arm, computed on every draw;
   - ``physicsnemo``: physicsnemo 2.2.2's ``DoMINODataPipe`` as its example trains with it, on the
     device at hand (its CPU path here, its GPU preprocessing on CUDA): physicsnemo_training.py;

   the last two stop once their validation loss reaches the target, or at the cap
   (``--cap-factor`` x the cached arm's time to the target, at most ``--max-cap-s``): a capped arm's
   time to the target is then longer than its cap, and its ratio is given as a lower bound;
3. per arm: time to the target (seconds from its train.py's start to the epoch that reached it),
   the median training epoch, the data-wait share of its steps (data wait over data wait plus
   compute, from its epochs.jsonl), peak host memory (the training process and its workers,
   sampled) and peak GPU memory (train.py's own figure, on CUDA), and its loss curve.

Prints one table per size with the command, date and commit; writes ``--json`` (per size and arm:
``surface_cells``, ``time_to_target_s`` (null when not reached), ``cap_s``, ``epoch_s``,
``data_wait_share``, ...) and ``--png`` (validation loss against wall time, one line per arm).
Finished training runs under ``--work`` are reused, so an interrupted benchmark resumes.

    nice -n 5 python benchmarks/benchmark_time_to_accuracy.py --sizes laminar drivaerml --work /data/tta \\
        --json docs/benchmark_time_to_accuracy.json --png docs/benchmark_time_to_accuracy.png
    python benchmarks/benchmark_time_to_accuracy.py --sizes tiny --runs 5 --epochs 2 --set geometry.interp_res=[16,8,8] ...
    python benchmarks/benchmark_time_to_accuracy.py --sizes bench --device cuda ...   # on a GPU machine
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_learning import (  # noqa: E402
    CONFIG_NAME,
    final_val_loss,
    kept_runs,
    run_entry_point,
    train,
    watch_training,
)
from training_runs import PeakRss, arm_summary, stop_rule, time_ratio  # noqa: E402

ARMS = ("cached", "uncached", "physicsnemo")
# Body sizes: the synthetic generator's preset and sizes. The volume is never read (surface model,
# process.parts=surface), so it is kept small. laminar: the laminar OpenFOAM family's ~5,000 faces
# a body, with STL vertices (about half the triangles) above the demo's 4,096 geometry points.
SIZES = {
    "tiny": {"preset": "tiny", "volume_points": 2_000},
    "laminar": {"preset": "demo", "surface_cells": 5_000, "stl_triangles": 8_400, "volume_points": 10_000},
    "bench": {"preset": "bench", "volume_points": 10_000},
    "drivaerml": {"preset": "full", "volume_points": 10_000},  # DrivAerML's 8.8M surface cells and STL size
}


def provenance(argv: list[str]) -> dict:
    """The command, the UTC date and the git commit (-dirty with uncommitted changes to tracked files)."""
    def git(*words: str) -> str:
        return subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return {"command": shlex.join(["python", "benchmarks/benchmark_time_to_accuracy.py", *argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


# ---- data

def _generate_one(raw: str, index: int, seed: int, sizes: dict) -> str:
    from synthetic_data import PRESETS, generate_run
    preset = PRESETS[sizes["preset"]]
    values = {k: int(sizes.get(k, preset[k])) for k in ("stl_triangles", "surface_cells", "volume_points")}
    return str(generate_run(Path(raw) / f"run_{index}", index, seed, **values))


def generate(raw: Path, runs: int, seed: int, sizes: dict, processes: int) -> None:
    """``runs`` synthetic DrivAerML runs of ``sizes`` in ``raw`` (run_1 ...), one process per run;
    a finished folder (marked done) is kept, so an interrupted generation resumes."""
    done = raw / "generated.json"
    wanted = {"runs": runs, "seed": seed, "sizes": sizes}
    if done.is_file() and json.loads(done.read_text()) == wanted:
        return
    raw.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(processes, runs))) as pool:
        list(pool.map(_generate_one, [str(raw)] * runs, range(1, runs + 1), [seed] * runs, [sizes] * runs))
    done.write_text(json.dumps(wanted) + "\n")
    print(f"generated {runs} runs in {time.perf_counter() - started:.0f} s", flush=True)


def stage_overrides(args: argparse.Namespace, work: Path) -> list[str]:
    """The overrides of every stage and arm (the arms add their own)."""
    return ["dataset=drivaerml", "process.parts=surface", "model_type=surface",
            f"data.raw_dir={work / 'raw'}", f"data.processed_dir={work / 'processed'}", f"cache.dir={work / 'cache'}",
            f"train.epochs={args.epochs}", "sampling.val_exact=true", f"seed={args.seed}",
            f"geometry.device={args.device}", f"train.device={args.device}", *args.set]


def generate_and_process(args: argparse.Namespace, size: str, work: Path) -> list[str]:
    """One size's runs generated and processed (both skip what is done); the stages' overrides."""
    overrides = stage_overrides(args, work)
    generate(work / "raw", args.runs, args.seed, SIZES[size], args.processes)
    run_entry_point("process_data", [*overrides, f"process.num_processes={args.processes}"])
    return overrides


def prepare(args: argparse.Namespace, size: str, work: Path) -> tuple[list[str], dict]:
    """Generate, process and cache one size; the overrides and what the size holds (cells per body,
    runs, the cache build's seconds: measured at the build, kept for reruns)."""
    overrides = generate_and_process(args, size, work)
    runs = kept_runs(overrides)
    record = work / "cache_build.json"
    if not record.is_file():
        started = time.perf_counter()
        run_entry_point("cache_data", overrides)
        record.write_text(json.dumps({"cache_build_s": time.perf_counter() - started, "runs": len(runs)}) + "\n")
    else:
        run_entry_point("cache_data", overrides)  # nothing to do when current; refuses a stale cache
    from domino_pipeline.processed.runs import open_run
    counts = [dict(open_run(r).attrs)["counts"] for r in runs]
    cells = [c["surface_cells"] for c in counts]
    return overrides, {"surface_cells": round(sum(cells) / len(cells)), "surface_cells_min": min(cells),
                       "stl_points": min(c["stl_points"] for c in counts), "runs": len(runs),
                       **json.loads(record.read_text())}


# ---- the arms

def arm_overrides(arm: str, overrides: list[str], work: Path) -> list[str]:
    """What each arm adds: the uncached arm no workers and the cache's scaling factors."""
    if arm == "uncached":
        return [*overrides, "cache.enabled=false", "train.num_workers=0", "train.val_num_workers=0",
                f"sampling.scaling_factors={work / 'cache' / 'scaling_factors.json'}"]
    return list(overrides)


def run_physicsnemo(work: Path, overrides: list[str], stop) -> dict:
    """physicsnemo_training.py into ``work/train/physicsnemo`` (reused when finished with the same command)."""
    out = work / "train" / "physicsnemo"
    done = out / "benchmark_run.json"
    command = ["benchmarks/physicsnemo_training.py", f"--config-name={CONFIG_NAME}", *overrides, f"output_dir={out}"]
    if done.is_file() and json.loads(done.read_text()).get("command") == command:
        print(f"reusing {out}", flush=True)
        return json.loads(done.read_text())
    import shutil
    shutil.rmtree(out, ignore_errors=True)
    print(f"$ python {shlex.join(command)}", flush=True)
    result = watch_training(command, out, stop) | {"output_dir": str(out), "command": command}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return result


def timed_arm(work: Path, arm: str, overrides: list[str], stop=None) -> tuple[dict, float | None]:
    """Train one arm, sampling its processes' memory; its result and peak host MB (kept beside the
    run, so a reused run keeps its figure)."""
    memory = work / "train" / f"{arm}_peak_rss.json"
    before = (work / "train" / arm / "benchmark_run.json").read_bytes() if (
        work / "train" / arm / "benchmark_run.json").is_file() else None
    with PeakRss() as peak:
        if arm == "physicsnemo":
            result = run_physicsnemo(work, overrides, stop)
        else:
            result = train(work, arm, overrides, *([stop] if stop else []))
    after = (work / "train" / arm / "benchmark_run.json").read_bytes()
    if before != after or not memory.is_file():
        memory.write_text(json.dumps({"peak_host_mb": peak.peak_mb or None}) + "\n")
    return result, json.loads(memory.read_text())["peak_host_mb"]


def measure_size(args: argparse.Namespace, size: str) -> dict:
    """Every arm of one size; the size's JSON record."""
    work = (args.work / size).resolve()
    work.mkdir(parents=True, exist_ok=True)
    overrides, held = prepare(args, size, work)
    record = {"size": size, **held, "arms": {}}
    cached, peak = timed_arm(work, "cached", arm_overrides("cached", overrides, work))
    target = final_val_loss(cached)
    arms = {"cached": arm_summary(cached, target, cap_s=None, peak_host_mb=peak)}
    cap = min(args.max_cap_s, args.cap_factor * arms["cached"]["time_to_target_s"])
    for arm in [a for a in ARMS[1:] if a in args.arms]:
        result, peak = timed_arm(work, arm, arm_overrides(arm, overrides, work), stop_rule(target, cap, args.epochs))
        arms[arm] = arm_summary(result, target, cap_s=cap, peak_host_mb=peak)
    for summary in arms.values():
        summary["surface_cells"] = held["surface_cells"]
    record |= {"target_val_loss": target, "cap_s": cap, "arms": arms, "ratios": ratios(arms)}
    return record


def ratios(arms: dict[str, dict]) -> dict:
    """Time to the target of each other arm over the cached arm's, and the epoch-time ratios."""
    cached = arms["cached"]
    out = {f"{arm}_over_cached": time_ratio(arms[arm], cached) for arm in arms if arm != "cached"}
    if "physicsnemo" in arms and arms["physicsnemo"]["epoch_s"]:
        out["cached_epoch_over_physicsnemo_epoch"] = cached["epoch_s"] / arms["physicsnemo"]["epoch_s"]
    return out


# ---- output

def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def size_table(record: dict) -> str:
    """Markdown: one row per arm of one size."""
    head = ["arm", "time to target s", "ended", "epochs", "epoch s", "data wait share", "peak host MB",
            "peak GPU MB", "loss at end"]
    lines = [f"**{record['size']}**: {record['surface_cells']:,} surface cells a body, {record['runs']} bodies, "
             f"target {record['target_val_loss']:.5f} (the cached arm's final validation loss), cap "
             f"{record['cap_s']:.0f} s; cache build {record['cache_build_s']:.0f} s (once per dataset)", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for arm, s in record["arms"].items():
        share = "-" if s["data_wait_share"] is None else f"{100 * s['data_wait_share']:.1f}%"
        lines.append("| " + " | ".join([
            arm, _num(s["time_to_target_s"], 0), s["ended"], str(s["epochs_run"]), _num(s["epoch_s"], 2), share,
            _num(s["peak_host_mb"], 0), _num(s["peak_device_mb"], 0), _num(s["loss_at_end"], 5)]) + " |")
    said = [f"{name.replace('_over_cached', '')} / cached: {r['text']}"
            for name, r in record["ratios"].items() if name.endswith("_over_cached")]
    if "cached_epoch_over_physicsnemo_epoch" in record["ratios"]:
        said.append(f"cached epoch / physicsnemo epoch: {record['ratios']['cached_epoch_over_physicsnemo_epoch']:.2f}")
    return "\n".join(lines + ["", "time to the target, " + "; ".join(said)])


def plot(report: dict, path: Path) -> None:
    """Validation loss against seconds since each arm's start, one panel per size, one line per arm."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = list(report["sizes"].values())
    figure, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 5), squeeze=False)
    for axis, record in zip(axes[0], sizes):
        for arm, s in record["arms"].items():
            if s["curve"]:
                seconds, losses = zip(*[(c[0], c[1]) for c in s["curve"]])
                axis.plot(seconds, losses, marker=".", label=f"{arm} ({s['ended']})")
        axis.axhline(record["target_val_loss"], color="k", linestyle="--", linewidth=1, label="target")
        axis.axvline(record["cap_s"], color="grey", linestyle=":", linewidth=1, label="cap")
        axis.set(xscale="log", yscale="log", xlabel="seconds since train.py's start", ylabel="validation loss",
                 title=f"{record['size']}: {record['surface_cells']:,} surface cells a body")
        axis.legend(fontsize=8)
    figure.suptitle(f"{report['date']}, commit {report['commit']}, {report['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["laminar", "drivaerml"], choices=list(SIZES))
    parser.add_argument("--work", type=Path, default=Path("outputs/time_to_accuracy"))
    parser.add_argument("--runs", type=int, default=8, help="bodies per size (conf/demo.yaml holds 20%% out)")
    parser.add_argument("--epochs", type=int, default=24, help="the cached arm's epochs (and the schedule's)")
    parser.add_argument("--seed", type=int, default=0, help="the bodies', the split's and the model's seed")
    parser.add_argument("--cap-factor", type=float, default=12.0,
                        help="cap the other arms at this many times the cached arm's time to the target")
    parser.add_argument("--max-cap-s", type=float, default=3600.0, help="and at most this many seconds")
    parser.add_argument("--arms", nargs="+", default=list(ARMS[1:]), choices=ARMS[1:],
                        help="the arms beside the cached one")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="training and geometry device")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="generation and processing")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every stage and arm (key=value)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="generate and process the runs, then stop (no cache, no training)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    return parser


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments().parse_args(argv)
    if args.runs < 3:
        sys.exit(f"--runs {args.runs}: at least 3 bodies (training and validation runs)")
    report = provenance(argv) | {"device": args.device, "epochs": args.epochs, "seed": args.seed,
                                 "runs": args.runs, "cap_factor": args.cap_factor, "max_cap_s": args.max_cap_s,
                                 "overrides": args.set, "sizes": {}}
    if args.prepare_only:
        for size in args.sizes:
            generate_and_process(args, size, (args.work / size).resolve())
        return report
    for size in args.sizes:
        report["sizes"][size] = measure_size(args, size)
        if args.json:  # after each size, so a long run leaves what it has measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\ncommand: {report['command']}\ndate: {report['date']}  commit: {report['commit']}  "
          f"device: {args.device}  epochs: {args.epochs}  seed: {args.seed}")
    for record in report["sizes"].values():
        print("\n" + size_table(record))
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        plot(report, args.png)
        print(f"wrote {args.png}")
    return report


if __name__ == "__main__":
    main()
