"""The learning benchmark's tables, lines and picture, from its report (benchmark_learning.py's JSON)."""

from __future__ import annotations

import math
from pathlib import Path

ROWS = (  # key, label
    ("p", "pressure rel. L2 (area-weighted)"), ("wss_x", "wall shear x rel. L2"),
    ("wss_y", "wall shear y rel. L2"), ("wss_z", "wall shear z rel. L2"),
    ("cd_r2", "Cd R^2"), ("cd_mae_percent", "Cd mean abs. error %"), ("cd_mae", "Cd mean abs. error"),
    ("cl_r2", "Cl R^2"), ("cl_mae_percent", "Cl mean abs. error %"), ("cl_mae", "Cl mean abs. error"),
    ("train_s", "training time s (train.py wall)"),
)
MODEL = "this run"
PUBLISHED = "DoMINO published (DrivAerML)"
# the baselines' columns: key in the report's guesses -> label
BASELINES = {"training_mean": "training mean", "nearest_body": "nearest body (surface distance)",
             "linear_descriptors": "linear (descriptors)", "gp_descriptors": "GP (descriptors)",
             "gp_parameters": "GP (family parameters, oracle)"}
ORACLES = ("gp_parameters",)


def cell(value: float | None, key: str) -> str:
    """One figure as the tables print it ("-": not defined)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == "train_s":
        return f"{value:.0f}"
    return f"{value:.1f}" if key.endswith("percent") else f"{value:.3f}" if key.endswith("r2") else f"{value:.4f}"


def main_table(columns: dict[str, dict]) -> str:
    """Markdown: one row per ROWS measure, one column per model or baseline ("-": not defined)."""
    lines = ["| measure (test bodies) | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for key, label in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(c.get(key), key) for c in columns.values()) + " |")
    return "\n".join(lines)


def summary_table(summary: dict[str, dict[str, dict]], published: dict[str, float], splits: int) -> str:
    """Markdown: each measure's mean ± sd over the splits per column, DoMINO's published figures beside."""
    names = [*summary, PUBLISHED]
    lines = [f"| measure (test bodies, mean ± sd over {splits} splits) | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for key, label in ROWS:
        cells = []
        for name in summary:
            figure = summary[name].get(key)
            cells.append("-" if figure is None or math.isnan(figure["mean"]) else
                         cell(figure["mean"], key) + (f" ± {cell(figure['sd'], key)}" if splits > 1 else ""))
        cells.append(cell(published.get(key), key))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def split_table(splits: list[dict]) -> str:
    """Markdown: one row per split: the chosen epoch, validation and test pressure, the field
    baselines' pressure, and every column's Cd mean absolute error %."""
    names = [name for name in splits[0]["columns"]]
    head = ["split", "test bodies", "chosen epoch (val loss)", "val p L2", *(f"p L2 {n}" for n in names
                                                                          if "p" in splits[0]["columns"][n]),
            *(f"Cd MAE % {n}" for n in names)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for split in splits:
        columns, chosen = split["columns"], split["chosen"]
        cells = [str(split["index"]), ", ".join(split["roles"]["test"]),
                 f"{chosen['epoch']} ({chosen['val_loss']:.5f})", cell(split["validation"]["p"], "p")]
        cells += [cell(columns[n]["p"], "p") for n in names if "p" in splits[0]["columns"][n]]
        cells += [cell(columns[n].get("cd_mae_percent"), "cd_mae_percent") for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_run_table(rows: list[dict], guesses: dict[str, dict], fields: dict[str, dict]) -> str:
    """Markdown: each test body's Cd and Cl, predicted and published, each baseline's Cd, and the
    pressure error of the model and of the field baselines."""
    shown = [k for k in BASELINES if k in guesses]
    head = ["run", "Cd pred", "Cd published", "err %", *(f"Cd {BASELINES[k]}" for k in shown),
            "Cl pred", "Cl published", "p L2", *(f"p L2 {BASELINES[k]}" for k in fields)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        run = r["run"]
        cells = [run, f"{r['cd_pred']:.4f}", f"{r['cd_published']:.4f}",
                 f"{100 * (r['cd_pred'] - r['cd_published']) / r['cd_published']:+.1f}"]
        for k in shown:
            guess = guesses[k][run]
            cells.append(f"{guess['cd']:.4f}" + (f" ({guess['run']})" if "run" in guess else ""))
        cells += [f"{r['cl_pred']:.4f}", f"{r['cl_published']:.4f}", f"{r['p']:.4f}"]
        cells += [f"{fields[k][run]['p']:.4f}" for k in fields]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _times(value: float, reference: float) -> str:
    return f"{value / reference:.2f} x" if reference > 0 else "- (the baseline is exact)"


def ratios_text(summary: dict[str, dict[str, dict]]) -> str:
    """How the model stands against its baselines (means over the splits): its pressure L2 over
    the nearest body's carried fields', its Cd error over the best non-oracle baseline's, and
    over the oracle's."""
    model = summary[MODEL]
    parts = []
    nearest = summary.get(BASELINES["nearest_body"], {}).get("p")
    if nearest:
        parts.append(f"pressure L2 {model['p']['mean']:.4f} = {_times(model['p']['mean'], nearest['mean'])} the "
                     f"nearest body's carried fields' {nearest['mean']:.4f}")
    plain = {BASELINES[k]: summary[BASELINES[k]]["cd_mae_percent"]["mean"] for k in BASELINES
             if k not in ORACLES and BASELINES[k] in summary}
    error = model["cd_mae_percent"]["mean"]
    if plain:
        best = min(plain, key=plain.get)
        parts.append(f"Cd error {error:.2f}% = {_times(error, plain[best])} the best baseline's "
                     f"({best}: {plain[best]:.2f}%)")
    for key in ORACLES:
        if BASELINES[key] in summary:
            oracle = summary[BASELINES[key]]["cd_mae_percent"]["mean"]
            parts.append(f"{_times(error, oracle)} the oracle's ({BASELINES[key]}: {oracle:.2f}%)")
    return "the model, means over the splits: " + "; ".join(parts)


