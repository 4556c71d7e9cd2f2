"""Raw runs as their datasets publish them, read into processed runs (the format:
``domino_pipeline.processed``), one sub-package per job; each one's ``__init__`` lists its modules:

- sources: where a run's files are and how their bytes are read (local, object storage, the Hub)
- vtk: VTK XML files (VTU, VTP) read by rows
- meshes: a run's meshes and their geometry
- statistics: knowing the data (statistics and quality)
- processing: the stage's driver
"""
