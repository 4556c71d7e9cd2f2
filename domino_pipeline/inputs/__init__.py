"""Raw runs as their datasets publish them, read into processed runs (the format:
``domino_pipeline.processed``), one sub-package per job:

- sources: where a run's files are and how their bytes are read: a local folder (run_folder.py,
  concat_bytes.py for files in pieces), object storage and the Hub (remote_runs.py listing,
  remote_bytes.py fetching, array_staging.py, fetch_progress.py), raw_reading.py choosing between
- vtk: VTK XML files (VTU, VTP) read by rows: xml_header.py (expat), array_data.py,
  xml_stream.py
- meshes: a run's meshes and their geometry: mesh_stream.py, surface_stream.py, volume_stream.py
  (by blocks), vtk_reader.py (whole, with VTK), mesh_rows.py, cell_geometry.py,
  polyhedron_faces.py (OpenFOAM's geometry), run_errors.py
- statistics: knowing the data: run_statistics.py, array_statistics.py, column_moments.py,
  column_quantiles.py, cell_quality.py, statistics_table.py, run_quality.py
- processing: the stage's driver: process_runs.py, process_options.py, nondimensional.py,
  published_forces.py (coefficients and references), read_ahead.py (blocks read ahead in a thread)
"""
