"""Validation during training: this rank's share of the validation runs (the same draw every
time, so epochs compare), summed over all ranks into the loss and per-variable errors."""

from __future__ import annotations

from domino_pipeline.training import distributed
from domino_pipeline.training.epoch_records import validation_metrics
from domino_pipeline.training.loaders import loader_over
from domino_pipeline.training.trainer import Trainer
from domino_pipeline.training.training_loop import evaluate


def run_validation(trainer: Trainer) -> dict[str, float]:
    """The validation metrics (``val_loss``, ``val_loss/<term>``, ``val_rel_l2/<part>/<name>``)."""
    info, objective = trainer.info, trainer.objective
    indices = list(range(info.rank, len(trainer.data.val_runs), info.world_size))
    widths = {key: len(names) for key, names in objective.variable_names.items()}
    sums = evaluate(
        trainer.state.model, loader_over(trainer.data.val_loader, indices), device=info.device,
        amp_dtype=trainer.state.amp_dtype, unscale=objective.unscale, target_widths=widths,
        loss_config=objective.loss,
    )
    reduced = {key: distributed.all_reduce_sum(value) for key, value in sorted(sums.items())}
    return validation_metrics(reduced, objective.variable_names)
