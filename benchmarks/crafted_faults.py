"""Faults a buggy tool could write with every checksum recomputed, and faults from other writers
and dead processes: each made on a copy of a built cache (or of processed runs), for
fault_injection.py and the tests; and raw run files with bad headers (``RAW_CRAFTS``).

Each ``craft_*`` function changes a cache in place and returns (run name, a phrase the error
must hold). ``rehash`` recomputes what a careful but wrong tool would: the run's metadata
SHA-256 in the manifest and the manifest's own checksum.

Each ``raw_*`` function changes a copy of a raw run folder (``run_1``: its STL, boundary VTP
and volume VTU) in place and returns (the path the error must name, a phrase it must hold):
counts larger than the data, appended offsets negative or past the end, compressed block
headers claiming huge counts or sizes or sizes that do not add up to the array, truncated files
and pieces, missing and mixed pieces, malformed and unclosed tags, random bytes, arrays without type or Name
or with no components, cell offsets that fall or pass the connectivity. The VTU or VTP is first
rewritten by VTK's own writer in the encoding the fault needs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import re

import crc32c
import numpy as np

from domino_pipeline.store.cache_format import metadata_sha256
from domino_pipeline.store.manifest import MANIFEST, manifest_digest, run_path


def _manifest(cache: Path) -> dict:
    return json.loads((cache / MANIFEST).read_text())


def generation(cache: Path, name: str) -> Path:
    """The generation the manifest names for run ``name``."""
    return run_path(cache, name, _manifest(cache)["runs"][name])


def rehash(cache: Path, name: str, *, target: Path | None = None) -> None:
    """Record run ``name``'s metadata SHA-256 (of ``target``, default its generation) in the
    manifest and recompute the manifest's checksum."""
    manifest = _manifest(cache)
    entry = manifest["runs"][name]
    entry["metadata_sha256"] = metadata_sha256(target or run_path(cache, name, entry))
    manifest["sha256"] = manifest_digest(manifest)
    (cache / MANIFEST).write_text(json.dumps(manifest, indent=2))


def rewrite_index(shard: Path, entries: int, change) -> None:
    """Apply ``change`` to the (entries, 2) uint64 index at the end of ``shard`` and recompute
    its CRC32C."""
    raw = bytearray(shard.read_bytes())
    start = len(raw) - entries * 16 - 4
    index = np.frombuffer(bytes(raw[start:start + entries * 16]), dtype="<u8").reshape(entries, 2).copy()
    change(index)
    body = index.astype("<u8").tobytes()
    raw[start:] = body + crc32c.crc32c(body).to_bytes(4, "little")
    shard.write_bytes(bytes(raw))


def _inner_chunks(array_dir: Path) -> int:
    meta = json.loads((array_dir / "zarr.json").read_text())
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    return shard // meta["codecs"][0]["configuration"]["chunk_shape"][0]


def _edit_json(path: Path, change) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


