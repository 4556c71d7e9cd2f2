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

from domino_pipeline.configuration.config import PipelineConfig
from domino_pipeline.configuration.source_configs import sources_of
from domino_pipeline.configuration.variables import column_names
from domino_pipeline.loading.assembly import TrainingSources, split_record, training_sources
from domino_pipeline.loading.items import parts_of
from domino_pipeline.loading.mixture import WeightedSourceSampler
from domino_pipeline.runtime.entry_point import entry_point
from domino_pipeline.runtime.launch import launch_environment
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
from domino_pipeline.training.target_scaling import training_scaling_factors, unscaler


def data_description(config: PipelineConfig) -> str:
    """How the training data is named in messages: the sources' caches, the cache directory, or the
    uncached datapipe."""
    if config.data.sources is not None:
        return "caches " + ", ".join(f"{source.name}: {own.cache.dir}" for source, own in sources_of(config))
    if config.cache.enabled:
        return f"cache {config.cache.dir}"
    return f"the uncached datapipe over {config.data.processed_dir}"


def build_data(config: PipelineConfig, info: DistInfo, sources: TrainingSources, factors: dict) -> TrainData:
    """Datasets and loaders over every source; validation draws the same samples every time, so
    epochs compare; over a mixture, each source drawn by its weight, each validation run's source
    and each training key's."""
    train_set, val_set = sources.datasets(factors)
    if val_set is not None:
        val_set.set_epoch(0)
    train, splits = config.train, sources.splits
    loaders = dict(train_loader=make_loader(train_set, train.batch_size, train.num_workers, info.device),
                   val_loader=None if val_set is None else make_loader(val_set, train.batch_size,
                                                                       train.val_num_workers, info.device))
    if sources.mixture is None:
        [split] = splits
        return TrainData(train_runs=split.train_runs, val_runs=split.val_runs, train_set=train_set, **loaders,
                         sampler=DistributedSampler(train_set, num_replicas=info.world_size, rank=info.rank,
                                                    shuffle=True, seed=config.seed))
    names = train_set.run_names
    return TrainData(
        train_runs=[n for s in splits for n in s.names("train")], val_runs=[n for s in splits for n in s.names("val")],
        train_set=train_set, run_names=names, **loaders,
        sampler=WeightedSourceSampler(train_set.sizes, [s.weight for s in train_set.sources], seed=config.seed,
                                      num_replicas=info.world_size, rank=info.rank),
        val_sources={} if val_set is None else {s.name: list(val_set.source_indices(i))
                                                 for i, s in enumerate(val_set.sources)},
        source_of=lambda key: names[key % len(names)].split("/")[0])


def target_variable_names(config: PipelineConfig, sources: TrainingSources, parts: tuple[str, ...]
                          ) -> dict[str, list[str]]:
    """Output variable names per target key of ``parts``: the mixture's (in its form), else the config's."""
    if sources.mixture is None:
        variables = {"volume": config.variables.volume, "surface": config.variables.surface}
    else:
        variables = {part: dict(names) for part, names in sources.mixture[0][0].variables.items()}
    return {f"{part}_fields": column_names(variables[part]) for part in variables if part in parts}


def build_state(config: PipelineConfig, info: DistInfo) -> TrainingState:
    """DoMINO, AdamW, the schedule and mixed precision, from the `model:` and `train:` sections."""
    widths = {part: len(column_names(getattr(config.variables, part))) for part in ("surface", "volume")}
    model = build_model(config.model_type, config.model, info.device, widths)
    optimizer = build_optimizer(model, config.train)
    dtype = amp_dtype(config.train, info.device)
    return TrainingState(model=model, trained=wrap_ddp(model, config.model_type, info), optimizer=optimizer,
                         scheduler=build_scheduler(optimizer, config.train), scaler=grad_scaler(info.device, dtype),
                         amp_dtype=dtype)


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
    sources = training_sources(config, log.print)
    factors = training_scaling_factors(sources, info)
    log.write_json("split.json", split_record(sources.splits, sources.mixture is not None))
    data = build_data(config, info, sources, factors)
    names = target_variable_names(config, sources, parts_of(model_type))
    # DoMINO draws its initial weights and its volume sampling noise from torch's global generator;
    # seeding it here (and checkpointing it) is what makes a run repeatable and resumable.
    torch.manual_seed(config.seed + info.rank)
    check_data_fits_model(data.train_set.settings, resolved_parameters(config.model), data_description(config))
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
            f"{data_description(config)}; "
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
