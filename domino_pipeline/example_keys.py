"""The keys of physicsnemo's DoMINO example config (``examples/cfd/external_aerodynamics/domino/
src/conf/config.yaml``) that this pipeline names differently: such a key, in a config or as a
command-line override, is refused with the name it has here (docs/example_keys.md has the table).

    model.volume_points_sample is sampling.volume_points here
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# example key -> (the key here, or None where nothing here corresponds; a note)
EXAMPLE_KEYS: dict[str, tuple[str | None, str]] = {
    "project": ("output_dir", "every output goes under output_dir"),
    "project.name": ("output_dir", ""),
    "exp_tag": ("output_dir", ""),
    "project_dir": ("output_dir", ""),
    "output": ("output_dir", ""),
    "resume_dir": ("train.resume_from", "the example's checkpoint.0.<e>.pt and DoMINO.0.<e>.mdlus; a run's own "
                   "<output_dir>/checkpoints/checkpoint.pt is resumed by itself"),
    "data_processor": ("process", "process_data.py reads DrivAerML run folders"),
    "data_processor.kind": (None, "process_data.py reads DrivAerML run folders (run_<i>/)"),
    "data_processor.input_dir": ("data.raw_dir", ""),
    "data_processor.output_dir": ("data.processed_dir", ""),
    "data_processor.cached_dir": ("cache.dir", "cache_data.py writes it"),
    "data_processor.use_cache": ("cache.enabled", ""),
    "data_processor.num_processors": ("process.num_processes", ""),
    "data.input_dir": ("data.processed_dir", "training and validation runs come from one folder"),
    "data.scaling_factors": ("sampling.scaling_factors", "the example's scaling_factors.pkl is read with "
                             "data.allow_pickle=true, or converted once to JSON (compute/example_factors.py)"),
    "data.input_dir_val": ("train.val_fraction", "validation runs are split off data.processed_dir"),
    "data.bounding_box": ("geometry.bounding_box_volume", ""),
    "data.bounding_box.min": ("geometry.bounding_box_volume.min", ""),
    "data.bounding_box.max": ("geometry.bounding_box_volume.max", ""),
    "data.bounding_box_surface": ("geometry.bounding_box_surface", ""),
    "data.bounding_box_surface.min": ("geometry.bounding_box_surface.min", ""),
    "data.bounding_box_surface.max": ("geometry.bounding_box_surface.max", ""),
    "domain_parallelism": (None, "no domain parallelism here; DDP over runs (torchrun)"),
    "variables.surface.solution": ("variables.surface", "the variables sit directly under it"),
    "variables.volume.solution": ("variables.volume", "the variables sit directly under it"),
    "variables.global_parameters": ("physics.stream_velocity", "and physics.air_density: the global parameters"),
    "data.gpu_preprocessing": ("geometry.device", "auto: CUDA when present"),
    "data.gpu_output": (None, "items are CPU tensors; the training loop moves each batch to the device"),
    "model.loss_function": ("loss", ""),
    "model.loss_function.loss_type": ("loss.type", ""),
    "model.loss_function.area_weighing_factor": ("loss.area_scaling_factor", ""),
    "model.volume_points_sample": ("sampling.volume_points", ""),
    "model.surface_points_sample": ("sampling.surface_points", ""),
    "model.geom_points_sample": ("sampling.geometry_points", ""),
    "model.surface_sampling_algorithm": ("sampling.exact", "surface draws are always area-weighted; "
                                         "sampling.surface_window_factor sets the window"),
    "model.num_surface_neighbors": ("geometry.num_neighbors_surface", ""),
    "model.normalization": ("sampling.normalization", "values min_max | mean_std"),
    "model.integral_loss_scaling_factor": ("loss.integral_weight", ""),
    "model.surf_loss_scaling": ("loss.surface_weight", "and loss.area_weight: both surface terms"),
    "model.vol_loss_scaling": ("loss.volume_weight", ""),
    "model.resampling_surface_mesh": (None, "the surface mesh is used as it is"),
    "model.return_volume_neighbors": (None, "the volume items hold no neighbours"),
    "model.geometry_rep.geo_conv.hops": ("model.geometry_rep.geo_conv.surface_hops",
                                         "and model.geometry_rep.geo_conv.volume_hops"),
    "model.geometry_rep.geo_processor_sdf": ("model.geometry_rep.geo_processor",
                                             "physicsnemo's DoMINO has one geometry processor"),
    "model.parameter_model.scaling_params": ("physics.stream_velocity", "and physics.air_density"),
    "train.checkpoint_interval": ("train.checkpoint_every", ""),
    "train.checkpoint_dir": ("output_dir", "checkpoints go to <output_dir>/checkpoints"),
    "train.dataloader": ("train.batch_size", "and train.num_workers"),
    "train.dataloader.batch_size": ("train.batch_size", ""),
    "train.dataloader.pin_memory": (None, "memory is pinned whenever training on CUDA"),
    "train.sampler": (None, "the training runs are always shuffled (DistributedSampler)"),
    "train.add_physics_loss": (None, "the losses are the example's data losses (loss.*)"),
    "val": ("train.val_every", "and train.val_num_workers"),
    "val.dataloader.batch_size": ("train.batch_size", ""),
    "eval": ("predict", "predict.py"),
    "eval.test_path": ("predict.runs", ""),
    "eval.save_path": ("predict.out_dir", ""),
    "eval.checkpoint_name": ("predict.checkpoint", ""),
    "eval.scaling_param_path": ("sampling.scaling_factors", ""),
    "eval.refine_stl": (None, "the STL is used as it is"),
    "eval.stencil_size": (None, "predict.py evaluates each point with the model's own neighbours"),
}


def example_key_message(key: str) -> str:
    """One line for an example key: ``<key> is <ours> here`` (or what to do instead)."""
    ours, note = EXAMPLE_KEYS[key]
    head = f"{key} is {ours} here" if ours else f"{key} (physicsnemo's DoMINO example) has no counterpart here"
    return f"{head} ({note})" if note else head


def _listed_prefix(key: str) -> str | None:
    """The longest prefix of dotted ``key`` (itself included) that EXAMPLE_KEYS lists."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in EXAMPLE_KEYS:
            return ".".join(parts[:end])
    return None


def _paths(values: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, Mapping):
            yield from _paths(value, path + ".")


def check_example_keys(values: Mapping[str, Any]) -> None:
    """Refuse a config (plain nested mappings) holding a key of the example's config, naming each
    with its key here (ValueError)."""
    found = sorted({_listed_prefix(p) for p in _paths(values)} - {None})
    deepest = [k for k in found if not any(other.startswith(k + ".") for other in found)]
    if deepest:
        raise ValueError("; ".join(example_key_message(k) for k in deepest))


def check_example_overrides(arguments: Iterable[str]) -> None:
    """Refuse command-line overrides (``key=value``, ``+key=value``) of the example's keys, before
    Hydra refuses them as "not in struct" without naming the key they have here."""
    keys = [a.split("=", 1)[0].lstrip("+~") for a in arguments if "=" in a and not a.startswith("-")]
    found = sorted({_listed_prefix(k) for k in keys} - {None})
    if found:
        raise ValueError("; ".join(example_key_message(k) for k in found))
