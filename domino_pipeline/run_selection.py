"""Which runs a stage takes (``data.runs``): all, or those whose numbers a list names.

A selection is null (every run), a list of numbers and ``"<first>-<last>"`` ranges (Hydra reads
``data.runs=[1,2,5-10]`` as ``[1, 2, "5-10"]``), or the same as one string (``"1,2,5-10"``). A
run's number is the last integer in its name (run_7 -> 7). A number named alone must match a
run; a range may span missing ones (DrivAerML publishes 484 of runs 1-500).

    select_runs(["run_1", "run_2", "run_10"], [1, "5-10"])    # ["run_1", "run_10"]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


def run_number(name: str) -> int | None:
    """The last integer in a run's name, None when it has none."""
    found = re.findall(r"\d+", name)
    return int(found[-1]) if found else None


def parse_selection(spec: Sequence[int | str] | str | None) -> tuple[set[int], list[tuple[int, int]]] | None:
    """(numbers named alone, (first, last) ranges) of a selection; None selects every run;
    ValueError naming a part that is neither."""
    if spec is None:
        return None
    parts = [p for p in spec.strip().strip("[]").split(",") if p.strip()] if isinstance(spec, str) else list(spec)
    single, ranges = set(), []
    for part in parts:
        match = _RANGE.fullmatch(str(part)) if not isinstance(part, bool) else None
        if match is None:
            raise ValueError(f"data.runs: {part!r} is not a run number or a range like 5-10")
        first, last = int(match.group(1)), match.group(2)
        if last is None:
            single.add(first)
        elif int(last) < first:
            raise ValueError(f"data.runs: the range {part!r} runs backwards")
        else:
            ranges.append((first, int(last)))
    return single, ranges


def select_runs(names: Sequence[str], spec: Sequence[int | str] | str | None) -> list[str]:
    """The names of ``names`` (in their order) that the selection ``spec`` takes; ValueError
    naming any number given alone that no run has."""
    selection = parse_selection(spec)
    if selection is None:
        return list(names)
    single, ranges = selection
    numbers = {name: run_number(name) for name in names}
    missing = sorted(single - set(numbers.values()))
    if missing:
        raise ValueError(f"data.runs names runs {missing}, which are not among the {len(names)} runs found")
    return [name for name, n in numbers.items()
            if n is not None and (n in single or any(a <= n <= b for a, b in ranges))]
