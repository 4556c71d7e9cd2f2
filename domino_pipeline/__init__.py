"""The DoMINO data pipeline, one sub-package per stage of the data flow, in this order:

- ``processed``: the processed-run format, its writer and its readers (curator forms too);
- ``inputs``: raw runs (VTK files, local or remote) read into processed runs;
- ``compute``: the per-run computation (Warp geometry, preprocessing, sampling, target scaling);
- ``store``: the cache on disk (format, manifest, checked chunk reads, the build, and the
  staleness and validation checks, which import no Warp);
- ``loading``: datasets and the hand-over of batches from DataLoader workers;
- ``training``: the model, the training loop, checkpoints and torch.distributed;
- ``inference``: prediction with a trained model (it uses ``training``'s model).

A module imports only its own stage, the stages listed before it, and the ground floor:
the modules directly in this package (atomic files and JSON, object-store locations and
clients, the typed config and its sections, the launch environment (ranks under torchrun or
srun), devices, entry-point refusals, run reports, variable widths), which import no stage. tests/test_layout.py checks the order.

The entry points (process_data.py, cache_data.py, train.py, predict.py, datapipe.py) live at the
repository root and run from its folder; only this package is installed. Its public names are
importable from here for scripts elsewhere, each loaded on first use, so that ``import
domino_pipeline`` loads neither torch nor Warp:

    from domino_pipeline import CachedDoMINODataset, collate_items   # torch, no Warp
    from domino_pipeline import DoMINODataPipe                       # Warp
"""

from __future__ import annotations

import importlib

# public name -> the module that defines it
_PUBLIC = {
    "CachedDoMINODataset": "domino_pipeline.loading.cached",
    "DoMINODataPipe": "domino_pipeline.loading.uncached",
    "collate_items": "domino_pipeline.loading.collate",
    "MODEL_TYPES": "domino_pipeline.loading.items",
    "build_item": "domino_pipeline.loading.items",
    "constant_grid": "domino_pipeline.loading.items",
    "parts_of": "domino_pipeline.loading.items",
    "SamplingLaw": "domino_pipeline.compute.sampling",
    "TooFewPointsError": "domino_pipeline.compute.sampling",
    "PreprocessSettings": "domino_pipeline.compute.settings",
    "load_scaling_factors": "domino_pipeline.compute.scaling",
    "CacheError": "domino_pipeline.store.cache_format",
    "StaleCacheError": "domino_pipeline.store.cache_format",
    "manifest_scaling_factors": "domino_pipeline.store.manifest",
    "validate_cache": "domino_pipeline.store.validate",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    """Import a public name's module on first use (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
