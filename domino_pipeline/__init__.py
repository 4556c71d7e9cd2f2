"""The DoMINO data pipeline, one sub-package per stage of the data flow:

- ``inputs``: DrivAerML VTK files and processed runs, read and written;
- ``compute``: the per-run computation (Warp geometry, preprocessing, sampling, target scaling);
- ``store``: the cache on disk (format, checked chunk reads, atomic writes);
- ``loading``: datasets and the hand-over of batches from DataLoader workers;
- ``training``: the training loop, checkpoints and torch.distributed.

The entry points (process_data.py, cache_data.py, train.py, datapipe.py) live at the repository root.
"""
