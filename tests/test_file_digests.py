"""Files with their digest beside them: written whole with the digest after them, checked on every
read; flipped bytes, a cut, a missing or damaged digest are named with the file; a file replaced in
place matches its digest at every instant; a write that fails leaves the old file and digest."""

from __future__ import annotations

import errno
import hashlib
import json
import zipfile

import pytest

from domino_pipeline.storage import file_digests
from domino_pipeline.runtime.entry_point import one_line
from domino_pipeline.storage.file_digests import (
    DamagedFileError,
    Version,
    check_file,
    check_zip,
    digest_path,
    read_checked,
    remove_checked,
    write_checked,
)


def write_text(path, text: str) -> Version:
    return write_checked(path, lambda tmp: tmp.write_bytes(text.encode()))


def flip(path, at: int, count: int = 8) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, at + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_written_file_has_its_digest_and_passes(tmp_path):
    path = tmp_path / "state.pt"
    version = write_text(path, "hello checkpoint")
    record = json.loads(digest_path(path).read_text())
    expected = hashlib.sha256(b"hello checkpoint").hexdigest()
    assert record == {"file": "state.pt", "versions": [{"sha256": expected, "bytes": 16}]}
    assert version == Version(expected, 16) == check_file(path)
    assert read_checked(path) == b"hello checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pt", "state.pt.sha256"]  # no temporaries


def test_damage_is_named_with_the_file_and_the_fault(tmp_path):
    path = tmp_path / "state.pt"
    write_text(path, "x" * 200)
    flip(path, 100)
    for read in (check_file, read_checked):
        with pytest.raises(DamagedFileError, match=rf"^{path}: its SHA-256 does not match state.pt.sha256: its bytes "
                                                   "changed after it was written$"):
            read(path)
    path.write_bytes(b"x" * 100)
    with pytest.raises(DamagedFileError, match=rf"^{path}: 100 bytes where state.pt.sha256 says 200: truncated$"):
        check_file(path)
    digest_path(path).write_text("{not json")
    with pytest.raises(DamagedFileError, match=rf"^{digest_path(path)}: not a digest file"):
        check_file(path)
    digest_path(path).unlink()
    with pytest.raises(DamagedFileError, match=rf"^{path}: no state.pt.sha256 beside it: its write did not finish"):
        read_checked(path)
    write_text(path, "y")
    path.unlink()
    with pytest.raises(DamagedFileError, match=rf"^{path}: missing; its state.pt.sha256 is there"):
        check_file(path)


def test_a_file_replaced_in_place_matches_its_digest_at_every_instant(tmp_path, monkeypatch):
    path = tmp_path / "model_last.mdlus"
    old = write_text(path, "old weights")
    seen = []
    real = file_digests.write_digest

    def checking(target, versions):  # each digest write is a moment between two renames
        seen.append((check_file(target), list(versions)))
        real(target, versions)

    monkeypatch.setattr(file_digests, "write_digest", checking)
    new = write_text(path, "new weights, longer")
    assert seen == [(old, [old, new]), (new, [new])]  # old file, both listed; then the new file, both listed
    assert check_file(path) == new and json.loads(digest_path(path).read_text())["versions"] == [new.__dict__]


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"),
                                     RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")])
def test_a_write_that_fails_half_way_leaves_the_old_file(tmp_path, failure):
    path = tmp_path / "state.pt"
    old = write_text(path, "the good state")

    def half_then_fail(tmp):
        tmp.write_bytes(b"half of the new st")
        raise failure

    with pytest.raises(OSError) as raised:
        write_checked(path, half_then_fail)
    reason = failure.strerror if isinstance(failure, OSError) else str(failure)
    assert one_line(raised.value) == f"{path}: not written ({reason})"  # the line the user sees
    assert check_file(path) == old and path.read_bytes() == b"the good state"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.pt", "state.pt.sha256"]


def test_removal_takes_the_file_then_its_digest(tmp_path):
    path = tmp_path / "old.pt"
    write_text(path, "old")
    remove_checked(path)
    assert list(tmp_path.iterdir()) == []


def test_a_zip_without_digest_is_checked_by_its_crcs(tmp_path):
    path = tmp_path / "foreign.mdlus"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("args.json", "{}")
        archive.writestr("model.pt", b"w" * 4000)
    check_zip(path)
    check_zip(path, path.read_bytes())
    flip(path, 2000, 64)
    with pytest.raises(DamagedFileError, match=rf"^{path}: its member model.pt fails its CRC-32 or header check: damaged$"):
        check_zip(path)
    path.write_bytes(b"not a zip")
    with pytest.raises(DamagedFileError, match=rf"^{path}: not a readable zip file"):
        check_zip(path)
