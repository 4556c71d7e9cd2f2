"""Runs written the way physicsnemo-curator's DoMINO ETL (and physicsnemo's older example) write
them, from a run's arrays: the tests' stand-in for a user's curated data.

What the writers copy from the curator (see docs in domino_pipeline/processed/curator_forms.py):
every array float32 (``stl_faces`` too, flattened), chunks of about 1 MiB (``_prepare_array``:
262,144 rows in 1-D, 1 MiB / (4 x columns) rows in 2-D), Blosc zstd level 5 with byte shuffle,
``global_params_*`` uncompressed in one chunk; root attributes ``filename``, ``dataset_type``,
``physics_constants``, ``x_bound`` / ``y_bound`` / ``z_bound``, ``num_points``, ``num_faces``
(the flattened length, as the curator records it), ``decimation_*``; no ``format`` attribute.
Volume rows stay in the order they come in (the curator's optional shuffle is off).
"""

from __future__ import annotations

from pathlib import Path

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec

PHYSICS = {"air_density": 1.205, "stream_velocity": 30.0}


def curator_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays as the curator stores them: float32, faces flattened."""
    return {name: np.ascontiguousarray(np.asarray(value).reshape(-1) if name == "stl_faces" else value,
                                       dtype=np.float32)
            for name, value in arrays.items()}


def curator_attrs(name: str, arrays: dict[str, np.ndarray]) -> dict:
    """The root attributes of ``ExternalAerodynamicsMetadata``."""
    points = arrays["stl_coordinates"]
    lo, hi = points.min(axis=0).tolist(), points.max(axis=0).tolist()
    return {"filename": name, "dataset_type": "combined", "physics_constants": dict(PHYSICS),
            "x_bound": [lo[0], hi[0]], "y_bound": [lo[1], hi[1]], "z_bound": [lo[2], hi[2]],
            "num_points": len(points), "num_faces": int(np.size(arrays["stl_faces"])),
            "decimation_reduction": 0.0, "decimation_algo": None}


def _chunks(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The curator's ``_prepare_array`` chunks: about 1 MiB of float32."""
    target = (1 << 20) // 4
    if len(shape) == 1:
        return (max(1, min(shape[0], target)),)
    return (max(1, min(shape[0], max(1, target // shape[1]))), *shape[1:])


def write_curator_zarr(path: Path, arrays: dict[str, np.ndarray], *, zarr_format: int = 2,
                       name: str | None = None) -> Path:
    """A curator-style Zarr group: v2 (the curator's Zarr v2 API: ``.zgroup``, ``.zattrs``,
    numcodecs Blosc) or v3 (``zarr.json``, BloscCodec, one shard per array)."""
    stored = curator_arrays(arrays)
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    group.attrs.update(curator_attrs(name or path.stem, stored))
    for key, data in stored.items():
        plain = key.startswith("global_params")
        chunks = data.shape if plain else _chunks(data.shape)
        if zarr_format == 2:
            compressor = None if plain else numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
            target = group.create_array(key, shape=data.shape, dtype="float32", chunks=chunks,
                                        compressors=compressor)
        else:
            shards = (-(-data.shape[0] // chunks[0]) * chunks[0], *data.shape[1:])
            codec = None if plain else BloscCodec(cname="zstd", clevel=5, shuffle="shuffle")
            target = group.create_array(key, shape=data.shape, dtype="float32", chunks=chunks,
                                        shards=None if plain else shards, compressors=codec)
        target[...] = data
    return path


def write_curator_npz(path: Path, arrays: dict[str, np.ndarray], *, name: str | None = None) -> Path:
    """A curator-style .npz: the arrays, ``filename`` and the physics constants as keys."""
    np.savez(path, **curator_arrays(arrays), filename=name or path.stem, **PHYSICS)
    return path


def write_legacy_npy(path: Path, arrays: dict[str, np.ndarray], *, name: str | None = None) -> Path:
    """physicsnemo's older example: ``np.save`` of a dict (a pickle), global parameters as dicts
    of values, an absent part as ``np.float32(None)``."""
    stored = curator_arrays({k: v for k, v in arrays.items() if not k.startswith("global_params")})
    values = arrays.get("global_params_values", np.array([30.0, 1.205]))
    reference = arrays.get("global_params_reference", values)
    stored |= {"filename": name or path.stem,
               "global_params_values": {"inlet_velocity": [float(values[0])], "air_density": float(values[1])},
               "global_params_reference": {"inlet_velocity": [float(reference[0])],
                                           "air_density": float(reference[1])}}
    for absent in ("volume_fields", "volume_mesh_centers"):
        stored.setdefault(absent, np.float32(None))
    np.save(path, stored, allow_pickle=True)
    return path
