"""Train DoMINO (physicsnemo.models.domino.DoMINO) on processed DrivAerML runs, cached or not.

One CPU or GPU:
    python train.py                                  # uncached DoMINODataPipe (num_workers 0)
    python cache_data.py --config-name=cached && python train.py --config-name=cached
DDP under torchrun (one process per GPU; NCCL on GPUs, gloo on CPUs):
    torchrun --standalone --nproc_per_node=8 train.py --config-name=cached
    torchrun --standalone --nproc_per_node=2 train.py --config-name=demo train.device=cpu
Any setting is one override away, e.g. `model_type=combined train.epochs=50 output_dir=/runs/a`.

Everything a run writes goes to `output_dir`: checkpoints/checkpoint.pt (resumed from automatically),
checkpoints/model_last.mdlus and model_best.mdlus (physicsnemo's format: the latest model and the one
with the lowest validation loss; `physicsnemo.Module.from_checkpoint` loads them, model_best.json says
which epoch), epochs.jsonl (one record per epoch: losses, data wait vs compute, samples/s, peak
memory, the runs each rank saw), steps.jsonl (loss per step), split.json (train/validation runs)
and tensorboard/. Fine-tune from any physicsnemo DoMINO `.mdlus`: `train.init_from=/path/model.mdlus`.
Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits with 128+signal.
"""

import json
import math
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler
from torch.utils.tensorboard import SummaryWriter

from datapipe import collate_items, dataset_from_config, parts_of, scaling_factors_path
from domino_pipeline.config import PipelineConfig, TrainConfig
from domino_pipeline.entry_point import entry_point
from domino_pipeline.inputs.runs import split_from_config, split_runs  # noqa: F401 (split_runs: train.split_runs)
from domino_pipeline.training import checkpointing, distributed
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.domino_model import (
    build_model,
    check_data_fits_model,
    model_parameters,  # noqa: F401 (tests use train.model_parameters)
    resolve_model_type,
    resolved_parameters,
    variable_names,
)
from domino_pipeline.training.losses import LossConfig
from domino_pipeline.training.training_loop import (
    EpochResult,
    evaluate,
    train_one_epoch,
)

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


class StopFlag:
    """Set by SIGINT/SIGTERM so that training stops after the current step; a second Ctrl-C aborts."""

    def __init__(self) -> None:
        self.signal_number: int | None = None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal_number is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum

    @property
    def is_set(self) -> bool:
        return self.signal_number is not None


class RunLog:
    """Rank 0's record of a run: console lines, TensorBoard scalars and JSON-lines files."""

    def __init__(self, output_dir: Path, enabled: bool) -> None:
        self.enabled = enabled
        self.output_dir = output_dir
        self.writer = SummaryWriter(str(output_dir / "tensorboard")) if enabled else None

    def print(self, line: str) -> None:
        if self.enabled:
            print(line, flush=True)

    def append(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON record to `output_dir/name` (e.g. epochs.jsonl)."""
        if self.enabled:
            with open(self.output_dir / name, "a") as file:
                file.write(json.dumps(record) + "\n")

    def write_json(self, name: str, record: dict[str, Any]) -> None:
        """Write one JSON document to `output_dir/name`."""
        if self.enabled:
            (self.output_dir / name).write_text(json.dumps(record, indent=1) + "\n")

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()




def wrap_ddp(model: torch.nn.Module, model_type: str, info: DistInfo) -> torch.nn.Module:
    """DDP across ranks. DoMINO builds both geometry branches whatever the model type, so a
    surface- or volume-only model leaves one branch without gradients: DDP must look for them."""
    if not info.is_distributed:
        return model
    device_ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=model_type != "combined")


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters."""
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig) -> torch.optim.lr_scheduler.LRScheduler:
    """Per-epoch learning-rate schedule: cosine to min_lr over all epochs, or step decay."""
    if config.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs, eta_min=config.min_lr)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=config.step_size, gamma=config.gamma)


