"""Does the pipeline teach DoMINO the flow? Train on a family of OpenFOAM bodies, predict the bodies held out.

On a folder of ``dataset=openfoam`` run folders (tools/openfoam_family/ writes one, with its
shape parameters in ``parameters.csv``), under ``--work``:

1. process_data.py (``process.parts=surface``) and cache_data.py, in this process;
2. a seeded split that holds ``--held-out`` bodies out (at least 6; written to split.json);
3. train.py on the cache (the demo's CPU-sized surface DoMINO, ``--epochs``), in a child
   process, timed; predict.py on the held-out bodies with the last epoch's model (never chosen
   by its validation loss: the held-out bodies are the validation runs);
4. one table beside DoMINO's published figures (physicsnemo's DoMINO README, DrivAerML,
   surface-only): area-weighted relative L2 of pressure and wall shear (predict.py's
   ``rel_l2_area_*``), Cd and Cl R^2 and mean absolute error against forceCoeffs' published
   values, training time; with two baselines on the same bodies: the training mean of Cd and Cl,
   and the nearest training body in shape parameters (range-scaled distance over the family's
   parameter table; skipped with a note when there is none);
5. time to reach the final validation error, cached against uncached (``cache.enabled=false``,
   no workers, as upstream trains), side by side; the uncached run stops once it reaches the
   cached run's final validation loss or at ``--uncached-cap-s`` (default: twice the cached
   run's wall time), and the table says which;
6. the accuracy cost of the cache's sampling law: the default law against ``sampling.exact=true``,
   same split, ``--seeds`` (three by default), each arm predicted on the held-out bodies; mean
   and spread per arm, and whether the default lies within the exact law's seed-to-seed range;
7. with ``--mixture-with DIR`` (raw runs of a second dataset in its published layout, profile
   ``--mixture-dataset``, drivaerml by default): DIR processed with its own profile into
   ``work/mixture/processed`` and cached (the family's cache is reused), and one more model, the
   main run's seed and overrides, trained over ``data.sources`` in the non-dimensional form: the
   family (weight 1, validated on exactly the held-out bodies) and every run of the second
   dataset (``--mixture-weight``, none held out); predicted on the held-out bodies, its column
   "mixture (family + <dataset>)" beside "this run" (its epochs draw both sources' training runs,
   so its training time covers more draws).

Every run validates on the same draws (``sampling.val_exact=true``) with the cache's scaling
factors. When a body's surface leaves the configured surface box (long bodies against the
``dataset=openfoam`` profile's), the box is widened to hold every body, with a note. Prints the table with the command, seeds, date and commit; writes ``--json`` and
``--png`` (predicted against published Cd with the y = x line, beside one held-out body's
pressure map against the solver's, predict.py's ``<run>_pressure.png``). A finished training
run under ``--work`` is reused, so an interrupted benchmark resumes. Timings on a shared
machine are noisy: compare the ratios of runs made side by side.

    nice -n 10 python benchmarks/benchmark_learning.py --family /data/openfoam_family --work /tmp/learning \
        --epochs 40 --json docs/benchmark_learning.json --png docs/benchmark_learning.png
    python benchmarks/benchmark_learning.py --family F --work W --epochs 1 --seeds 0 \
        --set geometry.interp_res=[16,8,8] ...                     # any override of every stage
    python benchmarks/benchmark_learning.py --family F --work W --skip-uncached --skip-exact \
        --mixture-with /data/drivaerml_runs --mixture-weight 0.5   # the family + DrivAerML row
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry points (process_data.py, cache_data.py, predict.py), as from the repository
sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_metrics import coefficient_scores, nearest_runs, read_parameters  # noqa: E402

CONFIG_NAME = "demo"  # the CPU-sized DoMINO of `make demo`
MIN_HELD_OUT = 6
# physicsnemo's DoMINO README, DrivAerML validation, surface-only model
DOMINO_PUBLISHED = {"p": 0.101, "wss_x": 0.138, "wss_y": 0.174, "wss_z": 0.198, "cd_r2": 0.983, "cl_r2": 0.971}
ROWS = (  # key, label
    ("p", "pressure rel. L2 (area-weighted)"), ("wss_x", "wall shear x rel. L2"),
    ("wss_y", "wall shear y rel. L2"), ("wss_z", "wall shear z rel. L2"),
    ("cd_r2", "Cd R^2"), ("cd_mae_percent", "Cd mean abs. error %"), ("cd_mae", "Cd mean abs. error"),
    ("cl_r2", "Cl R^2"), ("cl_mae_percent", "Cl mean abs. error %"), ("cl_mae", "Cl mean abs. error"),
    ("train_s", "training time s (train.py wall)"),
)
FIELD_KEYS = ("p", "wss_x", "wss_y", "wss_z")  # predict.py's surface variables, in their order
REACHED_SLACK = 1e-3  # the uncached run reaches the target within this relative slack (float noise)


# ---- the pipeline's stages ----

def stage_overrides(args: argparse.Namespace, work: Path) -> list[str]:
    """The overrides every stage shares (the split's are added once the runs are known)."""
    return ["dataset=openfoam", "process.parts=surface", "model_type=surface",
            f"data.raw_dir={args.family.resolve()}", f"data.processed_dir={work / 'processed'}",
            f"cache.dir={work / 'cache'}", f"train.epochs={args.epochs}", "sampling.val_exact=true",
            *args.set]


def run_entry_point(module: str, overrides: list[str]) -> None:
    """``module``'s main (an entry point) in this process, on conf/demo.yaml with ``overrides``;
    stop the benchmark when it fails."""
    import importlib

    from domino_pipeline.config_files import compose_files
    print(f"$ python {module}.py --config-name={CONFIG_NAME} {shlex.join(overrides)}", flush=True)
    started = time.perf_counter()
    try:
        importlib.import_module(module).main(compose_files(ROOT / "conf", CONFIG_NAME, overrides))
    except SystemExit as stop:
        if stop.code:
            sys.exit(f"{module}.py failed ({stop.code})")
    print(f"{module}.py: {time.perf_counter() - started:.1f} s", flush=True)


def typed_config(overrides: list[str]):
    """The PipelineConfig the entry points build from ``overrides``."""
    from domino_pipeline.config import load_config
    from domino_pipeline.config_files import compose_files
    return load_config(compose_files(ROOT / "conf", CONFIG_NAME, overrides))


def kept_runs(overrides: list[str]) -> list[Path]:
    """The processed runs train.py will split: those the quality checks keep (named when not)."""
    from domino_pipeline.inputs.statistics.run_quality import quality_selection
    from domino_pipeline.processed.runs import list_runs
    config = typed_config(overrides)
    selection = quality_selection(list_runs(config.data.processed_dir), config.data, config.dataset)
    print(selection.summary(), flush=True)
    return selection.require_some(config.data.processed_dir)


def run_attributes(run: Path) -> dict:
    """A processed run's attributes (counts, bounds, published coefficients)."""
    from domino_pipeline.processed.runs import open_run
    return dict(open_run(run).attrs)


def fitted_overrides(runs: list[Path], overrides: list[str], notes: list[str]) -> list[str]:
    """Geometry points no more than the fewest STL vertices (a draw takes them without
    replacement) and a surface box that holds every body (``surface_box_overrides``); notes: a
    surface window that spans whole bodies."""
    config = typed_config(overrides)
    attributes = {run_name(run): run_attributes(run) for run in runs}
    fewest = min(a["counts"]["stl_points"] for a in attributes.values())
    added = []
    if config.sampling.geometry_points > fewest:
        added.append(f"sampling.geometry_points={fewest}")
        notes.append(f"sampling.geometry_points={fewest}: the fewest STL vertices of a run "
                     f"(the config's {config.sampling.geometry_points} would exceed them)")
    window = config.sampling.surface_window_factor
    cells = min(a["counts"]["surface_cells"] for a in attributes.values())
    if window is not None and window * config.sampling.surface_points >= cells:
        notes.append(f"the default law's surface window ({window} x {config.sampling.surface_points} rows) spans "
                     f"every body's whole surface ({cells} cells or more): both sampling laws draw from all of it")
    box = [config.geometry.bounding_box_surface[k] for k in ("min", "max")]
    bounds = {name: a["bounds"]["surface"] for name, a in attributes.items()}
    return overrides + added + surface_box_overrides(bounds, *box, notes)


def surface_box_overrides(bounds: dict[str, list], box_min: list[float], box_max: list[float],
                          notes: list[str]) -> list[str]:
    """The surface box widened to hold every run's surface with a margin of 5% of their extent
    (rounded out to 0.1 m), when a run leaves it: its surface grid would miss the cells outside.
    Nothing when every run fits; notes name the runs that left the box and the new box."""
    lows, highs = (np.array([b[i] for b in bounds.values()], dtype=float) for i in (0, 1))
    box_min, box_max = np.array(box_min, dtype=float), np.array(box_max, dtype=float)
    leaving = [name for name, low, high in zip(bounds, lows, highs)
               if np.any(low < box_min) or np.any(high > box_max)]
    if not leaving:
        return []
    low, high = lows.min(axis=0), highs.max(axis=0)
    margin = 0.05 * (high - low)
    wider_min = np.minimum(box_min, np.floor((low - margin) * 10) / 10).round(1).tolist()
    wider_max = np.maximum(box_max, np.ceil((high + margin) * 10) / 10).round(1).tolist()
    named = ", ".join(leaving[:5]) + (", ..." if len(leaving) > 5 else "")
    notes.append(f"surface box {box_min.tolist()}..{box_max.tolist()} widened to {wider_min}..{wider_max}: "
                 f"{len(leaving)} of {len(bounds)} runs leave it ({named})")
    return [f"dataset.bounding_boxes.surface.{key}=[{','.join(map(str, corner))}]"
            for key, corner in (("min", wider_min), ("max", wider_max))]


def split_overrides(runs: list[Path], held_out: int, split_seed: int) -> tuple[list[str], dict[str, list[str]]]:
    """train.py's split holding exactly ``held_out`` of ``runs`` out: its overrides and the split."""
    from domino_pipeline.processed.runs import split_runs
    fraction = (held_out - 0.5) / len(runs)  # ceil(fraction * n) == held_out
    train, val = split_runs(runs, fraction, split_seed)
    names = {"train": [run_name(r) for r in train], "held_out": [run_name(r) for r in val]}
    return [f"train.val_fraction={fraction!r}", f"train.split_seed={split_seed}"], names


def run_name(path: Path | str) -> str:
    return Path(path).name.removesuffix(".zarr")


# ---- training runs, timed in a child process ----

def read_epoch_records(out: Path) -> list[dict]:
    """The finished epochs train.py logged in ``out``."""
    path = out / "epochs.jsonl"
    if not path.is_file():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "epoch"]


