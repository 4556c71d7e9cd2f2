"""How each DrivAerML field is made dimensionless (inputs/nondimensional.py): one divisor per
column, from U, rho and L as the DoMINO example divides them."""

from __future__ import annotations

import numpy as np
import pytest

from domino_pipeline.inputs.nondimensional import car_length, field_divisors


def test_each_column_gets_its_field_s_divisor():
    u, rho, length = 40.0, 1.2, 4.5
    divisors = field_divisors({"pMeanTrim": "scalar", "wallShearStressMeanTrim": "vector", "UMeanTrim": "vector",
                               "nutMeanTrim": "scalar", "pPrime2MeanTrim": "scalar", "CpMeanTrim": "scalar"},
                              stream_velocity=u, air_density=rho, reference_length=length, dtype=np.float64)
    q = rho * u * u
    np.testing.assert_allclose(divisors, [q, q, q, q, u, u, u, u * length, q * q, 1.0])


def test_an_unknown_field_or_kind_is_named():
    with pytest.raises(ValueError, match=r"no non-dimensionalisation for TMean"):
        field_divisors({"TMean": "scalar"}, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"variable pMeanTrim: kind 'tensor'"):
        field_divisors({"pMeanTrim": "tensor"}, 1.0, 1.0, 1.0)


def test_the_car_length_is_the_largest_extent():
    vertices = np.array([[0.0, -1.0, 0.0], [4.2, 1.0, 0.1], [1.0, 0.0, 1.4]])
    assert car_length(vertices) == pytest.approx(4.2)
