"""Small helpers shared by the cache and dataset tests: tiny settings and a cache built with the
real cache_data.py code path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from cache_data import build_cache
from domino_pipeline.compute.settings import PreprocessSettings
from domino_pipeline.processed.runs import list_runs
from domino_pipeline.store.build import manifest_runs, write_scaling_factors
from domino_pipeline.store.cache_format import current_generation, layout_arrays, settings_arrays
from domino_pipeline.store.manifest import write_manifest
from domino_pipeline.store.run_writer import RunWriter

SURFACE_VARIABLES = (("pMeanTrim", "scalar"), ("wallShearStressMeanTrim", "vector"))
VOLUME_VARIABLES = (("UMeanTrim", "vector"), ("pMeanTrim", "scalar"), ("nutMeanTrim", "scalar"))
BOX_VOLUME = ((-3.5, -2.25, -0.32), (8.5, 2.25, 3.0))
BOX_SURFACE = ((-1.5, -1.4, -0.32), (5.0, 1.4, 1.4))
INTERP_RES = (16, 8, 8)
# Hydra overrides that give the same settings from conf/config.yaml.
OVERRIDES = ["geometry.interp_res=[16,8,8]", "geometry.device=cpu", "geometry.neighbor_layout=indices"]
SAMPLES = {"surface_points": 256, "volume_points": 512, "geometry_points": 400}


def tiny_settings(**changes) -> PreprocessSettings:
    """The settings the tiny caches are built with (tiny grid, CPU)."""
    values = dict(bounding_box_volume=BOX_VOLUME, bounding_box_surface=BOX_SURFACE,
                  interp_res=INTERP_RES, num_neighbors_surface=7,
                  surface_variables=SURFACE_VARIABLES, volume_variables=VOLUME_VARIABLES,
                  device="cpu")
    values.update(changes)
    return PreprocessSettings(**values)


def build_tiny_cache(processed_dir: Path, cache_dir: Path, settings: PreprocessSettings | None = None) -> Path:
    """Build a cache of every processed run in-process with cache_data.py's functions, with
    scaling factors over all its runs."""
    settings = settings or tiny_settings()
    runs = list_runs(processed_dir)
    results = build_cache(runs, cache_dir, settings, rebuild=False)
    bad = [r for r in results if r.status not in ("built", "skipped")]
    if bad:
        raise RuntimeError(f"tiny cache build failed: {bad}")
    factors = write_scaling_factors(runs, cache_dir, settings, normalization="min_max")
    write_manifest(cache_dir, settings, manifest_runs(runs, cache_dir, settings), scaling_factors=factors)
    return cache_dir


def generation(cache_dir: Path, name: str) -> Path:
    """The newest generation of run ``name`` in a cache (its Zarr group)."""
    path = current_generation(Path(cache_dir) / name)
    assert path is not None, f"{cache_dir}: no generation of {name}"
    return path


def write_run(cache_dir: Path, name: str, contents: dict, settings: PreprocessSettings) -> Path:
    """Write ``preprocess_run``-style ``contents`` as the next generation of run ``name``."""
    shapes = {n: np.shape(contents[n]) for n in layout_arrays(settings.neighbor_layout) if n in contents}
    attrs = {"settings": settings.fingerprinted(), "settings_fingerprint": settings.fingerprint(),
             "source": {"path": name, "fingerprint": "test"}, "fingerprint": "test",
             "counts": {"geometry": len(contents["geometry_coordinates"]),
                        "surface": len(contents["surface_coordinates"]),
                        "volume": len(contents["volume_coordinates"])},
             "scalars": contents["scalars"]}
    with RunWriter(cache_dir, name, shapes, attrs, neighbor_layout=settings.neighbor_layout) as writer:
        for array in shapes:
            writer.write_rows(array, 0, contents[array])
    return writer.path


def read_cache_arrays(cache_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every array of the newest generation of every run of a cache (those of its neighbour
    layout and parts), for array-by-array comparisons."""
    runs = sorted(p.name for p in Path(cache_dir).iterdir() if current_generation(p) is not None)
    out = {}
    for run in runs:
        group = zarr.open_group(str(generation(cache_dir, run)), mode="r")
        names = settings_arrays(group.attrs["settings"])
        out[run] = {name: group[name][...] for name in names}
    return out


def assert_same_cache(a: Path, b: Path) -> None:
    """Two caches hold the same runs with the same arrays, identical."""
    left, right = read_cache_arrays(a), read_cache_arrays(b)
    assert sorted(left) == sorted(right)
    for run in left:
        assert sorted(left[run]) == sorted(right[run]), run
        for name in left[run]:
            np.testing.assert_array_equal(left[run][name], right[run][name], err_msg=f"{run}/{name}")


def first_chunk(cache_run: Path, array: str) -> Path:
    """The path of the first shard file of ``array`` in a cache run generation."""
    chunks = sorted(p for p in (cache_run / array / "c").rglob("*") if p.is_file())
    return chunks[0]


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Invert one byte of a file (the middle one by default)."""
    data = bytearray(path.read_bytes())
    offset = len(data) // 2 if offset is None else offset
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
