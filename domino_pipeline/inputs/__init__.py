"""Raw runs as their datasets publish them, read into processed runs, and the readers of processed
runs (this project's and physicsnemo-curator's).

- finding a run's files: run_folder.py (local), remote_runs.py, remote_bytes.py, array_staging.py,
  raw_reading.py, fetch_progress.py (object storage and the Hub), concat_bytes.py (volume pieces)
- reading its meshes: vtk_xml_header.py, vtk_array_data.py, vtk_xml_stream.py,
  mesh_stream.py (VTK XML by blocks), surface_stream.py, volume_stream.py, mesh_rows.py,
  cell_geometry.py, polyhedron_faces.py (OpenFOAM's geometry), vtk_reader.py (whole files with
  VTK), published_forces.py (coefficients and references), run_errors.py
- processing: process_options.py, nondimensional.py, process_runs.py, processed_run.py
- knowing the data: run_statistics.py, array_statistics.py, column_moments.py, cell_quality.py,
  statistics_table.py, run_quality.py
- reading processed runs: runs.py, curator_run.py, chunk_completeness.py
"""