def watch_training(command: list[str], out: Path, stop: Callable[[list[dict], float], bool]) -> dict:
    """Run train.py ``command``, noting when each epoch record appears (seconds since the start)
    and stopping it (SIGTERM: it saves a checkpoint) once ``stop(records, seconds)`` holds."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    seen: list[dict] = []
    stopped = False
    with open(out / "train.log", "w") as log:
        child = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while child.poll() is None:
            time.sleep(0.5)
            elapsed = time.perf_counter() - started
            for record in read_epoch_records(out)[len(seen):]:
                seen.append(record | {"at_s": elapsed})
            if not stopped and stop(seen, elapsed):
                child.send_signal(signal.SIGTERM)
                stopped = True
    wall = time.perf_counter() - started
    print(f"train.py: {wall:.1f} s, {len(seen)} epochs{' (stopped)' * stopped}", flush=True)
    if child.returncode != 0 and not (stopped and child.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)):
        tail = (out / "train.log").read_text()[-3000:]
        sys.exit(f"train.py failed ({child.returncode}); {out / 'train.log'}:\n{tail}")
    return {"wall_s": wall, "stopped": stopped, "epochs": seen}


def train(work: Path, name: str, overrides: list[str],
          stop: Callable[[list[dict], float], bool] = lambda records, seconds: False) -> dict:
    """One training run into ``work/train/<name>`` (reused when a finished one of the same
    command is there; its predictions go when it is trained again)."""
    out = work / "train" / name
    done = out / "benchmark_run.json"
    command = ["train.py", f"--config-name={CONFIG_NAME}", *overrides, f"output_dir={out}"]
    if done.is_file() and json.loads(done.read_text()).get("command") == command:
        print(f"reusing {out}", flush=True)
        return json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "predictions" / name, ignore_errors=True)
    print(f"$ python {shlex.join(command)}", flush=True)
    result = watch_training(command, out, stop) | {"output_dir": str(out), "command": command}
    done.write_text(json.dumps(result, indent=1) + "\n")
    return result


def final_val_loss(result: dict) -> float:
    return result["epochs"][-1]["val_loss"]


def first_reaching(result: dict, target: float) -> dict | None:
    """The first epoch whose validation loss is within REACHED_SLACK of ``target`` or below it."""
    return next((r for r in result["epochs"] if r.get("val_loss", math.inf) <= target * (1 + REACHED_SLACK)), None)


# ---- predictions of the held-out bodies ----

def predict_held_out(work: Path, name: str, overrides: list[str], source: str | None = None) -> list[dict]:
    """predict.py (this process) on the held-out runs with ``name``'s last model; the CSV's rows.
    ``source``: a model over sources, only that source's validation runs (predict.py writes them
    into ``<out>/<source>/``)."""
    import csv
    train_dir, out = work / "train" / name, work / "predictions" / name
    table = out / source / "predictions.csv" if source else out / "predictions.csv"
    if not table.is_file():
        chosen = [f"predict.source={source}"] if source else []
        run_entry_point("predict", [*overrides, f"output_dir={train_dir}", "predict.split=val", *chosen,
                                    f"predict.checkpoint={train_dir / 'checkpoints' / 'model_last.mdlus'}",
                                    f"predict.out_dir={out}"])
    with open(table, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def field_errors(rows: list[dict]) -> dict[str, float]:
    """Mean over the bodies of each surface variable's area-weighted relative L2 (FIELD_KEYS order)."""
    columns = [c for c in rows[0] if c.startswith("rel_l2_area_")]
    return {key: float(np.mean([r[c] for r in rows])) for key, c in zip(FIELD_KEYS, columns)}


