"""An error raised in a DataLoader worker reaches the user with the message it had there: the
same as with ``num_workers=0``, in the loop (checked_batches) and in train.py's one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, Dataset

from cache_fixtures import OVERRIDES
from domino_pipeline.compute.sampling import TooFewPointsError
from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.loading.worker_deaths import checked_batches
from domino_pipeline.loading.worker_errors import worker_message

ROOT = Path(__file__).resolve().parents[1]


class _Failing(Dataset):
    """Items whose draw raises ``error`` (made by ``make``)."""

    def __init__(self, make) -> None:
        self.make = make

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int):
        raise self.make()


class _TwoArguments(ValueError):
    """An error torch cannot make again from a message alone."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _raised(num_workers: int, make) -> BaseException:
    loader = DataLoader(_Failing(make), batch_size=1, num_workers=num_workers,
                        multiprocessing_context="fork" if num_workers else None)
    with pytest.raises(Exception) as caught:
        next(checked_batches(loader))
    return caught.value


@pytest.mark.slow
@pytest.mark.parametrize("make", [
    lambda: TooFewPointsError("/data/run_5/g1.zarr: STL vertices: 1882 rows, fewer than the 4096 a draw needs"),
    lambda: FileNotFoundError(2, "No such file or directory", "/data/run_5/g1.zarr/zarr.json"),
    lambda: ValueError("/data/run_5: first line\nsecond line"),
])
def test_a_workers_error_keeps_its_type_and_message(make):
    direct, from_worker = _raised(0, make), _raised(1, make)
    assert type(from_worker) is type(direct) and str(from_worker) == str(direct)
    assert one_line(from_worker) == one_line(direct)  # what an entry point prints


@pytest.mark.slow
def test_an_error_torch_cannot_rebuild_keeps_its_name_and_message():
    got = _raised(1, lambda: _TwoArguments("/data/run_5: bad", 3))
    assert type(got) is RuntimeError and str(got) == "_TwoArguments: /data/run_5: bad"


def test_the_message_is_read_from_the_end_of_the_last_traceback():
    text = ("Caught KeyError in DataLoader worker process 3.\nOriginal Traceback (most recent call last):\n"
            '  File "a.py", line 1, in f\n    g()\nKeyError: \'x\'\n\nDuring handling of the above exception, '
            "another exception occurred:\n\nTraceback (most recent call last):\n"
            '  File "b.py", line 2, in h\n    raise E("p: q")\n    ^^^^^^^^^^^^^^^\n'
            "pkg.mod.E: p: q\nline two\n")
    assert worker_message(text) == "p: q\nline two"
    assert worker_message("no traceback here") is None


TINY = ["sampling.surface_points=128", "sampling.volume_points=128", "sampling.geometry_points=400",
        "model.geometry_rep.geo_conv.base_neurons=8", "model.geometry_rep.geo_conv.surface_neighbors_in_radius=[8,8,16]",
        "model.geometry_local.surface_neighbors_in_radius=[8,16]", "model.geometry_local.base_layer=16",
        "model.nn_basis_functions.base_layer=16", "model.aggregation_model.base_layer=16",
        "model.position_encoder.base_neurons=16", "train.device=cpu", "train.cpu_threads=1", "train.epochs=1",
        "sampling.allow_other_split=true"]  # the fixture cache's factors cover both runs


def _train_error(processed: Path, cache: Path, out: Path, workers: int, *extra: str) -> str:
    """train.py's error line (stderr, ``error: ...``) with ``workers`` DataLoader workers."""
    result = subprocess.run(
        [sys.executable, "train.py", "--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={cache}",
         f"output_dir={out}", *OVERRIDES, *TINY, f"train.num_workers={workers}", f"train.val_num_workers={workers}",
         *extra], cwd=ROOT, capture_output=True, text=True, timeout=240)
    errors = [line[line.index("error: "):] for line in result.stderr.splitlines() if "error: " in line]  # after a bar
    assert result.returncode == 1 and "Traceback" not in result.stderr and len(errors) == 1, result.stderr[-3000:]
    return errors[0].strip()


def _damage_chunks(cache: Path) -> None:
    """A flipped byte in the middle of every stored chunk of every run's surface fields."""
    for shard in sorted(cache.glob("run_*/g*/surface_fields/c/**/*")):
        if shard.is_file():
            data = bytearray(shard.read_bytes())
            data[len(data) // 3] ^= 0xFF
            shard.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["too few STL vertices", "damaged chunk"])
def test_train_prints_a_workers_error_as_without_workers(fault, tiny_processed_dir, cache_dir, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(cache_dir, cache)
    extra = []
    if fault == "too few STL vertices":
        extra = ["sampling.geometry_points=100000"]
    else:
        _damage_chunks(cache)
    direct = _train_error(tiny_processed_dir, cache, tmp_path / "out0", 0, *extra)
    with_workers = _train_error(tiny_processed_dir, cache, tmp_path / "out1", 1, *extra)
    assert with_workers == direct and "DataLoader worker" not in with_workers
    expected = "fewer than the 100000 a draw needs" if fault == "too few STL vertices" else "surface_fields"
    assert str(cache) in direct and expected in direct, direct
