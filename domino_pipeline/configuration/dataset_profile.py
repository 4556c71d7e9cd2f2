"""A dataset profile: everything that differs between datasets, as one typed config section
(``dataset:``, a Hydra config group, conf/dataset/<name>.yaml). The keys, the file patterns and
the fields are described in docs/datasets.md, "The profile keys".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar

from omegaconf import OmegaConf

from domino_pipeline.configuration.config_section import check_choice, from_section
from domino_pipeline.configuration.variables import PARTS, FieldName, arrays_of, check_roles, column_name, roles_of, variables_of

NORMALS = ("into_body", "out_of_body")
WALL_SHEAR = ("on_fluid", "on_body")
COEFFICIENT_FORMATS = ("csv", "openfoam")
# The coefficients the pipeline integrates and compares with the published ones
COEFFICIENTS = ("cd", "cl", "cs", "clf", "clr", "cm_roll", "cm_pitch", "cm_yaw")
REFERENCE_QUANTITIES = ("area", "length", "centre", "velocity")  # velocity: the run's free stream (own columns only)
LOCATIONS = ("cells", "points")


@dataclass(frozen=True)
class RunFilesProfile:
    """``dataset.files``: the patterns of a run folder's files (docs/datasets.md)."""

    stl: str
    surface: str                    # the body's boundary cells: a VTP, or a VTU of polygon cells
    volume: str                     # a VTU, one file or its pieces
    surface_areas: str | None  # the solver's own area of each surface row (.npy, in file order); None: none published


@dataclass(frozen=True)
class FieldsProfile:
    """``dataset.fields``: per part, role -> the field's name in the files (or its components'), in column order."""

    surface: dict[str, FieldName]
    volume: dict[str, FieldName]
    SECTION: ClassVar[str] = "dataset.fields"

    def __post_init__(self) -> None:
        for part in PARTS:
            check_roles(f"{self.SECTION}.{part}", getattr(self, part))


@dataclass(frozen=True)
class OtherFieldsProfile(FieldsProfile):
    """``dataset.other_fields``: further fields the files hold (role -> name), which ``fields`` may take in."""

    SECTION: ClassVar[str] = "dataset.other_fields"


@dataclass(frozen=True)
class SurfaceRowsProfile:
    """``dataset.surface_rows``: a processed surface row is a boundary cell or point (docs/datasets.md)."""

    location: str
    normals: str | None

    def __post_init__(self) -> None:
        check_choice("dataset.surface_rows.location", self.location, LOCATIONS)
        if self.normals is not None and self.location != "points":
            raise ValueError("dataset.surface_rows.normals names a point data array: set it only with "
                             f"location: points (the location is {self.location})")


@dataclass(frozen=True)
class FieldDataProfile:
    """``dataset.field_data``: where each part's files hold the fields: cells, points, or both
    (the synthetic generator writes them there; the surface is read at ``surface_rows.location``)."""

    surface: list[str]
    volume: list[str]

    def __post_init__(self) -> None:
        for part in PARTS:
            where = getattr(self, part)
            if not where or any(w not in LOCATIONS for w in where) or len(set(where)) != len(where):
                raise ValueError(f"dataset.field_data.{part} must list some of {list(LOCATIONS)} once each, "
                                 f"not {where}")


@dataclass(frozen=True)
class FlowProfile:
    """``dataset.flow``: the flow the published coefficients refer to, and how the files state it."""

    velocity: float | None    # m/s, U_inf; None: each run's coefficient file gives it
    density: float            # kg/m^3, rho_inf of the coefficients when the fields are not kinematic
    kinematic: bool           # pressure and wall shear divided by the density (m^2/s^2)
    normals: str              # how the boundary cells' normals point: into_body | out_of_body
    wall_shear: str           # what the wall shear acts on: on_fluid | on_body
    drag_direction: list[float]
    lift_direction: list[float]
    side_direction: list[float]    # the side force's; the pitching moment is about it

    def __post_init__(self) -> None:
        check_choice("dataset.flow.normals", self.normals, NORMALS)
        check_choice("dataset.flow.wall_shear", self.wall_shear, WALL_SHEAR)
        if (self.velocity is not None and self.velocity <= 0) or self.density <= 0:
            raise ValueError(f"dataset.flow: velocity and density must be positive, not "
                             f"{self.velocity} and {self.density}")
        for key in ("drag_direction", "lift_direction", "side_direction"):
            vector = getattr(self, key)
            if len(vector) != 3 or not any(vector):
                raise ValueError(f"dataset.flow.{key} needs 3 values, not all zero; got {vector}")


