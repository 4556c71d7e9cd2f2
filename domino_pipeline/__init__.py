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

The entry points (process_data.py, cache_data.py, train.py, predict.py) and ``datapipe.py``, the
one facade of the datasets' public names (``from datapipe import CachedDoMINODataset``), live at
the repository root and run from its folder; only this package is installed, and ``import
domino_pipeline`` loads neither torch nor Warp. Elsewhere, import each name from its module:

    from domino_pipeline.loading.cached import CachedDoMINODataset   # torch, no Warp
    from domino_pipeline.loading.collate import collate_items
    from domino_pipeline.loading.uncached import DoMINODataPipe      # Warp
"""
