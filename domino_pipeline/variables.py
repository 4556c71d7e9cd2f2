"""The kinds of field variable and their widths, and the roles a field can play, shared by the
readers of raw runs (inputs/), the preprocessing (compute/), the model (training/) and the reports
(inference/).

A dataset profile (conf/dataset/<name>.yaml) names, per part, the field that plays each role in its
files; the role says the field's kind and how it is made dimensionless, whatever the dataset calls it.
"""

from __future__ import annotations

from collections.abc import Mapping

VARIABLE_WIDTH = {"scalar": 1, "vector": 3}

# role -> (kind, divisor that makes it dimensionless, in terms of the scaling references U, rho, L)
FIELD_ROLES: dict[str, tuple[str, str]] = {
    "pressure": ("scalar", "rho_u2"),
    "wall_shear_stress": ("vector", "rho_u2"),
    "velocity": ("vector", "u"),
    "turbulent_viscosity": ("scalar", "u_l"),
    "pressure_coefficient": ("scalar", "one"),
    "total_pressure_coefficient": ("scalar", "one"),
    "pressure_fluctuation": ("scalar", "rho_u2_squared"),
    "normalised_speed": ("scalar", "one"),
    "vorticity": ("vector", "u_per_l"),
}
PARTS = ("surface", "volume")


def variable_width(name: str, kind: str) -> int:
    """The number of columns of variable ``name`` of ``kind`` ("scalar" or "vector")."""
    if kind not in VARIABLE_WIDTH:
        raise ValueError(f"variable {name}: kind {kind!r}, expected one of {list(VARIABLE_WIDTH)}")
    return VARIABLE_WIDTH[kind]


def column_names(variables: Mapping[str, str]) -> list[str]:
    """The column names of variables {name: kind}: a scalar keeps its name, a vector becomes
    name_x, name_y, name_z."""
    names = []
    for name, kind in variables.items():
        names += [name] if variable_width(name, kind) == 1 else [f"{name}_{axis}" for axis in "xyz"]
    return names


def check_roles(key: str, fields: Mapping[str, str]) -> None:
    """Refuse a role -> field-name mapping with an unknown role, a name that is not a non-empty
    string, or one name given two roles; ``key`` names the mapping in the message."""
    unknown = [role for role in fields if role not in FIELD_ROLES]
    if unknown:
        raise ValueError(f"{key}: unknown roles {unknown}; the roles are {list(FIELD_ROLES)}")
    bad = {role: name for role, name in fields.items() if not isinstance(name, str) or not name}
    if bad:
        raise ValueError(f"{key}: field names must be non-empty strings, not {bad}")
    names = list(fields.values())
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{key}: {twice} given more than one role")


def variables_of(fields: Mapping[str, str]) -> dict[str, str]:
    """{field name: kind} of a role -> field-name mapping, in its order (the column order)."""
    return {name: FIELD_ROLES[role][0] for role, name in fields.items()}


def roles_of(fields: Mapping[str, str]) -> dict[str, str]:
    """{field name: role} of a role -> field-name mapping."""
    return {name: role for role, name in fields.items()}
