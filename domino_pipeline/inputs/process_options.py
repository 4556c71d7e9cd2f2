"""The options of processing one DrivAerML run, in one place: what process_data.py passes to each
run, checks before any run starts, and compares with what a processed run recorded.

    options = ProcessOptions.from_config(config.physics, config.variables, config.process)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from domino_pipeline.config import (
    VOLUME_SOURCES,
    PhysicsConfig,
    ProcessConfig,
    VariablesConfig,
    check_choice,
    check_scaling_references,
)
from domino_pipeline.inputs.nondimensional import field_divisors

@dataclass(frozen=True)
class ProcessOptions:
    """How every run is read and made dimensionless; settings that would fail every run are
    refused on construction (ValueError)."""

    surface_variables: dict[str, str]
    volume_variables: dict[str, str]
    stream_velocity: float
    air_density: float
    reference_length: float | None  # None: each car's length
    # points | cells; recorded as the source asked for (a run also records the one it fell back to)
    volume_source: str = field(metadata={"recorded_as": "volume_source_requested"})

    def __post_init__(self) -> None:
        check_choice("process.volume_source", self.volume_source, VOLUME_SOURCES)
        check_scaling_references(self.stream_velocity, self.air_density, self.reference_length)
        for variables in (self.surface_variables, self.volume_variables):
            field_divisors(variables, self.stream_velocity, self.air_density, 1.0)

    @classmethod
    def from_config(cls, physics: PhysicsConfig, variables: VariablesConfig, process: ProcessConfig) -> ProcessOptions:
        """The options of the ``physics``, ``variables`` and ``process`` sections."""
        return cls(surface_variables=dict(variables.surface), volume_variables=dict(variables.volume),
                   stream_velocity=physics.stream_velocity, air_density=physics.air_density,
                   reference_length=physics.reference_length, volume_source=process.volume_source)

    def recorded(self) -> dict[str, Any]:
        """The options as a processed run's attributes record them (a rerun compares them)."""
        return {f.metadata.get("recorded_as", f.name): getattr(self, f.name) for f in fields(self)}

    def differences(self, attrs: dict[str, Any]) -> list[str]:
        """``key: stored X, configured Y`` for each option that a processed run's ``attrs`` record
        otherwise."""
        stored = {f.name: attrs.get(f.metadata.get("recorded_as", f.name)) for f in fields(self)}
        return [f"{key}: stored {stored[key]!r}, configured {getattr(self, key)!r}"
                for key in stored if stored[key] != getattr(self, key)]