@dataclass(frozen=True)
class ReferencesProfile:
    """``dataset.references``: constant references of the coefficients and a run's own (docs/datasets.md)."""

    area: float               # m^2
    length: float             # m
    centre: list[float]       # m, the point the moments are taken about
    file: str | None
    format: str
    columns: dict[str, str | list[str]]
    constant_columns: dict[str, str | list[str]]

    def __post_init__(self) -> None:
        check_choice("dataset.references.format", self.format, COEFFICIENT_FORMATS)
        if self.area <= 0 or self.length <= 0 or len(self.centre) != 3:
            raise ValueError(f"dataset.references: area and length must be positive and the centre 3 "
                             f"values, not {self.area}, {self.length}, {self.centre}")
        for key in ("columns", "constant_columns"):
            unknown = sorted(set(getattr(self, key)) - set(REFERENCE_QUANTITIES))
            if unknown:
                raise ValueError(f"dataset.references.{key}: unknown quantities {unknown}; "
                                 f"known: {list(REFERENCE_QUANTITIES)}")
        if "velocity" in self.constant_columns:
            raise ValueError("dataset.references.constant_columns: the velocity is the run's own "
                             "(dataset.references.columns.velocity), not a constant reference")


@dataclass(frozen=True)
class CoefficientsProfile:
    """``dataset.coefficients``: the coefficient files each run publishes (patterns; None: not
    published), over its own and over the constant references, and each coefficient's column."""

    own: str | None
    constant: str | None
    format: str
    columns: dict[str, str]

    def __post_init__(self) -> None:
        check_choice("dataset.coefficients.format", self.format, COEFFICIENT_FORMATS)
        unknown = sorted(set(self.columns) - set(COEFFICIENTS))
        if unknown:
            raise ValueError(f"dataset.coefficients.columns: unknown coefficients {unknown}; "
                             f"known: {list(COEFFICIENTS)}")


@dataclass(frozen=True)
class BoundingBoxesProfile:
    """``dataset.bounding_boxes``: the volume and surface boxes ``geometry.bounding_box_*`` follow by default."""

    volume: dict[str, list[float]]
    surface: dict[str, list[float]]


@dataclass(frozen=True)
class DatasetConfig:
    """``dataset:`` one dataset's profile (conf/dataset/<name>.yaml)."""

    name: str
    run_folders: str          # the run folders' names, with {index}: run_{index}
    files: RunFilesProfile
    fields: FieldsProfile
    other_fields: OtherFieldsProfile
    surface_rows: SurfaceRowsProfile
    field_data: FieldDataProfile
    flow: FlowProfile
    references: ReferencesProfile
    coefficients: CoefficientsProfile
    bounding_boxes: BoundingBoxesProfile

    def __post_init__(self) -> None:
        if self.run_folders.count("{index}") != 1:
            raise ValueError(f"dataset.run_folders must hold {{index}} once, not {self.run_folders!r}")
        if self.surface_rows.location not in self.field_data.surface:
            raise ValueError(f"dataset.surface_rows.location is {self.surface_rows.location}, but the surface "
                             f"files hold their fields at {self.field_data.surface} (dataset.field_data.surface)")
        if self.flow.velocity is None and (self.references.file is None or "velocity" not in self.references.columns):
            raise ValueError("dataset.flow.velocity is null (each run's file gives it), so dataset.references.file "
                             "and dataset.references.columns.velocity must name that file and its column")

    def variables(self, part: str) -> dict[str, str]:
        """{variable name: kind} of ``part``'s fields, in column order."""
        return variables_of(getattr(self.fields, part))

    def arrays(self, part: str) -> dict[str, list[str]]:
        """{variable name: the arrays of the files it is read from} of ``part``'s fields."""
        return arrays_of(getattr(self.fields, part))

    def roles(self, part: str) -> dict[str, str]:
        """{variable name: role} of ``part``'s fields."""
        return roles_of(getattr(self.fields, part))

    def file_fields(self, part: str) -> dict[str, FieldName]:
        """role -> name of every field the files hold of ``part`` (``fields`` and ``other_fields``)."""
        return getattr(self.other_fields, part) | getattr(self.fields, part)

    def has_field(self, part: str, role: str) -> bool:
        """Whether a field of ``part`` plays ``role``."""
        return role in getattr(self.fields, part)

    def field(self, part: str, role: str) -> str:
        """The variable name of the field of ``part`` that plays ``role``; ValueError naming the profile key
        when the profile gives none."""
        names = getattr(self.fields, part)
        if role not in names:
            raise ValueError(f"dataset {self.name}: no {part} field plays the role {role} "
                             f"(set dataset.fields.{part}.{role}); its {part} fields are {names}")
        return column_name(role, names[role])

    def run_index(self, folder_name: str) -> str | None:
        """The ``{index}`` of a run folder's name, or None when the name is not a run folder's."""
        head, _, tail = self.run_folders.partition("{index}")
        match = re.fullmatch(re.escape(head) + r"(\w+?)" + re.escape(tail), folder_name)
        return match.group(1) if match else None


def profile_from_file(path: str | os.PathLike) -> DatasetConfig:
    """The typed, checked profile of a conf/dataset/<name>.yaml file, for tools that run outside Hydra."""
    return from_section(DatasetConfig, OmegaConf.load(path), "dataset")