def model_scores(rows: list[dict]) -> dict[str, float]:
    """The held-out figures of a trained model: field errors and coefficient scores."""
    scores = field_errors(rows)
    for name in ("cd", "cl"):
        figures = coefficient_scores([r[f"{name}_pred"] for r in rows], [r[f"{name}_published"] for r in rows])
        scores |= {f"{name}_{k}": v for k, v in figures.items()}
    return scores


# ---- baselines ----

def published(run: Path) -> dict[str, float]:
    """forceCoeffs' Cd and Cl of a processed run (kept from its raw folder)."""
    own = run_attributes(run)["published"]["own"]
    return {"cd": own["cd"], "cl": own["cl"]}


def baseline_scores(guesses: dict[str, dict[str, float]], truth: dict[str, dict[str, float]]) -> dict[str, float]:
    """Coefficient scores of per-run guesses of Cd and Cl."""
    runs = list(truth)
    scores = {}
    for name in ("cd", "cl"):
        figures = coefficient_scores([guesses[r][name] for r in runs], [truth[r][name] for r in runs])
        scores |= {f"{name}_{k}": v for k, v in figures.items()}
    return scores


def baselines(runs: dict[str, Path], split: dict[str, list[str]], parameters_csv: Path | None,
              notes: list[str]) -> tuple[dict[str, dict], dict[str, dict]]:
    """The two baselines' scores, and their per-run guesses (with the nearest run's name)."""
    coefficients = {name: published(path) for name, path in runs.items()}
    truth = {r: coefficients[r] for r in split["held_out"]}
    mean = {k: float(np.mean([coefficients[r][k] for r in split["train"]])) for k in ("cd", "cl")}
    guesses = {"training_mean": {r: dict(mean) for r in truth}}
    if parameters_csv is None:
        notes.append("nearest-body baseline skipped: no parameter table (--parameters) in the family folder")
    else:
        columns, table = read_parameters(parameters_csv)
        nearest = nearest_runs(table, split["train"], split["held_out"])
        guesses["nearest_body"] = {r: coefficients[nearest[r]] | {"run": nearest[r]} for r in truth}
        values = np.stack(list(table.values()))
        varied = [c for c, low, high in zip(columns, values.min(axis=0), values.max(axis=0)) if high > low]
        fixed = [c for c in columns if c not in varied]
        constant = f"; constant in this family: {', '.join(fixed)}" if fixed else ""
        notes.append(f"nearest body: range-scaled Euclidean distance over {', '.join(varied)} "
                     f"({parameters_csv.name}{constant})")
    return {name: baseline_scores(g, truth) for name, g in guesses.items()}, guesses


