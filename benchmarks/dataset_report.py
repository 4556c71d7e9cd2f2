"""A processed folder's data-quality report: its statistics table, the runs the checks reject with
every reason, and a PNG of histograms of the key statistics and of Cd with the rejected runs
marked and named.

    python benchmarks/dataset_report.py --config-name=demo --out outputs/demo/dataset_report
    python benchmarks/dataset_report.py data.processed_dir=/data/curated data.raw_dir=/data/drivaerml \\
        data.quality.robust_threshold=10 --out /tmp/report

The table is brought up to date first (domino_pipeline/inputs/statistics/table_writer.py: processed runs'
statistics from their attributes, other forms' by a pass over their arrays, rows of unchanged runs
reused) and written into a local processed folder, where cache_data.py and train.py read it, and
into ``--out`` (statistics.csv); ``--out`` also gets quality.json (the rejected runs, their
reasons, the notes) and dataset_report.png. The checks are domino_pipeline/processed/run_quality.py's,
with ``data.quality`` and the dataset profile as configured. Values far outside the other runs'
are drawn at the panel's edge, with an arrow and their value.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from domino_pipeline.configuration.config import PipelineConfig, load_config  # noqa: E402
from domino_pipeline.configuration.config_files import compose_files  # noqa: E402
from domino_pipeline.configuration.force_integration import ForceConvention  # noqa: E402
from domino_pipeline.inputs.statistics.table_writer import collect_statistics  # noqa: E402
from domino_pipeline.processed.run_quality import QualityVerdicts, integrated_coefficients, judge, label, unflatten  # noqa: E402
from domino_pipeline.processed.runs import read_options_from_config  # noqa: E402
from domino_pipeline.processed.statistics_table import TABLE_NAME, read_statistics_table, save_table, table_location  # noqa: E402
from domino_pipeline.storage.object_store import is_url  # noqa: E402

MAX_PANELS = 16
COLUMNS = 4
TITLES = {"integrated.cd": "Cd integrated from the fields", "integrated.cd_ratio": "Cd integrated / published"}


def key_statistics(config: PipelineConfig) -> list[str]:
    """The columns every report shows: counts, the profile's pressure and velocity, the surface's
    agreement with the STL and its cells' quality."""
    pressure = config.dataset.fields.surface.get("pressure")
    velocity = config.dataset.fields.volume.get("velocity")
    found = ["surface.count", "volume.count", "stl.triangles"]
    if pressure:
        found += [f"surface.fields.{pressure}.mean", f"surface.fields.{pressure}.std"]
    if velocity:
        found += [f"volume.fields.{velocity}_x.mean"]
    return found + ["consistency.surface_to_stl_volume", "consistency.surface_stl_bounds_gap",
                    "surface.cells.non_planarity_max", "surface.cells.aspect_ratio_max"]


def with_coefficients(rows: Sequence[Mapping], config: PipelineConfig, verdicts: QualityVerdicts) -> list[dict]:
    """The rows with ``integrated.cd`` (the convention the checks used, the run's own references
    where it has them) and ``integrated.cd_ratio`` (over the published one)."""
    flow = config.dataset.flow
    convention = verdicts.convention or ForceConvention(flow.normals, flow.wall_shear)
    found = []
    for row in rows:
        row = dict(row)
        coefficients = integrated_coefficients(unflatten(row), flow, convention)
        which = "own" if "own" in coefficients else "constant"
        if which in coefficients:
            row["integrated.cd"] = coefficients[which]["cd"]
            published = row.get(f"published.{which}.cd")
            row["published.cd"] = published
            row["integrated.cd_ratio"] = coefficients[which]["cd"] / published if published else None
        found.append(row)
    return found


def panels(rows: Sequence[Mapping], config: PipelineConfig, verdicts: QualityVerdicts) -> list[str]:
    """The columns to draw: Cd, its ratio to the published, the key statistics, then for each
    rejected run the statistic with its largest score (at most MAX_PANELS, present ones only)."""
    chosen = ["integrated.cd", "integrated.cd_ratio", *key_statistics(config)]
    for run in verdicts.rejected:
        scores = verdicts.scores.get(run, {})
        if scores:
            chosen.append(max(scores, key=lambda column: abs(scores[column])))
    present = [c for c in dict.fromkeys(chosen) if any(row.get(c) is not None for row in rows)]
    return present[:MAX_PANELS]


def _limits(clean: np.ndarray, every: np.ndarray) -> tuple[float, float]:
    """The x range: the clean runs' values with a margin (every value's when none is clean)."""
    values = clean if len(clean) else every
    low, high = float(values.min()), float(values.max())
    pad = 0.15 * (high - low) or 0.05 * abs(high) or 1.0
    return low - pad, high + pad


