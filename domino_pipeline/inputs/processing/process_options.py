"""The options of processing one run, in one place: what process_data.py passes to each run, checks
before any run starts, and compares with what a processed run recorded."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from domino_pipeline.configuration.config import (
    VOLUME_SOURCES,
    PhysicsConfig,
    ProcessConfig,
    check_choice,
    check_scaling_references,
    parts_named,
)
from domino_pipeline.configuration.dataset_profile import LOCATIONS, DatasetConfig
from domino_pipeline.inputs.processing.field_divisors import field_divisors
from domino_pipeline.configuration.variables import FieldName, variables_of


@dataclass(frozen=True)
class ProcessOptions:
    """How every run is read and made dimensionless; settings that would fail every run are refused."""

    dataset: DatasetConfig = field(metadata={"recorded": False})  # the files' names; its name is recorded apart
    # recorded under names no array has (a reader of attributes may take those for arrays)
    surface_fields: dict[str, FieldName] = field(metadata={"recorded_as": "surface_field_roles"})
    volume_fields: dict[str, FieldName] = field(metadata={"recorded_as": "volume_field_roles"})
    stream_velocity: float
    air_density: float
    reference_length: float | None  # None: each car's length
    # points | cells; recorded as the source asked for (a run also records the one it fell back to)
    volume_source: str = field(metadata={"recorded_as": "volume_source_requested"})
    # all | surface | volume: the meshes read besides the STL; runs processed before it have all
    parts: str = field(default="all", metadata={"absent": "all"})
    # what a surface row is (dataset.surface_rows): cells | points, and the point normals' array;
    # runs processed before they were recorded have cells; recorded under names no array has
    surface_location: str = field(default="cells", metadata={"absent": "cells", "recorded_as": "surface_row_location"})
    surface_normals: str | None = field(default=None, metadata={"recorded_as": "surface_row_normals"})
    # gather each run's statistics on the way (run_statistics.py); they change no array
    statistics: bool = field(default=True, metadata={"recorded": False})

    def __post_init__(self) -> None:
        check_choice("process.volume_source", self.volume_source, VOLUME_SOURCES)
        check_choice("dataset.surface_rows.location", self.surface_location, LOCATIONS)
        parts_named(self.parts)
        check_scaling_references(self.stream_velocity, self.air_density, self.reference_length)
        for part in ("surface", "volume"):
            field_divisors(getattr(self, f"{part}_fields"), self.stream_velocity, self.air_density, 1.0)

    @classmethod
    def from_config(cls, dataset: DatasetConfig, physics: PhysicsConfig, process: ProcessConfig) -> ProcessOptions:
        """The options of the ``dataset`` profile and the ``physics`` and ``process`` sections."""
        return cls(dataset=dataset, surface_fields=dict(dataset.fields.surface), volume_fields=dict(dataset.fields.volume),
                   stream_velocity=physics.stream_velocity, air_density=physics.air_density,
                   reference_length=physics.reference_length, volume_source=process.volume_source,
                   parts=process.parts, surface_location=dataset.surface_rows.location,
                   surface_normals=dataset.surface_rows.normals, statistics=process.statistics)

    @property
    def surface_variables(self) -> dict[str, str]:
        """{field name: kind} of the surface fields, in column order."""
        return variables_of(self.surface_fields)

    @property
    def volume_variables(self) -> dict[str, str]:
        """{field name: kind} of the volume fields, in column order."""
        return variables_of(self.volume_fields)

    def recorded(self) -> dict[str, Any]:
        """The options as a processed run records them (a rerun compares them), with the variables."""
        options = {f.metadata.get("recorded_as", f.name): getattr(self, f.name) for f in _recorded()}
        return options | {"surface_variables": self.surface_variables, "volume_variables": self.volume_variables}

    def differences(self, attrs: dict[str, Any]) -> list[str]:
        """``key: stored X, configured Y`` for each option a processed run's ``attrs`` record otherwise."""
        stored = {f.name: attrs.get(f.metadata.get("recorded_as", f.name), f.metadata.get("absent"))
                  for f in _recorded()}
        return [f"{key}: stored {stored[key]!r}, configured {getattr(self, key)!r}"
                for key in stored if stored[key] != getattr(self, key)]


def _recorded() -> list:
    """The fields of ProcessOptions that a processed run records."""
    return [f for f in fields(ProcessOptions) if f.metadata.get("recorded", True)]