def mixture_text(mixture: dict) -> str:
    """One line: what the mixture column trained on (its command is in the JSON report)."""
    family, other = mixture["split"][mixture["family_source"]], mixture["split"][mixture["dataset"]]
    return (f"mixture ({mixture['family_source']} + {mixture['dataset']}): one model, the first split's seed, "
            f"non-dimensional, over the {mixture['family_source']}'s {len(family['train'])} training bodies (weight 1) "
            f"and {len(other['train'])} {mixture['dataset']} runs (weight {mixture['weights'][mixture['dataset']]}); "
            f"validated on the {len(family['val'])} validation bodies, scored on the first split's "
            f"{len(mixture['per_run'])} test bodies; train.py {mixture['wall_s']:.0f} s")


def timing_text(timing: dict) -> str:
    """One line: the time each run took to the cached run's final validation loss."""
    c, u = timing["cached"], timing["uncached"]
    if u["reached_s"] is None and c.get("reached_uncached_best_s") is not None:
        return (f"time to the cached run's final validation loss {timing['target_val_loss']:.5f}: cached "
                f"{c['reached_s']:.0f} s (epoch {c['epoch']}); the uncached run {u['ended']} after "
                f"{u['epochs_run']} epochs, {u['wall_s']:.0f} s (cap {timing['cap_s']:.0f} s), its best validation "
                f"loss {u['best_val_loss']:.5f} at {u['reached_best_s']:.0f} s; the cached run reached that loss at "
                f"{c['reached_uncached_best_s']:.0f} s: uncached / cached "
                f"{u['reached_best_s'] / c['reached_uncached_best_s']:.2f}x (times from train.py's start)")
    reached = f"{u['reached_s']:.0f} s (epoch {u['epoch']})" if u["reached_s"] is not None else "not reached"
    ratio = f"; uncached / cached {u['reached_s'] / c['reached_s']:.2f}x" if u["reached_s"] else ""
    epochs = (f"; training epochs alone {c['epochs_s_to_reach']:.0f} s cached, {u['epochs_s_to_reach']:.0f} s uncached"
              if u["epochs_s_to_reach"] is not None else "")
    return (f"time to the cached run's final validation loss {timing['target_val_loss']:.5f} (from train.py's start): "
            f"cached {c['reached_s']:.0f} s (epoch {c['epoch']}), uncached {reached}{ratio}{epochs}; the uncached run "
            f"{u['ended']} after {u['epochs_run']} epochs, {u['wall_s']:.0f} s (cap {timing['cap_s']:.0f} s)")


def ab_table(ab: dict, seeds: list[int]) -> str:
    """Markdown: per measure each seed's default / exact figure, then mean ± sd per arm."""
    head = ["measure", *(f"seed {s}: default / exact" for s in seeds), "default mean ± sd", "exact mean ± sd",
            "default outside exact range by"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    labels = {"val_loss": "best validation loss", "p": "test pressure rel. L2",
              "cd_mae_percent": "test Cd mean abs. error %"}
    for measure, label in labels.items():
        arms, summary = ab["arms"], ab["summary"][measure]
        cells = [f"{arms['default'][s][measure]:.4f} / {arms['exact'][s][measure]:.4f}" for s in seeds]
        cells += [f"{summary[a]['mean']:.4f} ± {summary[a]['sd']:.4f}" for a in ("default", "exact")]
        outside = summary["default_outside_exact_range_by"]
        cells.append("within" if outside == 0 else f"{outside:+.4f}")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def representative_run(rows: list[dict]) -> str:
    """The test body of median pressure error: the picture shows a typical body."""
    ordered = sorted(rows, key=lambda r: r["p"])
    return ordered[len(ordered) // 2]["run"]


def plot(splits: list[dict], pressure_png: Path, path: Path) -> None:
    """Left: predicted (and the baselines') against published Cd over every split's test bodies,
    with y = x; right: one test body's pressure, predicted against the solver's (predict.py's picture)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (scatter, picture) = plt.subplots(1, 2, figsize=(16, 6), gridspec_kw={"width_ratios": [1, 1.6]})
    rows = [(split, r) for split in splits for r in split["per_run"]]
    true = [r["cd_published"] for _, r in rows]
    predicted = [r["cd_pred"] for _, r in rows]
    scatter.scatter(true, predicted, label="DoMINO (this run)", zorder=3)
    for key, marker in (("training_mean", "_"), ("nearest_body", "x"), ("gp_descriptors", "+"),
                        ("gp_parameters", "1")):
        if all(key in split["guesses"] for split in splits):
            scatter.scatter(true, [split["guesses"][key][r["run"]]["cd"] for split, r in rows], marker=marker, s=70,
                            label=BASELINES[key])
    span = [min(true + predicted) * 0.97, max(true + predicted) * 1.03]
    scatter.plot(span, span, "k--", linewidth=1, label="y = x")
    scatter.set(xlabel="Cd published (forceCoeffs)", ylabel="Cd predicted",
                title=f"Test bodies of {len(splits)} splits: drag")
    scatter.legend(fontsize=8)
    picture.imshow(plt.imread(pressure_png))
    picture.set_axis_off()
    picture.set_title(f"{pressure_png.stem.removesuffix('_pressure')}: pressure, solver (top) and predicted (bottom)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
