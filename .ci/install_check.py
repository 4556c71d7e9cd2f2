"""Run by `make install-check` with the interpreter of a fresh environment into which
`pip install .` (not editable) installed the project, from outside the repository: the install
holds no top-level module but ``domino_pipeline``, brought its dependencies, and the package's
public names import."""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, distribution, version

from packaging.requirements import Requirement

# the entry points, and the synthetic generator's internals (synthetic/): the repository's, not installed
ENTRY_POINTS = ("datapipe", "train", "predict", "process_data", "cache_data", "synthetic_data", "synthetic")


def problems() -> list[str]:
    """What is wrong with the installed distribution (empty: nothing)."""
    found = []
    dist = distribution("domino-pipeline")
    tops = {f.parts[0] for f in dist.files if f.parts[0] != ".." and not f.parts[0].endswith(".dist-info")}
    tops -= {"__pycache__"}
    if tops != {"domino_pipeline"}:
        found.append(f"installed top-level entries {sorted(tops)}, expected only domino_pipeline")
    found += [f"{name}: importable outside the repository" for name in ENTRY_POINTS
              if importlib.util.find_spec(name) is not None]
    for line in dist.requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None:
            continue
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            found.append(f"{requirement.name}: declared but not installed")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            found.append(f"{requirement.name} {installed}: outside {requirement.specifier}")
    return found


def main() -> int:
    from domino_pipeline.loading.cached import CachedDoMINODataset  # noqa: F401
    from domino_pipeline.loading.collate import collate_items  # noqa: F401

    found = problems()
    print("\n".join(found) or f"install check: only domino_pipeline installed, "
          f"{len(distribution('domino-pipeline').requires)} dependencies present, public names import")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
