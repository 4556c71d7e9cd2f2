"""How each field is made dimensionless by its role (inputs/processing/field_divisors.py): one divisor per
column, from U, rho and L as the DoMINO example divides them, whatever the field is called."""

from __future__ import annotations

import numpy as np
import pytest

from domino_pipeline.inputs.processing.field_divisors import car_length, field_divisors


def test_each_column_gets_its_field_s_divisor():
    u, rho, length = 40.0, 1.2, 4.5
    divisors = field_divisors({"pressure": "p", "wall_shear_stress": "tau", "velocity": "U",
                               "turbulent_viscosity": "nut", "pressure_fluctuation": "pPrime2",
                               "pressure_coefficient": "Cp", "vorticity": "w"},
                              stream_velocity=u, air_density=rho, reference_length=length, dtype=np.float64)
    q = rho * u * u
    np.testing.assert_allclose(divisors, [q, q, q, q, u, u, u, u * length, q * q, 1.0] + [u / length] * 3)


def test_an_unknown_role_or_a_name_given_two_roles_is_named():
    with pytest.raises(ValueError, match=r"fields: unknown roles \['temperature'\]; the roles are \['pressure', "):
        field_divisors({"temperature": "TMean"}, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"fields: \['p'\] given more than one role"):
        field_divisors({"pressure": "p", "pressure_coefficient": "p"}, 1.0, 1.0, 1.0)


def test_the_car_length_is_the_largest_extent():
    vertices = np.array([[0.0, -1.0, 0.0], [4.2, 1.0, 0.1], [1.0, 0.0, 1.4]])
    assert car_length(vertices) == pytest.approx(4.2)
