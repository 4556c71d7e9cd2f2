"""One Hydra config section into one typed dataclass: unknown or missing keys are errors."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


def from_section(cls: type[T], section: DictConfig, name: str) -> T:
    """``cls(**section)`` after checking that the section has exactly ``cls``'s fields; a
    ValueError naming ``name`` and the keys otherwise."""
    values = OmegaConf.to_container(section, resolve=True)
    known = {f.name for f in dataclasses.fields(cls)}
    if set(values) != known:
        raise ValueError(f"{name} config: unknown keys {sorted(set(values) - known)}, "
                         f"missing keys {sorted(known - set(values))}")
    return cls(**values)
