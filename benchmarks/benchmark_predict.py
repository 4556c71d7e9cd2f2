"""predict.py's cost on one processed run, split into what is paid once per run and per batch.

The run goes through predict's own steps (``load_processed``, ``prepare_run``, ``BatchItems``:
grid SDFs and the surface kNN, ``part_forward``: the geometry encodings on the first batch), then
``--batches`` surface batches (and ``--volume-batches`` volume batches) of ``--batch-points``,
and ``--whole-forward-batches`` surface batches through ``model(batch)`` for comparison;
the model is an untrained DoMINO of the config's size (weights do not change the cost). Prints a
Markdown table, the seconds per million cells (median batch) and the whole run's estimate
(once-per-run steps + cells x per-cell cost); peak RSS of the process; writes JSON.

    nice -n 10 python benchmarks/benchmark_predict.py --run outputs/full/processed/run_1.zarr \
        --model-type combined --batches 3 --volume-batches 3 --json outputs/benchmark_predict.json
    python benchmarks/benchmark_predict.py --run /tmp/tiny/run_1.zarr --set geometry.interp_res=[16,8,8]  # smoke
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from domino_pipeline.compute.settings import settings_from_config
from domino_pipeline.configuration.config import load_config
from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.inference.full_resolution import (
    BatchItems,
    model_parts,
    part_forward,
    prepare_run,
    row_batches,
)
from domino_pipeline.inference.run_inputs import load_processed
from domino_pipeline.training.domino_model import build_model

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    """This process's peak RSS so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(steps: dict, name: str, compute):
    """``compute()``, its seconds kept in ``steps[name]``."""
    started = time.perf_counter()
    result = compute()
    steps[name] = time.perf_counter() - started
    return result


def batch_seconds(forward, items: BatchItems, part: str, windows: list[tuple[int, int]]) -> list[float]:
    """Seconds of each batch (its item built, moved and predicted), as predict_part runs them."""
    seconds = []
    for start, stop in windows:
        began = time.perf_counter()
        item = (items.item(np.arange(start, stop), (0, 1) if "volume" in items.parts else None) if part == "surface"
                else items.item(np.arange(1) if "surface" in items.parts else None, (start, stop)))
        with torch.no_grad():
            forward(item, part)
        seconds.append(time.perf_counter() - began)
    return seconds


def part_figures(seconds: list[float], batch_points: int, rows: int) -> dict:
    """The first batch and the median of the others, per million rows."""
    per_batch = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    return {"rows": rows, "batches_run": len(seconds), "first_batch_s": seconds[0], "batch_s_median": per_batch,
            "s_per_million_rows": per_batch / batch_points * 1e6}


def whole_forward_figures(model: torch.nn.Module, items: BatchItems, args: argparse.Namespace, encoded: dict) -> dict:
    """Surface batches through ``model(batch)`` (the geometry encodings again in every batch, the
    path of a model ``EncodedDoMINO`` does not support), beside the encoded ones of this run."""
    forward = part_forward(model, encode_once=False)
    windows = row_batches(encoded["rows"], args.batch_points)[:args.whole_forward_batches]
    seconds = batch_seconds(forward, items, "surface", windows)
    median = statistics.median(seconds)
    return {"batches_run": len(seconds), "batch_s_median": median, "s_per_million_rows": median / args.batch_points * 1e6,
            "ratio_to_encoded": median / encoded["batch_s_median"]}


def measure(args: argparse.Namespace) -> dict:
    """One run's figures: the once-per-run steps, each part's batches, the peak RSS."""
    base = compose_files(ROOT / "conf", "config")
    merged = OmegaConf.merge(base, OmegaConf.from_dotlist([f"model_type={args.model_type}", *args.set]))
    config = load_config(merged)
    settings = settings_from_config(config.geometry, config.variables)
    torch.manual_seed(0)
    model = build_model(args.model_type, OmegaConf.to_container(merged.model, resolve=True), torch.device("cpu")).eval()
    parts, steps = model_parts(model), {}
    run = timed(steps, "load_s", lambda: load_processed(args.run, volume=args.volume_batches > 0))
    prepared = timed(steps, "prepare_s", lambda: prepare_run(run.arrays, settings, parts=parts, source=run.name))
    items = timed(steps, "geometry_s", lambda: BatchItems(prepared, settings, parts=parts,
                                                          geometry_points=config.sampling.geometry_points))
    forward, result = part_forward(model), {"model_type": args.model_type, "batch_points": args.batch_points}
    for part, count in (("surface", args.batches), ("volume", args.volume_batches)):
        if count and part in parts:
            rows = len(prepared.surface_areas) if part == "surface" else len(prepared.volume_coordinates)
            seconds = batch_seconds(forward, items, part, row_batches(rows, args.batch_points)[:count])
            first_part = not any(name in result for name in ("surface", "volume"))  # its first batch encodes
            result[part] = part_figures(seconds, args.batch_points, rows) | {"with_encodings": first_part}
    if args.whole_forward_batches and "surface" in result:
        result["surface_whole_forward"] = whole_forward_figures(model, items, args, result["surface"])
    surface = result.get("surface")
    if surface:
        once = steps["prepare_s"] + steps["geometry_s"] + surface["first_batch_s"] - surface["batch_s_median"]
        surface["whole_run_s_estimated"] = once + surface["rows"] * surface["s_per_million_rows"] / 1e6
    return result | steps | {"peak_rss_mb": round(peak_rss_mb()), "torch_threads": torch.get_num_threads()}


def table(result: dict) -> str:
    lines = ["| step | seconds | notes |", "|---|---|---|"]
    lines += [f"| {name.removesuffix('_s')} (once per run) | {result[name]:.1f} | |"
              for name in ("load_s", "prepare_s", "geometry_s")]
    for part in ("surface", "volume"):
        if part in result:
            r = result[part]
            with_encodings = " (with the run's geometry encodings)" if r["with_encodings"] else ""
            lines.append(f"| {part}: first batch{with_encodings} | {r['first_batch_s']:.1f} | |")
            lines.append(f"| {part}: batch of {result['batch_points']} (median of {r['batches_run'] - 1}) | "
                         f"{r['batch_s_median']:.1f} | {r['s_per_million_rows']:.0f} s per million of {r['rows']:,} |")
    if "surface_whole_forward" in result:
        r = result["surface_whole_forward"]
        lines.append(f"| surface: batch of {result['batch_points']} through model(batch) (median of "
                     f"{r['batches_run']}) | {r['batch_s_median']:.1f} | {r['ratio_to_encoded']:.1f}x the encoded batch |")
    if "surface" in result:
        lines.append(f"| whole surface, estimated | {result['surface']['whole_run_s_estimated']:.0f} | "
                     f"peak RSS {result['peak_rss_mb']} MB |")
    return "\n".join(lines)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a processed <run>.zarr")
    parser.add_argument("--model-type", default="surface", choices=("surface", "volume", "combined"))
    parser.add_argument("--batches", type=int, default=3, help="surface batches (the first with the encodings)")
    parser.add_argument("--volume-batches", type=int, default=0)
    parser.add_argument("--whole-forward-batches", type=int, default=0,
                        help="then surface batches through model(batch), which encodes the geometry every batch")
    parser.add_argument("--batch-points", type=int, default=8192)
    parser.add_argument("--set", nargs="*", default=[], help="config overrides (dotlist)")
    parser.add_argument("--json", type=Path)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    result = measure(args)
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
