"""The family's shape parameters, their ranges, and a seeded Latin hypercube over them.

Each body is tools/openfoam_fixture's superellipse loft (make_case.Variant) with eleven shape
parameters drawn from the ranges below and everything else (nose position, surface and mesh
resolution, iterations) fixed by MESH, the family's one set of mesh and solver settings.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "openfoam_fixture"))
import make_case  # noqa: E402  (the fixture's geometry and case writer, shared)


@dataclass(frozen=True)
class Range:
    """One shape parameter: the make_case.Variant field it sets, its bounds and what it means."""

    field: str
    low: float
    high: float
    meaning: str


PARAMETERS: tuple[Range, ...] = (
    Range("length", 3.4, 4.2, "body length (m), nose at x = -0.7"),
    Range("width", 1.6, 1.9, "body width (m)"),
    Range("z_roof", 1.15, 1.50, "roof height above the ground (m)"),
    Range("z_belt", 0.70, 0.90, "belt line height, where the cabin starts (m)"),
    Range("z_bottom", 0.12, 0.22, "ground clearance of the flat underside (m)"),
    Range("nose_exponent", 1.6, 4.0, "nose bluntness: planform superellipse exponent of the front half"),
    Range("tail_exponent", 2.0, 10.0, "tail bluntness: planform exponent of the rear half (high: a cut-off tail)"),
    Range("cabin_start", 0.15, 0.35, "windscreen foot, as a fraction of the length"),
    Range("cabin_end", 0.70, 0.95, "rear window foot (slant end), as a fraction of the length"),
    Range("cabin_peak", 0.3, 0.7, "roof's highest point, as a fraction of the cabin (sets windscreen against slant)"),
    Range("cabin_exponent", 0.3, 1.0, "cabin profile sin(pi t)^e: small is boxy with steep screens"),
)

# The same eleven parameters, the body's proportions (length, width, roof height) over wider bounds:
# drag per frontal area moves most with them, so that Cd spreads further than over the car-like ranges.
WIDER_BOUNDS = {"length": (3.0, 4.8), "width": (1.5, 2.1), "z_roof": (1.05, 1.75)}
WIDE: tuple[Range, ...] = tuple(
    dataclasses.replace(p, low=WIDER_BOUNDS[p.field][0], high=WIDER_BOUNDS[p.field][1])
    if p.field in WIDER_BOUNDS else p for p in PARAMETERS)
# Five of them varied (length, height, nose, tail, slant: the rear window's
# foot), over the wide bounds where those have them; the other six fixed at the middle of their
# car-like range (low == high), so that as many bodies cover five directions instead of eleven.
VARIED_FIVE = ("length", "z_roof", "nose_exponent", "tail_exponent", "cabin_end")
FIVE: tuple[Range, ...] = tuple(
    w if w.field in VARIED_FIVE else dataclasses.replace(c, low=round((c.low + c.high) / 2, 6),
                                                         high=round((c.low + c.high) / 2, 6))
    for c, w in zip(PARAMETERS, WIDE))
RANGES: dict[str, tuple[Range, ...]] = {"car": PARAMETERS, "wide": WIDE, "five": FIVE}

# The one set of mesh and solver settings of every body (fixture variant 2's mesh).
MESH = dict(x_nose=-0.7, section_exponent=5.0, n_along=48, n_around=40, base_cells=(28, 12, 7),
            surface_levels=(2, 3), box_level=1, end_time=500, underside_lift=0.25)


@dataclass(frozen=True)
class Settings:
    """What a family may change of MESH and the solver: the RAS model (or "laminar"), the kinematic
    viscosity (m^2/s) and the base grid's cells multiplied by ``base_factor`` in each direction."""

    turbulence: str = "kOmegaSST"
    nu: float = 1.5e-5
    base_factor: float = 1.0

    def describe(self) -> str:
        """family.json's words for the solver: the model, and the viscosity where it is not air's."""
        return self.turbulence if self.nu == RANS.nu else f"{self.turbulence} nu {self.nu:g}"


RANS = Settings()  # air at the fixture's 38.889 m/s (Re about 1e7 over the length), the fixture's mesh


def mesh(settings: Settings = RANS) -> dict:
    """MESH with the base grid refined by ``settings.base_factor``."""
    cells = tuple(int(round(n * settings.base_factor)) for n in MESH["base_cells"])
    return {**MESH, "base_cells": cells}


def latin_hypercube(n: int, dims: int, rng: np.random.Generator) -> np.ndarray:
    """(n, dims) points in [0, 1): each column has exactly one point in each of the n strata
    [k/n, (k+1)/n), placed uniformly inside it, the strata permuted independently per column."""
    if n < 1 or dims < 1:
        raise ValueError(f"latin_hypercube: n and dims must be >= 1, got n={n}, dims={dims}")
    strata = np.stack([rng.permutation(n) for _ in range(dims)], axis=1)
    return (strata + rng.random((n, dims))) / n


def sample_parameters(n: int, seed: int, ranges: tuple[Range, ...] = PARAMETERS) -> list[dict[str, float]]:
    """The shape parameters of ``n`` bodies: a Latin hypercube (seeded) scaled to ``ranges``."""
    unit = latin_hypercube(n, len(ranges), np.random.default_rng(seed))
    low = np.array([p.low for p in ranges])
    high = np.array([p.high for p in ranges])
    values = low + unit * (high - low)
    return [{p.field: round(float(v), 6) for p, v in zip(ranges, row)} for row in values]


def variant(shape: dict[str, float], settings: Settings = RANS) -> make_case.Variant:
    """The make_case.Variant of one body: its shape parameters with the family's mesh and solver settings."""
    unknown = set(shape) - {p.field for p in PARAMETERS}
    if unknown:
        raise ValueError(f"unknown shape parameters {sorted(unknown)}")
    return make_case.Variant(**mesh(settings), **shape, turbulence=settings.turbulence, nu=settings.nu)


def derived_angles(shape: dict[str, float]) -> dict[str, float]:
    """Mean windscreen and rear-window (slant) angles in degrees from the horizontal: the cabin's
    rise z_roof - z_belt over the cabin's length in front of and behind the roof's peak."""
    rise = shape["z_roof"] - shape["z_belt"]
    cabin = (shape["cabin_end"] - shape["cabin_start"]) * shape["length"]
    front, rear = shape["cabin_peak"] * cabin, (1.0 - shape["cabin_peak"]) * cabin
    return {"windscreen_angle_deg": round(math.degrees(math.atan2(rise, front)), 3),
            "slant_angle_deg": round(math.degrees(math.atan2(rise, rear)), 3)}


def with_settings(v: make_case.Variant, **changes) -> make_case.Variant:
    """``v`` with mesh or solver settings changed (the mesh-independence study's finer meshes)."""
    return dataclasses.replace(v, **changes)