# ---- the measurements beside the main run ----

def cached_against_uncached(work: Path, overrides: list[str], main: dict, cap_s: float | None) -> dict:
    """Time to reach the cached run's final validation loss, cached and uncached (same seed and
    draws, the cache's scaling factors, no workers); the uncached run stops when it reaches it
    or at the cap."""
    target = final_val_loss(main)
    cap = cap_s if cap_s is not None else 2.0 * main["wall_s"]

    last_epoch = main["epochs"][-1]["epoch"]  # the run ends there by itself

    def stop(records: list[dict], seconds: float) -> bool:
        if records and records[-1]["epoch"] == last_epoch:
            return False
        return seconds > cap or bool(records and records[-1].get("val_loss", math.inf) <= target * (1 + REACHED_SLACK))

    uncached = train(work, "uncached", [*overrides, "cache.enabled=false", "train.num_workers=0",
                                        "train.val_num_workers=0",
                                        f"sampling.scaling_factors={work / 'cache' / 'scaling_factors.json'}"], stop)
    cached_hit, uncached_hit = first_reaching(main, target), first_reaching(uncached, target)
    report = {
        "target_val_loss": target, "cap_s": cap,
        "cached": {"reached_s": cached_hit["at_s"], "epoch": cached_hit["epoch"], "wall_s": main["wall_s"],
                   "epochs_s_to_reach": epochs_seconds(main, cached_hit["epoch"])},
        "uncached": {"reached_s": None if uncached_hit is None else uncached_hit["at_s"],
                     "epoch": None if uncached_hit is None else uncached_hit["epoch"],
                     "epochs_s_to_reach": (None if uncached_hit is None else
                                           epochs_seconds(uncached, uncached_hit["epoch"])),
                     "epochs_run": len(uncached["epochs"]), "wall_s": uncached["wall_s"],
                     "last_val_loss": uncached["epochs"][-1]["val_loss"] if uncached["epochs"] else None,
                     "best_val_loss": min((r["val_loss"] for r in uncached["epochs"]), default=None),
                     "ended": ("reached the target" if uncached_hit is not None else
                               "cut at the time cap" if uncached["stopped"] else "ran all epochs without reaching it")},
    }
    best = report["uncached"]["best_val_loss"]
    if uncached_hit is None and best is not None:  # compare at the loss the uncached run did reach
        hit = first_reaching(main, best)
        report["cached"]["reached_uncached_best_s"] = None if hit is None else hit["at_s"]
        report["uncached"]["reached_best_s"] = next(r["at_s"] for r in uncached["epochs"] if r["val_loss"] == best)
    return report


