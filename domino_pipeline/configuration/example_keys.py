"""The keys of physicsnemo's DoMINO example config that this pipeline names differently: such a
key, in a config or as a command-line override, is refused with the name it has here
(docs/example_keys.md has the table).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# example key -> (the key here, or None where nothing here corresponds; a note), from the
# table beside this module
EXAMPLE_KEYS: dict[str, tuple[str | None, str]] = {
    key: (row["here"], row["note"])
    for key, row in json.loads((Path(__file__).with_name("example_keys.json")).read_text()).items()}


def example_key_message(key: str) -> str:
    """One line for an example key: ``<key> is <ours> here`` (or what to do instead)."""
    ours, note = EXAMPLE_KEYS[key]
    head = f"{key} is {ours} here" if ours else f"{key} (physicsnemo's DoMINO example) has no counterpart here"
    return f"{head} ({note})" if note else head


def _listed_prefix(key: str) -> str | None:
    """The longest prefix of dotted ``key`` (itself included) that EXAMPLE_KEYS lists."""
    parts = key.split(".")
    prefixes = (".".join(parts[:end]) for end in range(len(parts), 0, -1))  # the longest first
    return next((prefix for prefix in prefixes if prefix in EXAMPLE_KEYS), None)


def _paths(values: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, Mapping):
            yield from _paths(value, path + ".")


def check_example_keys(values: Mapping[str, Any]) -> None:
    """Refuse (ValueError) a config holding keys of the example's config, naming each with its key here."""
    found = sorted({_listed_prefix(p) for p in _paths(values)} - {None})
    deepest = [k for k in found if not any(other.startswith(k + ".") for other in found)]
    if deepest:
        raise ValueError("; ".join(example_key_message(k) for k in deepest))


def check_example_overrides(arguments: Iterable[str]) -> None:
    """Refuse command-line overrides (``key=value``, ``+key=value``) of the example's keys, before
    Hydra refuses them as "not in struct" without naming the key they have here."""
    keys = [a.split("=", 1)[0].lstrip("+~") for a in arguments if "=" in a and not a.startswith("-")]
    found = sorted({_listed_prefix(k) for k in keys} - {None})
    if found:
        raise ValueError("; ".join(example_key_message(k) for k in found))
