"""Train DoMINO (physicsnemo.models.domino.DoMINO) on processed DrivAerML runs, cached or not.

One CPU or GPU:
    python train.py                                  # uncached DoMINODataPipe (num_workers 0)
    python cache_data.py --config-name=cached && python train.py --config-name=cached
DDP under torchrun or Slurm's srun (one process per GPU; NCCL on GPUs, gloo on CPUs):
    torchrun --standalone --nproc_per_node=8 train.py --config-name=cached
    torchrun --standalone --nproc_per_node=2 train.py --config-name=demo train.device=cpu
    srun --nodes=4 --ntasks-per-node=8 --gpus-per-node=8 python train.py --config-name=cached
Any setting is one override away, e.g. `model_type=combined train.epochs=50 output_dir=/runs/a`.
Runs the quality checks reject (`data.quality`: <processed_dir>/statistics.csv, written by
process_data.py) are left out and named; `data.quality.include=[run_37]` takes one back.

Everything a run writes goes to `output_dir`: checkpoints/checkpoint-e<epoch>-s<step>.pt (the newest
two, each with its SHA-256 digest; the newest that passes its check is resumed from automatically),
checkpoints/model_last.mdlus and model_best.mdlus (physicsnemo's format: the latest model and the one
with the lowest validation loss; `physicsnemo.Module.from_checkpoint` loads them, model_best.json says
which epoch), epochs.jsonl (one record per epoch: losses, data wait vs compute, samples/s, peak
memory, the runs each rank saw), steps.jsonl (loss per step), split.json (train/validation/test runs)
and tensorboard/. Fine-tune from any physicsnemo DoMINO `.mdlus`: `train.init_from=/path/model.mdlus`.
Each checkpointed epoch end also writes physicsnemo's save_checkpoint pair (DoMINO.0.<e>.mdlus,
checkpoint.0.<e>.pt) for its load_checkpoint; `train.resume_from=/example/models` continues such a
pair written by the DoMINO example (domino_pipeline/training/checkpointing.py).
Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits with 128+signal.
A loss or gradient that is not finite stops every rank at that step with one line and exit code 1,
nothing saved (`train.max_nonfinite_steps` skips that many such steps instead); what is checked and
how a run resumes: docs/checkpoints.md.

This file wires the pieces of domino_pipeline/training/ together: the epoch loop with its draw,
step and validation (epochs.py), checkpoints (checkpointing.py), records and logs (run_log.py),
the model and its optimisation (domino_model.py), the losses, the target scaling, torch.distributed.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DistributedSampler

from datapipe import dataset_from_config, parts_of, scaling_factors_of, scaling_factors_path
from domino_pipeline.compute.scaling import load_scaling_factors, save_scaling_factors
from domino_pipeline.configuration.config import PipelineConfig
from domino_pipeline.runtime.entry_point import entry_point
from domino_pipeline.processed.run_quality import quality_selection
from domino_pipeline.processed.runs import RunSplit, list_runs, read_options_from_config, run_split_from_config
from domino_pipeline.runtime.launch import launch_environment
from domino_pipeline.loading.mixture import WeightedSourceSampler
from domino_pipeline.storage.object_store import name_of
from domino_pipeline.configuration.source_configs import sources_of, uses_sources
from domino_pipeline.training import distributed
from domino_pipeline.training.checkpointing import CheckpointFiles, TrainingState, agreed_checkpoint, checkpoint_folder
from domino_pipeline.training.distributed import DistInfo
from domino_pipeline.training.domino_model import (
    amp_dtype,
    build_model,
    build_optimizer,
    build_scheduler,
    check_data_fits_model,
    grad_scaler,
    resolve_model_type,
    resolved_parameters,
    wrap_ddp,
)
from domino_pipeline.training.epochs import Objective, StopFlag, TrainData, Trainer, make_loader, train_epochs
from domino_pipeline.training.run_log import RunLog
from domino_pipeline.training.sources import mixtures, split_record, split_sources
from domino_pipeline.training.target_scaling import ensure_scaling_factors, unscaler
from domino_pipeline.configuration.variables import column_names

def target_variable_names(config: PipelineConfig) -> dict[str, list[str]]:
    """Output variable names per target key, for the model type in use."""
    names = {}
    if config.model_type in ("volume", "combined"):
        names["volume_fields"] = column_names(config.variables.volume)
    if config.model_type in ("surface", "combined"):
        names["surface_fields"] = column_names(config.variables.surface)
    return names


def data_source(config: PipelineConfig) -> str:
    """How the training data is named in messages: the sources' caches, the cache directory, or the
    uncached datapipe."""
    if uses_sources(config):
        return "caches " + ", ".join(f"{source.name}: {own.cache.dir}" for source, own in sources_of(config))
    if config.cache.enabled:
        return f"cache {config.cache.dir}"
    return f"the uncached datapipe over {config.data.processed_dir}"


def split_and_scale(config: PipelineConfig, info: DistInfo) -> tuple[RunSplit, Path]:
    """The training, validation and test runs and the scaling factors' file (over the training
    runs), computed first when missing."""
    selection = quality_selection(list_runs(config.data.processed_dir), config.data, config.dataset)
    if info.is_main:
        print(selection.summary(), flush=True)
    split = run_split_from_config(selection.require_some(config.data.processed_dir), config.train, config.seed)
    train_runs = split.train
    path = scaling_factors_path(config)
    if isinstance(path, str):  # a cache on object storage: its factors, checked, kept beside the outputs
        from domino_pipeline.store.manifest import manifest_scaling_factors
        path = save_scaling_factors(Path(config.output_dir) / "cache_scaling_factors.json",
                                    manifest_scaling_factors(config.cache.dir))
    ensure_scaling_factors(path, train_runs, sampling=config.sampling, cached=config.cache.enabled,
                           variables=config.variables, options=read_options_from_config(config.data, config.physics),
                           info=info, work_timeout_s=config.distributed.work_timeout_s)
    return split, path


def build_data(config: PipelineConfig, info: DistInfo, train_runs: list[Path], val_runs: list[Path]) -> TrainData:
    """Datasets and loaders; validation draws the same samples every time, so epochs compare."""
    train_set = dataset_from_config(config, train_runs, train=True)
    val_set = dataset_from_config(config, val_runs, train=False) if val_runs else None
    if val_set is not None:
        val_set.set_epoch(0)
    train = config.train
    return TrainData(
        train_runs=train_runs, val_runs=val_runs, train_set=train_set,
        sampler=DistributedSampler(train_set, num_replicas=info.world_size, rank=info.rank, shuffle=True,
                                   seed=config.seed),
        train_loader=make_loader(train_set, train.batch_size, train.num_workers, info.device),
        val_loader=None if val_set is None else make_loader(val_set, train.batch_size, train.val_num_workers,
                                                            info.device),
    )


def build_state(config: PipelineConfig, info: DistInfo) -> TrainingState:
    """DoMINO, AdamW, the schedule and mixed precision, from the `model:` and `train:` sections."""
    widths = {part: len(column_names(getattr(config.variables, part))) for part in ("surface", "volume")}
    model = build_model(config.model_type, config.model, info.device, widths)
    optimizer = build_optimizer(model, config.train)
    dtype = amp_dtype(config.train, info.device)
    return TrainingState(model=model, trained=wrap_ddp(model, config.model_type, info), optimizer=optimizer,
                         scheduler=build_scheduler(optimizer, config.train), scaler=grad_scaler(info.device, dtype),
                         amp_dtype=dtype)


def build_source_data(config: PipelineConfig, info: DistInfo, log: RunLog) -> tuple[TrainData, dict]:
    """Over sources (``data.sources``, or ``data.nondimensional``): the mixtures of every source's
    training and validation runs, each source drawn by its weight, and their scaling factors
    (over every source's training runs, in the form; saved as <output_dir>/scaling_factors.json)."""
    splits = split_sources(config, log.print)
    given = config.sampling.scaling_factors is not None
    train_set, val_set, factors = mixtures(config, splits, dataset_from_config,
                                           scaling_factors_of(config) if given else None)
    if info.is_main and not given:
        save_scaling_factors(scaling_factors_path(config), factors)
    log.write_json("split.json", split_record(splits))
    if val_set is not None:
        val_set.set_epoch(0)
    names, train = train_set.run_names, config.train
    sampler = WeightedSourceSampler(train_set.sizes, [s.weight for s in train_set.sources], seed=config.seed,
                                    num_replicas=info.world_size, rank=info.rank)
    data = TrainData(
        train_runs=[n for s in splits for n in s.names("train")], val_runs=[n for s in splits for n in s.names("val")],
        train_set=train_set, sampler=sampler, run_names=names,
        train_loader=make_loader(train_set, train.batch_size, train.num_workers, info.device),
        val_loader=None if val_set is None else make_loader(val_set, train.batch_size, train.val_num_workers,
                                                            info.device),
        val_sources={} if val_set is None else {s.name: list(val_set.source_indices(i))
                                                 for i, s in enumerate(val_set.sources)},
        source_of=lambda key: names[key % len(names)].split("/")[0])
    return data, factors


def build_trainer(config: PipelineConfig, info: DistInfo) -> Trainer:
    """Everything the epoch loop needs; refusals (missing data, a stale cache, sources that cannot
    share a model, a model that does not fit the data) come before the model is built; a folder of
    checkpoints none of which passes its checks, before anything is written."""
    output_dir = Path(config.output_dir)
    saved = agreed_checkpoint(checkpoint_folder(output_dir))
    if info.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
    log = RunLog(output_dir, enabled=info.is_main)
    model_type = resolve_model_type(config.model_type, config.model)
    config.loss.check(parts_of(model_type), len(column_names(config.variables.surface)))
    if uses_sources(config):
        data, factors = build_source_data(config, info, log)
        variables = data.train_set.sources[0].variables
        names = {f"{part}_fields": column_names(dict(variables[part])) for part in parts_of(model_type)}
    else:
        split, path = split_and_scale(config, info)
        log.write_json("split.json", {role: [name_of(r) for r in getattr(split, role)]
                                      for role in ("train", "val", "test")})
        factors = load_scaling_factors(path, config.sampling.normalization, allow_pickle=config.data.allow_pickle)
        data, names = build_data(config, info, split.train, split.val), target_variable_names(config)
    # DoMINO draws its initial weights and its volume sampling noise from torch's global generator;
    # seeding it here (and checkpointing it) is what makes a run repeatable and resumable.
    torch.manual_seed(config.seed + info.rank)
    check_data_fits_model(data.train_set.settings, resolved_parameters(config.model), data_source(config))
    objective = Objective(loss=config.loss, description=config.loss.describe(parts_of(model_type)),
                          variable_names=names, unscale=unscaler(factors))
    files = CheckpointFiles.under(output_dir, config.as_dict(), keep=config.train.keep_checkpoints)
    return Trainer(info=info, config=config.train, state=build_state(config, info), data=data, objective=objective,
                   files=files, saved=saved, log=log, stop=StopFlag())


def describe(trainer: Trainer, config: PipelineConfig) -> str:
    """The run's first console line: model, devices, runs, data and loss."""
    parameters = sum(p.numel() for p in trainer.state.model.parameters())
    data = trainer.data
    info = trainer.info
    return (f"DoMINO {config.model_type}: {parameters:,} parameters on {info.device} x {info.world_size} "
            f"({info.launcher}); {len(data.train_runs)} training / {len(data.val_runs)} validation runs; "
            f"{data_source(config)}; "
            f"loss {trainer.objective.description}")


@entry_point
def main(config: PipelineConfig) -> int | None:
    """Train; 128 + the signal's number when a signal stopped it."""
    info = distributed.init_distributed(launch_environment(), config.train.device, config.distributed.timeout_s)
    if info.device.type == "cpu" and config.train.cpu_threads > 0:
        torch.set_num_threads(config.train.cpu_threads)
    try:
        trainer = build_trainer(config, info)
        trainer.log.print(describe(trainer, config))
        signum = train_epochs(trainer)
        trainer.log.close()
    finally:
        distributed.shutdown_distributed()
    return None if signum is None else 128 + signum


if __name__ == "__main__":
    main()
