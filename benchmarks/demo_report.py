"""Compare a cached and an uncached training run: epoch time split into data wait and compute.

Reads the `epochs.jsonl` that train.py writes into each run's output_dir, prints the comparison
table, writes it as JSON and draws a PNG (loss curves; per-epoch data wait and compute).

    python benchmarks/demo_report.py --cached outputs/demo/surface --uncached outputs/demo/surface_uncached \
        --out outputs/demo/report

Each figure is the median over the run's epochs (the first epoch too when it is the only one):
both runs are measured on the same machine in one `make demo`, so their ratio is what counts.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TIME_KEYS = ("data_wait_s", "compute_s", "epoch_s")


def read_epochs(run_dir: Path) -> list[dict[str, Any]]:
    """The epoch records of a run, the last one per epoch number (a resumed run may repeat one)."""
    path = run_dir / "epochs.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no epoch log; train with output_dir={run_dir} first")
    records = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON record ({error})") from error
        if record.get("kind") == "epoch":
            records[record["epoch"]] = record
    if not records:
        raise ValueError(f"{path}: no finished epoch recorded")
    return [records[epoch] for epoch in sorted(records)]


def summarize(records: list[dict[str, Any]]) -> dict[str, float]:
    """Median data wait, compute and epoch time, and samples per second, over the run's epochs."""
    summary = {key: statistics.median(r[key] for r in records) for key in TIME_KEYS}
    summary["samples_per_s"] = statistics.median(r["samples_per_s"] for r in records)
    summary["samples_per_epoch"] = records[-1]["samples"]
    summary["epochs"] = len(records)
    summary["peak_memory_mb"] = max(r["peak_memory_mb"] for r in records)
    return summary


def comparison(cached: dict[str, float], uncached: dict[str, float]) -> dict[str, float]:
    """Uncached over cached, per measure: how many times faster the cache makes each part."""
    return {key: uncached[key] / cached[key] if cached[key] > 0 else float("inf") for key in TIME_KEYS}


def format_table(cached: dict[str, float], uncached: dict[str, float], ratios: dict[str, float]) -> str:
    """The comparison as a fixed-width text table."""
    header = f"{'':<22}{'data wait s':>12}{'compute s':>12}{'epoch s':>12}{'samples/s':>12}{'epochs':>8}"
    lines = [header, "-" * len(header)]
    for name, s in (("cached", cached), ("uncached", uncached)):
        lines.append(
            f"{name:<22}{s['data_wait_s']:>12.2f}{s['compute_s']:>12.2f}{s['epoch_s']:>12.2f}"
            f"{s['samples_per_s']:>12.3f}{s['epochs']:>8d}"
        )
    lines.append(
        f"{'uncached / cached':<22}{ratios['data_wait_s']:>11.1f}x{ratios['compute_s']:>11.2f}x"
        f"{ratios['epoch_s']:>11.2f}x"
    )
    return "\n".join(lines)


def plot(cached: list[dict[str, Any]], uncached: list[dict[str, Any]], path: Path) -> None:
    """Left: training (and validation) loss per epoch; right: each epoch's data wait and compute."""
    figure, (losses, times) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, records, marker in (("cached", cached, "o"), ("uncached", uncached, "s")):
        epochs = [r["epoch"] for r in records]
        losses.plot(epochs, [r["train_loss"] for r in records], marker=marker, label=f"{name} train")
        if all("val_loss" in r for r in records):
            losses.plot(epochs, [r["val_loss"] for r in records], marker=marker, linestyle="--", label=f"{name} validation")
    losses.set_xticks(sorted({r["epoch"] for r in cached + uncached}))
    losses.set(xlabel="epoch", ylabel="loss (MSE, scaled targets)", title="Loss")
    losses.legend()
    labels = [f"cached {r['epoch']}" for r in cached] + [f"uncached {r['epoch']}" for r in uncached]
    records = cached + uncached
    wait = [r["data_wait_s"] for r in records]
    compute = [r["compute_s"] for r in records]
    times.bar(labels, wait, label="waiting for data")
    times.bar(labels, compute, bottom=wait, label="computing")
    times.set(ylabel="seconds per epoch", title="Epoch time")
    times.tick_params(axis="x", rotation=45)
    times.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cached", type=Path, required=True, help="output_dir of the run on the cache")
    parser.add_argument("--uncached", type=Path, required=True, help="output_dir of the run on the datapipe")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.png and OUT.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cached_records, uncached_records = read_epochs(args.cached), read_epochs(args.uncached)
    cached, uncached = summarize(cached_records), summarize(uncached_records)
    ratios = comparison(cached, uncached)
    print(f"Epoch time, cached ({args.cached}) against uncached ({args.uncached}); medians over epochs")
    print(format_table(cached, uncached, ratios))
    print(
        f"epoch 1 training loss: cached {cached_records[0]['train_loss']:.6g}, uncached "
        f"{uncached_records[0]['train_loss']:.6g} (same seed, same draws: equal when the cache is a drop-in)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "cached": cached, "uncached": uncached, "uncached_over_cached": ratios,
        "first_epoch_train_loss": {"cached": cached_records[0]["train_loss"], "uncached": uncached_records[0]["train_loss"]},
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    plot(cached_records, uncached_records, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.png')} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