def ensure_scaling_factors(config: PipelineConfig, train_runs: list[Path], path: Path, info: DistInfo) -> None:
    """Rank 0 computes the target scaling factors from the training runs once, if the file is
    missing; factors computed from other runs are refused unless ``sampling.allow_other_split``;
    the other ranks wait.
    The cache's own factors are cache_data.py's to write: missing, they are an error."""
    from domino_pipeline.compute.scaling import (
        compute_scaling_factors,
        load_scaling_factors,
        save_scaling_factors,
    )
    from domino_pipeline.inputs.runs import read_options_from_config, run_name

    sampling = config.sampling
    if not path.exists() and config.cache.enabled and sampling.scaling_factors is None:
        raise FileNotFoundError(f"{path}: the cache has no scaling factors; rerun cache_data.py, which writes them")
    if info.is_main and not path.exists():
        print(f"computing {sampling.normalization} scaling factors from {len(train_runs)} training runs -> {path}")
        variables = {"surface": list(config.variables.surface.items()), "volume": list(config.variables.volume.items())}
        save_scaling_factors(path, compute_scaling_factors(
            train_runs, normalization=sampling.normalization,
            options=read_options_from_config(config.data, config.physics), variables=variables))
    elif load_scaling_factors(path).get("runs", [run_name(r) for r in train_runs]) != [run_name(r) for r in train_runs]:
        if not sampling.allow_other_split:
            raise ValueError(f"{path}: the scaling factors were computed from other runs than this "
                             "training split (see its 'runs'); recompute them (delete the file, or "
                             "rerun cache_data.py with this train.val_fraction and train.split_seed), "
                             "or set sampling.allow_other_split=true to use them anyway")
        if info.is_main:
            print(f"note: {path} was computed from other runs than this training split (allowed)")
    distributed.barrier()


def make_unscaler(path: Path, normalization: str):
    """A function (target key, scaled tensor) -> tensor in physical units, from the saved factors."""
    from domino_pipeline.compute.scaling import load_scaling_factors, unscale_fields

    factors = load_scaling_factors(path, normalization)

    def unscale(key: str, values: torch.Tensor) -> torch.Tensor:
        return unscale_fields(values, factors, key.removesuffix("_fields"))

    return unscale


def epoch_indices(sampler: DistributedSampler, epoch: int, skip: int) -> list[int]:
    """This rank's sample order for `epoch` (same on every call), without the first `skip` samples."""
    sampler.set_epoch(epoch)
    return list(sampler)[skip:]


class PassIndices(Sampler[int]):
    """The sample indices of the current pass, in order; replaced before each pass, so one loader
    (and its persistent workers) serves every epoch, resumes included."""

    def __init__(self) -> None:
        self.indices: list[int] = []

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self) -> int:
        return len(self.indices)


def make_loader(dataset: Dataset, batch_size: int, num_workers: int, device: torch.device) -> DataLoader:
    """A loader over the indices set in its `PassIndices` sampler; workers persist across passes."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=PassIndices(),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=device.type == "cuda",
        collate_fn=collate_items,
    )


def loader_over(loader: DataLoader, indices: list[int]) -> DataLoader:
    """`loader`, pointed at exactly `indices` for its next pass."""
    loader.sampler.indices = list(indices)
    return loader


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """CUDA max allocated since the last reset on a GPU; the process's peak RSS (whole run) on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, "cpu_peak_rss"


def rank_summary(result: EpochResult, indices: list[int], runs: list[Path], device: torch.device) -> dict[str, Any]:
    """This rank's part of an epoch record: timings, loss sums, memory, and the runs it trained on."""
    memory, kind = peak_memory_mb(device)
    seen = indices[: result.samples]
    return {
        "loss_sum": result.loss_sum, "term_sums": result.term_sums, "batches": result.batches, "samples": result.samples,
        "data_wait_s": result.data_wait_s, "compute_s": result.compute_s,
        "peak_memory_mb": memory, "memory_kind": kind, "runs": [runs[i].name for i in seen],
    }


