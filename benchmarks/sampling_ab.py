"""Training A/B of the sampling law: the default draw (cyclic windows) against the exact law.

Builds `make demo`'s data (6 synthetic runs, processed, cached) under ``--work``, then trains the
demo model (``--model-type``: surface, volume or combined; 8 epochs) once per seed and arm, one
run after the other:

- ``default``: the configured law (surface area-weighted in a cyclic window of 8 x the sample,
  volume uniform in a cyclic window of 8 x the sample);
- ``exact``: ``sampling.exact=true`` (area-weighted over the whole surface, volume over all rows);
- ``window1`` (with ``--arms default exact window1``): the volume window of the sample itself
  (``sampling.volume_window_factor=1``), where stored neighbours are always drawn together.

Both arms keep the same train/validation split (``train.split_seed``) and validate on the same
draws, by the exact law (``sampling.val_exact=true``); the seed changes the model's initial
weights and the training draws. Prints the final validation loss and relative L2 per variable
side by side, per seed and as mean and spread, and whether the default's mean loss lies within
the exact law's seed-to-seed range; writes the figures as JSON.

    python benchmarks/sampling_ab.py --work /tmp/ab --seeds 42 1 2 --json /tmp/ab/sampling_ab.json
    python benchmarks/sampling_ab.py --work /tmp/ab_combined --model-type combined --surface-cells 50000 \
        --volume-points 100000 --stl-triangles 16000 --epochs 6 --json docs/sampling_ab_combined.json
    python benchmarks/sampling_ab.py --work /tmp/ab --report-only     # the table from finished runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"default": [], "exact": ["sampling.exact=true"],
        "window1": ["sampling.volume_window_factor=1"]}  # the volume window of the sample itself
SPLIT_SEED = 42  # the demo's seed: the same four training and two validation runs in every run


def run(command: list[str]) -> None:
    """Run a pipeline step from the repository root; stop with its output if it fails."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{command[0]} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def data_overrides(work: Path) -> list[str]:
    return [f"data.raw_dir={work / 'raw'}", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", "hydra.run.dir=.", "hydra.output_subdir=null"]


def build_data(work: Path, sizes: dict[str, int]) -> None:
    """`make demo`'s first three steps, into ``work`` (each skips what is already there);
    ``sizes``: synthetic_data.py's size options (surface-cells, stl-triangles, volume-points)."""
    if not (work / "raw").is_dir():
        size_options = [option for name, value in sizes.items() for option in (f"--{name}", str(value))]
        run(["synthetic_data.py", "--preset", "demo", "--runs", "6", "--seed", "0", "--out",
             str(work / "raw"), *size_options])
    run(["process_data.py", "--config-name=demo", *data_overrides(work)])
    run(["cache_data.py", "--config-name=demo", *data_overrides(work)])


def train_dir(work: Path, arm: str, seed: int, model_type: str = "surface") -> Path:
    prefix = "" if model_type == "surface" else f"{model_type}_"
    return work / "train" / f"{prefix}{arm}_seed{seed}"


def train(work: Path, arm: str, seed: int, epochs: int, model_type: str) -> None:
    """One training run of ``arm`` with ``seed`` (skipped when its last epoch is logged)."""
    out = train_dir(work, arm, seed, model_type)
    if final_record(out, epochs) is not None:
        return
    run(["train.py", "--config-name=demo", *data_overrides(work), f"output_dir={out}", f"seed={seed}",
         f"model_type={model_type}", f"train.split_seed={SPLIT_SEED}", f"train.epochs={epochs}",
         "sampling.val_exact=true", *ARMS[arm]])


def final_record(out: Path, epochs: int) -> dict | None:
    """The epoch record of the last epoch with validation, or None when the run is unfinished."""
    path = out / "epochs.jsonl"
    if not path.is_file():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines()]
    done = [r for r in records if r.get("kind") == "epoch" and r["epoch"] == epochs and "val_loss" in r]
    return done[-1] if done else None


