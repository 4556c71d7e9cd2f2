"""Runs in every accepted form: listing, detection, loading equal arrays from curator-style Zarr
v2 / v3 groups, .npz and (opt-in) legacy .npy dicts, refusals with the file named, global
parameters from the run or the config, and the source fingerprint of curator output."""

from __future__ import annotations

import math
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import typed_config
from curator_fixtures import write_curator_npz, write_curator_zarr, write_legacy_npy

from domino_pipeline.processed.run_layout import ARRAY_NAMES, ProcessedRunError
from domino_pipeline.processed.runs import (
    NoRunsError,
    ReadOptions,
    list_runs,
    load_run,
    open_run,
    run_format,
    run_name,
    run_split_from_config,
    source_fingerprint,
    split_with_test,
)


@pytest.fixture(scope="module")
def source(tiny_processed_dir: Path) -> dict[str, np.ndarray]:
    """The arrays of a run processed by process_data.py."""
    return load_run(tiny_processed_dir / "run_1.zarr")


WRITERS = {
    "curator-zarr-v2": lambda d, a: write_curator_zarr(d / "run_1.zarr", a, zarr_format=2),
    "curator-zarr-v3": lambda d, a: write_curator_zarr(d / "run_1.zarr", a, zarr_format=3),
    "curator-npz": lambda d, a: write_curator_npz(d / "run_1.npz", a),
    "curator-npy": lambda d, a: write_legacy_npy(d / "run_1.npy", a),
}


@pytest.mark.parametrize("form", list(WRITERS))
def test_every_form_loads_the_same_arrays(form, source, tmp_path):
    path = WRITERS[form](tmp_path, source)
    assert list_runs(tmp_path) == [path] and run_name(path) == "run_1"
    loaded = load_run(path, options=ReadOptions(allow_pickle=True))
    assert open_run(path, ReadOptions(allow_pickle=True)).format == run_format(path) == form
    assert list(loaded) == list(ARRAY_NAMES)
    for name in ARRAY_NAMES:
        assert loaded[name].dtype == source[name].dtype, name  # faces back to int32
        np.testing.assert_array_equal(loaded[name], source[name], err_msg=name)


def test_the_curator_writes_what_the_tests_say(source, tmp_path):
    """The Zarr v2 stand-in has the curator's marks: .zgroup, float32 faces, Blosc zstd, no format."""
    path = write_curator_zarr(tmp_path / "run_1.zarr", source, zarr_format=2)
    assert (path / ".zgroup").is_file() and not (path / "zarr.json").exists()
    import zarr
    group = zarr.open_group(str(path), mode="r")
    assert group["stl_faces"].dtype == np.float32 and group["stl_faces"].ndim == 1
    assert "format" not in group.attrs and group.attrs["physics_constants"]["stream_velocity"] == 30.0
    assert "zstd" in str(group["volume_fields"].metadata.to_dict())


def test_the_project_form_is_named_processed(tiny_processed_dir):
    assert run_format(tiny_processed_dir / "run_1.zarr") == "processed"


