"""The demo's report: what the model learned, and what the cache bought.

Reads the `epochs.jsonl` that train.py writes into each run's output_dir and, with
`--predictions`, predict.py's `predictions.csv` for the test runs (held out of training and
validation: they chose nothing). Prints the validation error per epoch (relative L2 of each
surface variable on the validation draws), the test runs' predicted against true drag and lift
with the area-weighted field errors, beside the training mean (every test run guessed as the mean
Cd and Cl its training runs publish: `--processed`, the runs of the cached run's `split.json`),
and the cached-against-uncached epoch times; writes them as JSON and draws a PNG (loss and
validation error per epoch; predicted against true Cd and Cl; per-epoch data wait and compute).
The demo's runs are synthetic: smooth fields of the body's shape, no flow regime.

    python benchmarks/demo_report.py --cached outputs/demo/surface --uncached outputs/demo/surface_uncached \
        --predictions outputs/demo/predictions/predictions.csv --processed outputs/demo/processed \
        --out outputs/demo/report

Each figure is the median over the run's epochs (the first epoch too when it is the only one):
both runs are measured on the same machine in one `make demo`, so their ratio is what counts.
"""

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TIME_KEYS = ("data_wait_s", "compute_s", "epoch_s")
VAL_PREFIX = "val_rel_l2/"
COEFFICIENTS = ("cd", "cl")


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


