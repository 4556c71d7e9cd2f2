"""VTK XML files (VTU, VTP) read a block of rows at a time: xml_header.py (the header, parsed
with expat: its counts and arrays), array_data.py (one DataArray's encoded bytes,
decoded by ranges), xml_stream.py (VtkXmlFile: any rows of any array)."""