def epoch_record(epoch: int, ranks: list[dict[str, Any]], epoch_s: float, lr: float, resumed_at: int,
                 loss_function: str) -> dict[str, Any]:
    """Combine every rank's summary into one epoch record (mean times over ranks, max memory); the
    loss's terms (unweighted means over batches) beside the loss and the loss function."""
    samples = sum(r["samples"] for r in ranks)
    batches = max(sum(r["batches"] for r in ranks), 1)
    terms = sorted({term for r in ranks for term in r["term_sums"]})
    return {
        "kind": "epoch", "epoch": epoch, "lr": lr, "loss_function": loss_function,
        "train_loss": sum(r["loss_sum"] for r in ranks) / batches,
        **{f"train_loss/{t}": sum(r["term_sums"].get(t, 0.0) for r in ranks) / batches for t in terms},
        "samples": samples, "epoch_s": epoch_s, "samples_per_s": samples / epoch_s if epoch_s > 0 else 0.0,
        "data_wait_s": float(np.mean([r["data_wait_s"] for r in ranks])),
        "compute_s": float(np.mean([r["compute_s"] for r in ranks])),
        "peak_memory_mb": max(r["peak_memory_mb"] for r in ranks), "memory_kind": ranks[0]["memory_kind"],
        "world_size": len(ranks), "resumed_at_step": resumed_at, "runs_by_rank": [r["runs"] for r in ranks],
    }


def format_epoch(record: dict[str, Any], epochs: int) -> str:
    return (
        f"epoch {record['epoch']}/{epochs}  loss {record['train_loss']:.5g}  "
        f"data wait {record['data_wait_s']:.2f} s  compute {record['compute_s']:.2f} s  "
        f"total {record['epoch_s']:.2f} s  {record['samples_per_s']:.2f} samples/s  "
        f"peak {record['peak_memory_mb']:.0f} MiB ({record['memory_kind']})"
    )


def validation_metrics(sums: dict[str, torch.Tensor], names: dict[str, list[str]]) -> dict[str, float]:
    """Turn summed validation results (over all ranks) into the mean loss and the mean relative L2
    error of each output variable."""
    samples = max(sums["samples"].item(), 1.0)
    metrics = {"val_loss": sums["loss_sum"].item() / samples}
    metrics |= {f"val_loss/{key.removeprefix('term/')}": value.item() / samples
                for key, value in sums.items() if key.startswith("term/")}
    for key, columns in names.items():
        if key in sums:
            for name, value in zip(columns, (sums[key] / samples).tolist()):
                metrics[f"val_rel_l2/{key.removesuffix('_fields')}/{name}"] = value
    return metrics


@dataclass
class Session:
    """Everything the epoch loop needs, built once by `main`."""

    info: DistInfo
    config: TrainConfig
    model: torch.nn.Module          # the bare DoMINO, for validation and checkpoints
    trained: torch.nn.Module        # the same model, DDP-wrapped when distributed
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    amp_dtype: torch.dtype | None
    train_set: Dataset
    val_set: Dataset | None
    train_runs: list[Path]
    val_runs: list[Path]
    sampler: DistributedSampler
    unscale: Any
    variable_names: dict[str, list[str]]
    log: RunLog
    stop: StopFlag
    checkpoint: Path
    config_json: str
    train_loader: DataLoader
    val_loader: DataLoader | None
    loss_config: LossConfig
    loss_description: str           # the loss terms this model uses and their weights, for the logs
    model_files: dict[str, Path]    # the .mdlus models: last, best (and the best's JSON record)
    best_val_loss: float = math.inf


def run_validation(session: Session) -> dict[str, float]:
    """Validate on this rank's share of the validation runs (a fixed draw), summed over all ranks."""
    info = session.info
    indices = list(range(info.rank, len(session.val_runs), info.world_size))
    loader = loader_over(session.val_loader, indices)
    widths = {key: len(names) for key, names in session.variable_names.items()}
    sums = evaluate(
        session.model, loader, device=info.device, amp_dtype=session.amp_dtype, unscale=session.unscale,
        target_widths=widths, loss_config=session.loss_config,
    )
    reduced = {key: distributed.all_reduce_sum(value) for key, value in sorted(sums.items())}
    return validation_metrics(reduced, session.variable_names)