def epochs_seconds(result: dict, epoch: int) -> float:
    """The training epochs' own seconds up to ``epoch`` (no start-up, no validation)."""
    return sum(r["epoch_s"] for r in result["epochs"] if r["epoch"] <= epoch)


def sampling_ab(work: Path, overrides: list[str], seeds: list[int], main: dict, main_scores: dict) -> dict:
    """The default sampling law against the exact one per seed: final validation loss and the
    held-out figures of each arm's last model."""
    arms: dict[str, dict[int, dict]] = {"default": {}, "exact": {}}
    for seed in seeds:
        for arm, extra in (("default", []), ("exact", ["sampling.exact=true"])):
            name = f"{arm}_seed{seed}"
            if arm == "default" and seed == seeds[0]:
                result, scores = main, main_scores
            else:
                result = train(work, name, [*overrides, f"seed={seed}", *extra])
                scores = model_scores(predict_held_out(work, name, overrides))
            arms[arm][seed] = {"val_loss": final_val_loss(result), "p": scores["p"],
                               "cd_mae_percent": scores["cd_mae_percent"]}
    return {"arms": arms, "summary": ab_summary(arms, seeds)}


def ab_summary(arms: dict[str, dict[int, dict]], seeds: list[int]) -> dict:
    """Per arm and measure the mean and standard deviation over seeds; for each measure whether
    the default's mean lies within the exact law's seed range, else by how much it is outside."""
    summary = {}
    for measure in ("val_loss", "p", "cd_mae_percent"):
        values = {arm: [arms[arm][s][measure] for s in seeds] for arm in arms}
        default_mean = statistics.fmean(values["default"])
        low, high = min(values["exact"]), max(values["exact"])
        outside = 0.0 if low <= default_mean <= high else default_mean - (high if default_mean > high else low)
        summary[measure] = {arm: {"mean": statistics.fmean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0}
                            for arm, v in values.items()} | {"default_outside_exact_range_by": outside}
    return summary


# ---- the mixture: the family and a second dataset in one model ----

FAMILY_SOURCE = "family"  # the family's name among data.sources (and its predictions' folder)


def mixture_label(dataset: str) -> str:
    """The table's column of the mixture arm."""
    return f"mixture ({FAMILY_SOURCE} + {dataset})"


def _quoted(text: str | Path) -> str:
    """``text`` as a single-quoted string of a data.sources override (paths and run names as they are)."""
    return "'" + str(text).replace("'", "\\'") + "'"


def source_entry(name: str, dataset: str, processed: Path, cache: Path, raw: Path, weight: float,
                 val_runs: list[str]) -> str:
    """One ``data.sources`` entry as override text (train.py's Hydra and the in-process composer read it)."""
    runs = ", ".join(_quoted(r) for r in val_runs)
    return (f"{{name: {_quoted(name)}, dataset: {_quoted(dataset)}, processed_dir: {_quoted(processed)}, "
            f"cache_dir: {_quoted(cache)}, raw_dir: {_quoted(raw)}, weight: {weight!r}, val_runs: [{runs}]}}")


def process_mixture(args: argparse.Namespace, work: Path) -> list[Path]:
    """process_data.py on ``--mixture-with`` with its own profile (surface only, as the family) into
    ``work/mixture/processed``; the runs its quality checks keep (train.py keeps the same)."""
    own = [f"dataset={args.mixture_dataset}", "process.parts=surface", "model_type=surface",
           f"data.raw_dir={args.mixture_with.resolve()}", f"data.processed_dir={work / 'mixture' / 'processed'}",
           f"cache.dir={work / 'mixture' / 'cache'}", *args.set]
    run_entry_point("process_data", [*own, "process.num_processes=2"])
    return kept_runs(own)


def with_override(overrides: list[str], key: str, value: object) -> list[str]:
    """``overrides`` with ``key`` set to ``value`` (any earlier setting of it dropped: one value per key)."""
    return [o for o in overrides if o.partition("=")[0] != key] + [f"{key}={value}"]


