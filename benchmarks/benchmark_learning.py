"""Does the pipeline teach DoMINO the flow? Train on a family of OpenFOAM bodies, predict bodies that chose nothing.

On a folder of ``dataset=openfoam`` run folders (tools/openfoam_family/ writes one, with its
shape parameters in ``parameters.csv``), under ``--work``:

1. process_data.py (``process.parts=surface``) and cache_data.py, in this process;
2. ``--splits`` splits (learning_splits.py), each into ``--test`` test bodies, ``--val``
   validation bodies and the training bodies (the rest); the test bodies of successive splits
   do not repeat while the family has bodies left; every split's roles go into the JSON;
3. per split: train.py on the cache (the demo's CPU-sized surface DoMINO, ``--epochs``), in a
   child process, timed, its test bodies named (``train.test_runs``: held out of training and
   validation) and its target scaling factors over its own training bodies; the checkpoint is
   chosen by the validation loss (``model_best.mdlus``), the only choice made, and on the
   validation bodies only; predict.py with it on the validation bodies (the figures a choice
   between settings may read) and once on the test bodies (the figures reported); with
   ``--train-jobs K`` the splits' models are first trained K at a time, then measured in turn;
4. per split, baselines on the same test bodies from the training bodies only
   (learning_baselines.py): the training mean (Cd, Cl, and each field's area-weighted mean); the
   nearest training body by geometry (the symmetric surface distance between STLs), its Cd and
   Cl and its fields carried onto the test body cell by cell; linear and Gaussian-process
   regressions of Cd and Cl on descriptors any car's STL gives (length, width, height, frontal
   area, wetted area, volume); with a parameter table, a Gaussian process on the family's own
   parameters, an oracle a real dataset does not have. Fields are scored as predict.py scores the
   model (area-weighted relative L2 of the non-dimensional fields, ``rel_l2_area_*``);
5. one table of every measure's mean ± sd over the splits beside DoMINO's published figures
   (physicsnemo's DoMINO README, DrivAerML, surface-only), one row per split, one table of the
   test bodies per split, and how the model stands against the best baseline and the oracle;
6. on the first split only: time to reach the final validation error, cached against uncached
   (``cache.enabled=false``, no workers, as upstream trains), side by side; the uncached run
   stops once it reaches the cached run's final validation loss or at ``--uncached-cap-s``
   (default: twice the cached run's wall time), and the table says which;
7. on the first split only: the accuracy cost of the cache's sampling law: the default law
   against ``sampling.exact=true``, ``--seeds`` (three by default), each arm's chosen checkpoint
   predicted on the test bodies; mean and spread per arm, and whether the default lies within the
   exact law's seed-to-seed range;
8. with ``--mixture-with DIR`` (raw runs of a second dataset in its published layout, profile
   ``--mixture-dataset``, drivaerml by default), on the first split: DIR processed with its own
   profile into ``work/mixture/processed`` and cached, and one more model, the first split's seed
   and overrides, trained over ``data.sources`` in the non-dimensional form: the family's
   training and validation bodies (weight 1; validated on the validation bodies) and every run of
   the second dataset (``--mixture-weight``), its test bodies left out; predicted on the test
   bodies, its column "mixture (family + <dataset>)" beside "this run".

Every run validates on the same draws (``sampling.val_exact=true``). When a body's surface leaves
the configured surface box (long bodies against the ``dataset=openfoam`` profile's), the box is
widened to hold every body (their geometry, no label), with a note. Prints the tables with the
command, seeds, date and commit; writes ``--json`` and ``--png`` (predicted against published Cd
over every split's test bodies with the y = x line, beside one test body's pressure map against
the solver's, predict.py's ``<run>_pressure.png``). A finished training run under ``--work`` is
reused, so an interrupted benchmark resumes. Timings on a shared machine are noisy: compare the
ratios of runs made side by side.

    nice -n 10 python benchmarks/benchmark_learning.py --family /data/openfoam_family --work /tmp/learning \
        --epochs 40 --splits 3 --val 12 --test 12 --json docs/benchmark_learning.json --png docs/benchmark_learning.png
    python benchmarks/benchmark_learning.py --family F --work W --epochs 1 --seeds 0 --splits 1 \
        --set geometry.interp_res=[16,8,8] ...                     # any override of every stage
    python benchmarks/benchmark_learning.py --family F --work W --skip-uncached --skip-exact \
        --mixture-with /data/drivaerml_runs --mixture-weight 0.5   # the family + DrivAerML column
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the entry points (process_data.py, cache_data.py, predict.py), as from the repository
sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_baselines  # noqa: E402
from learning_metrics import coefficient_scores, read_parameters  # noqa: E402
from learning_report import (  # noqa: E402
    BASELINES,
    MODEL,
    ab_table,
    mixture_text,
    per_run_table,
    plot,
    ratios_text,
    representative_run,
    split_table,
    summary_table,
    timing_text,
)
from learning_splits import draw_splits, over_splits, split_overrides  # noqa: E402

CONFIG_NAME = "demo"  # the CPU-sized DoMINO of `make demo`
MIN_TEST = 3
CHOSEN = "model_best.mdlus"  # the checkpoint of the lowest validation loss (train.py; model_best.json: its epoch)
# physicsnemo's DoMINO README, DrivAerML validation, surface-only model
DOMINO_PUBLISHED = {"p": 0.101, "wss_x": 0.138, "wss_y": 0.174, "wss_z": 0.198, "cd_r2": 0.983, "cl_r2": 0.971}
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

    from domino_pipeline.configuration.config_files import compose_files
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
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.configuration.config_files import compose_files
    return load_config(compose_files(ROOT / "conf", CONFIG_NAME, overrides))


def kept_runs(overrides: list[str]) -> list[Path]:
    """The processed runs train.py will split: those the quality checks keep (named when not)."""
    from domino_pipeline.processed.run_quality import quality_selection
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


def run_name(path: Path | str) -> str:
    """A run's name: its folder or processed group's name without .zarr."""
    return Path(path).name.removesuffix(".zarr")


# ---- the splits: each scaled by its own training bodies, checked against train.py's ----

def write_split_factors(path: Path, train: list[str], overrides: list[str]) -> Path:
    """The target scaling factors over ``train`` (one split's training bodies) at ``path``, from
    the statistics each cache run records, as cache_data.py computes the cache's own."""
    from domino_pipeline.compute.scaling import merge_statistics, save_scaling_factors
    from domino_pipeline.compute.settings import settings_from_config
    from domino_pipeline.store.cache_format import current_generation, run_folder
    from domino_pipeline.store.cache_run import CacheRun
    config = typed_config(overrides)
    settings = settings_from_config(config.geometry, config.variables, parts=config.process.part_names)
    variables = {"surface": settings.surface_variables, "volume": settings.volume_variables}
    statistics_per_run = [CacheRun(current_generation(run_folder(Path(config.cache.dir), run))).attrs["scalars"]
                          ["field_statistics"] for run in train]
    factors = merge_statistics(statistics_per_run, train, normalization=config.sampling.normalization,
                               variables={part: variables[part] for part in settings.parts})
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_scaling_factors(path, factors)


def split_run_overrides(work: Path, split: dict, overrides: list[str], total: int) -> list[str]:
    """The stages' overrides for one split: its roles (train.py's test runs, validation fraction
    and seed) and its own scaling factors."""
    factors = write_split_factors(work / "splits" / f"split{split['index']}_scaling_factors.json", split["train"],
                                  overrides)
    return [*overrides, *split_overrides(split, total), f"sampling.scaling_factors={factors}"]


def check_split(train_dir: Path, split: dict) -> None:
    """Stop unless train.py put exactly the split's bodies in each role (``split.json``)."""
    written = json.loads((train_dir / "split.json").read_text())
    for role in ("train", "val", "test"):
        if sorted(map(run_name, written.get(role, []))) != sorted(split[role]):
            sys.exit(f"{train_dir / 'split.json'}: its {role} runs {written.get(role)} are not the split's "
                     f"{split[role]}")


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


# ---- predictions with the checkpoint chosen on validation ----

def chosen_checkpoint(train_dir: Path) -> dict:
    """The model train.py kept for the lowest validation loss: its path, epoch and loss."""
    record = train_dir / "checkpoints" / "model_best.json"
    if not record.is_file():
        sys.exit(f"{record}: no model chosen by validation loss (a run without validation bodies?)")
    return json.loads(record.read_text()) | {"checkpoint": str(train_dir / "checkpoints" / CHOSEN)}


def predict_role(work: Path, name: str, overrides: list[str], role: str, *, source: str | None = None,
                 runs: list[Path] | None = None) -> list[dict]:
    """predict.py (this process) with ``name``'s chosen checkpoint on its ``role`` bodies ("val",
    "test"; or ``runs``), once: the CSV's rows, each with its FIELD_KEYS figures. ``source``: a
    model over sources, that source's runs (predict.py writes them into ``<out>/<source>/``)."""
    import csv
    train_dir, out = work / "train" / name, work / "predictions" / name / role
    table = out / source / "predictions.csv" if source else out / "predictions.csv"
    if not table.is_file():
        which = [f"predict.split={role}"] if runs is None else [
            "predict.runs=[" + ",".join(_quoted(r) for r in runs) + "]"]
        chosen = [f"predict.source={source}"] if source else []
        run_entry_point("predict", [*overrides, f"output_dir={train_dir}", *which, *chosen,
                                    f"predict.checkpoint={chosen_checkpoint(train_dir)['checkpoint']}",
                                    f"predict.out_dir={out}"])
    with open(table, newline="") as f:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return [row | dict(zip(FIELD_KEYS, (row[c] for c in row if c.startswith("rel_l2_area_")))) for row in rows]


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def field_errors(rows: list[dict]) -> dict[str, float]:
    """Mean over the bodies of each surface variable's area-weighted relative L2 (FIELD_KEYS)."""
    return {key: float(np.mean([r[key] for r in rows])) for key in FIELD_KEYS if key in rows[0]}


def model_scores(rows: list[dict]) -> dict[str, float]:
    """A trained model's figures on some bodies: field errors and coefficient scores."""
    scores = field_errors(rows)
    for name in ("cd", "cl"):
        figures = coefficient_scores([r[f"{name}_pred"] for r in rows], [r[f"{name}_published"] for r in rows])
        scores |= {f"{name}_{k}": v for k, v in figures.items()}
    return scores


# ---- baselines, from the training bodies alone ----

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


def family_parameters(path: Path | None, names: list[str], notes: list[str]) -> dict[str, np.ndarray] | None:
    """The family's parameters per body (the oracle's inputs), or None (with a note) without a
    table or with bodies it lacks; a note names the parameters that vary and those held constant."""
    if path is None or not path.is_file():
        notes.append("oracle baseline skipped: no parameter table (--parameters) in the family folder")
        return None
    columns, table = read_parameters(path)
    absent = [n for n in names if n not in table]
    if absent:
        notes.append(f"oracle baseline skipped: {path.name} has no row for {', '.join(absent[:5])}")
        return None
    values = np.stack([table[n] for n in names])
    varied = [c for c, low, high in zip(columns, values.min(axis=0), values.max(axis=0)) if high > low]
    fixed = [c for c in columns if c not in varied]
    constant = f"; constant in this family: {', '.join(fixed)}" if fixed else ""
    notes.append(f"oracle: a Gaussian process on {', '.join(varied)} ({path.name}{constant})")
    return {n: table[n] for n in names}


def field_baselines(bodies: dict, train: list[str], test: list[str], nearest: dict[str, str]) -> dict[str, dict]:
    """Each test body's FIELD_KEYS figures, scored as predict.py scores the model, of the training
    cells' area-weighted mean fields and of its nearest body's fields carried onto its cells."""
    from domino_pipeline.inference.report import relative_l2
    mean = learning_baselines.area_weighted_mean([bodies[r].fields for r in train], [bodies[r].areas for r in train])
    found: dict[str, dict] = {"training_mean": {}, "nearest_body": {}}
    for run in test:
        body, near = bodies[run], bodies[nearest[run]]
        guesses = {"training_mean": np.broadcast_to(mean, body.fields.shape),
                   "nearest_body": learning_baselines.carried_fields(near.centres, near.fields, body.centres)}
        for key, fields in guesses.items():
            found[key][run] = dict(zip(FIELD_KEYS, map(float, relative_l2(fields, body.fields, body.areas))))
    return found


def split_baselines(bodies: dict, coefficients: dict[str, dict], split: dict,
                    parameters: dict[str, np.ndarray] | None) -> tuple[dict, dict, dict]:
    """Every baseline of one split on its test bodies, from its training bodies: the columns
    (label -> scores), the guesses (key -> run -> Cd, Cl) and the field figures (key -> run -> figures)."""
    from shape_geometry import distance_matrix
    train, test = split["train"], split["test"]
    distances = distance_matrix([bodies[r].stl_points for r in test], [bodies[r].stl_points for r in train])
    nearest = learning_baselines.nearest_bodies(distances, train, test)
    descriptors = {r: bodies[r].descriptors for r in [*train, *test]}
    guesses = {"training_mean": learning_baselines.training_mean(coefficients, train, test),
               "nearest_body": learning_baselines.nearest_guesses(coefficients, nearest),
               "linear_descriptors": learning_baselines.regression_guesses(descriptors, coefficients, train, test,
                                                                           "linear"),
               "gp_descriptors": learning_baselines.regression_guesses(descriptors, coefficients, train, test, "gp")}
    if parameters is not None:
        guesses["gp_parameters"] = learning_baselines.regression_guesses(parameters, coefficients, train, test, "gp")
    fields = field_baselines(bodies, train, test, nearest)
    truth = {r: coefficients[r] for r in test}
    columns = {BASELINES[key]: baseline_scores(g, truth) | (field_errors(list(fields[key].values()))
                                                           if key in fields else {})
               for key, g in guesses.items()}
    return columns, guesses, fields


# ---- one split, and the measurements beside its main run ----

def split_training(args: argparse.Namespace, work: Path, overrides: list[str], split: dict,
                   total: int) -> tuple[str, list[str]]:
    """A split's training run: its name and its overrides (the seed aside)."""
    return f"split{split['index']}_default_seed{args.seeds[0]}", split_run_overrides(work, split, overrides, total)


def train_splits_side_by_side(args: argparse.Namespace, work: Path, overrides: list[str], splits: list[dict],
                              total: int) -> None:
    """Every split's model trained ``--train-jobs`` at a time, before the splits are measured one
    by one (which then reuse them): on a machine with cores to spare, K splits in the time of fewer."""
    def one(split: dict) -> dict:
        name, own = split_training(args, work, overrides, split, total)
        return train(work, name, [*own, f"seed={args.seeds[0]}"])

    with ThreadPoolExecutor(args.train_jobs) as pool:
        list(pool.map(one, splits))


def measure_split(args: argparse.Namespace, work: Path, overrides: list[str], split: dict, total: int,
                  bodies: dict, coefficients: dict[str, dict], parameters: dict | None) -> tuple[dict, dict]:
    """Train one split's model, choose its checkpoint on validation, predict validation and test
    once; its baselines. The split's record and the training run's."""
    name, own = split_training(args, work, overrides, split, total)
    result = train(work, name, [*own, f"seed={args.seeds[0]}"])
    check_split(work / "train" / name, split)
    validation, rows = (predict_role(work, name, own, role) for role in ("val", "test"))
    columns, guesses, fields = split_baselines(bodies, coefficients, split, parameters)
    chosen = chosen_checkpoint(work / "train" / name)
    record = {"index": split["index"], "split_seed": split["split_seed"], "name": name,
              "roles": {role: split[role] for role in ("train", "val", "test")}, "overrides": own,
              "chosen": chosen | {"checkpoint": CHOSEN}, "validation": model_scores(validation),
              "per_run": rows, "guesses": guesses, "baseline_fields": fields,
              "columns": {MODEL: model_scores(rows) | {"train_s": result["wall_s"]}, **columns},
              "run": {k: result[k] for k in ("wall_s", "epochs")}}
    return record, result


def cached_against_uncached(work: Path, overrides: list[str], main: dict, cap_s: float | None) -> dict:
    """Time to reach the cached run's final validation loss, cached and uncached (same seed, split,
    draws and scaling factors, no workers); the uncached run stops when it reaches it or at the cap."""
    target = final_val_loss(main)
    cap = cap_s if cap_s is not None else 2.0 * main["wall_s"]

    last_epoch = main["epochs"][-1]["epoch"]  # the run ends there by itself

    def stop(records: list[dict], seconds: float) -> bool:
        if records and records[-1]["epoch"] == last_epoch:
            return False
        return seconds > cap or bool(records and records[-1].get("val_loss", math.inf) <= target * (1 + REACHED_SLACK))

    uncached = train(work, "split0_uncached", [*overrides, "cache.enabled=false", "train.num_workers=0",
                                               "train.val_num_workers=0"], stop)
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


def sampling_ab(work: Path, overrides: list[str], seeds: list[int], main: dict) -> dict:
    """The default sampling law against the exact one per seed, on the first split: each arm's
    best validation loss (its chosen checkpoint's) and that checkpoint's test figures."""
    arms: dict[str, dict[int, dict]] = {"default": {}, "exact": {}}
    for seed in seeds:
        for arm, extra in (("default", []), ("exact", ["sampling.exact=true"])):
            name = f"split0_{arm}_seed{seed}"
            if not (arm == "default" and seed == seeds[0]):  # the first split's main run is that arm
                train(work, name, [*overrides, f"seed={seed}", *extra])
            scores = model_scores(predict_role(work, name, overrides, "test"))
            arms[arm][seed] = {"val_loss": chosen_checkpoint(work / "train" / name)["val_loss"], "p": scores["p"],
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
    """``text`` as a single-quoted string of an override's list (paths and run names as they are)."""
    return "'" + str(text).replace("'", "\\'") + "'"


def source_entry(name: str, dataset: str, processed: Path, cache: Path, raw: Path, weight: float,
                 val_runs: list[str], runs: list[str] | None = None) -> str:
    """One ``data.sources`` entry as override text (train.py's Hydra and the in-process composer
    read it); ``runs`` None: every run of the source."""
    listed = "null" if runs is None else "[" + ", ".join(_quoted(r) for r in runs) + "]"
    return (f"{{name: {_quoted(name)}, dataset: {_quoted(dataset)}, processed_dir: {_quoted(processed)}, "
            f"cache_dir: {_quoted(cache)}, raw_dir: {_quoted(raw)}, weight: {weight!r}, runs: {listed}, "
            f"val_runs: [{', '.join(_quoted(r) for r in val_runs)}]}}")


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


def mixture_overrides(args: argparse.Namespace, work: Path, overrides: list[str], split: dict,
                      other_runs: list[Path], notes: list[str]) -> list[str]:
    """The first split's overrides over two sources in the non-dimensional form: the family (its
    training and validation bodies, validated on exactly the latter; its test bodies left out) and
    the second dataset (every run trains: ``val_runs: []``); the scaling factors those of the
    mixture (train.py's, over both sources' training runs), not the split's; geometry points lowered
    to the second dataset's fewest STL vertices where they exceed them (a draw takes them without
    replacement)."""
    family = source_entry(FAMILY_SOURCE, "openfoam", work / "processed", work / "cache", args.family.resolve(),
                          1.0, split["val"], runs=[*split["train"], *split["val"]])
    other = source_entry(args.mixture_dataset, args.mixture_dataset,  # named by its profile
                         work / "mixture" / "processed", work / "mixture" / "cache", args.mixture_with.resolve(),
                         args.mixture_weight, [])
    kept = [o for o in overrides if o.partition("=")[0] not in ("train.test_runs", "sampling.scaling_factors")]
    mixed = [*kept, f"data.sources=[{family}, {other}]", "data.nondimensional=true"]
    fewest = min(run_attributes(run)["counts"]["stl_points"] for run in other_runs)
    wanted = typed_config(mixed).sampling.geometry_points
    if wanted <= fewest:
        return mixed
    notes.append(f"mixture: sampling.geometry_points={fewest}, the fewest STL vertices of a {args.mixture_dataset} "
                 f"run (the main run's {wanted} would exceed them)")
    return with_override(mixed, "sampling.geometry_points", fewest)


def check_mixture_split(train_dir: Path, split: dict) -> dict:
    """The mixture's split.json per source; stop the benchmark unless the family trained on
    exactly the split's training bodies and validated on its validation bodies."""
    sources = json.loads((train_dir / "split.json").read_text())["sources"]
    family = sources[FAMILY_SOURCE]
    for role in ("train", "val"):
        if sorted(family[role]) != sorted(split[role]):
            sys.exit(f"mixture: the family's {role} runs {family[role]} are not the split's {split[role]}")
    return sources


def mixture_arm(args: argparse.Namespace, work: Path, overrides: list[str], split: dict,
                notes: list[str]) -> tuple[dict, dict]:
    """The family and ``--mixture-with`` in one model (the first split's seed): its test scores
    (model_scores and train_s, as "this run") and its record (overrides, command, split, per run)."""
    other_runs = process_mixture(args, work)
    mixed = mixture_overrides(args, work, overrides, split, other_runs, notes)
    run_entry_point("cache_data", mixed)  # the second source's cache; the family's runs are current
    name = f"split0_mixture_seed{args.seeds[0]}"
    result = train(work, name, [*mixed, f"seed={args.seeds[0]}"])
    sources = check_mixture_split(work / "train" / name, split)
    rows = predict_role(work, name, mixed, "test", source=FAMILY_SOURCE,
                        runs=[args.family.resolve() / run for run in split["test"]])
    record = {"dataset": args.mixture_dataset, "family_source": FAMILY_SOURCE,
              "raw_dir": str(args.mixture_with.resolve()),
              "weights": {FAMILY_SOURCE: 1.0, args.mixture_dataset: args.mixture_weight},
              "overrides": mixed, "command": result["command"], "split": sources, "per_run": rows,
              "wall_s": result["wall_s"], "chosen": chosen_checkpoint(work / "train" / name)}
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


def family_regime(family: Path, names: list[str]) -> dict:
    """The flow the figures hold in, over the bodies used (tools/openfoam_family/drag_shares.py): the
    solver, Re, Cd and the pressure share of drag, printed above the tables so that no figure is read
    without its regime."""
    tools = str(ROOT / "tools" / "openfoam_family")
    if tools not in sys.path:
        sys.path.append(tools)
    import drag_shares
    regime = drag_shares.family_regime(family, names)
    return {k: v for k, v in regime.items() if k != "runs"} | {"text": drag_shares.describe(regime)}


def print_report(report: dict) -> None:
    """Every table of the report, with its provenance and notes."""
    sizes = report["sizes"]
    print(f"\ncommand: {report['command']}\ndate: {report['date']}  commit: {report['commit']}  "
          f"seeds: {report['seeds']} (main runs: {report['seeds'][0]})  split seed: {report['split_seed']}  "
          f"epochs: {report['epochs']}")
    print(f"regime: {report['regime']['text']}")
    print(f"{len(report['splits'])} splits of {sizes['train']} training / {sizes['val']} validation / "
          f"{sizes['test']} test bodies; checkpoint: the lowest validation loss ({CHOSEN})")
    print(summary_table(report["summary"], DOMINO_PUBLISHED, len(report["splits"])))
    print(ratios_text(report["summary"]))
    print(split_table(report["splits"]))
    for split in report["splits"]:
        print(f"\nsplit {split['index']}: test bodies")
        print(per_run_table(split["per_run"], split["guesses"], split["baseline_fields"]))
    if "mixture" in report:
        print(mixture_text(report["mixture"]))
        print(f"mixture on split 0's test bodies: pressure L2 {report['mixture']['columns']['p']:.4f}, "
              f"Cd MAE {report['mixture']['columns']['cd_mae_percent']:.2f}%")
    timing = report["timing"]
    print(f"timing skipped ({timing['skipped']})" if "skipped" in timing else timing_text(timing))
    ab = report["sampling_ab"]
    print(f"sampling A/B skipped ({ab['skipped']})" if "skipped" in ab else ab_table(ab, report["seeds"]))
    for note in report["notes"]:
        print(f"note: {note}")


# ---- wiring ----

def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", type=Path, required=True, help="the run_<i>/ folders (dataset=openfoam)")
    parser.add_argument("--parameters", type=Path,
                        help="the family's shape parameters, the oracle's inputs (default: FAMILY/parameters.csv)")
    parser.add_argument("--work", type=Path, default=Path("outputs/learning"), help="processed runs, cache, training")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2], help="the first trains every split")
    parser.add_argument("--splits", type=int, default=3, help="splits into training, validation and test bodies")
    parser.add_argument("--val", type=int, default=12, help="validation bodies per split (they choose the checkpoint)")
    parser.add_argument("--test", type=int, default=12, help=f"test bodies per split (at least {MIN_TEST})")
    parser.add_argument("--train-jobs", type=int, default=1,
                        help="split models trained at a time (each with train.cpu_threads threads)")
    parser.add_argument("--split-seed", type=int, default=0, help="seeds the test sets; split k's validation: + k")
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