def test_legacy_npy_is_refused_unless_allowed_and_never_runs_code(source, tmp_path):
    path = write_legacy_npy(tmp_path / "run_1.npy", source)
    with pytest.raises(ProcessedRunError, match=r"run_1.npy: refused: it is a pickled Python dict.*"
                                                r"data.allow_pickle=true"):
        load_run(path)
    evil = tmp_path / "run_2.npy"
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(evil, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump({"stl_coordinates": Payload()}, handle, protocol=4)
    with pytest.raises(ProcessedRunError, match=r"run_2.npy: not a dict of numpy arrays \(refusing to load"):
        load_run(evil, options=ReadOptions(allow_pickle=True))
    assert not marker.exists()


def test_an_npz_with_an_object_array_is_refused(tmp_path):
    np.savez(tmp_path / "run_1.npz", stl_coordinates=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ProcessedRunError, match="run_1.npz: holds an object array"):
        load_run(tmp_path / "run_1.npz")


def test_global_parameters_from_the_arrays_the_attributes_or_the_config(source, tmp_path):
    without = {k: v for k, v in source.items() if not k.startswith("global_params")}
    options = ReadOptions(global_params=(40.0, 1.0))
    write_curator_zarr(tmp_path / "a.zarr", {**without, "global_params_values": np.array([[35.0], [1.1]])})
    loaded = load_run(tmp_path / "a.zarr", ["global_params_values", "global_params_reference"], options=options)
    np.testing.assert_allclose(loaded["global_params_values"], [35.0, 1.1])  # (G, 1) flattened
    np.testing.assert_allclose(loaded["global_params_reference"], [30.0, 1.205])  # physics_constants
    np.savez(tmp_path / "b.npz", **without)  # neither arrays nor constants: the config
    loaded = load_run(tmp_path / "b.npz", ["global_params_values"], options=options)
    np.testing.assert_allclose(loaded["global_params_values"], [40.0, 1.0])


def test_problems_are_named(source, tmp_path):
    path = write_curator_zarr(tmp_path / "run_1.zarr", {k: v for k, v in source.items() if k != "stl_areas"})
    with pytest.raises(ProcessedRunError, match=r"run_1.zarr: missing arrays \['stl_areas'\] \(curator-zarr-v2"):
        load_run(path)
    import zarr
    group = zarr.open_group(str(tmp_path / "other.zarr"), mode="w", zarr_format=2)
    group.create_array("pressure", shape=(3,), dtype="float32")
    with pytest.raises(ProcessedRunError, match=r"other.zarr: a curator-zarr-v2 store without any DoMINO "
                                                r"array; it holds arrays \['pressure'\]"):
        open_run(tmp_path / "other.zarr")
    with pytest.raises(ProcessedRunError, match="cache.zarr: a 'domino-cache' group, not a processed run"):
        group = zarr.open_group(str(tmp_path / "cache.zarr"), mode="w", zarr_format=3)
        group.attrs["format"] = "domino-cache"
        open_run(tmp_path / "cache.zarr")


def test_list_runs_sorts_naturally_hides_temporaries_and_names_what_it_found(tmp_path):
    for name in ("run_10.zarr", "run_2.zarr", ".run_3.zarr.tmp-1-abc", "notes"):
        (tmp_path / name).mkdir()
    (tmp_path / "run_1.npz").write_bytes(b"")
    (tmp_path / "run_4.npy").write_bytes(b"")
    (tmp_path / "scaling_factors.json").write_text("{}")
    assert [p.name for p in list_runs(tmp_path)] == ["run_1.npz", "run_2.zarr", "run_4.npy", "run_10.zarr"]
    (tmp_path / "run_2.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="run run_2 is there twice: run_2.npz and run_2.zarr"):
        list_runs(tmp_path)
    empty = tmp_path / "notes"
    (empty / "readme.txt").write_text("x")
    (empty / "run_1").mkdir()
    with pytest.raises(NoRunsError, match=r"notes: no run found \(expected <run>.zarr groups in Zarr v2 "
                                          r"or v3, <run>.npz or <run>.npy files\); it holds readme.txt, run_1/"):
        list_runs(empty)
    with pytest.raises(FileNotFoundError, match="no such processed-data directory"):
        list_runs(tmp_path / "absent")


@pytest.mark.parametrize("form", ["curator-zarr-v2", "curator-npz"])
def test_rewriting_a_curator_run_with_new_data_changes_its_fingerprint(form, source, tmp_path):
    path = WRITERS[form](tmp_path, source)
    first = source_fingerprint(path)
    copy = tmp_path / "copy"
    copy.mkdir()
    (shutil.copytree if path.is_dir() else shutil.copy)(path, copy / path.name)
    assert source_fingerprint(copy / path.name) == first  # a copy is the same source
    changed = dict(source, surface_fields=source["surface_fields"] * 2)  # same shapes, same attributes
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    WRITERS[form](tmp_path, changed)
    assert source_fingerprint(path) != first


def test_split_is_deterministic():
    runs = [Path(f"run_{i}.zarr") for i in range(10)]
    split = split_with_test(runs, 0.2, seed=3)
    assert split == split_with_test(runs, 0.2, seed=3) and len(split.val) == 2
    assert set(split.train) | set(split.val) == set(runs)


def _validation_first(runs, fraction, seed):
    """The split's rule without test runs: the permutation's first ceil(f * n) validate (at least one, never all)."""
    n_val = min(math.ceil(fraction * len(runs)), len(runs) - 1) if fraction > 0 else 0
    val = sorted((runs[i] for i in np.random.default_rng(seed).permutation(len(runs))[:n_val]), key=runs.index)
    return [run for run in runs if run not in val], val


def test_a_split_without_test_runs_validates_the_first_runs_and_test_runs_follow_the_validation_runs():
    runs = [Path(f"run_{i}.zarr") for i in range(1, 21)]
    for n, fraction, seed in ((20, 0.2, 3), (7, 0.1, 0), (2, 0.5, 1), (1, 0.5, 0), (20, 0.0, 4)):
        split = split_with_test(runs[:n], fraction, seed)
        assert (split.train, split.val, split.test) == (*_validation_first(runs[:n], fraction, seed), [])
    # 20 runs, val 0.1 and test 0.2: the permutation's first 2 validate (as without test runs), the next 4 test
    order = [runs[i] for i in np.random.default_rng(5).permutation(20)]
    split = split_with_test(runs, 0.1, 5, test_fraction=0.2)
    assert split.val == sorted(order[:2], key=runs.index) == _validation_first(runs, 0.1, 5)[1]
    assert split.test == sorted(order[2:6], key=runs.index)
    assert split.train == [r for r in runs if r not in order[:6]]


def test_named_test_runs_are_left_out_of_training_and_validation():
    runs = [Path(f"run_{i}.zarr") for i in range(1, 11)]
    split = split_with_test(runs, 0.2, 0, test_runs=["run_3", 7, "9-10"])
    assert [run_name(r) for r in split.test] == ["run_3", "run_7", "run_9", "run_10"]
    # validation: ceil(0.2 x 10) runs, the first of the seeded permutation that are not test runs
    order = [runs[i] for i in np.random.default_rng(0).permutation(len(runs)) if runs[i] not in split.test]
    assert split.val == sorted(order[:2], key=runs.index)
    assert split.train == [r for r in runs if r not in split.val and r not in split.test]
    with pytest.raises(ValueError, match="none would be left to train on"):
        split_with_test(runs[:2], 0.5, 0, test_runs=["1-2"])
    with pytest.raises(ValueError, match="'run_99' matches no run of train.test_runs"):
        split_with_test(runs, 0.2, 0, test_runs=["run_99"])


def test_train_config_takes_a_test_fraction_or_test_runs_not_both():
    split = run_split_from_config([f"run_{i}" for i in range(1, 11)],
                                  typed_config("train.val_fraction=0.1", "train.test_fraction=0.3").train, seed=2)
    assert (len(split.train), len(split.val), len(split.test)) == (6, 1, 3)
    with pytest.raises(ValueError, match="train.test_runs=\\[3\\] and train.test_fraction=0.2: give one of them"):
        typed_config("train.test_runs=[3]", "train.test_fraction=0.2")
    with pytest.raises(ValueError, match="train.test_fraction must be in \\[0, 1\\), not 1.0"):
        typed_config("train.test_fraction=1.0")
