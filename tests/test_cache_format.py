"""The cache layout's own rules (store/cache_format.py): generations numbered, not sorted as
text, temporaries never listed; the arrays of each neighbour layout; fingerprints that change
with each of their parts; settings differences listed with the implicit defaults; the metadata
checksum, which follows the zarr.json files and nothing else."""

from __future__ import annotations

import hashlib

import pytest

from domino_pipeline.store.cache_format import (
    ARRAYS,
    FORMAT_VERSION,
    NEIGHBOR_FEATURE_ARRAYS,
    current_generation,
    diff_settings,
    file_sizes,
    generations,
    layout_arrays,
    metadata_sha256,
    run_fingerprint,
)


def test_generations_are_ordered_by_number_and_temporaries_are_hidden(tmp_path):
    for name in ("g2.zarr", "g10.zarr", "g9.zarr", ".g11.zarr.tmp-123-abcd", "g3.zarr.bak", "notes"):
        (tmp_path / name).mkdir()
    assert generations(tmp_path) == [(2, tmp_path / "g2.zarr"), (9, tmp_path / "g9.zarr"),
                                     (10, tmp_path / "g10.zarr")]
    assert current_generation(tmp_path) == tmp_path / "g10.zarr"
    assert generations(tmp_path / "absent") == [] and current_generation(tmp_path / "absent") is None


def test_each_layout_holds_its_arrays():
    assert layout_arrays("indices") == ARRAYS
    assert layout_arrays("features") == ARRAYS | NEIGHBOR_FEATURE_ARRAYS
    assert set(NEIGHBOR_FEATURE_ARRAYS).isdisjoint(ARRAYS)
    with pytest.raises(ValueError, match=r"neighbor_layout must be one of \['indices', 'features'\]; got 'rows'"):
        layout_arrays("rows")


def test_the_run_fingerprint_is_the_hash_of_format_settings_and_source():
    expected = hashlib.sha256(f"{FORMAT_VERSION}:abc:def".encode()).hexdigest()
    assert run_fingerprint("abc", "def") == expected
    assert len({run_fingerprint("abc", "def"), run_fingerprint("abd", "def"), run_fingerprint("abc", "deg")}) == 3


def test_settings_differences_are_dotted_and_implicit_defaults_filled_in():
    cached = {"interp_res": [16, 8, 8], "box": {"min": [0, 0, 0], "max": [1, 1, 1]}}
    expected = {"interp_res": [16, 8, 8], "box": {"min": [0, 0, 0], "max": [2, 1, 1]}, "seed": 3}
    assert diff_settings(cached, expected) == ["box.max: cached [1, 1, 1], expected [2, 1, 1]",
                                               "seed: cached <absent>, expected 3"]
    assert diff_settings({}, {"neighbor_layout": "indices"}) == []  # the implicit default
    assert diff_settings({}, {"neighbor_layout": "features"}) == [
        "neighbor_layout: cached indices, expected features"]


def test_the_metadata_checksum_covers_every_zarr_json_and_only_those(tmp_path):
    (tmp_path / "a" / "c").mkdir(parents=True)
    (tmp_path / "zarr.json").write_text("{group}")
    (tmp_path / "a" / "zarr.json").write_text("{array}")
    (tmp_path / "a" / "c" / "0").write_bytes(b"chunk")
    before = metadata_sha256(tmp_path)
    (tmp_path / "a" / "c" / "0").write_bytes(b"other chunk")
    assert metadata_sha256(tmp_path) == before
    (tmp_path / "a" / "zarr.json").write_text("{Array}")
    assert metadata_sha256(tmp_path) != before
    assert sum(file_sizes(tmp_path)) == len("{group}") + len("{Array}") + len("other chunk")
    assert len(file_sizes(tmp_path)) == 3