def prepare(args: argparse.Namespace, work: Path, notes: list[str]) -> tuple[list[str], list[dict], dict[str, Path]]:
    """Process and cache the family; the overrides every split shares, the splits and the runs."""
    overrides = stage_overrides(args, work)
    run_entry_point("process_data", [*overrides, "process.num_processes=2"])
    runs = kept_runs(overrides)
    names = [run_name(r) for r in runs]
    try:
        splits = draw_splits(names, args.splits, args.val, args.test, args.split_seed)
    except ValueError as error:
        sys.exit(str(error))
    overrides = fitted_overrides(runs, overrides, notes)
    (work / "splits.json").write_text(json.dumps(splits, indent=1) + "\n")
    run_entry_point("cache_data", [*overrides, *split_overrides(splits[0], len(runs))])  # its factors: split 0's
    return overrides, splits, dict(zip(names, runs))


def measure(args: argparse.Namespace, argv: list[str]) -> dict:
    """Every measurement of the module docstring; the JSON report."""
    from learning_bodies import read_bodies
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    report = provenance(argv) | {"seeds": args.seeds, "epochs": args.epochs, "split_seed": args.split_seed}
    overrides, splits, runs = prepare(args, work, notes)
    bodies = read_bodies({name: args.family.resolve() / name for name in runs}, typed_config(overrides))
    coefficients = {name: published(path) for name, path in runs.items()}
    if args.train_jobs > 1:
        train_splits_side_by_side(args, work, overrides, splits, len(runs))
    parameters = family_parameters(args.parameters or args.family / "parameters.csv", list(runs), notes)
    records, results = zip(*(measure_split(args, work, overrides, split, len(runs), bodies, coefficients, parameters)
                             for split in splits))
    first = records[0]
    report |= {"overrides": overrides, "notes": notes, "checkpoint": CHOSEN,
               "regime": family_regime(args.family.resolve(), list(runs)),
               "sizes": {role: len(first["roles"][role]) for role in ("train", "val", "test")},
               "splits": list(records), "summary": over_splits([r["columns"] for r in records]),
               "validation_summary": over_splits([{MODEL: r["validation"]} for r in records])[MODEL]}
    report["timing"] = ({"skipped": "--skip-uncached"} if args.skip_uncached else
                        cached_against_uncached(work, [*first["overrides"], f"seed={args.seeds[0]}"], results[0],
                                                args.uncached_cap_s))
    report["sampling_ab"] = ({"skipped": "--skip-exact"} if args.skip_exact else
                             sampling_ab(work, first["overrides"], args.seeds, results[0]))
    report["pressure_png"] = str(work / "predictions" / first["name"] / "test" /
                                 f"{representative_run(first['per_run'])}_pressure.png")
    if args.mixture_with is not None:
        scores, record = mixture_arm(args, work, first["overrides"], splits[0], notes)
        report["mixture"] = record | {"columns": scores}
    return report


def check_arguments(args: argparse.Namespace) -> None:
    """Stop on arguments a later stage would refuse, before the first run is trained."""
    if args.test < MIN_TEST:
        sys.exit(f"--test {args.test}: hold at least {MIN_TEST} test bodies out")
    if args.val < 1 or args.splits < 1:
        sys.exit(f"--val {args.val} --splits {args.splits}: at least one validation body and one split")
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
        plot(report["splits"], Path(report["pressure_png"]), args.png)
        print(f"wrote {args.png}")
    return report


if __name__ == "__main__":
    main()
