"""Checks of a cache run generation's metadata against itself and its manifest entry: counts against array lengths, grid
shapes against the settings, the recorded run name and source. Plain values in, ``RunMetadataError`` out."""

from __future__ import annotations

from typing import Any

from domino_pipeline.processed.runs import run_name
from domino_pipeline.store.cache_format import CacheError

GRIDS = ("surface_grid_sdf", "volume_grid_sdf")


class RunMetadataError(CacheError):
    """Metadata of a cache run that contradicts itself, its bytes or its manifest entry."""


def check_counts(counts: Any, lengths: dict[str, int]) -> None:
    """RunMetadataError unless ``counts`` gives each kind's rows as the length of its arrays (``lengths``)."""
    if not isinstance(counts, dict):
        raise RunMetadataError(f"counts {counts!r} is not a mapping")
    for array, rows in sorted(lengths.items()):
        if array in GRIDS:
            continue
        kind = array.split("_", 1)[0]  # the counts key: geometry, surface or volume
        count = counts.get(kind)
        if type(count) is not int or count < 0:
            raise RunMetadataError(f"counts.{kind} is {count!r}, not a row count")
        if count != rows:
            raise RunMetadataError(f"counts.{kind} is {count}, but array {array} has {rows} rows")


def check_grids(settings: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """RunMetadataError unless each grid SDF has the shape of the settings' ``interp_res``."""
    resolution = tuple(settings.get("interp_res", ())) if isinstance(settings, dict) else ()
    for grid in GRIDS:
        if grid in shapes and shapes[grid] != resolution:
            raise RunMetadataError(f"array {grid} has shape {shapes[grid]}, the settings' "
                                   f"interp_res is {list(resolution)}")


def check_origin(attrs: dict, name: str, entry: dict) -> None:
    """RunMetadataError unless the generation's recorded source is its manifest entry's (name, fingerprint)."""
    source = attrs.get("source")
    path = source.get("path") if isinstance(source, dict) else None
    if not isinstance(path, str):
        raise RunMetadataError("records no source path")
    recorded = run_name(path)
    if recorded != name:
        raise RunMetadataError(f"records the processed run {recorded!r}, but sits under {name!r} "
                               "in manifest.json (copied or linked from another run?)")
    listed = entry.get("source") if isinstance(entry, dict) else None
    if not isinstance(listed, dict) or listed.get("fingerprint") != source.get("fingerprint"):
        raise RunMetadataError("was built from another version of its processed run than manifest.json records")