def collect(work: Path, seeds: list[int], epochs: int, model_type: str,
            arms: list[str]) -> dict[str, dict[int, dict[str, float]]]:
    """arm -> seed -> {"loss": final validation loss, variable: relative L2}."""
    figures: dict[str, dict[int, dict[str, float]]] = {}
    for arm in arms:
        for seed in seeds:
            record = final_record(train_dir(work, arm, seed, model_type), epochs)
            if record is None:
                sys.exit(f"{train_dir(work, arm, seed, model_type)}: unfinished; run without --report-only")
            values = {"loss": record["val_loss"]}
            values |= {k.removeprefix("val_rel_l2/"): v for k, v in record.items() if k.startswith("val_rel_l2/")}
            figures.setdefault(arm, {})[seed] = values
    return figures


def summary(values: list[float]) -> str:
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.4f} ± {spread:.4f}"


def table(figures: dict[str, dict[int, dict[str, float]]], seeds: list[int]) -> str:
    """Markdown: one row per measure, per seed each arm's figure (default / exact / ...), then
    mean ± sd of each arm."""
    arms = list(figures)
    measures = list(figures["default"][seeds[0]])
    head = ["measure", *(f"seed {s}: {' / '.join(arms)}" for s in seeds), *(f"{arm} mean ± sd" for arm in arms)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for measure in measures:
        per_arm = {arm: [figures[arm][s][measure] for s in seeds] for arm in arms}
        cells = [" / ".join(f"{per_arm[arm][k]:.4f}" for arm in arms) for k in range(len(seeds))]
        name = "validation loss" if measure == "loss" else f"rel. L2 {measure}"
        lines.append("| " + " | ".join([name, *cells, *(summary(per_arm[arm]) for arm in arms)]) + " |")
    return "\n".join(lines)


def verdict(figures: dict[str, dict[int, dict[str, float]]], seeds: list[int]) -> dict:
    """Whether the default's mean validation loss lies within the exact law's seed range."""
    exact = [figures["exact"][s]["loss"] for s in seeds]
    default_mean = statistics.fmean(figures["default"][s]["loss"] for s in seeds)
    within = min(exact) <= default_mean <= max(exact)
    return {"default_mean_loss": default_mean, "exact_min_loss": min(exact), "exact_max_loss": max(exact),
            "exact_mean_loss": statistics.fmean(exact), "within_exact_range": within}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ab"), help="data and training runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--model-type", default="surface", choices=["surface", "volume", "combined"])
    parser.add_argument("--surface-cells", type=int, default=400_000)
    parser.add_argument("--stl-triangles", type=int, default=200_000)
    parser.add_argument("--volume-points", type=int, default=None, help="default: the demo preset's")
    parser.add_argument("--arms", nargs="+", default=["default", "exact"], choices=list(ARMS),
                        help="default and exact always; window1 optional")
    parser.add_argument("--report-only", action="store_true", help="only read finished runs")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("a spread needs at least two seeds")
    work = args.work.resolve()
    arms = ["default", "exact", *(arm for arm in args.arms if arm not in ("default", "exact"))]
    if not args.report_only:
        sizes = {"surface-cells": args.surface_cells, "stl-triangles": args.stl_triangles}
        if args.volume_points is not None:
            sizes["volume-points"] = args.volume_points
        build_data(work, sizes)
        for seed in args.seeds:
            for arm in arms:
                train(work, arm, seed, args.epochs, args.model_type)
    figures = collect(work, args.seeds, args.epochs, args.model_type, arms)
    print(table(figures, args.seeds))
    result = verdict(figures, args.seeds)
    print(f"default mean validation loss {result['default_mean_loss']:.4f}; exact "
          f"{result['exact_mean_loss']:.4f} (seeds from {result['exact_min_loss']:.4f} to "
          f"{result['exact_max_loss']:.4f}): {'within' if result['within_exact_range'] else 'OUTSIDE'} "
          "the exact law's seed-to-seed range")
    if args.json:
        args.json.write_text(json.dumps({"model_type": args.model_type, "seeds": args.seeds, "epochs": args.epochs,
                                         "figures": figures,
                                         "verdict": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
