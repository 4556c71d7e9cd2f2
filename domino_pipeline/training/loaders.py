"""The training and validation loaders: one DataLoader each for the whole run, its persistent
workers serving every pass; the sample indices of a pass are set before it (this rank's share
of a seeded shuffle, less the samples a resumed epoch already trained on)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from domino_pipeline.loading.collate import collate_items


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
        multiprocessing_context=getattr(dataset, "worker_context", None) if num_workers > 0 else None,
        pin_memory=device.type == "cuda",
        collate_fn=collate_items,
    )


def loader_over(loader: DataLoader, indices: list[int]) -> DataLoader:
    """`loader`, pointed at exactly `indices` for its next pass."""
    loader.sampler.indices = list(indices)
    return loader


def epoch_indices(sampler: DistributedSampler, epoch: int, skip: int) -> list[int]:
    """This rank's sample order for `epoch` (same on every call), without the first `skip` samples."""
    sampler.set_epoch(epoch)
    return list(sampler)[skip:]
