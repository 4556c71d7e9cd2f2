"""DoMINO datasets, by the names users import:

    from datapipe import CachedDoMINODataset, collate_items      # reads the cache; no Warp
    from datapipe import DoMINODataPipe                          # preprocesses every draw (Warp)

``CachedDoMINODataset`` reads the cache that ``cache_data.py`` wrote; ``DoMINODataPipe`` runs the
same preprocessing on every draw; both return the same dict of float32 tensors (DoMINO's input
names, domino_pipeline/loading/items.py) for the same (seed, epoch, index). ``DoMINODataPipe`` is
imported on first use, so that importing this module (in a DataLoader worker, say) loads no Warp.
``dataset_from_config`` builds either from the config (domino_pipeline/loading/assembly.py).
"""

from domino_pipeline.loading.assembly import dataset_from_config, scaling_factors_of, scaling_factors_path
from domino_pipeline.loading.cached import CachedDoMINODataset
from domino_pipeline.loading.collate import collate_items
from domino_pipeline.loading.items import MODEL_TYPES, build_item, constant_grid, parts_of

__all__ = [
    "CachedDoMINODataset", "MODEL_TYPES", "build_item", "collate_items", "constant_grid",
    "dataset_from_config", "parts_of", "scaling_factors_of", "scaling_factors_path",
    "DoMINODataPipe",  # noqa: F822 (from __getattr__, on first use)
]


def __getattr__(name: str):
    if name == "DoMINODataPipe":  # imports Warp: only when asked for
        from domino_pipeline.loading.uncached import DoMINODataPipe
        return DoMINODataPipe
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
