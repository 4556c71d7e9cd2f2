"""How each DrivAerML field is made dimensionless: process_data.py divides by these divisors, and
whoever turns stored or predicted fields back into physical units multiplies by them.

    divisors = field_divisors({"pMeanTrim": "scalar", "wallShearStressMeanTrim": "vector"},
                              stream_velocity=38.89, air_density=1.205, reference_length=1.0)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from domino_pipeline.variables import variable_width

# How each DrivAerML field is made dimensionless: its divisor in terms of U, rho and L.
FIELD_SCALES = {
    "pMeanTrim": "rho_u2",
    "wallShearStressMeanTrim": "rho_u2",
    "pPrime2MeanTrim": "rho_u2_squared",
    "UMeanTrim": "u",
    "nutMeanTrim": "u_l",
    "CpMeanTrim": "one",
    "magUMeanNormTrim": "one",
}


def field_divisors(
    variables: Mapping[str, str],
    stream_velocity: float,
    air_density: float,
    reference_length: float,
    dtype: type = np.float32,
) -> np.ndarray:
    """Per column divisors that make the fields dimensionless (DoMINO's convention), as ``dtype``."""
    rho_u2 = air_density * stream_velocity**2
    scales = {"rho_u2": rho_u2, "rho_u2_squared": rho_u2**2, "u": stream_velocity,
              "u_l": stream_velocity * reference_length, "one": 1.0}
    divisors = []
    for name, kind in variables.items():
        if name not in FIELD_SCALES:
            raise ValueError(f"no non-dimensionalisation for {name}; known: {sorted(FIELD_SCALES)}")
        divisors += [scales[FIELD_SCALES[name]]] * variable_width(name, kind)
    return np.asarray(divisors, dtype=dtype)


def car_length(stl_vertices: np.ndarray) -> float:
    """The largest extent of the STL's bounding box: the DoMINO example's length scale for
    nutMeanTrim (the car's length for a car)."""
    return float(np.max(stl_vertices.max(axis=0) - stl_vertices.min(axis=0)))
