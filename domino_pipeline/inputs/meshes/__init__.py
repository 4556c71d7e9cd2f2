"""A raw run's meshes and their geometry: mesh_stream.py (what the block readers share),
surface_stream.py and volume_stream.py (the boundary and the volume as blocks of rows),
vtk_reader.py (the STL, VTP and VTU whole, with VTK), mesh_rows.py (the checks and field columns
both share), cell_geometry.py and polyhedron_faces.py (OpenFOAM's face and cell geometry),
run_errors.py (the one-line errors a run's files give)."""
