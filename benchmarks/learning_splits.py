"""How the learning benchmark splits a family, and how it sums its splits up.

Each of K splits holds three roles apart: test bodies (they choose nothing: each reported model is
predicted on them once), validation bodies (train.py validates on them; the checkpoint is chosen
by their loss) and training bodies (the rest). The test bodies of successive splits are
consecutive groups of one seeded permutation, so no body is tested twice while the family has
bodies left; past that, each further split draws its own. Validation is train.py's own choice
(``split_with_test`` with the test bodies named, seeded per split), so the benchmark knows it
before training and checks it after.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

ROLES = ("train", "val", "test")


def fraction_for(count: int, total: int) -> float:
    """The fraction f of ``total`` runs whose ceil(f * total) is exactly ``count`` (train.py's rule)."""
    return (count - 0.5) / total if count > 0 else 0.0


def test_sets(names: Sequence[str], count: int, size: int, seed: int) -> list[list[str]]:
    """``count`` test sets of ``size`` names: consecutive groups of one seeded permutation, each
    further set past the permutation's end drawn alone (seeded by ``seed`` and its index); each
    set in the order of ``names``."""
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    groups = len(names) // size
    sets = []
    for index in range(count):
        if index < groups:
            chosen = order[index * size:(index + 1) * size]
        else:
            chosen = [names[i] for i in np.random.default_rng([seed, index]).permutation(len(names))[:size]]
        sets.append([n for n in names if n in chosen])
    return sets


def draw_splits(names: Sequence[str], count: int, val: int, test: int, seed: int) -> list[dict]:
    """``count`` splits of ``names`` into ``test`` test bodies (``test_sets``), ``val`` validation
    bodies (train.py's split of the rest, seeded by ``seed`` + the split's index) and the training
    bodies; each {"index", "split_seed", "train", "val", "test"}. ValueError when too few are left to train."""
    from domino_pipeline.processed.runs import split_with_test
    names = list(names)
    if len(names) - val - test < 2:
        raise ValueError(f"{len(names)} runs: too few to hold {val} for validation and {test} for test "
                         "and train on 2 or more")
    splits = []
    for index, held in enumerate(test_sets(names, count, test, seed)):
        split = split_with_test(names, fraction_for(val, len(names)), seed + index, test_runs=held)
        splits.append({"index": index, "split_seed": seed + index, "train": list(split.train),
                       "val": list(split.val), "test": list(split.test)})
    return splits


def split_overrides(split: dict, total: int) -> list[str]:
    """train.py's overrides that reproduce ``split`` among ``total`` runs: its test runs named
    (no test fraction beside them), the validation fraction and seed."""
    return [f"train.test_runs=[{','.join(split['test'])}]", "train.test_fraction=0",
            f"train.val_fraction={fraction_for(len(split['val']), total)!r}", f"train.split_seed={split['split_seed']}"]


def spread(values: Sequence[float]) -> dict:
    """Mean and standard deviation (n - 1; 0 for one value) of ``values``, NaN-free values only, and the values."""
    finite = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not finite:
        return {"mean": math.nan, "sd": math.nan, "values": list(values)}
    return {"mean": statistics.fmean(finite), "sd": statistics.stdev(finite) if len(finite) > 1 else 0.0,
            "values": list(values)}


def over_splits(columns: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict]]:
    """Per column and measure, ``spread`` of its figures over the splits (``columns``: each split's
    column -> measure -> figure); a column or measure missing in a split is left out there."""
    summary: dict[str, dict[str, dict]] = {}
    for name in dict.fromkeys(c for split in columns for c in split):
        measures = dict.fromkeys(m for split in columns for m in split.get(name, {}))
        summary[name] = {m: spread([split[name][m] for split in columns if m in split.get(name, {})])
                         for m in measures}
    return summary
