"""One loader per run, pointed at each pass's indices; a rank's epoch order, less a resume's skip."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, DistributedSampler

from domino_pipeline.training.loaders import epoch_indices, loader_over, make_loader


class _Indices(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(index)}


def test_a_pass_reads_exactly_the_indices_set_for_it():
    loader = make_loader(_Indices(), batch_size=2, num_workers=0, device=torch.device("cpu"))
    for indices in ([3, 1, 4], [], [9, 0]):
        seen = [i for batch in loader_over(loader, indices) for i in batch["index"].tolist()]
        assert seen == indices


def test_an_epochs_order_is_fixed_per_epoch_and_rank_and_a_resume_skips_its_head():
    ranks = [DistributedSampler(_Indices(), num_replicas=2, rank=r, shuffle=True, seed=5) for r in (0, 1)]
    first = [epoch_indices(s, 1, 0) for s in ranks]
    assert sorted(first[0] + first[1]) == list(range(10))
    assert epoch_indices(ranks[0], 1, 0) == first[0] and epoch_indices(ranks[0], 2, 0) != first[0]
    assert epoch_indices(ranks[0], 1, 3) == first[0][3:]
