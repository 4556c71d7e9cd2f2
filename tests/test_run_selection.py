"""data.runs and data.shard: run numbers, ranges and names, then a round-robin share of the
chosen runs in natural order; the shards of a split together are the runs, each once."""

from __future__ import annotations

import random

import pytest

from domino_pipeline.configuration.run_selection import parse_shard, run_number, select_runs

NAMES = [f"run_{i}" for i in (1, 2, 3, 5, 7, 10, 11, 12, 100)]  # gaps, as DrivAerML has


def test_all_runs_in_natural_order_without_a_selection():
    shuffled = random.Random(0).sample(NAMES, len(NAMES))
    assert select_runs(shuffled, None, None) == NAMES


def test_numbers_ranges_and_names_choose_the_union_in_natural_order():
    assert select_runs(NAMES, [12, "1", "3-10", "run_100"], None) == [
        "run_1", "run_3", "run_5", "run_7", "run_10", "run_12", "run_100"]
    assert select_runs(NAMES, ["2 - 3"], None) == ["run_2", "run_3"]  # a range may be spaced
    assert select_runs(NAMES, ["4-6"], None) == ["run_5"]  # a range need not be complete


def test_a_number_is_the_last_digits_of_a_name():
    assert [run_number(n) for n in ("run_12", "car3_run_40", "baseline")] == [12, 40, None]
    assert select_runs(["car3_run_40", "car3_run_41", "baseline"], [40, "baseline"], None) == [
        "baseline", "car3_run_40"]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 9, 12])
def test_shards_are_disjoint_and_together_the_chosen_runs(count):
    shares = [select_runs(NAMES, None, f"{i}/{count}") for i in range(count)]
    dealt = [name for share in shares for name in share]
    assert sorted(dealt) == sorted(NAMES) and len(dealt) == len(NAMES)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_a_shard_is_dealt_round_robin_after_the_selection():
    assert select_runs(NAMES, None, "0/4") == ["run_1", "run_7", "run_100"]
    assert select_runs(NAMES, None, "1/4") == ["run_2", "run_10"]
    assert select_runs(NAMES, ["3-12"], "0/2") == ["run_3", "run_7", "run_11"]


@pytest.mark.parametrize("shard", ["2/2", "0/0", "1", "a/b", "-1/2", "1/2/3"])
def test_a_malformed_shard_is_refused_with_the_form(shard):
    with pytest.raises(ValueError, match=r"^data.shard must be <i>/<n> with 0 <= i < n"):
        parse_shard(shard)


@pytest.mark.parametrize(("item", "message"), [
    (4, r"^data.runs: 4 matches no run of /raw \(9 listed: run_1, run_2, run_3 ... run_100\)$"),
    ("13-99", r"^data.runs: '13-99' matches no run of /raw"),
    ("run_4", r"^data.runs: 'run_4' matches no run of /raw"),
    ("10-5", r"^data.runs: range '10-5' is empty \(write it low-high\)$"),
    (1.5, r"^data.runs items are run numbers, ranges a-b or run names, not 1.5$"),
    (True, r"^data.runs items are run numbers, ranges a-b or run names, not True$"),
    (" ", r"^data.runs: an empty item$"),
])
def test_an_item_matching_no_run_or_malformed_is_refused(item, message):
    with pytest.raises(ValueError, match=message):
        select_runs(NAMES, [3, item], None, source="/raw")
