"""batch_transfer: batches from DataLoader workers equal torch's default batches, reuse a few
buffers, and are never overwritten while anything still views them."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from datapipe import collate_items
from domino_pipeline.loading import batch_transfer
from domino_pipeline.loading.batch_transfer import (
    POOL_SIZE,
    mark_constant,
    output_array,
)


@functools.lru_cache(maxsize=None)
def ramp(n: int) -> torch.Tensor:
    """A constant that every item holds (built once per process)."""
    value = torch.arange(n, dtype=torch.float32)
    mark_constant(value, ramp, (n,))
    return value


class Items(Dataset):
    """Items whose values depend on the index, in three dtypes, plus a constant."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        return {"points": torch.randn(300, 3, generator=g), "ids": torch.arange(7) + index,
                "constant": ramp(1000), "mask": torch.rand(5, generator=g) > 0.5,
                "scalar": torch.tensor(float(index))}


class DrawnInPlace(Items):
    """Items whose large values are allocated with ``output_array``; with ``keep``, each worker
    keeps every item it drew and returns the kept one when asked again."""

    def __init__(self, keep: bool = False) -> None:
        self.keep, self.kept = keep, {}

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index in self.kept:
            return self.kept[index]
        item = super().__getitem__(index)
        points = output_array(tuple(item["points"].shape), np.float32)
        points[...] = item["points"].numpy()
        item["points"] = torch.from_numpy(points)
        if self.keep:
            self.kept[index] = item
        return item


def _assert_batches_equal(expected: dict, got: dict) -> None:
    assert list(expected) == list(got)
    for key in expected:
        assert got[key].shape == expected[key].shape and got[key].dtype == expected[key].dtype, key
        assert torch.equal(got[key], expected[key]), key


def _reference(batch_size: int) -> list[dict]:
    return list(DataLoader(Items(), batch_size=batch_size, collate_fn=default_collate))


@pytest.mark.parametrize("batch_size", [1, 3])
def test_worker_batches_equal_the_default_batches(batch_size):
    loader = DataLoader(Items(), batch_size=batch_size, num_workers=2, collate_fn=collate_items)
    got = list(loader)
    expected = _reference(batch_size)
    assert len(got) == len(expected)
    for x, y in zip(expected, got):
        _assert_batches_equal(x, y)


def test_constants_are_rebuilt_in_the_receiver_not_sent():
    batch = next(iter(DataLoader(Items(), batch_size=1, num_workers=1, collate_fn=collate_items)))
    assert batch["constant"].untyped_storage().data_ptr() == ramp(1000).untyped_storage().data_ptr()
    assert batch["points"].untyped_storage().data_ptr() != ramp(1000).untyped_storage().data_ptr()


def test_buffers_are_reused_once_released():
    before = batch_transfer.mapped_buffers()
    loader = DataLoader(Items(), batch_size=1, num_workers=1, persistent_workers=True,
                        collate_fn=collate_items)
    for expected, got in zip(_reference(1), loader):
        _assert_batches_equal(expected, got)
    used = batch_transfer.mapped_buffers() - before
    assert 1 <= len(used) < POOL_SIZE < len(Items())  # without reuse the pool would fill up


def test_held_batches_and_views_are_never_overwritten():
    loader = DataLoader(Items(), batch_size=1, num_workers=2, persistent_workers=True,
                        collate_fn=collate_items)
    held = list(loader)  # more batches than the pools have buffers: the rest go the default way
    views = [batch["points"][0, 1:3] for batch in held]
    clones = [view.clone() for view in views]
    del held
    for _ in range(2):
        for _ in loader:  # these would land in the buffers the views still see
            pass
    for view, clone in zip(views, clones):
        assert torch.equal(view, clone)


def test_mappings_of_exited_workers_are_forgotten():
    first = batch_transfer.mapped_buffers()
    list(DataLoader(Items(), batch_size=1, num_workers=1, collate_fn=collate_items))
    old = batch_transfer.mapped_buffers() - first
    assert old
    list(DataLoader(Items(), batch_size=1, num_workers=1, collate_fn=collate_items))
    assert not old & batch_transfer.mapped_buffers()


def test_a_batch_of_one_in_the_main_process_is_made_of_views():
    item = Items()[4]
    batch = collate_items([item])
    assert batch["points"].shape == (1, 300, 3)
    assert batch["points"].untyped_storage().data_ptr() == item["points"].untyped_storage().data_ptr()


@pytest.mark.parametrize("batch_size", [1, 3])
def test_arrays_drawn_into_the_buffer_arrive_intact(batch_size):
    loader = DataLoader(DrawnInPlace(), batch_size=batch_size, num_workers=2, persistent_workers=True,
                        collate_fn=collate_items)
    for _ in range(2):
        for expected, got in zip(_reference(batch_size), loader):
            _assert_batches_equal(expected, got)


def test_a_buffer_is_not_reused_while_the_worker_still_holds_its_arrays():
    loader = DataLoader(DrawnInPlace(keep=True), batch_size=1, num_workers=1, persistent_workers=True,
                        collate_fn=collate_items)
    for _ in range(3):  # later passes return the kept items: their buffers must be untouched
        for expected, got in zip(_reference(1), loader):
            _assert_batches_equal(expected, got)


def test_output_array_outside_a_worker_is_plain_numpy():
    out = output_array((4, 3), np.float32)
    assert out.shape == (4, 3) and out.dtype == np.float32 and out.flags.owndata
