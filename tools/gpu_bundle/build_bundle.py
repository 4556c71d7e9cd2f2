"""Build the packages that gpu_check needs beyond a CUDA image (Python with torch, numpy, scipy,
matplotlib and what such images hold) as a few compressed parts, for a GPU machine that cannot
reach a package index. Versions are the project venv's; wheels are those of the target's Python.

    python3 tools/gpu_bundle/build_bundle.py --out /tmp/bundle                  # Python 3.12 target
    python3 tools/gpu_bundle/build_bundle.py --out /tmp/bundle --part-mb 50 --python-version 3.12

There: ``python3 unpack_bundle.py PARTS_DIR /tmp/site`` (copied beside the parts), then
``PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gpu_check.py --out outputs/gpu_check``.
Three archives, xz with the x86 filter: ``warp.so`` alone, the VTK libraries that the check's
steps load (vtk_libraries.txt), everything else. README.md beside this file has the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Distributions the check imports beyond the image (read off every step run on the CPU).
PACKAGES = (
    "warp-lang vtk pyvista nvidia-physicsnemo zarr numcodecs hydra-core omegaconf crc32c google-crc32c "
    "lz4 donfig s3fs fsspec botocore boto3 aiobotocore s3transfer jmespath aioitertools tensordict nvtx "
    "pyvers lazy-importer importlib_metadata GitPython gitdb smmap truststore httpx2 httpcore2 pooch "
    "platformdirs scooby pyvista-validation pytest pluggy iniconfig pytest-xdist execnet typing_extensions"
).split()
SOURCE_ONLY = ("antlr4",)  # published as an sdist: copied from the venv (pure Python)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
DROPPED = ("warp/examples", "warp/tests", "bin")  # bin: console scripts for the machine that built it
AWS_MODELS_KEPT = ("s3", "s3control", "sts")  # the check creates no AWS client; the rest is 25 MB
WARP_LIB = "warp/bin/warp.so"
XZ_DICT_MAX = 192 << 20  # warp.so: 61 MB with it, 74 MB with preset 9's 64 MiB


def venv_versions(python: str, names: list[str]) -> dict[str, str]:
    """Each distribution's version in the venv of ``python`` (the pins the bundle reproduces)."""
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    return json.loads(subprocess.run([python, "-c", code, *names], check=True, capture_output=True,
                                     text=True).stdout)


def pip_target_args(python_version: str) -> list[str]:
    """pip's arguments for binary wheels of CPython ``python_version`` on x86-64 Linux."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", *platforms]


def install(pins: dict[str, str], site: Path, wheels: Path, python_version: str) -> None:
    """Download each pinned wheel (no dependencies: the list is complete) and unpack it into
    ``site``."""
    target = pip_target_args(python_version)
    for name, version in pins.items():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *target,
                        "-d", str(wheels), f"{name}=={version}"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", *target,
                    "--target", str(site), *map(str, sorted(wheels.glob("*.whl")))], check=True)


def library_key(name: str) -> str:
    """A VTK library's name without its CPython tag, as vtk_libraries.txt lists it."""
    name = re.sub(r"\.cpython-\d+-[^.]+\.so$", ".so", name)
    return re.sub(r"PythonCore\d+\.\d+\.so$", "PythonCore.so", name)


def read_library_list(path: Path) -> set[str]:
    """The library names of a list such as vtk_libraries.txt (one per line, ``#`` comments)."""
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def trim(site: Path, vtk_libraries: set[str]) -> list[str]:
    """Remove from ``site`` what the check never loads: Warp's examples and tests, botocore's
    models of other services, VTK libraries off the list. The removed paths, relative."""
    removed = [site / d for d in DROPPED if (site / d).exists()]
    models = site / "botocore" / "data"
    if models.is_dir():
        removed += [d for d in models.iterdir() if d.is_dir() and d.name not in AWS_MODELS_KEPT]
    vtk = site / "vtkmodules"
    if vtk.is_dir():
        removed += [f for f in vtk.glob("*.so") if library_key(f.name) not in vtk_libraries]
    for path in removed:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return sorted(str(p.relative_to(site)) for p in removed)


