"""The options of processing one DrivAerML run, in one place: what process_data.py passes to each
run, checks before any run starts, and compares with what a processed run recorded.

    options = ProcessOptions.from_config(config.physics, config.variables, config.process)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domino_pipeline.config import VOLUME_SOURCES, PhysicsConfig, ProcessConfig, VariablesConfig, check_choice
from domino_pipeline.inputs.nondimensional import field_divisors

# Each option and the processed-run attribute that records it (volume_source: the one asked for;
# a run also records the source it fell back to)
RECORDED_AS = {"surface_variables": "surface_variables", "volume_variables": "volume_variables",
               "stream_velocity": "stream_velocity", "air_density": "air_density",
               "reference_length": "reference_length", "volume_source": "volume_source_requested"}


@dataclass(frozen=True)
class ProcessOptions:
    """How every run is read and made dimensionless; settings that would fail every run are
    refused on construction (ValueError)."""

    surface_variables: dict[str, str]
    volume_variables: dict[str, str]
    stream_velocity: float
    air_density: float
    reference_length: float | None  # None: each car's length
    volume_source: str              # points | cells

    def __post_init__(self) -> None:
        check_choice("process.volume_source", self.volume_source, VOLUME_SOURCES)
        PhysicsConfig(self.stream_velocity, self.air_density, self.reference_length)  # positive
        for variables in (self.surface_variables, self.volume_variables):
            field_divisors(variables, self.stream_velocity, self.air_density, 1.0)

    @classmethod
    def from_config(cls, physics: PhysicsConfig, variables: VariablesConfig, process: ProcessConfig) -> ProcessOptions:
        """The options of the ``physics``, ``variables`` and ``process`` sections."""
        return cls(surface_variables=dict(variables.surface), volume_variables=dict(variables.volume),
                   stream_velocity=physics.stream_velocity, air_density=physics.air_density,
                   reference_length=physics.reference_length, volume_source=process.volume_source)

    def differences(self, attrs: dict[str, Any]) -> list[str]:
        """``key: stored X, configured Y`` for each option that a processed run's ``attrs`` record
        otherwise."""
        return [f"{key}: stored {attrs.get(attr)!r}, configured {getattr(self, key)!r}"
                for key, attr in RECORDED_AS.items() if attrs.get(attr) != getattr(self, key)]