def flagged_runs(column: str, verdicts: QualityVerdicts, threshold: float) -> set[str]:
    """The runs a panel of ``column`` marks: those its score rejects, and for the drag panels
    those whose integrated coefficients disagree with the published ones."""
    if column.startswith("integrated."):
        return {run for run, reasons in verdicts.rejected.items() if any(r.startswith(("Cd ", "Cl ")) for r in reasons)}
    return verdicts.flagged(column, threshold)


def draw_panel(axes, rows: Sequence[Mapping], column: str, flagged: set[str]) -> list[str]:
    """A histogram of ``column`` over the runs, the ``flagged`` ones marked in red and named
    (beyond the range of the others: at its edge, with their value); return the runs named."""
    values = {row["run"]: float(row[column]) for row in rows if row.get(column) is not None
              and math.isfinite(float(row[column]))}
    clean = np.array([v for run, v in values.items() if run not in flagged])
    low, high = _limits(clean, np.array(list(values.values())))
    axes.hist(np.clip(clean, low, high), bins=20, range=(low, high), color="#4c72b0", alpha=0.8)
    if column == "integrated.cd":
        published = [float(r["published.cd"]) for r in rows if r.get("published.cd") is not None]
        axes.hist(np.clip(published, low, high), bins=20, range=(low, high), histtype="step", color="black",
                  label="published (all runs)")
        axes.legend(fontsize=6)
    named = []
    top = axes.get_ylim()[1]
    for k, run in enumerate(r for r in values if r in flagged):
        value = values[run]
        shown = min(max(value, low), high)
        outside = "" if shown == value else ("< " if value < low else "> ")
        axes.axvline(shown, color="red", lw=1)
        axes.annotate(f"{outside}{run} {value:.3g}", (shown, top * (0.92 - 0.11 * (k % 8))), color="red",
                      fontsize=6, ha="right" if shown > (low + high) / 2 else "left")
        named.append(run)
    axes.set_title(TITLES.get(column, label(column)), fontsize=8)
    axes.tick_params(labelsize=6)
    return named


def draw_report(rows: Sequence[Mapping], config: PipelineConfig, verdicts: QualityVerdicts, path: Path) -> set[str]:
    """The report's PNG at ``path``; the runs it names."""
    rows = with_coefficients(rows, config, verdicts)
    columns = panels(rows, config, verdicts)
    n_rows = max(1, math.ceil(len(columns) / COLUMNS))
    figure, grid = plt.subplots(n_rows, COLUMNS, figsize=(4 * COLUMNS, 2.8 * n_rows), squeeze=False)
    named: set[str] = set()
    for axes, column in zip(grid.flat, columns):
        flagged = flagged_runs(column, verdicts, config.data.quality.robust_threshold)
        named |= set(draw_panel(axes, rows, column, flagged))
    for axes in list(grid.flat)[len(columns):]:
        axes.axis("off")
    excluded = ", ".join(verdicts.rejected) or "none"
    figure.suptitle(f"{len(rows)} runs, {len(verdicts.rejected)} rejected (red): {excluded}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return named


def report(config: PipelineConfig, out: Path) -> dict:
    """Bring the table up to date, judge it, write statistics.csv, quality.json and
    dataset_report.png into ``out``; return quality.json's contents."""
    out.mkdir(parents=True, exist_ok=True)
    options = read_options_from_config(config.data, config.physics)
    processed = config.data.processed_dir
    rows = collect_statistics(processed, config.dataset, options, config.data.raw_dir)
    if not is_url(processed):
        save_table(table_location(processed), rows)
    save_table(out / TABLE_NAME, rows)
    typed_rows = read_statistics_table(out)  # as the checks of cache_data.py and train.py read it
    verdicts = judge(typed_rows, config.data.quality, config.dataset)
    named = draw_report(typed_rows, config, verdicts, out / "dataset_report.png")
    result = {"runs": len(typed_rows), "rejected": verdicts.rejected, "notes": verdicts.notes,
              "named_in_figure": sorted(named), "robust_threshold": config.data.quality.robust_threshold,
              "coefficient_tolerance": config.data.quality.coefficient_tolerance}
    (out / "quality.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: the config (name and dotted overrides, as the stages take them) and --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-name", default="config")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", help="key=value, as on the stages' command lines")
    args = parser.parse_args(argv)
    config = load_config(compose_files(ROOT / "conf", args.config_name, args.overrides))
    result = report(config, args.out)
    for note in result["notes"]:
        print(f"quality: {note}")
    for run, reasons in result["rejected"].items():
        print(f"REJECTED {run}: {'; '.join(reasons)}")
    print(f"{result['runs']} runs, {len(result['rejected'])} rejected; report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
