"""Convert the internalField of an OpenFOAM ascii volVectorField (e.g. C) to a float64 .npy.

postProcess -func writeCellCentres writes C with the case's writePrecision (12 digits here);
this keeps those values exactly as float64, one row per cell in OpenFOAM's cell order (the
order foamToVTK writes cells in when polyhedra are not decomposed).
Usage: python export_centers.py TIME_DIR/C OUT.npy
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

_INTERNAL = re.compile(r"internalField\s+nonuniform\s+List<vector>\s*(\d+)\s*\(", re.S)


def read_internal_vectors(path: Path) -> np.ndarray:
    """Return the (N, 3) float64 internalField of an ascii volVectorField file."""
    text = path.read_text()
    match = _INTERNAL.search(text)
    if match is None:
        raise ValueError(f"{path}: no ascii 'internalField nonuniform List<vector>' entry")
    n = int(match.group(1))
    body = text[match.end():]
    end = body.index("\n)\n")
    values = np.array(body[:end].replace("(", " ").replace(")", " ").split(), dtype=np.float64)
    if values.size != 3 * n:
        raise ValueError(f"{path}: internalField announces {n} vectors, holds {values.size / 3}")
    return values.reshape(n, 3)


def main() -> None:
    """Convert the file named on the command line."""
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    values = read_internal_vectors(src)
    np.save(dst, values)
    print(f"{src} -> {dst}: {values.shape[0]} cells")


if __name__ == "__main__":
    main()
