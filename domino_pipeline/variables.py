"""The kinds of field variable and their widths, shared by the readers of raw runs (inputs/),
the preprocessing (compute/), the model (training/) and the reports (inference/)."""

from __future__ import annotations

VARIABLE_WIDTH = {"scalar": 1, "vector": 3}


def variable_width(name: str, kind: str) -> int:
    """The number of columns of variable ``name`` of ``kind`` ("scalar" or "vector")."""
    if kind not in VARIABLE_WIDTH:
        raise ValueError(f"variable {name}: kind {kind!r}, expected one of {list(VARIABLE_WIDTH)}")
    return VARIABLE_WIDTH[kind]
