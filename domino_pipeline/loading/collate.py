"""``collate_items``: batches of DoMINO items, handed from DataLoader workers through shared buffers."""

from __future__ import annotations

import torch
from torch.utils.data import default_collate, get_worker_info

from domino_pipeline.loading.batch_transfer import pack


def collate_items(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Batch items as torch's default collate, in a worker as a ``PackedBatch`` in a reused shared buffer."""
    packed = pack(items) if get_worker_info() is not None else None
    if packed is not None:
        return packed
    if len(items) != 1:
        return default_collate(items)
    return {key: value.unsqueeze(0) for key, value in items[0].items()}
