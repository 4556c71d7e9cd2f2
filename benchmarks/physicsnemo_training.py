"""train.py's training run, its draws made by physicsnemo 2.2.2's own DoMINODataPipe as its example trains.

The third arm of benchmark_time_to_accuracy.py. Everything but the training draws is train.py's:
the config (``--config-name`` and overrides, as train.py takes them), the split, the model and its
initial weights (the same seed), the optimiser and schedule, the loss, the epoch loop and its
records (epochs.jsonl: data wait against compute, peak memory), checkpoints and SIGTERM. Only the
training batches differ: physicsnemo's ``DoMINODataPipe`` over a ``CAEDataset`` of the training
runs, built as physicsnemo's ``create_domino_dataset`` builds it and iterated as the DoMINO
example's train.py iterates it (no DataLoader; a ``DistributedSampler`` with the run's seed sets
each epoch's order; ``preload_depth`` 1, the example config's; reads on a background thread,
preprocessing in the training process). Its settings are the config's (grid, boxes, points,
neighbours, area-weighted surface draws, coordinates normalised to the boxes); on CUDA its
preprocessing runs on the GPU (``gpu_preprocessing``, physicsnemo's default), on the CPU on the
CPU (``--preprocessing`` forces one). Targets are scaled with the cache's factors in the form the
other arms train on (physicsnemo's ``mean_std_scaling`` with our offset and scale), and
validation is train.py's own, on the cache: every arm is judged on the same validation draws.
physicsnemo's draws are its own (its sampler, its random numbers), not the cache's.

    python benchmarks/physicsnemo_training.py --config-name=demo data.processed_dir=... cache.dir=... output_dir=...
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DistributedSampler

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # train.py's build_trainer, as from the repository
sys.path.insert(0, str(Path(__file__).resolve().parent))
PRELOAD_DEPTH = 1  # the DoMINO example's train.dataloader.preload_depth


def target_factors(factors: dict, kind: str) -> np.ndarray:
    """Our scaling of ``kind``'s targets, (x - offset) / scale, as physicsnemo's
    ``mean_std_scaling`` factors: rows [offset, scale]."""
    from domino_pipeline.compute.scaling import affine
    offset, scale = affine(factors, kind)
    return np.stack([offset, scale]).astype(np.float32)


def global_parameters(item: dict) -> dict[str, torch.Tensor]:
    """The global parameters of one of our items, as the ``CAEDataset`` fills keys a run lacks."""
    return {key: item[key].reshape(-1, 1).float() for key in ("global_params_values", "global_params_reference")}


def physicsnemo_pipe(config, stage_dir: Path, factors: dict, parameters: dict, on_gpu: bool):
    """physicsnemo's ``DoMINODataPipe`` over the runs in ``stage_dir``, with a ``CAEDataset`` as
    ``create_domino_dataset`` sets it (sampling on, coordinates normalised, draws in the box)."""
    from types import SimpleNamespace

    from benchmark_physicsnemo_cache import SURFACE_VARIABLES, VOLUME_VARIABLES, keys_to_read
    from physicsnemo.datapipes.cae.cae_dataset import CAEDataset
    from physicsnemo.datapipes.cae.domino_datapipe import DoMINODataPipe

    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    model_type = config.model_type
    dataset = CAEDataset(data_dir=stage_dir, keys_to_read=keys_to_read(model_type),
                         keys_to_read_if_available=parameters, output_device=device,
                         preload_depth=PRELOAD_DEPTH, pin_memory=False,
                         consumer_stream=torch.cuda.default_stream() if on_gpu else None)
    geometry, sampling = config.geometry, config.sampling
    boxes = {name: SimpleNamespace(min=list(box["min"]), max=list(box["max"]))
             for name, box in (("volume", geometry.bounding_box_volume),
                               ("surface", geometry.bounding_box_surface))}
    pipe = DoMINODataPipe(
        str(stage_dir), model_type, phase="train", grid_resolution=list(geometry.interp_res),
        normalize_coordinates=True, sampling=True, sample_in_bbox=True,
        volume_points_sample=sampling.volume_points, surface_points_sample=sampling.surface_points,
        geom_points_sample=sampling.geometry_points,
        volume_factors=target_factors(factors, "volume") if "volume" in factors else None,
        surface_factors=target_factors(factors, "surface") if "surface" in factors else None,
        scaling_type="mean_std_scaling", bounding_box_dims=boxes["volume"], bounding_box_dims_surf=boxes["surface"],
        volume_sample_from_disk=False, num_surface_neighbors=geometry.num_neighbors_surface,
        surface_sampling_algorithm="area_weighted", volume_variables=list(VOLUME_VARIABLES),
        surface_variables=list(SURFACE_VARIABLES), gpu_preprocessing=on_gpu, gpu_output=on_gpu)
    pipe.set_dataset(dataset)
    return pipe


class PipeEpochs:
    """physicsnemo's datapipe where the epoch loop expects a dataset: its length, and the epoch
    counter that our datasets take (physicsnemo's draws follow torch's generator instead)."""

    def __init__(self, pipe) -> None:
        self.pipe = pipe

    def __len__(self) -> int:
        return len(self.pipe)

    def set_epoch(self, epoch: int) -> None:
        """Nothing to set: physicsnemo draws from torch's global generator, seeded once."""


