"""The configuration files composed as Hydra composes them, without Hydra, for tests, benchmarks
and tools that compose many times (cached per content of the files): this project's ``defaults``
lists and ``key=value``, ``+key=value`` and group overrides only; tests/test_dataset_profile.py
checks the result against Hydra's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from domino_pipeline.configuration.config import HYDRA_KEYS

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(conf_dir: Path, name: str, choices: dict[str, str]) -> DictConfig:
    """``name`` merged after the configs and group choices its defaults list names (``_self_``
    where the list puts it, else last), without Hydra's own keys."""
    own = OmegaConf.load(conf_dir / f"{name}.yaml")
    parts: list[DictConfig] = []
    entries = list(own.get("defaults", []))
    if "_self_" not in entries:
        entries.append("_self_")
    for entry in entries:
        if entry == "_self_":
            parts.append(own)
        elif isinstance(entry, str):
            parts.append(_compose(conf_dir, entry, choices))
        else:
            group, choice = next(iter(OmegaConf.to_container(entry).items()))
            if group.startswith("override "):
                continue  # Hydra's own groups (hydra/job_logging)
            chosen = choices.get(group, choice)
            path = conf_dir / group / f"{chosen}.yaml"
            if not path.is_file():
                known = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
                raise ValueError(f"{group}={chosen}: no such {group}; the {group} choices are {known}")
            parts.append(OmegaConf.create({group: OmegaConf.load(path)}))
    merged = OmegaConf.merge(*parts)
    for key in HYDRA_KEYS:
        merged.pop(key, None)
    return merged


_COMPOSED: dict[tuple, DictConfig] = {}


def compose_files(conf_dir: str | os.PathLike = CONF, name: str = "config",
                  overrides: Sequence[str] = ()) -> DictConfig:
    """conf/<name>.yaml with its defaults' files and group choices, then ``overrides``, left unresolved."""
    conf_dir = Path(conf_dir)
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    stripped = [override.lstrip("+") for override in overrides]
    choices = {key: value for key, _, value in (s.partition("=") for s in stripped) if key in groups}
    dotted = [s for s in stripped if s.partition("=")[0] not in groups]
    key = (str(conf_dir), name, tuple(sorted(choices.items())),
           tuple((str(p), p.read_bytes()) for p in sorted(conf_dir.rglob("*.yaml"))))
    if key not in _COMPOSED:
        _COMPOSED[key] = _compose(conf_dir, name, choices)
    return OmegaConf.merge(_COMPOSED[key], OmegaConf.from_dotlist(dotted))  # a copy: the cached one stays
