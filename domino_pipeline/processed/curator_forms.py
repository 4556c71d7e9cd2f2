"""Readers of the forms physicsnemo-curator (and physicsnemo's older example) write: Zarr v2/v3 groups, .npz, pickled
.npy dicts (restricted unpickler, opt-in); docs/processed_runs.md, "The accepted forms". Each returns the arrays (lazy
where it can) and attributes; ``runs.open_run`` normalises them."""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import zarr

from domino_pipeline.processed.run_layout import ProcessedRunError
from domino_pipeline.storage.byte_reader import read_bytes
from domino_pipeline.storage.object_store import is_url, zarr_store

# Globals a legacy .npy dict may name: numpy's array, dtype and scalar reconstructors (numpy 1
# and 2 module names). Pickle opcodes build dicts, lists, strings and numbers without globals.
_NUMPY_GLOBALS = frozenset({
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
})
PICKLE_HINT = ("it is a pickled Python dict (physicsnemo's older np.save format), and reading a pickle can run code; "
               "convert it to .npz (np.savez(path, **d)), or set data.allow_pickle=true if you trust the file (numpy "
               "arrays, scalars and plain containers only are read even then)")


class NumpyOnlyUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays, dtypes and scalars and refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not a numpy array, dtype or scalar")


def _binary(path: Path | str) -> IO[bytes]:
    """A run file opened for reading: a local file, or an object fetched whole (a URL)."""
    if not is_url(path):
        return open(path, "rb")
    data = read_bytes(path)
    if data is None:
        raise FileNotFoundError(f"{path}: no such object")
    return io.BytesIO(data)


def read_zarr_group(path: Path | str) -> tuple[str, Mapping[str, Any], dict]:
    """(format "zarr-v2" | "zarr-v3", the group's arrays (lazy), its attributes); a URL through zarr_store."""
    store, inside = zarr_store(path) if is_url(path) else (str(path), None)
    try:
        group = zarr.open_group(store=store, path=inside, mode="r")
    except Exception as err:  # zarr raises several types for a missing or broken group
        raise ProcessedRunError(f"{path}: not a readable Zarr group ({type(err).__name__}: {err})") from err
    arrays = {name: group[name] for name in group.array_keys()}
    return f"zarr-v{group.metadata.zarr_format}", arrays, dict(group.attrs)


def _split_scalars(items: Mapping[str, Any]) -> tuple[dict[str, Any], dict]:
    """Arrays (ndim >= 1, numeric) apart from attributes (strings, 0-d values, dicts)."""
    arrays, attrs = {}, {}
    for key, value in items.items():
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype.kind in "biuf":
            arrays[key] = value
        elif isinstance(value, np.ndarray) and value.ndim == 0:
            attrs[key] = value.item()
        else:
            attrs[key] = value
    return arrays, attrs


def read_npz(path: Path | str) -> tuple[str, Mapping[str, Any], dict]:
    """("npz", arrays, attributes) of an .npz file or object; object arrays are refused, not unpickled."""
    try:
        with _binary(path) as handle, np.load(handle, allow_pickle=False) as npz:
            items = {key: npz[key] for key in npz.files}
    except ValueError as err:  # an object array: numpy would need a pickle
        raise ProcessedRunError(f"{path}: holds an object array, which only a pickle could "
                                f"read; store plain numeric arrays ({err})") from err
    except (OSError, EOFError) as err:
        raise ProcessedRunError(f"{path}: not a readable .npz file ({err})") from err
    arrays, attrs = _split_scalars(items)
    return "npz", arrays, attrs


def npz_names(path: Path | str) -> list[str]:
    """The keys of an .npz file (or object), from its listing: no array is read."""
    try:
        with _binary(path) as handle, np.load(handle, allow_pickle=False) as npz:
            return list(npz.files)
    except (OSError, EOFError, ValueError) as err:
        raise ProcessedRunError(f"{path}: not a readable .npz file ({err})") from err


def _legacy_dict(value: dict) -> dict[str, Any]:
    """A legacy dict's values as float32 arrays, dicts of values flattened, an absent part (NaN) dropped."""
    out = {}
    for key, item in value.items():
        if isinstance(item, dict):
            item = np.concatenate([np.ravel(np.asarray(v, dtype=np.float32)) for v in item.values()])
        if isinstance(item, (np.generic, float)) and key.startswith(("stl_", "surface_", "volume_")):
            continue  # np.float32(None): the part was not written
        out[key] = np.asarray(item) if not isinstance(item, str) else item
    return out


def read_npy(path: Path | str, *, allow_pickle: bool) -> tuple[str, Mapping[str, Any], dict]:
    """("npy", arrays, attributes) of a legacy .npy dict (file or object), only when ``allow_pickle``."""
    with _binary(path) as handle:
        try:  # the header, leaving the handle at the data
            version = np.lib.format.read_magic(handle)
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)
            _, _, dtype = header(handle)
        except ValueError as err:
            raise ProcessedRunError(f"{path}: not an .npy file ({err})") from err
        if dtype != np.dtype(object):
            raise ProcessedRunError(f"{path}: a plain {dtype} array, not a run (a run's .npy file "
                                    "holds a dict of arrays)")
        if not allow_pickle:
            raise ProcessedRunError(f"{path}: refused: {PICKLE_HINT}")
        try:
            value = NumpyOnlyUnpickler(handle).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as err:
            raise ProcessedRunError(f"{path}: not a dict of numpy arrays ({err})") from err
    value = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    if not isinstance(value, dict):
        raise ProcessedRunError(f"{path}: holds a {type(value).__name__}, not a dict of arrays")
    arrays, attrs = _split_scalars(_legacy_dict(value))
    return "npy", arrays, attrs
