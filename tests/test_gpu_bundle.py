"""tools/gpu_bundle without a package index: what the trim keeps and drops, and parts that unpack
to the very files they were made from (a corrupt part named, not unpacked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "gpu_bundle"))
import build_bundle  # noqa: E402
import unpack_bundle  # noqa: E402

sys.path.remove(str(ROOT / "tools" / "gpu_bundle"))

KEPT = ["warp/__init__.py", "warp/bin/warp.so", "warp/bin/warp-clang.so", "botocore/data/endpoints.json",
        "botocore/data/s3/2006-03-01/service-2.json.gz", "vtkmodules/__init__.py",
        "vtkmodules/libvtkCommonCore.so", "vtkmodules/vtkCommonCore.cpython-312-x86_64-linux-gnu.so",
        "vtkmodules/libvtkWrappingPythonCore3.12.so", "zarr/core.py", "zarr-3.1.6.dist-info/METADATA"]
DROPPED = ["warp/examples/example.py", "warp/tests/test_a.py", "botocore/data/ec2/2016-11-15/service-2.json.gz",
           "vtkmodules/libvtkRenderingVolume.so", "vtkmodules/vtkRenderingVolume.cpython-312-x86_64-linux-gnu.so"]


def fake_site(root: Path) -> dict[str, bytes]:
    """A site folder laid out like the installed packages: compressible text and random bytes."""
    rng = np.random.default_rng(0)
    contents = {}
    for n, rel in enumerate(KEPT + DROPPED):
        body = rng.integers(0, 256, 3000 + 7000 * (rel.endswith(".so")), dtype=np.uint8).tobytes()
        contents[rel] = body + f"# {rel}\n".encode() * (n + 1)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(contents[rel])
    return contents


def test_library_keys_drop_the_python_tag():
    assert build_bundle.library_key("vtkCommonCore.cpython-312-x86_64-linux-gnu.so") == "vtkCommonCore.so"
    assert build_bundle.library_key("libvtkWrappingPythonCore3.12.so") == "libvtkWrappingPythonCore.so"
    assert build_bundle.library_key("libvtkCommonCore.so") == "libvtkCommonCore.so"
    listed = build_bundle.read_library_list(ROOT / "tools" / "gpu_bundle" / "vtk_libraries.txt")
    assert {"libvtkCommonCore.so", "vtkIOXML.so", "libvtkWrappingPythonCore.so"} <= listed
    assert not any(name.startswith("#") for name in listed)


def test_trim_keeps_what_the_check_loads_and_the_parts_unpack_to_the_same_files(tmp_path):
    site, parts, target = tmp_path / "site", tmp_path / "parts", tmp_path / "target"
    contents = fake_site(site)
    libraries = {"libvtkCommonCore.so", "vtkCommonCore.so", "libvtkWrappingPythonCore.so"}
    removed = build_bundle.trim(site, libraries)
    assert set(removed) == {"warp/examples", "warp/tests", "botocore/data/ec2",
                            "vtkmodules/libvtkRenderingVolume.so",
                            "vtkmodules/vtkRenderingVolume.cpython-312-x86_64-linux-gnu.so"}
    manifest = build_bundle.pack(site, parts, part_bytes=4000)
    names = [a["name"] for a in manifest["archives"]]
    assert names == ["warp.so.xz", "vtk.tar.xz", "rest.tar.xz"]
    sizes = [(parts / p).stat().st_size for a in manifest["archives"] for p in a["parts"]]
    assert max(sizes) <= 4000 and len(sizes) > len(names)  # split where the archive is larger
    result = subprocess.run([sys.executable, str(parts / "unpack_bundle.py"), str(parts), str(target)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    unpacked = {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert unpacked == {rel: contents[rel] for rel in KEPT}
    assert not [p for p in parts.iterdir() if p.name in names]  # the joined archives are removed


def test_a_corrupt_or_missing_part_or_a_blocked_target_names_the_archive(tmp_path):
    site, parts = tmp_path / "site", tmp_path / "parts"
    fake_site(site)
    manifest = build_bundle.pack(site, parts, part_bytes=4000)
    vtk = next(a for a in manifest["archives"] if a["name"] == "vtk.tar.xz")
    broken = parts / vtk["parts"][-1]
    broken.write_bytes(broken.read_bytes()[:-1] + b"\0")
    with pytest.raises(unpack_bundle.BundleError, match=r"vtk.tar.xz: sha256 .* expected"):
        unpack_bundle.unpack(parts, vtk, tmp_path / "target")
    assert not (tmp_path / "target" / "vtkmodules").exists()
    assert not (parts / "vtk.tar.xz").exists()  # the joined archive that failed its check is removed
    (parts / vtk["parts"][0]).unlink()
    with pytest.raises(unpack_bundle.BundleError, match=r"missing part vtk.tar.xz.part00 of vtk.tar.xz"):
        unpack_bundle.unpack(parts, vtk, tmp_path / "target")
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "warp").write_text("a file where the folder goes")
    with pytest.raises(unpack_bundle.BundleError, match=r"warp.so.xz: unpacking into .*blocked failed"):
        unpack_bundle.unpack(parts, manifest["archives"][0], blocked)
    assert json.loads((parts / "bundle.json").read_text()) == manifest
