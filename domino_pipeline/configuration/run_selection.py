"""Which runs a stage takes: ``data.runs`` (run numbers, ranges, names), then ``data.shard``
(``<i>/<n>``: every n-th of them in natural order, from the i-th), so the jobs of an array never
write the same run (docs/scaling.md). A run's number is its name's last digits (run_12: 12).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


def select_runs(names: Sequence[str], spec: Sequence[int | str] | None, shard: str | None,
                *, source: str = "the runs") -> list[str]:
    """This ``shard``'s share of the ``names`` that ``spec`` chooses, in natural order; ValueError naming
    ``source`` for an item that matches no run, or a malformed item or shard."""
    ordered = sorted(names, key=name_key)
    chosen = ordered if spec is None else _chosen(ordered, spec, source)
    if shard is None:
        return chosen
    index, count = parse_shard(shard)
    return chosen[index::count]


def select_items(items: Sequence[T], name: Callable[[T], str], spec: Sequence[int | str] | None,
                 shard: str | None, *, source: str = "the runs") -> list[T]:
    """``select_runs`` of runs given as ``items`` (run folders, processed runs, remote runs),
    each named by ``name``: the chosen items, in the order of ``items``."""
    chosen = set(select_runs([name(item) for item in items], spec, shard, source=source))
    return [item for item in items if name(item) in chosen]


def parse_shard(shard: str) -> tuple[int, int]:
    """``"i/n"`` as (i, n) with 0 <= i < n; a ValueError saying the form otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(shard))
    if not match or not int(match[1]) < int(match[2]):
        raise ValueError(f"data.shard must be <i>/<n> with 0 <= i < n (as $SLURM_ARRAY_TASK_ID/"
                         f"$SLURM_ARRAY_TASK_COUNT), not {shard!r}")
    return int(match[1]), int(match[2])


def check_spec(spec: Sequence[int | str] | None) -> None:
    """Refuse a ``data.runs`` item that is neither a number, a range ``a-b`` (a <= b) nor a name."""
    for item in spec or ():
        _matcher(item)


def run_number(name: str) -> int | None:
    """The last group of digits in ``name`` as a number (run_12: 12); None without digits."""
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits else None


def _chosen(ordered: list[str], spec: Sequence[int | str], source: str) -> list[str]:
    """The runs that any item of ``spec`` matches; an item matching none is an error."""
    keep = set()
    for item in spec:
        matched = {name for name in ordered if _matcher(item)(name)}
        if not matched:
            raise ValueError(f"data.runs: {item!r} matches no run of {source} "
                             f"({_sample(ordered)})")
        keep |= matched
    return [name for name in ordered if name in keep]


def _matcher(item: int | str):
    """A test of a run name for one item of ``data.runs``."""
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise ValueError(f"data.runs items are run numbers, ranges a-b or run names, not {item!r}")
    if isinstance(item, int) or item.strip().isdigit():
        number = int(item)
        return lambda name: run_number(name) == number
    bounds = _RANGE.match(item)
    if bounds:
        low, high = int(bounds[1]), int(bounds[2])
        if low > high:
            raise ValueError(f"data.runs: range {item!r} is empty (write it low-high)")
        return lambda name: (n := run_number(name)) is not None and low <= n <= high
    if not item.strip():
        raise ValueError("data.runs: an empty item")
    return lambda name: name == item


def _sample(ordered: list[str]) -> str:
    if not ordered:
        return "none listed"
    shown = ", ".join(ordered[:3]) + (f" ... {ordered[-1]}" if len(ordered) > 3 else "")
    return f"{len(ordered)} listed: {shown}"


def name_key(name: str) -> list[int | str]:
    """Sort key that orders digits by value: run_2 before run_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
