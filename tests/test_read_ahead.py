"""ReadAhead: blocks produced in a thread ahead of their use, in order, errors handed on, stopped
on close; and processing leaves no reader thread behind, whether a run ends well or not."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from domino_pipeline.inputs.processing.read_ahead import ReadAhead


def _counting(n: int, made: list[int], closed: threading.Event | None = None):
    try:
        for i in range(n):
            made.append(i)
            yield i
    finally:
        if closed is not None:
            closed.set()


def _wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_the_blocks_come_in_order_and_are_read_before_they_are_asked_for() -> None:
    made: list[int] = []
    blocks = ReadAhead(_counting(50, made), depth=3)
    assert _wait_for(lambda: len(made) >= 3)  # nothing asked for yet
    assert list(blocks) == list(range(50))
    assert list(blocks) == []


def test_at_most_depth_blocks_wait_unread() -> None:
    made: list[int] = []
    blocks = ReadAhead(_counting(1000, made), depth=2)
    assert _wait_for(lambda: len(made) >= 3)
    time.sleep(0.3)
    assert len(made) == 3  # two waiting, the third made and held until there is room
    assert next(blocks) == 0
    assert _wait_for(lambda: len(made) == 4)
    blocks.close()


def test_an_error_of_the_producer_is_raised_where_the_blocks_are_used_with_its_traceback() -> None:
    def failing():
        yield 1
        raise ValueError("block 2 is bad")

    blocks = ReadAhead(failing())
    assert next(blocks) == 1
    with pytest.raises(ValueError, match="block 2 is bad") as err:
        next(blocks)
    assert "failing" in {entry.name for entry in err.traceback}
    with pytest.raises(StopIteration):
        next(blocks)


def test_close_stops_the_producer_and_closes_its_iterator() -> None:
    closed = threading.Event()
    made: list[int] = []
    blocks = ReadAhead(_counting(10**9, made, closed), depth=1, name="endless blocks")
    assert next(blocks) == 0
    blocks.close()
    assert closed.is_set()
    assert "endless blocks" not in {t.name for t in threading.enumerate()}
    with pytest.raises(StopIteration):
        next(blocks)


def _reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name in ("surface blocks", "volume blocks")]


def test_processing_leaves_no_reader_thread_whether_the_run_is_written_or_fails(tmp_path: Path, tiny_raw_dir: Path) -> None:
    import shutil

    from conftest import typed_config
    from domino_pipeline.inputs.processing.process_options import ProcessOptions
    from domino_pipeline.inputs.processing.process_runs import process_all

    config = typed_config()
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    [done] = process_all(tiny_raw_dir, tmp_path / "good", options, runs=[1])
    assert done.status == "processed" and _reader_threads() == []

    bad = tmp_path / "raw" / "run_1"
    shutil.copytree(tiny_raw_dir / "run_1", bad)
    stl = next(bad.glob("*.stl"))
    stl.write_bytes(stl.read_bytes()[:200])  # a truncated STL, read while the meshes' blocks are read ahead
    [failed] = process_all(bad.parent, tmp_path / "bad", options)
    assert failed.status == "failed" and stl.name in failed.message
    assert _reader_threads() == []
    assert [p.name for p in (tmp_path / "bad").iterdir()] == [".locks"]  # no run, no temporary one


def test_a_growing_staged_array_is_read_as_its_bytes_are_staged_and_names_the_error_that_ends_it(tmp_path: Path) -> None:
    from domino_pipeline.inputs.raw_files.array_staging import GrowingStagedArray

    path = tmp_path / "array.bin"
    array = GrowingStagedArray(path, 8)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(array.read(2, 6)))
    reader.start()
    time.sleep(0.2)
    assert got == []  # bytes 2..6 not staged yet
    path.write_bytes(b"abcdef")
    array.advance(6)
    reader.join(5)
    assert got == [b"cdef"]
    array.fail(RuntimeError("s3://bucket/volume.vtu: reading stopped"))
    assert array.read(0, 6) == b"abcdef"  # staged bytes stay readable
    with pytest.raises(RuntimeError, match="reading stopped"):
        array.read(4, 8)
    with pytest.raises(RuntimeError, match="reading stopped"):
        array.local_file()  # the whole array is never staged
