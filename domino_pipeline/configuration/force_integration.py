"""A data set's flow and force conventions, and the force on a body from sums over its surface
cells (docs/predict.md, "Force and moment coefficients"). The sums ``P = sum p n A`` and
``S = sum tau A`` do not depend on the convention, so they are gathered a block of cells at a
time (``force_sums``) and turned into the force of any convention afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from domino_pipeline.configuration.config_section import check_choice
from domino_pipeline.configuration.dataset_profile import NORMALS, WALL_SHEAR


@dataclass(frozen=True)
class FreeStream:
    """The flow the coefficients refer to: its speed, its density, and whether the pressure and
    wall shear are kinematic (already divided by the density, as DrivAerML's are)."""

    velocity: float            # m/s
    density: float             # kg/m^3; unused when kinematic
    kinematic: bool = True

    def __post_init__(self) -> None:
        if not (self.velocity > 0 and self.density > 0):
            raise ValueError(f"dataset.flow.velocity and density must be positive, not "
                             f"{self.velocity} and {self.density}")

    @property
    def dynamic_pressure(self) -> float:
        """0.5 rho_inf U_inf^2 in the fields' units (rho_inf = 1 for kinematic fields)."""
        return 0.5 * (1.0 if self.kinematic else self.density) * self.velocity**2


@dataclass(frozen=True)
class ForceConvention:
    """Which way a data set's surface normals point, and on what its wall shear stress acts."""

    normals: str = "into_body"   # DrivAerML (OpenFOAM): into the car
    wall_shear: str = "on_fluid"  # DrivAerML (OpenFOAM wallShearStress): the stress on the fluid

    def __post_init__(self) -> None:
        check_choice("dataset.flow.normals", self.normals, NORMALS)
        check_choice("dataset.flow.wall_shear", self.wall_shear, WALL_SHEAR)

    def force(self, pressure_sum: np.ndarray, shear_sum: np.ndarray) -> np.ndarray:
        """The force on the body from ``force_sums``' sums (3,), or per cell from ``p n A`` and ``tau A`` (N, 3)."""
        outward_sign = 1.0 if self.normals == "out_of_body" else -1.0  # -1: the normals point into the car
        shear_on_body_sign = 1.0 if self.wall_shear == "on_body" else -1.0  # -1: the stress on the fluid
        return -outward_sign * np.asarray(pressure_sum, np.float64) \
            + shear_on_body_sign * np.asarray(shear_sum, np.float64)


ALL_CONVENTIONS = tuple(ForceConvention(n, w) for n in NORMALS for w in WALL_SHEAR)


def force_sums(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray,
               areas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sum p n A, sum tau A)``, each (3,) in float64, over N cells (``vector_areas``: area times unit
    normal as the files orient it); sums over any split of the cells add up to the whole's."""
    pressure, wall_shear, vector_areas, areas = cell_arrays(pressure, wall_shear, vector_areas, areas, "force_sums")
    return pressure @ vector_areas, areas @ wall_shear


def cell_arrays(pressure: np.ndarray, wall_shear: np.ndarray, vector_areas: np.ndarray, areas: np.ndarray,
                what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four per-cell arrays of a force integration in float64; ValueError naming ``what`` on a mismatch."""
    pressure, areas = np.asarray(pressure, np.float64), np.asarray(areas, np.float64)
    vector_areas, wall_shear = np.asarray(vector_areas, np.float64), np.asarray(wall_shear, np.float64)
    if not (pressure.shape == areas.shape == vector_areas.shape[:1] == wall_shear.shape[:1]) \
            or vector_areas.shape[1:] != (3,) or wall_shear.shape[1:] != (3,):
        raise ValueError(f"{what}: pressure {pressure.shape}, wall_shear {wall_shear.shape}, vector areas "
                         f"{vector_areas.shape} and areas {areas.shape} must describe the same N cells")
    return pressure, wall_shear, vector_areas, areas


def coefficients_of_force(force: np.ndarray, *, reference_area: float, dynamic_pressure: float,
                          drag_direction: Sequence[float] = (1.0, 0.0, 0.0),
                          lift_direction: Sequence[float] = (0.0, 0.0, 1.0)) -> dict[str, float]:
    """``{"cd", "cl"}``: F.e / (dynamic_pressure A_ref)."""
    if reference_area <= 0:
        raise ValueError(f"the reference area must be positive, not {reference_area}")
    coefficient = 1.0 / (dynamic_pressure * reference_area)
    return {"cd": float(coefficient * np.asarray(force) @ unit(drag_direction)),
            "cl": float(coefficient * np.asarray(force) @ unit(lift_direction))}


def unit(direction: Sequence[float]) -> np.ndarray:
    """``direction`` scaled to length 1; ValueError for a zero or malformed vector."""
    vector = np.asarray(direction, dtype=np.float64)
    if vector.shape != (3,) or not np.linalg.norm(vector) > 0:
        raise ValueError(f"a force direction needs 3 values, not all zero; got {list(direction)}")
    return vector / np.linalg.norm(vector)
