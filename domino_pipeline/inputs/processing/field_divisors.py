"""How each field is made dimensionless, by its role (variables.FIELD_ROLES): process_data.py divides
by these divisors, and whoever turns stored or predicted fields back into physical units multiplies
by them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from domino_pipeline.configuration.variables import FIELD_ROLES, VARIABLE_WIDTH, FieldName, check_roles


def field_divisors(
    fields: Mapping[str, FieldName],
    stream_velocity: float,
    air_density: float,
    reference_length: float,
    dtype: type = np.float32,
) -> np.ndarray:
    """Per column divisors making the fields (role -> name, column order) dimensionless, as ``dtype``."""
    check_roles("fields", fields)
    rho_u2 = air_density * stream_velocity**2
    scales = {"rho_u2": rho_u2, "rho_u2_squared": rho_u2**2, "u": stream_velocity, "u2": stream_velocity**2,
              "u_l": stream_velocity * reference_length, "u_per_l": stream_velocity / reference_length, "one": 1.0}
    divisors = []
    for role in fields:
        kind, scale = FIELD_ROLES[role]
        divisors += [scales[scale]] * VARIABLE_WIDTH[kind]
    return np.asarray(divisors, dtype=dtype)


def car_length(stl_vertices: np.ndarray) -> float:
    """The STL's largest extent: the DoMINO example's length scale for the turbulent viscosity."""
    return float(np.max(stl_vertices.max(axis=0) - stl_vertices.min(axis=0)))