class PipeLoader:
    """The loader of the epoch loop over physicsnemo's datapipe: the loop sets ``sampler.indices``
    before each pass; a pass hands them to the ``CAEDataset`` and iterates the datapipe, as the
    DoMINO example's train.py does (``dataset.set_indices(list(sampler))``, ``for batch in pipe``)."""

    def __init__(self, pipe) -> None:
        from domino_pipeline.training.epochs import PassIndices
        self.pipe = pipe
        self.sampler = PassIndices()

    def __iter__(self):
        self.pipe.dataset.set_indices(list(self.sampler.indices))
        return iter(self.pipe)

    def __len__(self) -> int:
        return len(self.sampler.indices)


def stage_training_runs(train_runs: list[Path], out: Path) -> Path:
    """A folder of links to exactly the training runs (``CAEDataset`` reads every entry of its folder)."""
    from benchmark_physicsnemo_cache import stage_runs
    runs = [Path(r) for r in train_runs]
    return stage_runs(runs[0].parent, [r.name for r in runs], out / "physicsnemo_runs")[0].parent


def with_physicsnemo_draws(trainer, config, on_gpu: bool):
    """``trainer`` with its training draws from physicsnemo's datapipe (validation unchanged)."""
    from domino_pipeline.processed.runs import run_name
    data = trainer.data
    stage = stage_training_runs(data.train_runs, Path(config.output_dir))
    factors = data.train_set.scaling_factors
    pipe = physicsnemo_pipe(config, stage, factors, global_parameters(data.train_set[0]), on_gpu)
    info = trainer.info
    sampler = DistributedSampler(pipe, num_replicas=info.world_size, rank=info.rank, shuffle=True,
                                 seed=config.seed)
    names = [run_name(f) for f in pipe.dataset._filenames]
    swapped = dataclasses.replace(data, train_set=PipeEpochs(pipe), sampler=sampler,
                                  train_loader=PipeLoader(pipe), run_names=names)
    return dataclasses.replace(trainer, data=swapped)


def arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-name", default="demo", help="conf/<name>.yaml, as train.py takes it")
    parser.add_argument("--preprocessing", choices=("auto", "cpu", "cuda"), default="auto",
                        help="physicsnemo's preprocessing device (auto: the training device)")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int | None:
    """Train as train.py does, with physicsnemo's draws; 128 + the signal's number when stopped by one."""
    import train
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.configuration.config_files import compose_files
    from domino_pipeline.runtime.launch import launch_environment
    from domino_pipeline.training import distributed
    from domino_pipeline.training.epochs import train_epochs

    args, overrides = arguments(sys.argv[1:] if argv is None else argv)
    config = load_config(compose_files(ROOT / "conf", args.config_name, overrides))
    if not config.cache.enabled:
        sys.exit("physicsnemo_training: validation reads the cache: run with cache.enabled=true")
    info = distributed.init_distributed(launch_environment(), config.train.device, config.distributed.timeout_s)
    if info.device.type == "cpu" and config.train.cpu_threads > 0:
        torch.set_num_threads(config.train.cpu_threads)
    on_gpu = info.device.type == "cuda" if args.preprocessing == "auto" else args.preprocessing == "cuda"
    try:
        trainer = with_physicsnemo_draws(train.build_trainer(config, info), config, on_gpu)
        trainer.log.print(train.describe(trainer, config).replace(
            train.data_description(config), f"physicsnemo DoMINODataPipe ({'GPU' if on_gpu else 'CPU'} preprocessing)"))
        signum = train_epochs(trainer)
        trainer.log.close()
    finally:
        distributed.shutdown_distributed()
    return None if signum is None else 128 + signum


if __name__ == "__main__":
    sys.exit(main())
