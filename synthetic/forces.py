"""The forces the synthetic runs publish: sums over the boundary rows of the force on the body and
its moment, and the coefficients OpenFOAM's forceCoeffs writes of them (and WindsorML publishes
alike), in the directions the dataset profile gives. Written apart from the pipeline's own
integration (domino_pipeline/inference/forces.py) on purpose: the tests compare the two.

    terms = force_terms(centres, area_vectors, cp, cf)         # per block; the sums add up
    values = coefficients(moment_about(terms, refs.centre), refs, directions)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ForceReferences:
    """The references a published coefficient uses: area (m^2), length (m), moment centre (m)."""

    area: float
    length: float
    centre: tuple[float, float, float]


@dataclass(frozen=True)
class Directions:
    """Unit drag, side and lift directions; the moments are about the drag (roll), side (pitch)
    and lift (yaw) directions."""

    drag: np.ndarray
    side: np.ndarray
    lift: np.ndarray


def force_terms(centres: np.ndarray, area_vectors: np.ndarray, pressure: np.ndarray,
                shear: np.ndarray) -> np.ndarray:
    """The force on the body (3) and its moment about the origin (3) of rows at ``centres`` with
    area vectors out of the body, the pressure and the shear on the body (any units; coefficient
    fields give the force over q): sums over any split of the rows add up."""
    areas = np.linalg.norm(area_vectors, axis=1)
    forces = -pressure.astype(np.float64)[:, None] * area_vectors + shear.astype(np.float64) * areas[:, None]
    return np.concatenate([forces.sum(axis=0), np.cross(centres, forces).sum(axis=0)])


def moment_about(terms: np.ndarray, centre: tuple[float, float, float]) -> np.ndarray:
    """``force_terms`` with the moment taken about ``centre`` instead: M_c = M_0 - c x F."""
    moved = terms.copy()
    moved[3:6] -= np.cross(np.asarray(centre, dtype=np.float64), terms[:3])
    return moved


def coefficients(terms: np.ndarray, references: ForceReferences, directions: Directions) -> dict[str, float]:
    """The coefficients of a force over q (``force_terms`` of coefficient fields) and its moment:
    Cd, Cs, Cl, the roll, pitch and yaw moments over A L, and the front and rear lift
    Clf = Cl/2 + CmPitch, Clr = Cl/2 - CmPitch."""
    force, moment = terms[:3] / references.area, terms[3:6] / (references.area * references.length)
    cl, pitch = float(force @ directions.lift), float(moment @ directions.side)
    return {"cd": float(force @ directions.drag), "cs": float(force @ directions.side), "cl": cl,
            "cm_roll": float(moment @ directions.drag), "cm_pitch": pitch, "cm_yaw": float(moment @ directions.lift),
            "clf": 0.5 * cl + pitch, "clr": 0.5 * cl - pitch}