def save_checkpoint(session: Session, epoch: int, step: int, partial: EpochResult) -> None:
    """Collective: gather every rank's RNG state, rank 0 writes the checkpoint, all wait."""
    rng_states = distributed.gather_objects(checkpointing.capture_rng_state())
    partials = distributed.gather_objects(
        {"loss_sum": partial.loss_sum, "batches": partial.batches, "term_sums": partial.term_sums})
    if session.info.is_main:
        checkpointing.save_checkpoint(
            session.checkpoint,
            {
                "model": session.model.state_dict(),
                "optimizer": session.optimizer.state_dict(),
                "scheduler": session.scheduler.state_dict(),
                "scaler": session.scaler.state_dict(),
                "epoch": epoch,
                "step": step,
                "epoch_partial": partials,
                "rng_states": rng_states,
                "config": session.config_json,
                "best_val_loss": session.best_val_loss,
            },
        )
        checkpointing.save_model_file(session.model, session.model_files["last"])
    distributed.barrier()


def keep_best(session: Session, epoch: int, val_loss: float) -> None:
    """Rank 0 saves the model as the best one when the validation loss is the lowest so far."""
    if not val_loss < session.best_val_loss:
        return
    session.best_val_loss = val_loss
    if session.info.is_main:
        checkpointing.save_model_file(session.model, session.model_files["best"])
        session.model_files["best_record"].write_text(json.dumps({"epoch": epoch, "val_loss": val_loss}) + "\n")


