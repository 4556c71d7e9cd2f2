"""The package layout: stages import only their own stage, lower stages and the ground floor
(an import walk over every module), and the reading and validating path imports neither Warp
nor the DoMINO model (fresh interpreters)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("warp", "physicsnemo")
PACKAGE = Path(__file__).resolve().parents[1] / "domino_pipeline"
# The package docstring states this order; the package's modules outside these folders are the
# ground floor (level 0), and domino_pipeline/__init__.py, the public face, may name any stage.
STAGES = ("inputs", "compute", "store", "loading", "training", "inference")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _level(module: str) -> int:
    """0 for the ground floor, else 1 + the stage's place in STAGES."""
    parts = module.split(".")
    return STAGES.index(parts[1]) + 1 if len(parts) > 1 and parts[1] in STAGES else 0


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every domino_pipeline module ``path`` imports (at the top or inside a function), with the
    line; ``from package import name`` counts as importing ``package.name``."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name.split(".")[0] == PACKAGE.name]


def _upward_imports() -> list[str]:
    """``module:line -> imported`` for each import of a higher stage than the importer's."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == PACKAGE.name:
            continue
        for name, line in _imports(path):
            if _level(name) > _level(module):
                wrong.append(f"{module}:{line} -> {name}")
    return wrong


def test_no_module_imports_a_higher_stage():
    assert _upward_imports() == []


def test_the_import_walk_sees_imports_inside_functions(tmp_path, monkeypatch):
    """The walk itself: an upward import hidden in a function body is reported."""
    fake = tmp_path / PACKAGE.name
    (fake / "store").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "store" / "__init__.py").write_text("")
    (fake / "store" / "x.py").write_text("def f():\n    from ..loading import cached\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _upward_imports() == [f"{PACKAGE.name}.store.x:2 -> {PACKAGE.name}.loading.cached"]


def test_every_stage_is_named():
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(STAGES)


def _heavy_modules_after(statement: str) -> list[str]:
    """The Warp and physicsnemo modules loaded by ``statement`` in a fresh interpreter."""
    code = (f"{statement}\nimport sys\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


LOADING = sorted(_module_name(p) for p in (PACKAGE / "loading").glob("*.py")
                 if p.stem not in ("__init__", "uncached"))


@pytest.mark.parametrize("statement", [
    "import datapipe",
    "from datapipe import CachedDoMINODataset, collate_items, dataset_from_config",
    "from domino_pipeline import CachedDoMINODataset, collate_items",
    "import domino_pipeline.store.validate, domino_pipeline.store.staleness",
    "import domino_pipeline.store.cache_format, domino_pipeline.store.chunk_reader, domino_pipeline.atomic_store",
    "import " + ", ".join(LOADING),
    "import domino_pipeline.inputs.runs, domino_pipeline.compute.sampling, domino_pipeline.compute.scaling",
])
def test_the_cache_reader_imports_neither_warp_nor_the_model(statement):
    assert _heavy_modules_after(statement) == []


def test_the_uncached_datapipe_is_imported_on_first_use():
    assert "warp" in _heavy_modules_after("from datapipe import DoMINODataPipe")


def test_importing_the_package_loads_no_stage_and_no_torch():
    code = ("import sys, domino_pipeline\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'warp', 'zarr')"
            " or m.startswith('domino_pipeline.')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