def validation_errors(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per validation variable (``surface/pMeanTrim``, ...), its relative L2 error at each epoch."""
    names = [key for key in records[-1] if key.startswith(VAL_PREFIX)]
    return {key.removeprefix(VAL_PREFIX): [r.get(key, float("nan")) for r in records] for key in names}


def format_validation(records: list[dict[str, Any]], errors: dict[str, list[float]]) -> str:
    """Validation relative L2 per epoch, one row an epoch, one column a variable."""
    names = {n: n.split("/")[-1] for n in errors}
    header = f"{'epoch':>6}{'lr':>10}{'train loss':>12}" + "".join(f"{s:>{len(s) + 2}}" for s in names.values())
    lines = [header, "-" * len(header)]
    for i, record in enumerate(records):
        lines.append(f"{record['epoch']:>6d}{record['lr']:>10.2e}{record['train_loss']:>12.5f}"
                     + "".join(f"{errors[n][i]:>{len(s) + 2}.4f}" for n, s in names.items()))
    return "\n".join(lines)


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """predict.py's table: per run, predicted and true coefficients and the area-weighted relative
    L2 error of each surface variable (its ``rel_l2_area_<name>`` columns)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no predictions table; run predict.py first")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(f"{path}: no predicted run")
    missing = [f"{c}_{kind}" for c in COEFFICIENTS for kind in ("pred", "true") if f"{c}_{kind}" not in rows[0]]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing; is it predict.py's predictions.csv?")
    return rows


def training_mean(processed: Path, split: Path) -> dict[str, float]:
    """The mean Cd and Cl that the training runs of ``split`` (train.py's split.json) publish
    (each processed run keeps its raw folder's published coefficients)."""
    from domino_pipeline.processed.runs import open_run
    if not split.is_file():
        raise FileNotFoundError(f"{split}: no split; train first")
    names = json.loads(split.read_text())["train"]
    published = [open_run(processed / name).attrs.get("published", {}).get("own") or {} for name in names]
    lacking = [name for name, own in zip(names, published) if not all(c in own for c in COEFFICIENTS)]
    if lacking:
        raise ValueError(f"{processed}: runs {lacking} publish no Cd and Cl: no training mean to print")
    return {c: statistics.fmean(float(own[c]) for own in published) for c in COEFFICIENTS}


def prediction_summary(rows: list[dict[str, Any]], mean: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Per run: predicted, true and the error in % of each coefficient (and of the training
    ``mean``'s, when given), and each field's error."""
    summary = []
    for row in rows:
        entry: dict[str, Any] = {"run": row["run"]}
        for c in COEFFICIENTS:
            predicted, true = float(row[f"{c}_pred"]), float(row[f"{c}_true"])
            entry[c] = {"pred": predicted, "true": true, "error_pct": 100.0 * (predicted - true) / abs(true)}
            if mean is not None:
                entry[c] |= {"training_mean": mean[c], "training_mean_error_pct": 100.0 * (mean[c] - true) / abs(true)}
        entry["rel_l2_area"] = {key.removeprefix("rel_l2_area_"): float(value) for key, value in row.items()
                                if key.startswith("rel_l2_area_") and value not in ("", None)}
        summary.append(entry)
    return summary


def format_predictions(summary: list[dict[str, Any]]) -> str:
    """The test runs: Cd and Cl predicted against true (beside the training mean and its error,
    when known), the area-weighted field errors; last, the mean absolute errors."""
    fields = list(summary[0]["rel_l2_area"])
    baseline = "training_mean" in summary[0]["cd"]
    header = (f"{'run':<10}" + "".join(f"{c + ' pred':>10}{c + ' true':>10}{'err %':>8}"
                                       + (f"{c + ' mean':>10}{'err %':>8}" if baseline else "") for c in COEFFICIENTS)
              + "".join(f"{'L2 ' + f:>{len(f) + 5}}" for f in fields))
    lines = [header, "-" * len(header)]
    for entry in summary:
        lines.append(f"{entry['run']:<10}"
                     + "".join(f"{entry[c]['pred']:>10.4f}{entry[c]['true']:>10.4f}{entry[c]['error_pct']:>+8.1f}"
                               + (f"{entry[c]['training_mean']:>10.4f}{entry[c]['training_mean_error_pct']:>+8.1f}"
                                  if baseline else "") for c in COEFFICIENTS)
                     + "".join(f"{entry['rel_l2_area'][f]:>{len(f) + 5}.4f}" for f in fields))
    for c in COEFFICIENTS:
        model = statistics.fmean(abs(e[c]["error_pct"]) for e in summary)
        mean = (f", the training mean {statistics.fmean(abs(e[c]['training_mean_error_pct']) for e in summary):.1f}%"
                if baseline else "")
        lines.append(f"{c.capitalize()} mean abs. error over the {len(summary)} test runs: "
                     f"the model {model:.1f}%{mean}")
    return "\n".join(lines)


def plot(cached: list[dict[str, Any]], uncached: list[dict[str, Any]], predictions: list[dict[str, Any]] | None,
         path: Path) -> None:
    """Loss per epoch; validation error per epoch; predicted against true Cd and Cl of the
    test runs; each epoch's data wait and compute."""
    figure, axes = plt.subplots(2, 2, figsize=(12, 9))
    _plot_losses(axes[0, 0], cached, uncached)
    _plot_validation(axes[0, 1], cached)
    _plot_coefficients(axes[1, 0], predictions)
    _plot_times(axes[1, 1], cached, uncached)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_losses(axis, cached: list[dict[str, Any]], uncached: list[dict[str, Any]]) -> None:
    for name, records, marker in (("cached", cached, "o"), ("uncached", uncached, "s")):
        epochs = [r["epoch"] for r in records]
        axis.plot(epochs, [r["train_loss"] for r in records], marker=marker, label=f"{name} train")
        if all("val_loss" in r for r in records):
            axis.plot(epochs, [r["val_loss"] for r in records], marker=marker, linestyle="--", label=f"{name} validation")
    axis.set_yscale("log")
    axis.set(xlabel="epoch", ylabel="loss (MSE, scaled targets)", title="Loss")
    axis.legend()


def _plot_validation(axis, records: list[dict[str, Any]]) -> None:
    epochs = [r["epoch"] for r in records]
    for name, values in validation_errors(records).items():
        axis.plot(epochs, values, marker=".", label=name.split("/")[-1])
    axis.set_yscale("log")
    axis.set(xlabel="epoch", ylabel="relative L2", title="Validation error (cached run)")
    axis.legend(fontsize=8)


def _plot_coefficients(axis, predictions: list[dict[str, Any]] | None) -> None:
    if not predictions:
        axis.set_axis_off()
        axis.text(0.5, 0.5, "no predictions given", ha="center")
        return
    values = []
    for c, marker in zip(COEFFICIENTS, ("o", "s")):
        true = [e[c]["true"] for e in predictions]
        predicted = [e[c]["pred"] for e in predictions]
        axis.scatter(true, predicted, marker=marker, label=c.capitalize())
        for entry, x, y in zip(predictions, true, predicted):
            axis.annotate(entry["run"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        values += true + predicted
    low, high = min(values), max(values)
    pad = 0.05 * (high - low or 1.0)
    axis.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", linewidth=1, label="y = x")
    if "training_mean" in predictions[0]["cd"]:
        for c, marker in zip(COEFFICIENTS, ("_", "|")):
            axis.scatter([e[c]["true"] for e in predictions], [e[c]["training_mean"] for e in predictions],
                         marker=marker, s=80, color="grey", label=f"{c.capitalize()} training mean")
    axis.set(xlabel="true (integrated from the run's fields)", ylabel="predicted",
             title="Test runs: drag and lift coefficients")
    axis.legend()


def _plot_times(axis, cached: list[dict[str, Any]], uncached: list[dict[str, Any]]) -> None:
    labels = [f"cached {r['epoch']}" for r in cached] + [f"uncached {r['epoch']}" for r in uncached]
    records = cached + uncached
    wait = [r["data_wait_s"] for r in records]
    compute = [r["compute_s"] for r in records]
    axis.bar(labels, wait, label="waiting for data")
    axis.bar(labels, compute, bottom=wait, label="computing")
    axis.set(ylabel="seconds per epoch", title="Epoch time")
    axis.tick_params(axis="x", rotation=60, labelsize=7)
    axis.legend()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cached", type=Path, required=True, help="output_dir of the run on the cache")
    parser.add_argument("--uncached", type=Path, required=True, help="output_dir of the run on the datapipe")
    parser.add_argument("--predictions", type=Path, help="predict.py's predictions.csv of the test runs")
    parser.add_argument("--processed", type=Path,
                        help="the processed runs: the training mean of the runs in --cached's split.json")
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.png and OUT.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cached_records, uncached_records = read_epochs(args.cached), read_epochs(args.uncached)
    mean = training_mean(args.processed, args.cached / "split.json") if args.processed else None
    predictions = prediction_summary(read_predictions(args.predictions), mean) if args.predictions else None
    print(f"Validation error per epoch ({args.cached}): relative L2 on the validation draws")
    print(format_validation(cached_records, validation_errors(cached_records)))
    if predictions:
        print(f"\nTest runs ({args.predictions}; held out of training and validation), with the model chosen by "
              "the validation loss: coefficients predicted against integrated from the true fields, beside the "
              "training runs' mean; field errors relative L2, area-weighted over the whole surface. Synthetic "
              "fields (a smooth function of the body's shape, no flow regime): this shows the pipeline teaching "
              "a model, not an accuracy on real flow")
        print(format_predictions(predictions))
    cached, uncached = summarize(cached_records), summarize(uncached_records)
    ratios = comparison(cached, uncached)
    print(f"\nEpoch time, cached ({args.cached}) against uncached ({args.uncached}); medians over epochs")
    print(format_table(cached, uncached, ratios))
    print(
        f"epoch 1 training loss: cached {cached_records[0]['train_loss']:.6g}, uncached "
        f"{uncached_records[0]['train_loss']:.6g} (same seed, same draws: equal when the cache is a drop-in)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "cached": cached, "uncached": uncached, "uncached_over_cached": ratios,
        "first_epoch_train_loss": {"cached": cached_records[0]["train_loss"], "uncached": uncached_records[0]["train_loss"]},
        "validation_rel_l2_per_epoch": validation_errors(cached_records),
        "test": predictions, "training_mean": mean,
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    plot(cached_records, uncached_records, predictions, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.png')} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
