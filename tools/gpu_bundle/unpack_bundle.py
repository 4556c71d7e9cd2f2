"""Unpack a bundle made by build_bundle.py: every archive's parts joined, checked against its
sha256, decompressed into one folder (the three archives in parallel). Standard library only.

    python3 unpack_bundle.py PARTS_DIR TARGET_DIR      # then PYTHONPATH=TARGET_DIR:$PWD ...
"""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import sys
import tarfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


class BundleError(RuntimeError):
    pass


def joined(parts_dir: Path, archive: dict) -> Path:
    """The archive's parts as one file beside them, after checking its sha256."""
    whole, digest = parts_dir / archive["name"], hashlib.sha256()
    try:
        with open(whole, "wb") as out:
            for part in archive["parts"]:
                path = parts_dir / part
                if not path.is_file():
                    raise BundleError(f"{path}: missing part {part} of {archive['name']}")
                with open(path, "rb") as source:
                    while chunk := source.read(1 << 24):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != archive["sha256"]:
            raise BundleError(f"{archive['name']}: sha256 {digest.hexdigest()} of its parts, expected "
                              f"{archive['sha256']} (a part corrupt or from another bundle)")
    except BaseException:
        whole.unlink(missing_ok=True)
        raise
    return whole


def unpack(parts_dir: Path, archive: dict, target: Path) -> str:
    """One archive into ``target``: a single file at its path, or a tar's members."""
    whole = joined(parts_dir, archive)
    try:
        if archive["kind"] == "file":
            dest = target / archive["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(whole) as source, open(dest, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 24)
        else:
            with tarfile.open(whole, mode="r:xz") as tar:
                tar.extractall(target, filter="data")
    except (OSError, lzma.LZMAError, tarfile.TarError) as error:
        raise BundleError(f"{archive['name']}: unpacking into {target} failed: {error}") from error
    finally:
        whole.unlink()
    return archive["name"]


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    parts_dir, target = Path(args[0]), Path(args[1])
    archives = json.loads((parts_dir / "bundle.json").read_text())["archives"]
    target.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=len(archives)) as pool:
        jobs = [pool.submit(unpack, parts_dir, a, target) for a in archives]
        try:
            for job in jobs:
                print(f"unpacked {job.result()}", flush=True)
        except BundleError as error:
            print(f"unpack_bundle: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
