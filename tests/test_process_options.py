"""process_data.py's options: built from the config, checked on construction, recorded in a
processed run and compared on a rerun."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import DEFAULTS, PROCESS_OPTIONS, typed_config

from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.processed.run_layout import arrays_for


def test_the_options_come_from_the_dataset_profile_and_the_physics_and_process_sections():
    config = typed_config("physics.reference_length=4.5", "process.volume_source=cells")
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    assert (options.stream_velocity, options.air_density, options.reference_length) == (30.0, 1.205, 4.5)
    assert options.volume_source == "cells" and options.surface_variables == DEFAULTS.variables.surface


def test_what_a_run_records_is_what_a_rerun_compares():
    recorded = PROCESS_OPTIONS.recorded()
    assert recorded["volume_source_requested"] == "points" and "volume_source" not in recorded
    assert PROCESS_OPTIONS.differences(recorded) == []
    changed = replace(PROCESS_OPTIONS, air_density=1.0, volume_source="cells")
    assert changed.differences(recorded) == ["air_density: stored 1.205, configured 1.0",
                                             "volume_source: stored 'points', configured 'cells'"]
    assert PROCESS_OPTIONS.reference_length is None  # the default: stored None, as a run without attributes
    later = ("parts", "surface_location", "surface_normals")  # recorded later: a run without them had the defaults
    recorded_keys = [key for key in vars(PROCESS_OPTIONS) if key not in ("dataset", "statistics") and key not in later]
    assert PROCESS_OPTIONS.differences({}) == [f"{key}: stored None, configured {getattr(PROCESS_OPTIONS, key)!r}"
                                               for key in recorded_keys if getattr(PROCESS_OPTIONS, key) is not None]
    # a run processed before process.parts existed holds every part: "all", as the default
    assert recorded["parts"] == "all" and "parts" not in " ".join(PROCESS_OPTIONS.differences({}))
    surface_only = replace(PROCESS_OPTIONS, parts="surface")
    assert "parts: stored 'all', configured 'surface'" in surface_only.differences({})
    assert surface_only.differences(surface_only.recorded()) == []
    assert replace(PROCESS_OPTIONS, surface_location="points").differences(recorded) == [
        "surface_location: stored 'cells', configured 'points'"]
    # physicsnemo's reader takes an attribute named as an array for that array
    assert not set(recorded) & set(arrays_for(("surface", "volume")))
    assert replace(PROCESS_OPTIONS, statistics=False).differences(recorded) == []  # no array changes
    assert recorded["surface_field_roles"] == dict(DEFAULTS.dataset.fields.surface)
    assert recorded["surface_variables"] == DEFAULTS.variables.surface  # for the readers of processed runs


@pytest.mark.parametrize(("change", "message"), [
    ({"stream_velocity": 0.0}, "stream_velocity, air_density and reference_length"),
    ({"reference_length": -1.0}, "stream_velocity, air_density and reference_length"),
    ({"volume_fields": {"temperature": "TMeanTrim"}}, r"unknown roles \['temperature'\]"),
    ({"volume_source": "faces"}, r"process.volume_source must be one of \['points', 'cells'\]"),
    ({"parts": "stl"}, r"process.parts must be one of \['all', 'surface', 'volume'\], not 'stl'"),
])
def test_options_that_would_fail_every_run_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        replace(PROCESS_OPTIONS, **change)
