"""The DoMINO data pipeline, one sub-package per stage of the data flow, in this order:

- ``inputs``: DrivAerML VTK files and processed runs, read and written;
- ``compute``: the per-run computation (Warp geometry, preprocessing, sampling, target scaling);
- ``store``: the cache on disk (format, manifest, checked chunk reads, the build, and the
  staleness and validation checks, which import no Warp);
- ``loading``: datasets and the hand-over of batches from DataLoader workers;
- ``training``: the model, the training loop, checkpoints and torch.distributed;
- ``inference``: prediction with a trained model (it uses ``training``'s model).

A module imports only its own stage, the stages listed before it, and the ground floor:
the modules directly in this package (``atomic_store``, ``config_section``, ``run_report``,
``variables``), which import no stage. tests/test_layout.py checks the order.

The entry points (process_data.py, cache_data.py, train.py, predict.py, datapipe.py) live at the
repository root.
"""