def mixture_overrides(args: argparse.Namespace, work: Path, overrides: list[str], split: dict[str, list[str]],
                      other_runs: list[Path], notes: list[str]) -> list[str]:
    """The main run's overrides over two sources in the non-dimensional form: the family (its
    processed runs and cache, validated on exactly the main split's held-out bodies) and the
    second dataset (every run trains: ``val_runs: []``); geometry points lowered to the second
    dataset's fewest STL vertices where they exceed them (a draw takes them without replacement)."""
    family = source_entry(FAMILY_SOURCE, "openfoam", work / "processed", work / "cache", args.family.resolve(),
                          1.0, split["held_out"])
    other = source_entry(args.mixture_dataset, args.mixture_dataset,  # named by its profile
                         work / "mixture" / "processed", work / "mixture" / "cache", args.mixture_with.resolve(),
                         args.mixture_weight, [])
    mixed = [*overrides, f"data.sources=[{family}, {other}]", "data.nondimensional=true"]
    fewest = min(run_attributes(run)["counts"]["stl_points"] for run in other_runs)
    wanted = typed_config(mixed).sampling.geometry_points
    if wanted <= fewest:
        return mixed
    notes.append(f"mixture: sampling.geometry_points={fewest}, the fewest STL vertices of a {args.mixture_dataset} "
                 f"run (the main run's {wanted} would exceed them)")
    return with_override(mixed, "sampling.geometry_points", fewest)


def check_mixture_split(train_dir: Path, split: dict[str, list[str]]) -> dict:
    """The mixture's split.json per source; stop the benchmark unless the family's validation runs
    are exactly the main run's held-out bodies (the two columns would score other bodies)."""
    sources = json.loads((train_dir / "split.json").read_text())["sources"]
    if sorted(sources[FAMILY_SOURCE]["val"]) != sorted(split["held_out"]):
        sys.exit(f"mixture: the family's validation runs {sources[FAMILY_SOURCE]['val']} are not the held-out "
                 f"bodies {split['held_out']}")
    return sources


def mixture_arm(args: argparse.Namespace, work: Path, overrides: list[str], split: dict[str, list[str]],
                notes: list[str]) -> tuple[dict, dict]:
    """The family and ``--mixture-with`` in one model (the main run's seed): its held-out scores
    (model_scores and train_s, as "this run") and its record (overrides, command, split, per run)."""
    other_runs = process_mixture(args, work)
    mixed = mixture_overrides(args, work, overrides, split, other_runs, notes)
    run_entry_point("cache_data", mixed)  # the second source's cache; the family's runs are current
    name = f"mixture_seed{args.seeds[0]}"
    result = train(work, name, [*mixed, f"seed={args.seeds[0]}"])
    sources = check_mixture_split(work / "train" / name, split)
    rows = predict_held_out(work, name, mixed, source=FAMILY_SOURCE)
    record = {"dataset": args.mixture_dataset, "raw_dir": str(args.mixture_with.resolve()),
              "weights": {FAMILY_SOURCE: 1.0, args.mixture_dataset: args.mixture_weight},
              "overrides": mixed, "command": result["command"], "split": sources, "per_run": rows,
              "wall_s": result["wall_s"], "final_val_loss": final_val_loss(result)}
    return model_scores(rows) | {"train_s": result["wall_s"]}, record


# ---- output ----

