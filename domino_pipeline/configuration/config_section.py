"""One config section into one typed dataclass: unknown or missing keys, and values of the wrong
type, are errors."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


def from_section(cls: type[T], section: DictConfig | Mapping[str, Any], name: str) -> T:
    """``cls(**section)`` once the section has exactly ``cls``'s fields, each of its type; else ValueError."""
    values = OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)
    known = {f.name for f in dataclasses.fields(cls)}
    if set(values) != known:
        raise ValueError(f"{name} config: {wrong_keys(values, known)}")
    hints = typing.get_type_hints(cls)
    return cls(**{key: check_type(f"{name}.{key}", value, hints[key]) for key, value in values.items()})


def wrong_keys(given: Mapping[str, Any], known: set[str]) -> str:
    """The unknown keys of ``given`` and the missing ones, each only when there are some."""
    wrong = {"unknown": set(given) - known, "missing": known - set(given)}
    return ", ".join(f"{what} keys {sorted(keys)}" for what, keys in wrong.items() if keys)


def check_type(key: str, value: Any, hint: Any) -> Any:
    """``value`` if it is of type ``hint`` (float from int; unions, lists and dicts checked at the top
    level; a mapping becomes a dataclass asked for), else a ValueError naming ``key``."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if dataclasses.is_dataclass(option) and isinstance(value, Mapping):
            return from_section(option, value, key)
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return None
        if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if origin in (str, bool, list, dict) and isinstance(value, origin):
            return value
    names = " or ".join("null" if o is type(None) else "a mapping" if dataclasses.is_dataclass(o)
                        else getattr(typing.get_origin(o) or o, "__name__", str(o)) for o in options)
    raise ValueError(f"{key} must be {names}, not {value!r}")


def check_choice(key: str, value: Any, choices: tuple) -> None:
    """Refuse ``value`` for ``key`` unless it is one of ``choices``, listing them."""
    if value not in choices:
        raise ValueError(f"{key} must be one of {list(choices)}, not {value!r}")
