"""The synthetic generator's internals (synthetic_data.py is its entry point). Not part of the
installed package: only the generator, the tests and the benchmarks use it.

    body.py          the parametric car-like body: STL and boundary meshes (warped polygons too)
    faces.py         the generator's own face geometry (OpenFOAM's definitions), dual areas
    fields.py        smooth, plausible surface and volume fields, by role
    volume_points.py points filling the tunnel outside the body, block by block
    forces.py        force and moment sums, and the coefficients the datasets publish
    layouts.py       each dataset's layout: body sizes, frame, units, file conventions
    writers.py       the STL, boundary, volume and published files of one run
    vtk_xml_writer.py  VTK XML (VTU, VTP) written block by block, in any of VTK's encodings
"""
