"""The DoMINO example's ``scaling_factors.pkl`` as our factors (docs/example_keys.md): refused unless
``data.allow_pickle=true``, then read by an unpickler building only numpy values and the ``ScalingFactors`` record."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from domino_pipeline.storage.atomic_store import write_json_atomic
from domino_pipeline.processed.curator_forms import NumpyOnlyUnpickler

PICKLE_MAGIC = b"\x80"  # every pickle of protocol 2 or later starts with the PROTO opcode
EXAMPLE_CLASS = "ScalingFactors"
EXAMPLE_STATISTICS = {"min": "min_val", "max": "max_val", "mean": "mean", "std": "std"}
CONVERT_HINT = ("python -c \"from domino_pipeline.compute.example_factors import convert; "
                "convert('{path}', '{json}')\"")


class ExampleScalingFactors:
    """What the restricted unpickler builds for the example's ``ScalingFactors``: its attributes only (pickle's
    default state: the instance's ``__dict__``)."""


class _FactorsUnpickler(NumpyOnlyUnpickler):
    """Numpy arrays, scalars and containers, and the example's ``ScalingFactors`` record."""

    def find_class(self, module: str, name: str) -> Any:
        if name == EXAMPLE_CLASS:
            return ExampleScalingFactors
        return super().find_class(module, name)


def is_pickle(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a pickle (False when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            return file.read(1) == PICKLE_MAGIC
    except OSError:
        return False


def read_example_factors(path: str | os.PathLike, *, allow_pickle: bool, normalization: str = "min_max") -> dict:
    """This project's factors from the example's ``scaling_factors.pkl``; ValueError naming file and fix."""
    path = Path(path)
    if not allow_pickle:
        converted = path.with_suffix(".json")
        raise ValueError(f"{path}: a pickled scaling factors file (the DoMINO example's scaling_factors.pkl); "
                         "reading a pickle can run code: set data.allow_pickle=true if you trust it, or convert it "
                         f"once to JSON: {CONVERT_HINT.format(path=path, json=converted)} and set "
                         f"sampling.scaling_factors={converted}")
    with open(path, "rb") as file:
        try:
            record = _FactorsUnpickler(file).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: not the DoMINO example's scaling factors ({error})") from error
    if not isinstance(record, ExampleScalingFactors):
        raise ValueError(f"{path}: holds a {type(record).__name__}, not the example's {EXAMPLE_CLASS}")
    factors: dict[str, Any] = {"normalization": normalization}  # the statistics of surface_fields and volume_fields
    for kind in ("surface", "volume"):
        part = {}
        for ours, theirs in EXAMPLE_STATISTICS.items():
            values = getattr(record, theirs, {}).get(f"{kind}_fields")
            if values is None:
                raise ValueError(f"{path}: no {theirs}['{kind}_fields'] (the file has "
                                 f"{sorted(getattr(record, 'field_keys', []) or [])})")
            part[ours] = np.asarray(values, dtype=np.float64).reshape(-1).tolist()
        factors[kind] = part
    return factors


def convert(pickle_path: str | os.PathLike, json_path: str | os.PathLike, normalization: str = "min_max") -> Path:
    """Write the example's ``scaling_factors.pkl`` as our JSON factors file (running this is the trust decision)."""
    path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, read_example_factors(pickle_path, allow_pickle=True, normalization=normalization))
    return path
