"""The kinds of field variable and their widths, and the roles a field can play, shared by every
stage (docs/datasets.md, "The profile keys"): a field given as one scalar array per component
becomes one variable named after its role.
"""

from __future__ import annotations

from collections.abc import Mapping

# symmetric_tensor: the 6 components xx, xy, xz, yy, yz, zz (OpenFOAM's symmTensor order)
VARIABLE_WIDTH = {"scalar": 1, "vector": 3, "symmetric_tensor": 6}
COMPONENTS = {"scalar": ("",), "vector": ("x", "y", "z"), "symmetric_tensor": ("xx", "xy", "xz", "yy", "yz", "zz")}

# role -> (kind, divisor that makes it dimensionless, in terms of the scaling references U, rho, L)
FIELD_ROLES: dict[str, tuple[str, str]] = {
    "pressure": ("scalar", "rho_u2"),
    "wall_shear_stress": ("vector", "rho_u2"),
    "velocity": ("vector", "u"),
    "turbulent_viscosity": ("scalar", "u_l"),
    "pressure_coefficient": ("scalar", "one"),
    "skin_friction_coefficient": ("vector", "one"),
    "total_pressure_coefficient": ("scalar", "one"),
    "pressure_fluctuation": ("scalar", "rho_u2_squared"),
    "pressure_coefficient_variance": ("scalar", "one"),
    "normalised_speed": ("scalar", "one"),
    "vorticity": ("vector", "u_per_l"),
    "reynolds_stress": ("symmetric_tensor", "u2"),
    "y_plus": ("scalar", "one"),
    "patch_id": ("scalar", "one"),   # an integer per boundary cell: the surface patch it belongs to
}
PARTS = ("surface", "volume")

FieldName = str | list[str]  # one array, or one scalar array per component


def variable_width(name: str, kind: str) -> int:
    """The number of columns of variable ``name`` of ``kind`` (VARIABLE_WIDTH's keys)."""
    if kind not in VARIABLE_WIDTH:
        raise ValueError(f"variable {name}: kind {kind!r}, expected one of {list(VARIABLE_WIDTH)}")
    return VARIABLE_WIDTH[kind]


def column_names(variables: Mapping[str, str]) -> list[str]:
    """The column names of variables {name: kind}: name for a scalar, name_x, name_y, name_z for a vector."""
    names = []
    for name, kind in variables.items():
        names += [name] if variable_width(name, kind) == 1 else [f"{name}_{axis}" for axis in COMPONENTS[kind]]
    return names


def check_roles(key: str, fields: Mapping[str, FieldName]) -> None:
    """Refuse a role -> field-name mapping with an unknown role, a malformed name (a vector or tensor
    role: one name per component), or one name given two roles; ``key`` names it in the message."""
    unknown = [role for role in fields if role not in FIELD_ROLES]
    if unknown:
        raise ValueError(f"{key}: unknown roles {unknown}; the roles are {list(FIELD_ROLES)}")
    bad = {role: name for role, name in fields.items() if not _valid_name(role, name)}
    if bad:
        raise ValueError(f"{key}: field names must be non-empty strings, or lists of one per component of a "
                         f"vector or tensor role, not {bad}")
    names = [array for name in fields.values() for array in _as_list(name)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{key}: {twice} given more than one role")


def _valid_name(role: str, name: object) -> bool:
    if isinstance(name, str):
        return bool(name)
    width = VARIABLE_WIDTH[FIELD_ROLES[role][0]]
    return (isinstance(name, list) and width > 1 and len(name) == width
            and all(isinstance(n, str) and n for n in name))


def _as_list(name: FieldName) -> list[str]:
    return [name] if isinstance(name, str) else list(name)


def column_name(role: str, name: FieldName) -> str:
    """The variable's name: the array's, or the role's for a field composed of scalar arrays."""
    return name if isinstance(name, str) else role


def variables_of(fields: Mapping[str, FieldName]) -> dict[str, str]:
    """{variable name: kind} of a role -> field-name mapping, in its order (the column order)."""
    return {column_name(role, name): FIELD_ROLES[role][0] for role, name in fields.items()}


def arrays_of(fields: Mapping[str, FieldName]) -> dict[str, list[str]]:
    """{variable name: the arrays of the files it is read from, one, or one per component}."""
    return {column_name(role, name): _as_list(name) for role, name in fields.items()}


def roles_of(fields: Mapping[str, FieldName]) -> dict[str, str]:
    """{variable name: role} of a role -> field-name mapping."""
    return {column_name(role, name): role for role, name in fields.items()}
