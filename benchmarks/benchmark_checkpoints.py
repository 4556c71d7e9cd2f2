"""What checked checkpoints cost an epoch: an epoch-end save and a resume's read, before (main at
12b0b0c: ``torch.save`` and a rename, no digest, no flush) and now (``checkpointing.write_files``:
each file flushed to disk, its digest written and the file read back and checked, the older
checkpoint checked before rotation; ``load_checkpoint``: the digest and the weights checked),
side by side, alternating, medians of ``--repeats``; set against the median epoch of a training run
of the same config (``<train-dir>/epochs.jsonl``; ``--train-epochs N`` runs train.py first). The
model is the config's DoMINO with AdamW's state filled by one step (its size is what counts).
Prints a Markdown table; writes JSON.

    python benchmarks/benchmark_checkpoints.py --config-name demo --train-dir outputs/demo/train_cached \
        --repeats 15 --json outputs/benchmark_checkpoints.json
    python benchmarks/benchmark_checkpoints.py --config-name demo --train-dir /tmp/bench/train --train-epochs 3 \
        --set data.processed_dir=/tmp/demo/processed cache.dir=/tmp/demo/cache   # the epoch measured here too
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from domino_pipeline.configuration.config import load_config
from domino_pipeline.configuration.config_files import compose_files
from domino_pipeline.training import checkpointing
from domino_pipeline.training.checkpointing import CheckpointFiles, TrainingState
from domino_pipeline.training.domino_model import build_model, build_optimizer, build_scheduler, grad_scaler
from domino_pipeline.training.model_files import save_model_file
from domino_pipeline.configuration.variables import column_names

ROOT = Path(__file__).resolve().parents[1]


# ---- before: main's writes and read at 12b0b0c, verbatim but for names

def save_before(state: TrainingState, folder: Path, contents: dict[str, Any], index: int, best: bool) -> None:
    """An epoch-end save as main did it: checkpoint.pt, model_last, the physicsnemo pair, model_best."""
    _torch_save_renamed(contents, folder / "checkpoint.pt")
    _model_save_renamed(state.model, folder / "model_last.mdlus")
    model_path = folder / f"DoMINO.0.{index}.mdlus"
    temporary = model_path.with_name(f".{model_path.stem}.tmp{os.getpid()}.mdlus")
    os.link(folder / "model_last.mdlus", temporary)
    os.replace(temporary, model_path)
    pair = {f"{name}_state_dict": contents[name] for name in ("optimizer", "scheduler", "scaler")} | {"epoch": index}
    _torch_save_renamed(pair, folder / f"checkpoint.0.{index}.pt")
    for older in (folder / f"checkpoint.0.{index - 1}.pt", folder / f"DoMINO.0.{index - 1}.mdlus"):
        older.unlink(missing_ok=True)
    if best:
        _model_save_renamed(state.model, folder / "model_best.mdlus")


def _torch_save_renamed(obj: Any, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(obj, temporary)
    os.replace(temporary, path)


def _model_save_renamed(model: torch.nn.Module, path: Path) -> None:
    temporary = path.with_name(f".{path.stem}.tmp{os.getpid()}.mdlus")
    model.save(str(temporary))
    os.replace(temporary, path)


def read_before(path: Path) -> dict[str, Any]:
    """A resume's read as main did it."""
    return torch.load(path, map_location="cpu", weights_only=True)


# ---- now: the production functions

def save_now(state: TrainingState, files: CheckpointFiles, contents: dict[str, Any], best: bool) -> Path:
    """An epoch-end save as train.py does it now (``write_files``, then model_best as ``keep_best`` writes it)."""
    path = files.folder / checkpointing.CHECKPOINT_NAME.format(epoch=contents["epoch"], step=0)
    checkpointing.write_files(state, files, path, contents)
    if best:
        save_model_file(state.model, files.models["best"])
    return path


# ---- the measurement

def training_state(args: argparse.Namespace) -> tuple[TrainingState, dict[str, Any]]:
    """The config's DoMINO (CPU) with one AdamW step taken, and its resolved config."""
    merged = OmegaConf.merge(compose_files(ROOT / "conf", args.config_name), OmegaConf.from_dotlist(args.set))
    config = load_config(merged)
    widths = {part: len(column_names(getattr(config.variables, part))) for part in ("surface", "volume")}
    torch.manual_seed(0)
    model = build_model(config.model_type, config.model, torch.device("cpu"), widths)
    optimizer = build_optimizer(model, config.train)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter) * 1e-3
    optimizer.step()
    state = TrainingState(model=model, trained=model, optimizer=optimizer,
                          scheduler=build_scheduler(optimizer, config.train),
                          scaler=grad_scaler(torch.device("cpu"), None), amp_dtype=None)
    return state, config.as_dict()