def check_same_model(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse to resume a checkpoint of another model type or architecture."""
    differing = [key for key in ("model_type", "model") if saved.get(key) != current.get(key)]
    if differing:
        raise ValueError(
            f"{path}: checkpoint was trained with other {differing} settings; "
            "use another output_dir or delete the checkpoint"
        )


def resume(session: Session) -> tuple[int, int, EpochResult]:
    """Restore the latest checkpoint if there is one: (epoch to run, batches of it done, its partial sums)."""
    state = checkpointing.load_checkpoint(session.checkpoint)
    if state is None:
        if session.config.init_from:
            checkpointing.init_weights_from(session.model, session.config.init_from)
            session.log.print(f"initialised the model from {session.config.init_from}")
        return 1, 0, EpochResult()
    if session.config.init_from:
        session.log.print(f"note: resuming {session.checkpoint}; train.init_from={session.config.init_from} is not used")
    check_same_model(checkpointing.config_from_checkpoint(state), json.loads(session.config_json), session.checkpoint)
    session.model.load_state_dict(state["model"])
    session.optimizer.load_state_dict(state["optimizer"])
    session.scheduler.load_state_dict(state["scheduler"])
    session.scaler.load_state_dict(state["scaler"])
    session.best_val_loss = float(state.get("best_val_loss", math.inf))
    rank = session.info.rank
    checkpointing.restore_rng_state(state["rng_states"][rank % len(state["rng_states"])])
    partial = EpochResult(**state["epoch_partial"][rank % len(state["epoch_partial"])])
    session.log.print(f"resumed from {session.checkpoint}: epoch {state['epoch']}, step {state['step']}")
    return state["epoch"], state["step"], partial


def train_epoch(session: Session, epoch: int, skip_batches: int, partial: EpochResult) -> tuple[EpochResult, dict[str, Any]]:
    """One epoch (or its remainder after a resume) on every rank, and rank 0's combined record."""
    info, config = session.info, session.config
    session.train_set.set_epoch(epoch)
    indices = epoch_indices(session.sampler, epoch, skip_batches * config.batch_size)
    reset_peak_memory(info.device)
    start = time.perf_counter()
    loader = loader_over(session.train_loader, indices)

    # the loss of a resumed epoch: all its steps
    result = EpochResult(loss_sum=partial.loss_sum, batches=partial.batches, term_sums=dict(partial.term_sums))

    def log_step(loss: float) -> None:
        session.log.append("steps.jsonl", {"epoch": epoch, "step": result.batches, "loss": loss})

    result = train_one_epoch(
        session.trained, loader, len(indices), session.optimizer, session.scaler,
        device=info.device, amp_dtype=session.amp_dtype, clip_grad_norm=config.clip_grad_norm,
        loss_config=session.loss_config, should_stop=lambda: distributed.any_rank(session.stop.is_set, info.device),
        after_step=log_step, result=result, progress=f"epoch {epoch}" if info.is_main else None,
    )
    epoch_s = time.perf_counter() - start
    summary = rank_summary(result, indices, session.train_runs, info.device)
    ranks = distributed.gather_objects(summary)
    record = epoch_record(epoch, ranks, epoch_s, session.optimizer.param_groups[0]["lr"], skip_batches,
                          session.loss_description)
    return result, record


def finish_epoch(session: Session, epoch: int, record: dict[str, Any]) -> None:
    """Step the schedule, validate and checkpoint when due, and log the epoch."""
    config = session.config
    session.scheduler.step()
    if session.val_runs and (epoch % config.val_every == 0 or epoch == config.epochs):
        record.update(run_validation(session))
        keep_best(session, epoch, record["val_loss"])
    if epoch % config.checkpoint_every == 0 or epoch == config.epochs:
        save_checkpoint(session, epoch + 1, 0, EpochResult())
    session.log.print(format_epoch(record, config.epochs))
    if "val_loss" in record:
        session.log.print("  validation " + "  ".join(f"{k.removeprefix('val_')} {v:.4g}" for k, v in record.items() if k.startswith("val_")))
    session.log.append("epochs.jsonl", record)
    scalars = {
        "train/loss": record["train_loss"], "train/lr": record["lr"], "time/data_wait_s": record["data_wait_s"],
        "time/compute_s": record["compute_s"], "time/epoch_s": record["epoch_s"],
        "throughput/samples_per_s": record["samples_per_s"], "memory/peak_mib": record["peak_memory_mb"],
    }
    scalars.update({k.replace("train_loss/", "train/loss_", 1): v for k, v in record.items() if k.startswith("train_loss/")})
    scalars.update({k.replace("val_", "val/", 1): v for k, v in record.items() if k.startswith("val_")})
    session.log.scalars(scalars, epoch)


def train_epochs(session: Session) -> int | None:
    """Run the remaining epochs; the signal number when stopped by one, else None."""
    epoch, skip, partial = resume(session)
    if epoch > session.config.epochs:
        session.log.print(f"all {session.config.epochs} epochs are done in this output_dir; raise train.epochs to go on")
    while epoch <= session.config.epochs:
        result, record = train_epoch(session, epoch, skip, partial)
        if result.interrupted:
            save_checkpoint(session, epoch, result.batches, result)
            session.log.append("epochs.jsonl", {"kind": "interrupted", "epoch": epoch, "step": result.batches})
            session.log.print(f"stopped by signal in epoch {epoch}; checkpoint saved to {session.checkpoint}")
            return session.stop.signal_number or signal.SIGINT
        finish_epoch(session, epoch, record)
        epoch, skip, partial = epoch + 1, 0, EpochResult()
    return None


def target_variable_names(config: PipelineConfig) -> dict[str, list[str]]:
    """Output variable names per target key, for the model type in use."""
    names = {}
    if config.model_type in ("volume", "combined"):
        names["volume_fields"] = variable_names(config.variables.volume)
    if config.model_type in ("surface", "combined"):
        names["surface_fields"] = variable_names(config.variables.surface)
    return names


def data_source(config: PipelineConfig) -> str:
    """How the training data is named in messages: the cache directory, or the uncached datapipe."""
    if config.cache.enabled:
        return f"cache {config.cache.dir}"
    return f"the uncached datapipe over {config.data.processed_dir}"


def build_session(cfg: PipelineConfig, config: TrainConfig, info: DistInfo) -> Session:
    """Split the runs, make sure the scaling factors exist, build datasets, model and optimizer."""
    from domino_pipeline.inputs.runs import list_runs

    output_dir = Path(cfg.output_dir)
    if info.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
    train_runs, val_runs = split_from_config(list_runs(cfg.data.processed_dir), cfg.train, cfg.seed)
    scaling_path = scaling_factors_path(cfg)
    ensure_scaling_factors(cfg, train_runs, scaling_path, info)
    log = RunLog(output_dir, enabled=info.is_main)
    log.write_json("split.json", {"train": [r.name for r in train_runs], "val": [r.name for r in val_runs]})
    # DoMINO draws its initial weights and its volume sampling noise from torch's global generator;
    # seeding it here (and checkpointing it) is what makes a run repeatable and resumable.
    torch.manual_seed(cfg.seed + info.rank)
    model_section = cfg.model
    model_type = resolve_model_type(cfg.model_type, model_section)
    widths = {part: len(variable_names(getattr(cfg.variables, part))) for part in ("surface", "volume")}
    loss_config = cfg.loss
    loss_config.check(parts_of(model_type), widths["surface"])
    train_set = dataset_from_config(cfg, train_runs, train=True)
    val_set = dataset_from_config(cfg, val_runs, train=False) if val_runs else None
    check_data_fits_model(train_set.settings, resolved_parameters(model_section), data_source(cfg))
    model = build_model(model_type, model_section, info.device, widths)
    optimizer = build_optimizer(model, config)
    if val_set is not None:
        val_set.set_epoch(0)  # the same validation draw every time, so epochs compare
    amp_dtype = AMP_DTYPES[config.amp] if info.device.type == "cuda" else None
    return Session(
        info=info, config=config, model=model, trained=wrap_ddp(model, cfg.model_type, info),
        optimizer=optimizer, scheduler=build_scheduler(optimizer, config),
        scaler=torch.amp.GradScaler(info.device.type, enabled=amp_dtype == torch.float16),
        amp_dtype=amp_dtype, train_set=train_set, val_set=val_set, train_runs=train_runs, val_runs=val_runs,
        sampler=DistributedSampler(train_set, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed),
        unscale=make_unscaler(scaling_path, cfg.sampling.normalization), variable_names=target_variable_names(cfg), log=log, stop=StopFlag(),
        checkpoint=checkpointing.checkpoint_path(output_dir), model_files=checkpointing.model_file_paths(output_dir),
        config_json=json.dumps(cfg.as_dict()),
        train_loader=make_loader(train_set, config.batch_size, config.num_workers, info.device),
        val_loader=None if val_set is None else make_loader(val_set, config.batch_size, config.val_num_workers, info.device),
        loss_config=loss_config, loss_description=loss_config.describe(parts_of(model_type)),
    )


@entry_point
def main(cfg: PipelineConfig) -> int | None:
    """Train; 128 + the signal's number when stopped by one."""
    config = cfg.train
    info = distributed.init_distributed(config.device)
    if info.device.type == "cpu" and config.cpu_threads > 0:
        torch.set_num_threads(config.cpu_threads)
    try:
        session = build_session(cfg, config, info)
        session.log.print(
            f"DoMINO {cfg.model_type}: {sum(p.numel() for p in session.model.parameters()):,} parameters on "
            f"{info.device} x {info.world_size}; {len(session.train_runs)} training / {len(session.val_runs)} "
            f"validation runs; {'cache ' + str(cfg.cache.dir) if cfg.cache.enabled else 'uncached datapipe'}; "
            f"loss {session.loss_description}"
        )
        signum = train_epochs(session)
        session.log.close()
    finally:
        distributed.shutdown_distributed()
    return None if signum is None else 128 + signum


if __name__ == "__main__":
    main()
