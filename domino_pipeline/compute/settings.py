"""The settings that decide a run's preprocessed contents: ``PreprocessSettings``, built once from the config
(``settings_from_config``); its ``fingerprinted()`` form is what a cache records and compares."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from domino_pipeline.configuration.config import (NEIGHBOR_LAYOUTS, PARTS, GeometryConfig, VariablesConfig,
                                                  check_choice, parts_setting)
from domino_pipeline.configuration.variables import VARIABLE_WIDTH
# The version of the code that computes a cache's contents, in every settings fingerprint;
# tests/test_code_version.py fails when that code changes without this number being bumped.
PREPROCESS_CODE_VERSION = 2
# The features a cache stores of each surface cell's neighbours with neighbor_layout features
NEIGHBOR_FEATURES = ("coordinates", "normals", "areas")
# Settings fingerprinted() leaves out at these values, so older caches keep their fingerprint (absent: these values)
IMPLICIT_DEFAULTS = {"neighbor_layout": "indices", "parts": list(PARTS)}


@dataclass(frozen=True)
class PreprocessSettings:
    """Every setting that changes the preprocessed arrays (all fingerprinted except ``device``)."""

    bounding_box_volume: tuple[tuple[float, ...], tuple[float, ...]]  # (min xyz, max xyz)
    bounding_box_surface: tuple[tuple[float, ...], tuple[float, ...]]
    interp_res: tuple[int, int, int]
    num_neighbors_surface: int
    surface_variables: tuple[tuple[str, str], ...]  # (name, scalar | vector), in column order
    volume_variables: tuple[tuple[str, str], ...]
    permutation_seed: int = 0
    neighbor_layout: str = "indices"  # one of NEIGHBOR_LAYOUTS
    parts: tuple[str, ...] = PARTS  # the parts a cache holds (process.parts): surface, volume or both
    device: str = "auto"

    def __post_init__(self) -> None:
        for name in ("bounding_box_volume", "bounding_box_surface"):
            lo, hi = (np.asarray(b, dtype=np.float64) for b in getattr(self, name))
            if lo.shape != (3,) or hi.shape != (3,) or not np.all(hi > lo):
                raise ValueError(f"{name} needs min and max of 3 values with max > min; got {getattr(self, name)}")
        if len(self.interp_res) != 3 or min(self.interp_res) < 2:
            raise ValueError(f"interp_res needs 3 values >= 2; got {self.interp_res}")
        if self.num_neighbors_surface < 1:
            raise ValueError(f"num_neighbors_surface must be >= 1; got {self.num_neighbors_surface}")
        for kind, variables in (("surface", self.surface_variables), ("volume", self.volume_variables)):
            bad = [v for v in variables if v[1] not in VARIABLE_WIDTH]
            if bad:
                raise ValueError(f"{kind} variables {bad}: kind must be one of {list(VARIABLE_WIDTH)}")
        check_choice("neighbor_layout", self.neighbor_layout, NEIGHBOR_LAYOUTS)
        if tuple(self.parts) != tuple(p for p in PARTS if p in self.parts):
            raise ValueError(f"parts must be some of {list(PARTS)} in that order; got {list(self.parts)}")
        parts_setting(self.parts)

    def width(self, part: str) -> int:
        """Number of target columns of ``part``."""
        variables = self.surface_variables if part == "surface" else self.volume_variables
        return sum(VARIABLE_WIDTH[kind] for _, kind in variables)

    def fingerprinted(self) -> dict:
        """The JSON form of the settings a cache's contents depend on, less those at ``IMPLICIT_DEFAULTS``."""
        settings = asdict(self)
        del settings["device"]
        settings["code_version"] = PREPROCESS_CODE_VERSION
        settings = json.loads(json.dumps(settings))  # tuples -> lists, as stored in JSON
        for key, value in IMPLICIT_DEFAULTS.items():
            if settings[key] == value:
                del settings[key]
        return settings

    def fingerprint(self) -> str:
        """A SHA-256 of ``fingerprinted()``."""
        return hashlib.sha256(json.dumps(self.fingerprinted(), sort_keys=True).encode()).hexdigest()


def neighbor_layout_of(fingerprinted: dict) -> str:
    """The neighbour layout of settings in their ``fingerprinted()`` form (a cache's settings)."""
    return (IMPLICIT_DEFAULTS | fingerprinted)["neighbor_layout"]


def held_parts(fingerprinted: dict) -> tuple[str, ...]:
    """The parts a cache holds, from its settings in their ``fingerprinted()`` form."""
    return tuple((IMPLICIT_DEFAULTS | fingerprinted)["parts"])


def parse_box(box) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(min, max) from a {"min", "max"} mapping (a Hydra box) or a (min, max) pair."""
    if hasattr(box, "keys"):
        box = (box["min"], box["max"])
    lo, hi = box
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


def settings_from_config(geometry: GeometryConfig, variables: VariablesConfig, *,
                         device: str | None = None, parts: tuple[str, ...] = PARTS) -> PreprocessSettings:
    """The settings of the ``geometry`` and ``variables`` sections (``parts``: those a cache holds)."""
    return PreprocessSettings(
        bounding_box_volume=parse_box(geometry.bounding_box_volume),
        bounding_box_surface=parse_box(geometry.bounding_box_surface), interp_res=tuple(geometry.interp_res),
        num_neighbors_surface=geometry.num_neighbors_surface, surface_variables=tuple(variables.surface.items()),
        volume_variables=tuple(variables.volume.items()), permutation_seed=geometry.permutation_seed,
        neighbor_layout=geometry.neighbor_layout, parts=tuple(parts),
        device=geometry.device if device is None else device)