class PartWriter:
    """A binary stream written as ``<name>.partNN`` files of at most ``part_bytes``, hashed whole."""

    def __init__(self, folder: Path, name: str, part_bytes: int):
        self.folder, self.name, self.part_bytes = folder, name, part_bytes
        self.parts: list[str] = []
        self.sha256 = hashlib.sha256()
        self._file, self._left = None, 0

    def write(self, data: bytes) -> None:
        self.sha256.update(data)
        while data:
            if self._left == 0:
                self._roll()
            piece, data = data[:self._left], data[self._left:]
            self._file.write(piece)
            self._left -= len(piece)

    def _roll(self) -> None:
        if self._file:
            self._file.close()
        self.parts.append(f"{self.name}.part{len(self.parts):02d}")
        self._file, self._left = open(self.folder / self.parts[-1], "wb"), self.part_bytes

    def close(self) -> dict:
        if self._file:
            self._file.close()
        return {"name": self.name, "parts": self.parts, "sha256": self.sha256.hexdigest()}


def xz_filters(size: int) -> list[dict]:
    """xz's x86 filter, then LZMA2 at its strongest preset with a dictionary that holds the
    whole input up to XZ_DICT_MAX (machine code repeats far apart in a large library)."""
    dictionary = min(XZ_DICT_MAX, max(1 << 20, 1 << max(size - 1, 1).bit_length()))
    return [{"id": lzma.FILTER_X86},
            {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": dictionary}]


class _Compressed:
    """File-like sink: xz (x86 filter) of about ``size`` bytes into a PartWriter."""

    def __init__(self, sink: PartWriter, size: int):
        self.sink = sink
        self.xz = lzma.LZMACompressor(format=lzma.FORMAT_XZ, filters=xz_filters(size))

    def write(self, data: bytes) -> int:
        self.sink.write(self.xz.compress(data))
        return len(data)

    def close(self) -> dict:
        self.sink.write(self.xz.flush())
        return self.sink.close()


def pack(site: Path, out: Path, part_bytes: int) -> dict:
    """Three xz archives of ``site`` in parts: ``warp.so`` alone (a file), the VTK libraries and
    everything else (tars). The manifest that unpack_bundle.py reads."""
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(p for p in site.rglob("*") if p.is_file() or p.is_symlink())
    vtk = [p for p in files if p.parent == site / "vtkmodules" and p.suffix == ".so"]
    elsewhere = set(vtk) | {site / WARP_LIB}
    rest = [p for p in files if p not in elsewhere]
    archives = []
    if (site / WARP_LIB).is_file():
        sink = _Compressed(PartWriter(out, "warp.so.xz", part_bytes), (site / WARP_LIB).stat().st_size)
        with open(site / WARP_LIB, "rb") as source:
            shutil.copyfileobj(source, sink, 1 << 24)
        archives.append(sink.close() | {"kind": "file", "path": WARP_LIB})
    for name, members in (("vtk.tar.xz", vtk), ("rest.tar.xz", rest)):
        sink = _Compressed(PartWriter(out, name, part_bytes), sum(p.stat().st_size for p in members))
        with tarfile.open(fileobj=sink, mode="w|") as tar:
            for path in members:
                tar.add(path, arcname=str(path.relative_to(site)), recursive=False)
        archives.append(sink.close() | {"kind": "tar"})
    manifest = {"archives": archives}
    (out / "bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.copy(HERE / "unpack_bundle.py", out / "unpack_bundle.py")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the parts and bundle.json")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (wheels' tag)")
    parser.add_argument("--venv-python", default=".venv/bin/python", help="the venv whose versions are pinned")
    parser.add_argument("--part-mb", type=float, default=50.0, help="largest part, MB")
    parser.add_argument("--work", type=Path, help="scratch folder (default: OUT/work)")
    args = parser.parse_args(argv)
    work = args.work or args.out / "work"
    site, wheels = work / "site", work / "wheels"
    pins = venv_versions(args.venv_python, PACKAGES)
    install(pins, site, wheels, args.python_version)
    venv_site = Path(subprocess.run([args.venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    for name in SOURCE_ONLY:
        shutil.copytree(venv_site / name, site / name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    removed = trim(site, read_library_list(HERE / "vtk_libraries.txt"))
    print(f"removed {len(removed)} paths the check does not load", flush=True)
    manifest = pack(site, args.out, int(args.part_mb * 1e6))
    for archive in manifest["archives"]:
        size = sum((args.out / p).stat().st_size for p in archive["parts"])
        print(f"{archive['name']}: {size / 1e6:.1f} MB in {len(archive['parts'])} part(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