def contents_of(state: TrainingState, config: dict[str, Any], epoch: int) -> dict[str, Any]:
    """What ``save_checkpoint`` writes at the end of epoch ``epoch - 1`` of one rank."""
    partial = {"loss_sum": 0.0, "batches": 0, "term_sums": {}, "skipped": 0}
    return {"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(),
            "scheduler": state.scheduler.state_dict(), "scaler": state.scaler.state_dict(),
            "epoch": epoch, "step": 0, "epoch_partial": [partial],
            "rng_states": [checkpointing.capture_rng_state()], "config": json.dumps(config),
            "best_val_loss": 0.5, "nonfinite_steps": 0}


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def epoch_seconds(train_dir: Path) -> list[float]:
    """The epoch times of a training run (its epochs.jsonl), the first left out (warm-up)."""
    records = [json.loads(line) for line in (train_dir / "epochs.jsonl").read_text().splitlines()]
    seconds = [r["epoch_s"] for r in records if r.get("kind") == "epoch"]
    return seconds[1:] if len(seconds) > 1 else seconds


def run_training(args: argparse.Namespace) -> None:
    """train.py on the config for ``--train-epochs`` epochs into ``--train-dir`` (afresh)."""
    shutil.rmtree(args.train_dir, ignore_errors=True)
    command = [sys.executable, "train.py", f"--config-name={args.config_name}", *args.set,
               f"output_dir={args.train_dir}", f"train.epochs={args.train_epochs}"]
    subprocess.run(command, cwd=ROOT, check=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Median seconds of each operation before and now, alternating, and the epoch they are set against."""
    if args.train_epochs:
        run_training(args)
    state, config = training_state(args)
    times: dict[str, list[float]] = {key: [] for key in ("save_before", "save_now", "read_before", "read_now")}
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        before, now = Path(work) / "before", Path(work) / "now"
        before.mkdir()
        files = CheckpointFiles.under(now.parent / "now_run", config, keep=2)
        for repeat in range(args.repeats + 1):  # the first of each: warm-up, dropped
            epoch = repeat + 2
            contents = contents_of(state, config, epoch)
            pair = [lambda: save_before(state, before, contents, epoch - 2, best=True),
                    lambda: save_now(state, files, contents, best=True)]
            order = pair if repeat % 2 == 0 else pair[::-1]
            spent = [timed(call) for call in order]
            spent = spent if repeat % 2 == 0 else spent[::-1]
            newest = checkpointing.newest_checkpoint(files.folder.parent)
            reads = [timed(lambda: read_before(before / "checkpoint.pt")),
                     timed(lambda: checkpointing.load_checkpoint(newest))]
            if repeat:
                for key, value in zip(("save_before", "save_now", "read_before", "read_now"), [*spent, *reads]):
                    times[key].append(value)
        sizes = {"checkpoint_mb": newest.stat().st_size / 1e6,
                 "model_mb": files.models["last"].stat().st_size / 1e6}
    epochs = epoch_seconds(args.train_dir)
    medians = {key: statistics.median(values) for key, values in times.items()}
    epoch_s = statistics.median(epochs)
    return {
        "config_name": args.config_name, "overrides": args.set, "repeats": args.repeats, "times_s": times,
        "median_s": medians, "epoch_s_median": epoch_s, "epochs_measured": len(epochs), **sizes,
        "save_added_s": medians["save_now"] - medians["save_before"],
        "save_added_percent_of_epoch": 100 * (medians["save_now"] - medians["save_before"]) / epoch_s,
        "read_added_s": medians["read_now"] - medians["read_before"],
        "read_added_percent_of_epoch": 100 * (medians["read_now"] - medians["read_before"]) / epoch_s,
        "parameters": sum(p.numel() for p in state.model.parameters()),
    }


def table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    median, epoch = result["median_s"], result["epoch_s_median"]
    rows = [
        "| operation | before (main) | now (checked) | added | added / epoch |",
        "|---|---|---|---|---|",
        f"| epoch-end save (checkpoint, model_last, physicsnemo pair, model_best) | {median['save_before'] * 1e3:.1f} ms "
        f"| {median['save_now'] * 1e3:.1f} ms | {result['save_added_s'] * 1e3:+.1f} ms "
        f"| {result['save_added_percent_of_epoch']:+.2f}% |",
        f"| resume's read of the checkpoint (once per start) | {median['read_before'] * 1e3:.1f} ms "
        f"| {median['read_now'] * 1e3:.1f} ms | {result['read_added_s'] * 1e3:+.1f} ms "
        f"| {result['read_added_percent_of_epoch']:+.2f}% |",
    ]
    return ("\n".join(rows) + f"\n\nmedians of {result['repeats']} alternating repeats; DoMINO of "
            f"{result['parameters']:,} parameters, checkpoint {result['checkpoint_mb']:.1f} MB, model "
            f"{result['model_mb']:.1f} MB; epoch {epoch:.2f} s (median of {result['epochs_measured']} epochs of "
            f"train.py, config {result['config_name']})")


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-name", default="demo", help="conf/<name>.yaml: the model size and the training")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides (dotlist), for training and the model")
    parser.add_argument("--train-dir", type=Path, required=True, help="a training run of this config (epochs.jsonl)")
    parser.add_argument("--train-epochs", type=int, default=0, help="run train.py for this many epochs first")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the checkpoints are written (a temporary "
                        "folder in it): the disk measured")
    parser.add_argument("--json", type=Path, default=None)
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
