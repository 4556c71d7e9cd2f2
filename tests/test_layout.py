"""The package layout: stages import only their own stage, lower stages and the ground floor
(an import walk over every module), the root holds few modules, only inputs/ and inference/ import
inputs/, and the reading and validating path imports neither Warp nor the DoMINO model (fresh
interpreters)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("warp", "physicsnemo")
WATCHED = ("torch", "zarr", *HEAVY)
PACKAGE = Path(__file__).resolve().parents[1] / "domino_pipeline"
# docs/architecture.md states this order; the package's modules outside these folders are the
# ground floor (level 0): domino_pipeline/*.py and the GROUND folders, shared by every stage.
STAGES = ("processed", "inputs", "compute", "store", "loading", "training", "inference")
GROUND = ("configuration", "storage", "runtime")
ROOT_MODULES = 10  # at most: the root's own *.py files (__init__.py among them) and GROUND folders


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
    (fake / "store" / "x.py").write_text("def f():\n    from ..loading import cached\n"
                                         "    from domino_pipeline.loading import collate\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _upward_imports() == [f"{PACKAGE.name}.store.x:2 -> {PACKAGE.name}.loading.cached",
                                 f"{PACKAGE.name}.store.x:3 -> {PACKAGE.name}.loading.collate"]


def test_every_stage_is_named():
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(STAGES) | set(GROUND)


def test_the_root_holds_few_modules():
    """The ground floor at the root: its own modules and the GROUND folders, each counted once."""
    assert len([*PACKAGE.glob("*.py"), *GROUND]) <= ROOT_MODULES


def test_the_datapipe_facade_only_re_exports():
    """datapipe.py, the names users import, holds no logic of its own: imports, ``__all__`` and the
    lazy ``__getattr__`` for the Warp-loading DoMINODataPipe, in at most 40 lines."""
    path = PACKAGE.parent / "datapipe.py"
    tree = ast.parse(path.read_text())
    kinds = {type(node).__name__ for node in tree.body}
    functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert len(path.read_text().splitlines()) <= 40
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign", "FunctionDef"} and functions == ["__getattr__"]


def _imports_of_inputs() -> list[str]:
    """``module:line -> imported`` for each import of inputs/ from outside inputs/ and inference/."""
    def room(module: str) -> str:
        return (module.split(".") + [""])[1]

    return [f"{module}:{line} -> {name}" for path in sorted(PACKAGE.rglob("*.py"))
            if room(module := _module_name(path)) not in ("inputs", "inference")
            for name, line in _imports(path) if room(name) == "inputs"]


def test_only_inputs_and_inference_import_inputs():
    assert _imports_of_inputs() == []


def test_the_inputs_check_sees_an_import_of_inputs(tmp_path, monkeypatch):
    """The check itself: training/ importing inputs/ is reported, inference/ importing it is not."""
    fake = tmp_path / PACKAGE.name
    for room in ("training", "inference"):
        (fake / room).mkdir(parents=True)
        (fake / room / "x.py").write_text("from domino_pipeline.inputs.statistics import run_statistics\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert _imports_of_inputs() == [f"{PACKAGE.name}.training.x:1 -> {PACKAGE.name}.inputs.statistics.run_statistics"]


def _modules_after(statements: list[str]) -> list[list[str]]:
    """Run ``statements`` one after another in one fresh interpreter; after each, the modules
    loaded so far among torch, Warp, physicsnemo, zarr and the package's own. A module a
    statement loads stays loaded, so the first statement after which one appears loads it."""
    code = "import json, sys\nloaded = []\n" + "".join(
        f"{statement}\nloaded.append(sorted(m for m in sys.modules if m.split('.')[0] in {WATCHED!r}"
        " or m.startswith('domino_pipeline.')))\n" for statement in statements) + "print(json.dumps(loaded))"
    result = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


LOADING = sorted(_module_name(p) for p in (PACKAGE / "loading").glob("*.py")
                 if p.stem not in ("__init__", "uncached"))
READING = [
    "import datapipe",
    "from datapipe import CachedDoMINODataset, collate_items, dataset_from_config",
    "from domino_pipeline.loading.cached import CachedDoMINODataset",
    "from domino_pipeline.loading.mixture import MixtureDataset, WeightedSourceSampler",
    "import domino_pipeline.store.validate, domino_pipeline.store.staleness",
    "import domino_pipeline.store.cache_format, domino_pipeline.store.chunk_reader, domino_pipeline.storage.atomic_store",
    "import " + ", ".join(LOADING),
    "import domino_pipeline.processed.runs, domino_pipeline.compute.sampling, domino_pipeline.compute.scaling",
]

UNCACHED = "from datapipe import DoMINODataPipe"  # loads Warp: run last


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Statement -> the watched modules loaded once it has run (after the ones before it)."""
    statements = ["import domino_pipeline", *READING, UNCACHED]
    return dict(zip(statements, _modules_after(statements)))


@pytest.mark.slow
def test_importing_the_package_loads_no_stage_and_no_torch(loaded):
    assert loaded["import domino_pipeline"] == []


@pytest.mark.parametrize("statement", READING)
@pytest.mark.slow
def test_the_cache_reader_imports_neither_warp_nor_the_model(loaded, statement):
    assert _heavy(loaded[statement]) == []


@pytest.mark.slow
def test_the_watch_sees_what_a_statement_loads(loaded):
    assert "domino_pipeline.loading.cached" in loaded[READING[0]] and "torch" in loaded[READING[0]]


@pytest.mark.slow
def test_the_uncached_datapipe_is_imported_on_first_use(loaded):
    assert "warp" in _heavy(loaded[UNCACHED])  # and in no statement before it


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module an imported name lives in: itself, or the module above a name imported from it."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> modules it imports), each once, from its least name."""
    found = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.add(tuple(path))
            elif nxt not in path and nxt > path[0]:
                walk(path + [nxt])

    for start in sorted(graph):
        walk([start])
    return [list(c) for c in sorted(found)]


def _package_graph(root: Path) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in root.rglob("*.py")}
    modules = set(paths)
    return {m: {r for name, _ in _imports(p) if (r := _resolve(name, modules)) and r != m
                and not m.startswith(r + ".") and not (p.name == "__init__.py" and r.startswith(m + "."))}
            for m, p in paths.items()}


def _benchmark_graph(folder: Path) -> dict[str, set[str]]:
    """benchmarks/ scripts import one another by their file names (the folder is on sys.path)."""
    names = {p.stem for p in folder.glob("*.py")}
    graph = {}
    for path in folder.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
        graph[path.stem] = (imported & names) - {path.stem}
    return graph


def test_no_import_circles_in_the_package_or_the_benchmarks():
    """Imports under TYPE_CHECKING and inside functions count: a circle is a circle to a reader."""
    assert _cycles(_package_graph(PACKAGE)) == []
    assert _cycles(_benchmark_graph(PACKAGE.parent / "benchmarks")) == []


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