def craft_index_wrap(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An index offset near 2**64 (wraps past a uint64 bound check)."""
    array = generation(cache, name) / "volume_fields"
    rewrite_index(array / "c" / "0" / "0", _inner_chunks(array),
                  lambda index: index.__setitem__((0, 0), 2**64 - 17))
    return name, "volume_fields: the index of shard c/0/0: inner chunk 0 starts at byte"


def craft_index_overlap(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An index entry pointing at another chunk's bytes (both entries then valid alone)."""
    array = generation(cache, name) / "volume_fields"
    n = _inner_chunks(array)
    if n < 2:
        raise ValueError(f"{array}: one inner chunk per shard; build the cache with more volume rows")
    rewrite_index(array / "c" / "0" / "0", n, lambda index: index.__setitem__(1, index[0]))
    return name, "volume_fields: the index of shard c/0/0: inner chunk 1 overlaps inner chunk 0"


def craft_counts(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """``counts.volume = 10**12`` in the run's attributes."""
    _edit_json(generation(cache, name) / "zarr.json",
               lambda meta: meta["attributes"]["counts"].__setitem__("volume", 10**12))
    rehash(cache, name)
    return name, "counts.volume is 1000000000000, but array volume_"


def craft_huge_shape(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """``geometry_coordinates`` described with 2**40 rows."""
    _edit_json(generation(cache, name) / "geometry_coordinates" / "zarr.json",
               lambda meta: meta["shape"].__setitem__(0, 2**40))
    rehash(cache, name)
    return name, "array geometry_coordinates: 1099511627776 rows need"


def craft_inner_chunk(cache: Path, name: str = "run_1") -> tuple[str, str]:
    """An inner chunk shape of 10**9 rows for ``volume_fields``."""
    _edit_json(generation(cache, name) / "volume_fields" / "zarr.json",
               lambda meta: meta["codecs"][0]["configuration"]["chunk_shape"].__setitem__(0, 10**9))
    rehash(cache, name)
    return name, "array volume_fields: its description is not the layout a cache writes"


def craft_linked_generation(cache: Path, name: str = "run_2", other: str = "run_1") -> tuple[str, str]:
    """Run ``name``'s generation replaced by a symbolic link to run ``other``'s."""
    path = generation(cache, name)
    shutil.rmtree(path)
    os.symlink(os.path.relpath(generation(cache, other), path.parent), path)
    rehash(cache, name)
    return name, "a symbolic link"


def craft_copied_generation(cache: Path, name: str = "run_2", other: str = "run_1") -> tuple[str, str]:
    """Run ``name``'s generation replaced by a copy of run ``other``'s."""
    path = generation(cache, name)
    shutil.rmtree(path)
    shutil.copytree(generation(cache, other), path)
    rehash(cache, name)
    return name, f"records the processed run '{other}', but sits under '{name}'"


def craft_linked_run_folder(cache: Path, name: str = "run_2") -> tuple[str, str]:
    """Run ``name``'s folder moved outside the cache and replaced by a symbolic link to it."""
    outside = cache.parent / f"{cache.name}-outside-{name}"
    shutil.rmtree(outside, ignore_errors=True)
    shutil.move(str(cache / name), outside)
    os.symlink(outside, cache / name)
    return name, "a symbolic link"


CRAFTS = {
    "index offset near 2**64": craft_index_wrap,
    "index entry at another chunk": craft_index_overlap,
    "counts.volume = 10**12": craft_counts,
    "shape of 2**40 rows": craft_huge_shape,
    "inner chunk of 10**9 rows": craft_inner_chunk,
    "generation linked to another run's": craft_linked_generation,
    "generation copied from another run": craft_copied_generation,
    "run folder linked outside the cache": craft_linked_run_folder,
}


# ----------------------------------------------------------------------------- raw run files


def vtk_rewrite(path: Path, mode: str = "appended-raw", compressor: str = "none", header_bits: int = 64) -> Path:
    """Rewrite the VTU or VTP ``path`` with VTK's own XML writer in one encoding (``mode``
    appended-raw, appended-base64 or binary; ``compressor`` none, zlib, lz4 or lzma)."""
    from vtkmodules.vtkIOXML import (
        vtkXMLPolyDataReader,
        vtkXMLPolyDataWriter,
        vtkXMLUnstructuredGridReader,
        vtkXMLUnstructuredGridWriter,
    )

    vtp = path.suffix == ".vtp"
    reader = vtkXMLPolyDataReader() if vtp else vtkXMLUnstructuredGridReader()
    reader.SetFileName(str(path))
    reader.Update()
    writer = vtkXMLPolyDataWriter() if vtp else vtkXMLUnstructuredGridWriter()
    writer.SetInputData(reader.GetOutput())
    writer.SetFileName(str(path))
    if mode == "binary":
        writer.SetDataModeToBinary()
    else:
        writer.SetDataModeToAppended()
        writer.SetEncodeAppendedData(mode == "appended-base64")
    getattr(writer, {"none": "SetCompressorTypeToNone", "zlib": "SetCompressorTypeToZLib",
                     "lz4": "SetCompressorTypeToLZ4", "lzma": "SetCompressorTypeToLZMA"}[compressor])()
    writer.SetHeaderType(writer.UInt64 if header_bits == 64 else writer.UInt32)
    if not writer.Write():
        raise OSError(f"{path}: VTK could not rewrite it")
    return path


def _edit_header(path: Path, old: bytes, new: bytes) -> None:
    """Replace the first ``old`` of the file's XML header (before its appended data) by ``new``."""
    data = path.read_bytes()
    end = data.find(b"<AppendedData")
    at = data.find(old, 0, end if end >= 0 else len(data))
    if at < 0:
        raise ValueError(f"{path}: no {old!r} in its header")
    path.write_bytes(data[:at] + new + data[at + len(old):])


def _attribute(path: Path, tag: bytes, name: str, after: bytes = b"") -> str:
    """Attribute ``name`` of the first header tag that holds ``tag`` (after ``after``)."""
    data = path.read_bytes()
    start = data.find(tag, data.find(after))
    end = data.find(b">", start)
    return re.search(rb'\b' + name.encode() + rb'="([^"]*)"', data[start:end]).group(1).decode()


def _appended_at(path: Path, name: bytes, section: bytes = b"") -> int:
    """The file position of the appended array named ``name`` (its header; the first after the
    tag ``section``), from the XML offset."""
    data = path.read_bytes()
    offset = int(_attribute(path, b'Name="' + name + b'"', "offset", section))
    return data.find(b"_", data.find(b"<AppendedData")) + 1 + offset


def _poke(path: Path, at: int, values: np.ndarray) -> None:
    with open(path, "r+b") as out:
        out.seek(at)
        out.write(values.tobytes())


def _volume(run: Path, **encoding) -> Path:
    """The run's volume as one file (its pieces joined, as DrivAerML's are published), rewritten."""
    from synthetic_data import join_pieces

    return vtk_rewrite(join_pieces(run / f"volume_{run.name.removeprefix('run_')}.vtu"), **encoding)


def _boundary(run: Path, **encoding) -> Path:
    return vtk_rewrite(run / f"boundary_{run.name.removeprefix('run_')}.vtp", **encoding)


def raw_points_count(run: Path) -> tuple[Path, str]:
    """NumberOfPoints 2**21, far more than the Points data holds."""
    path = _volume(run)
    n = int(_attribute(path, b"<Piece", "NumberOfPoints"))
    _edit_header(path, f'NumberOfPoints="{n}"'.encode(), b'NumberOfPoints="2097152"')
    return path, f"NumberOfPoints 2097152 needs {2097152 * 12} bytes of Points data, the array holds {n * 12}"


def raw_cells_count(run: Path) -> tuple[Path, str]:
    """NumberOfCells 10**12 (the last appended array, types, would end far past the file)."""
    path = _volume(run)
    n = int(_attribute(path, b"<Piece", "NumberOfCells"))
    _edit_header(path, f'NumberOfCells="{n}"'.encode(), b'NumberOfCells="1000000000000"')
    return path, "NumberOfCells 1000000000000 needs 1000000000000 bytes of Cells array types, the last array"


def raw_negative_offset(run: Path) -> tuple[Path, str]:
    """An appended offset of -8."""
    path = _volume(run)
    offset = _attribute(path, b'Name="pMeanTrim"', "offset")
    _edit_header(path, f'offset="{offset}"'.encode(), b'offset="-8"')
    return path, "PointData DataArray named pMeanTrim: offset -8 is negative"


def raw_offset_past_end(run: Path) -> tuple[Path, str]:
    """An appended offset of 10**11, past the end of the file."""
    path = _volume(run)
    offset = _attribute(path, b'Name="pMeanTrim"', "offset")
    _edit_header(path, f'offset="{offset}"'.encode(), b'offset="100000000000"')
    return path, "PointData array pMeanTrim: its appended offset 100000000000 lies past the end of the"


def raw_no_components(run: Path) -> tuple[Path, str]:
    """NumberOfComponents 0 for UMeanTrim."""
    path = _volume(run)
    _edit_header(path, b'Name="UMeanTrim" NumberOfComponents="3"', b'Name="UMeanTrim" NumberOfComponents="0"')
    return path, "DataArray named UMeanTrim: NumberOfComponents 0 is below 1"


def raw_no_type(run: Path) -> tuple[Path, str]:
    """A DataArray without its type."""
    path = _volume(run)
    _edit_header(path, b'type="Float32" Name="pMeanTrim"', b'Name="pMeanTrim"')
    return path, "a PointData DataArray named pMeanTrim has no type"


def raw_no_name(run: Path) -> tuple[Path, str]:
    """A DataArray without its Name."""
    path = _volume(run)
    _edit_header(path, b'Name="pMeanTrim" ', b"")
    return path, "a PointData DataArray has no Name"


def raw_unquoted_attribute(run: Path) -> tuple[Path, str]:
    """``NumberOfPoints=8000``, an attribute without quotes."""
    path = _volume(run)
    n = _attribute(path, b"<Piece", "NumberOfPoints")
    _edit_header(path, f'NumberOfPoints="{n}"'.encode(), f"NumberOfPoints={n}".encode())
    return path, "not a VTK XML file, or it is corrupt: not well-formed (invalid token) at byte"


def raw_unclosed_element(run: Path) -> tuple[Path, str]:
    """``</Cells>`` missing."""
    path = _volume(run)
    _edit_header(path, b"</Cells>", b"")
    return path, "not a VTK XML file, or it is corrupt: mismatched tag at byte"


def raw_truncated_file(run: Path) -> tuple[Path, str]:
    """The volume cut at 60% of its bytes."""
    path = _volume(run)
    os.truncate(path, path.stat().st_size * 6 // 10)
    return path, "the file is truncated: it does not end with </AppendedData> and </VTKFile>"


def raw_truncated_inline(run: Path) -> tuple[Path, str]:
    """The boundary in inline binary (base64) data, cut at 60% of its bytes."""
    path = _boundary(run, mode="binary")
    os.truncate(path, path.stat().st_size * 6 // 10)
    return path, "the file ends inside <"


def raw_random_bytes(run: Path) -> tuple[Path, str]:
    """The boundary replaced by 64 KiB of random bytes."""
    path = run / f"boundary_{run.name.removeprefix('run_')}.vtp"
    path.write_bytes(np.random.default_rng(38).bytes(1 << 16))
    return path, "not a VTK XML file, or it is corrupt"


def _pieces(path: Path, naming: str = "00.part") -> list[Path]:
    from synthetic_data import split_into_pieces

    return split_into_pieces(path, [path.stat().st_size // 2], naming)


def raw_truncated_piece(run: Path) -> tuple[Path, str]:
    """The volume in two pieces, the first one 1000 bytes short (an interrupted download)."""
    path = _volume(run)
    first, _ = _pieces(path)
    os.truncate(first, first.stat().st_size - 1000)
    return path, f"of {path.name}.01.part): a piece of the file is truncated, or a count is wrong"


def raw_missing_second_piece(run: Path) -> tuple[Path, str]:
    """The volume's ``.00.part`` alone."""
    path = _volume(run)
    _pieces(path)[1].unlink()
    return path, f"the file (or its last piece, {path.name}.00.part) is truncated"


def raw_piece_gap(run: Path) -> tuple[Path, str]:
    """Pieces ``.00.part`` and ``.02.part``."""
    path = _volume(run)
    first, second = _pieces(path)
    second.rename(path.with_name(f"{path.name}.02.part"))
    return path.with_name(f"{path.name}.01.part"), "missing piece"


def raw_pieces_mixed(run: Path) -> tuple[Path, str]:
    """Pieces ``.00.part`` and ``.part2``."""
    path = _volume(run)
    first, second = _pieces(path)
    second.rename(path.with_name(f"{path.name}.part2"))
    return path, "pieces in two namings"


def _compressed_points(run: Path, compressor: str = "zlib") -> tuple[Path, int]:
    path = _volume(run, compressor=compressor)
    return path, _appended_at(path, b"Points")


def raw_huge_block_count(run: Path) -> tuple[Path, str]:
    """A compressed header claiming 2**40 blocks."""
    path, at = _compressed_points(run)
    _poke(path, at, np.array([2**40], "<u8"))
    return path, "Points data: its header claims 1099511627776 compressed blocks"


def raw_huge_block_size(run: Path) -> tuple[Path, str]:
    """zlib blocks claiming 2**40 bytes each."""
    path, at = _compressed_points(run)
    _poke(path, at + 8, np.array([2**40, 0], "<u8"))
    return path, "bytes cannot decompress to the 1099511627776 bytes its header claims"


def raw_huge_lz4_block(run: Path) -> tuple[Path, str]:
    """lz4 blocks claiming 2**31 bytes each."""
    path, at = _compressed_points(run, "lz4")
    _poke(path, at + 8, np.array([2**31, 0], "<u8"))
    return path, "bytes cannot decompress to the 2147483648 bytes its header claims"


def raw_huge_lzma_block(run: Path) -> tuple[Path, str]:
    """lzma blocks claiming 2**40 bytes each (lzma is decompressed incrementally, so the sizes
    are checked against the rows alone)."""
    path, at = _compressed_points(run, "lzma")
    count = int(np.frombuffer(path.read_bytes()[at:at + 8], "<u8")[0])
    _poke(path, at + 8, np.array([2**40, 0], "<u8"))
    return path, f"bytes of Points data, the array holds {count * 2**40}"


def raw_block_sizes_short(run: Path) -> tuple[Path, str]:
    """A last block 4 bytes shorter: blocks x block size no longer the array's rows x 12 bytes."""
    path, at = _compressed_points(run)
    count, block, last = np.frombuffer(path.read_bytes()[at:at + 24], "<u8").tolist()
    _poke(path, at + 16, np.array([(last or block) - 4], "<u8"))
    n = int(_attribute(path, b"<Piece", "NumberOfPoints"))
    return path, f"NumberOfPoints {n} needs {n * 12} bytes of Points data, the array holds {n * 12 - 4}"


def _polys_offsets(run: Path) -> tuple[Path, int, np.ndarray]:
    path = _boundary(run)
    at = _appended_at(path, b"offsets", b"<Polys>") + 8
    n = int(_attribute(path, b"<Piece", "NumberOfPolys"))
    return path, at, np.frombuffer(path.read_bytes()[at:at + 8 * n], "<i8").copy()


def raw_falling_offsets(run: Path) -> tuple[Path, str]:
    """Two cell offsets of the boundary swapped: they fall at cell 11."""
    path, at, offsets = _polys_offsets(run)
    offsets[[10, 11]] = offsets[[11, 10]]
    _poke(path, at, offsets)
    return path, f"Polys offsets decrease at cell 11 ({offsets[11]} after {offsets[10]})"


def raw_offsets_past_connectivity(run: Path) -> tuple[Path, str]:
    """The boundary's last cell offset 100 past the end of its connectivity."""
    path, at, offsets = _polys_offsets(run)
    ids = int(offsets[-1])
    offsets[-1] += 100
    _poke(path, at, offsets)
    return path, f"the last of the Polys offsets is {ids + 100}, past the {ids} entries of Polys connectivity"


RAW_CRAFTS = {
    "NumberOfPoints larger than the data": raw_points_count,
    "NumberOfCells of 10**12": raw_cells_count,
    "negative appended offset": raw_negative_offset,
    "appended offset past the end": raw_offset_past_end,
    "NumberOfComponents 0": raw_no_components,
    "DataArray without type": raw_no_type,
    "DataArray without Name": raw_no_name,
    "attribute without quotes": raw_unquoted_attribute,
    "element never closed": raw_unclosed_element,
    "truncated file": raw_truncated_file,
    "truncated inline binary file": raw_truncated_inline,
    "random bytes as the boundary": raw_random_bytes,
    "truncated first piece": raw_truncated_piece,
    "missing second piece": raw_missing_second_piece,
    "gap in the pieces": raw_piece_gap,
    "pieces in two namings": raw_pieces_mixed,
    "2**40 compressed blocks": raw_huge_block_count,
    "zlib blocks of 2**40 bytes": raw_huge_block_size,
    "lz4 blocks of 2**31 bytes": raw_huge_lz4_block,
    "lzma blocks of 2**40 bytes": raw_huge_lzma_block,
    "block sizes short of the rows": raw_block_sizes_short,
    "cell offsets that fall": raw_falling_offsets,
    "cell offsets past the connectivity": raw_offsets_past_connectivity,
}