def provenance(argv: list[str]) -> dict:
    """The command, the UTC date and the git commit (with -dirty for uncommitted changes)."""
    def git(*words: str) -> str:
        done = subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    return {"command": shlex.join(["python", "benchmarks/benchmark_learning.py", *argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def _cell(value: float | None, key: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key == "train_s":
        return f"{value:.0f}"
    return f"{value:.1f}" if key.endswith("percent") else f"{value:.3f}" if key.endswith("r2") else f"{value:.4f}"


def main_table(columns: dict[str, dict]) -> str:
    """Markdown: one row per ROWS measure, one column per model or baseline ("-": not defined)."""
    lines = ["| measure (held-out bodies) | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for key, label in ROWS:
        lines.append(f"| {label} | " + " | ".join(_cell(c.get(key), key) for c in columns.values()) + " |")
    return "\n".join(lines)


def per_run_table(rows: list[dict], guesses: dict[str, dict]) -> str:
    """Markdown: each held-out body's Cd and Cl, predicted, published and the baselines' guesses."""
    nearest = ["Cd nearest (run)"] if "nearest_body" in guesses else []
    head = ["run", "Cd pred", "Cd published", "err %", "Cd mean", *nearest,
            "Cl pred", "Cl published", "p rel. L2"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        run = r["run"]
        cells = [run, f"{r['cd_pred']:.4f}", f"{r['cd_published']:.4f}",
                 f"{100 * (r['cd_pred'] - r['cd_published']) / r['cd_published']:+.1f}",
                 f"{guesses['training_mean'][run]['cd']:.4f}"]
        if "nearest_body" in guesses:
            near = guesses["nearest_body"][run]
            cells.append(f"{near['cd']:.4f} ({near['run']})")
        cells += [f"{r['cl_pred']:.4f}", f"{r['cl_published']:.4f}", f"{list(field_errors([r]).values())[0]:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mixture_text(mixture: dict) -> str:
    """One line: what the mixture column trained on (its command is in the JSON report)."""
    family, other = mixture["split"][FAMILY_SOURCE], mixture["split"][mixture["dataset"]]
    return (f"{mixture_label(mixture['dataset'])}: one model, the main run's seed, non-dimensional, over the "
            f"{FAMILY_SOURCE}'s {len(family['train'])} training bodies (weight 1) and {len(other['train'])} "
            f"{mixture['dataset']} runs (weight {mixture['weights'][mixture['dataset']]}); validated and scored on "
            f"the {len(family['val'])} held-out bodies; train.py {mixture['wall_s']:.0f} s")


def timing_text(timing: dict) -> str:
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
    labels = {"val_loss": "final validation loss", "p": "held-out pressure rel. L2",
              "cd_mae_percent": "Cd mean abs. error %"}
    for measure, label in labels.items():
        arms, summary = ab["arms"], ab["summary"][measure]
        cells = [f"{arms['default'][s][measure]:.4f} / {arms['exact'][s][measure]:.4f}" for s in seeds]
        cells += [f"{summary[a]['mean']:.4f} ± {summary[a]['sd']:.4f}" for a in ("default", "exact")]
        outside = summary["default_outside_exact_range_by"]
        cells.append("within" if outside == 0 else f"{outside:+.4f}")
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], guesses: dict[str, dict], pressure_png: Path, path: Path) -> None:
    """Left: predicted (and the baselines') against published Cd with y = x; right: one held-out
    body's pressure, predicted against the solver's (predict.py's picture)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (scatter, picture) = plt.subplots(1, 2, figsize=(16, 6), gridspec_kw={"width_ratios": [1, 1.6]})
    true = [r["cd_published"] for r in rows]
    scatter.scatter(true, [r["cd_pred"] for r in rows], label="DoMINO (this run)", zorder=3)
    for name, marker in (("training_mean", "_"), ("nearest_body", "x")):
        if name in guesses:
            scatter.scatter(true, [guesses[name][r["run"]]["cd"] for r in rows], marker=marker, s=80,
                            label=name.replace("_", " "))
    values = true + [r["cd_pred"] for r in rows]
    span = [min(values) * 0.95, max(values) * 1.05]
    scatter.plot(span, span, "k--", linewidth=1, label="y = x")
    scatter.set(xlabel="Cd published (forceCoeffs)", ylabel="Cd predicted", title="Held-out bodies: drag")
    scatter.legend()
    picture.imshow(plt.imread(pressure_png))
    picture.set_axis_off()
    picture.set_title(f"{pressure_png.stem.removesuffix('_pressure')}: pressure, solver (top) and predicted (bottom)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def representative_run(rows: list[dict]) -> str:
    """The held-out run of median pressure error: the picture shows a typical body."""
    ordered = sorted(rows, key=lambda r: list(field_errors([r]).values())[0])
    return ordered[len(ordered) // 2]["run"]


# ---- wiring ----

def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", type=Path, required=True, help="the run_<i>/ folders (dataset=openfoam)")
    parser.add_argument("--parameters", type=Path,
                        help="the family's shape parameters (default: FAMILY/parameters.csv)")
    parser.add_argument("--work", type=Path, default=Path("outputs/learning"), help="processed runs, cache, training")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2], help="the first trains the main run")
    parser.add_argument("--held-out", type=int, default=MIN_HELD_OUT, help=f"bodies held out (at least {MIN_HELD_OUT})")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--skip-uncached", action="store_true", help="no cached-against-uncached timing")
    parser.add_argument("--skip-exact", action="store_true", help="no sampling-law A/B")
    parser.add_argument("--uncached-cap-s", type=float,
                        help="stop the uncached run here (default: 2 x the cached wall)")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every stage (key=value)")
    parser.add_argument("--mixture-with", type=Path, metavar="DIR",
                        help="raw runs of a second dataset (published layout): also train the family with them")
    parser.add_argument("--mixture-dataset", default="drivaerml", metavar="NAME",
                        help="the second dataset's profile (conf/dataset/NAME.yaml)")
    parser.add_argument("--mixture-weight", type=float, default=1.0, metavar="W",
                        help="the second dataset's share of the draws (the family's weight is 1)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    return parser


def prepare(args: argparse.Namespace, work: Path, notes: list[str]) -> tuple[list[str], dict, dict[str, Path]]:
    """Process and cache the family; the overrides of every later stage, the split and the runs."""
    overrides = stage_overrides(args, work)
    run_entry_point("process_data", [*overrides, "process.num_processes=2"])
    runs = kept_runs(overrides)
    if len(runs) - args.held_out < 2:
        sys.exit(f"{len(runs)} runs kept: too few to hold {args.held_out} out and train on the rest")
    split_args, split = split_overrides(runs, args.held_out, args.split_seed)
    overrides = fitted_overrides(runs, overrides + split_args, notes)
    (work / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    run_entry_point("cache_data", overrides)
    return overrides, split, {run_name(r): r for r in runs}


def measure(args: argparse.Namespace, argv: list[str]) -> dict:
    """Every measurement of the module docstring; the JSON report."""
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    report = provenance(argv) | {"seeds": args.seeds, "epochs": args.epochs, "split_seed": args.split_seed}
    overrides, split, runs = prepare(args, work, notes)
    seed_overrides = [*overrides, f"seed={args.seeds[0]}"]
    main = train(work, f"default_seed{args.seeds[0]}", seed_overrides)
    rows = predict_held_out(work, f"default_seed{args.seeds[0]}", overrides)
    scores = model_scores(rows) | {"train_s": main["wall_s"]}
    parameters = args.parameters or (args.family / "parameters.csv")
    baseline, guesses = baselines(runs, split, parameters if parameters.is_file() else None, notes)
    report |= {"overrides": overrides, "split": split, "notes": notes, "per_run": rows, "guesses": guesses,
               "columns": {"this run": scores, "DoMINO published (DrivAerML)": DOMINO_PUBLISHED,
                           **{name.replace("_", " "): s for name, s in baseline.items()}},
               "main_run": {k: main[k] for k in ("wall_s", "epochs")}}
    report["timing"] = ({"skipped": "--skip-uncached"} if args.skip_uncached else
                        cached_against_uncached(work, seed_overrides, main, args.uncached_cap_s))
    report["sampling_ab"] = ({"skipped": "--skip-exact"} if args.skip_exact else
                             sampling_ab(work, overrides, args.seeds, main, scores))
    report["pressure_png"] = str(work / "predictions" / f"default_seed{args.seeds[0]}" /
                                 f"{representative_run(rows)}_pressure.png")
    if args.mixture_with is not None:
        add_mixture(report, *mixture_arm(args, work, overrides, split, notes))
    return report


def add_mixture(report: dict, scores: dict, record: dict) -> None:
    """The mixture's column beside "this run" (the table reads the columns in order) and its record."""
    columns = list(report["columns"].items())
    report["columns"] = dict([columns[0], (mixture_label(record["dataset"]), scores), *columns[1:]])
    report["mixture"] = record


def print_report(report: dict) -> None:
    print(f"\ncommand: {report['command']}\ndate: {report['date']}  commit: {report['commit']}  "
          f"seeds: {report['seeds']} (main run: {report['seeds'][0]})  split seed: {report['split_seed']}  "
          f"epochs: {report['epochs']}")
    print(f"held out ({len(report['split']['held_out'])}): {', '.join(report['split']['held_out'])}; "
          f"{len(report['split']['train'])} training bodies")
    print(main_table(report["columns"]))
    if "mixture" in report:
        print(mixture_text(report["mixture"]))
    print(per_run_table(report["per_run"], report["guesses"]))
    timing = report["timing"]
    print(f"timing skipped ({timing['skipped']})" if "skipped" in timing else timing_text(timing))
    ab = report["sampling_ab"]
    print(f"sampling A/B skipped ({ab['skipped']})" if "skipped" in ab else ab_table(ab, report["seeds"]))
    for note in report["notes"]:
        print(f"note: {note}")


def check_arguments(args: argparse.Namespace) -> None:
    """Stop on arguments a later stage would refuse, before the first run is trained."""
    if args.held_out < MIN_HELD_OUT:
        sys.exit(f"--held-out {args.held_out}: hold at least {MIN_HELD_OUT} bodies out")
    if args.mixture_with is None:
        return
    if not args.mixture_with.is_dir():
        sys.exit(f"--mixture-with {args.mixture_with}: no such folder")
    if not (ROOT / "conf" / "dataset" / f"{args.mixture_dataset}.yaml").is_file():
        sys.exit(f"--mixture-dataset {args.mixture_dataset}: no profile conf/dataset/{args.mixture_dataset}.yaml")
    if not args.mixture_weight > 0:
        sys.exit(f"--mixture-weight {args.mixture_weight}: a share of the draws must be positive")


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments().parse_args(argv)
    check_arguments(args)
    report = measure(args, argv)
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        plot(report["per_run"], report["guesses"], Path(report["pressure_png"]), args.png)
        print(f"wrote {args.png}")
    return report


if __name__ == "__main__":
    main()
