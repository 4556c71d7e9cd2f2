"""Packaging: the wheel holds the ``domino_pipeline`` package only and declares the
dependencies the code imports, in ranges that admit the tested pins (requirements.txt); the
public names of datapipe.py, the one facade, load on first use. (The install into a fresh environment, with its
dependencies, is a CI step: `make install-check`.)"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import domino_pipeline

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = ("process_data.py", "cache_data.py", "train.py", "predict.py", "datapipe.py",
                "synthetic_data.py")
# Needed but never imported by name: torch.utils.tensorboard's writer.
NOT_IMPORTED = {"tensorboard"}
# Imported only where a setting asks for them, declared as an extra: executor.kind=dask.
OPTIONAL = {"dask": "dask", "distributed": "dask"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built (no dependencies fetched) from a copy of the project's sources."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "domino_pipeline", src / "domino_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for script in ENTRY_POINTS:  # present, as in the repository, yet not to be packaged
        shutil.copy(ROOT / script, src)
    shutil.copytree(ROOT / "synthetic", src / "synthetic", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def _requires(wheel: zipfile.ZipFile) -> list[Requirement]:
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    lines = wheel.read(metadata).decode().splitlines()
    return [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]


def _pins() -> dict[str, str]:
    """requirements.txt's pinned versions by distribution name."""
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    requirements = [Requirement(line) for line in lines if line]
    return {r.name.lower(): str(r.specifier).removeprefix("==") for r in requirements}


def _imported_distributions() -> set[str]:
    """The distributions whose modules the package, the entry points and the generator's
    internals (synthetic/, not installed) import."""
    files = [*ROOT.joinpath("domino_pipeline").rglob("*.py"), *ROOT.joinpath("synthetic").rglob("*.py"),
             *(ROOT / s for s in ENTRY_POINTS)]
    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    owners = packages_distributions()
    return {dist.lower() for name in names if name not in sys.stdlib_module_names
            for dist in owners.get(name, [])} - {"domino-pipeline"}


@pytest.mark.slow
def test_the_wheel_installs_only_the_package(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    (info,) = {top for top in tops if top.endswith(".dist-info")}
    assert tops - {info} == {"domino_pipeline"} and info.startswith("domino_pipeline-")
    assert "domino_pipeline/loading/cached.py" in wheel.namelist()
    assert "domino_pipeline/configuration/example_keys.json" in wheel.namelist()  # package data, read on import


@pytest.mark.slow
def test_the_wheel_declares_every_imported_distribution(wheel):
    declared = {r.name.lower() for r in _requires(wheel) if r.marker is None}
    assert (_imported_distributions() - set(OPTIONAL)) | NOT_IMPORTED <= declared
    assert declared - _imported_distributions() <= NOT_IMPORTED
    extras = {(r.name.lower(), *sorted(r.extras), str(r.marker)) for r in _requires(wheel) if r.marker is not None}
    for extra in OPTIONAL.values():  # dask[distributed] brings the distributed package
        assert ("dask", "distributed", f'extra == "{extra}"') in extras, extras


@pytest.mark.slow
def test_each_declared_range_admits_the_tested_pin_and_stops_at_the_next_major(wheel):
    pins = _pins()
    for requirement in _requires(wheel):
        pin = pins[requirement.name.lower()]
        assert requirement.specifier.contains(pin), (requirement, pin)
        major = int(pin.split(".")[0])
        assert not requirement.specifier.contains(f"{major + 1}.0"), requirement


def test_the_public_names_resolve_in_the_one_facade_and_are_their_modules_ones():
    import datapipe
    from domino_pipeline.loading import cached, collate, items, uncached

    defined_in = {"CachedDoMINODataset": cached, "DoMINODataPipe": uncached, "collate_items": collate,
                  "MODEL_TYPES": items, "build_item": items, "constant_grid": items, "parts_of": items}
    for name in datapipe.__all__:
        assert getattr(datapipe, name) is not None
    for name, module in defined_in.items():
        assert getattr(datapipe, name) is getattr(module, name)
    assert not hasattr(domino_pipeline, "__getattr__")  # one facade: the package holds no second one
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        datapipe.nothing  # noqa: B018
