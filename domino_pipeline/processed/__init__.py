"""Processed runs: the format process_data.py writes and every later stage reads, below them all (it imports no stage).

- run_layout.py: the layout of one processed run (a Zarr v3 group), its writer and its checks
- runs.py: every accepted form of a processed run (ours, physicsnemo-curator's) behind one interface
- curator_forms.py: the readers of physicsnemo-curator's forms (Zarr v2/v3 groups, .npz, .npy)
- chunk_completeness.py: whether every chunk of a run's Zarr arrays was written
- statistics_table.py, run_quality.py: a folder's table of run statistics, and the runs it shows wrong"""
