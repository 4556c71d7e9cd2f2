"""benchmarks/learning_splits.py: splits whose roles never meet, test sets that do not repeat while
the family lasts, validation as train.py itself draws it, and the spread over splits."""

from __future__ import annotations

import math

import pytest
from conftest import import_benchmark, typed_config

from domino_pipeline.processed.runs import run_split_from_config

NAMES = [f"run_{i}" for i in range(1, 21)]


def test_each_split_holds_its_roles_apart_and_test_sets_do_not_repeat_while_the_family_lasts():
    splits_module = import_benchmark("learning_splits")
    splits = splits_module.draw_splits(NAMES, 3, val=3, test=6, seed=4)
    for split in splits:
        roles = [set(split[r]) for r in ("train", "val", "test")]
        assert (len(split["train"]), len(split["val"]), len(split["test"])) == (11, 3, 6)
        assert set().union(*roles) == set(NAMES) and sum(map(len, roles)) == len(NAMES)
    assert not set(splits[0]["test"]) & set(splits[1]["test"]) and not set(splits[1]["test"]) & set(splits[2]["test"])
    assert splits == splits_module.draw_splits(NAMES, 3, val=3, test=6, seed=4)  # seeded
    # a fourth set of six outruns the twenty bodies: drawn on its own, still six distinct bodies
    fourth = splits_module.test_sets(NAMES, 4, 6, seed=4)[3]
    assert len(set(fourth)) == 6
    with pytest.raises(ValueError, match="too few to hold 9 for validation and 10 for test"):
        splits_module.draw_splits(NAMES, 1, val=9, test=10, seed=0)


def test_train_py_given_a_splits_overrides_draws_exactly_its_roles():
    splits_module = import_benchmark("learning_splits")
    for split in splits_module.draw_splits(NAMES, 3, val=4, test=5, seed=1):
        overrides = splits_module.split_overrides(split, len(NAMES))
        config = typed_config("train.test_fraction=0.2", *overrides)  # a config's own test fraction yields
        drawn = run_split_from_config(NAMES, config.train, config.seed)
        assert (drawn.train, drawn.val, drawn.test) == (split["train"], split["val"], split["test"])
    assert math.ceil(splits_module.fraction_for(12, 88) * 88) == 12


def test_the_spread_over_splits_is_mean_and_sample_deviation_per_column_and_measure():
    splits_module = import_benchmark("learning_splits")
    columns = [{"model": {"p": 0.1, "cd": 1.0}, "mean": {"cd": 5.0}},
               {"model": {"p": 0.2, "cd": 3.0}, "mean": {"cd": 7.0}},
               {"model": {"p": 0.3, "cd": float("nan")}}]
    summary = splits_module.over_splits(columns)
    assert summary["model"]["p"]["mean"] == pytest.approx(0.2) and summary["model"]["p"]["sd"] == pytest.approx(0.1)
    assert summary["model"]["cd"]["mean"] == pytest.approx(2.0)  # NaN left out of the mean, kept in the values
    assert summary["mean"]["cd"] == {"mean": 6.0, "sd": pytest.approx(math.sqrt(2)), "values": [5.0, 7.0]}
