"""The package layout: the reading path imports neither Warp nor the DoMINO model."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("warp", "physicsnemo")


def _heavy_modules_after(statement: str) -> list[str]:
    """The Warp and physicsnemo modules loaded by ``statement`` in a fresh interpreter."""
    code = (f"{statement}\nimport sys\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import datapipe",
    "from datapipe import CachedDoMINODataset, collate_items, dataset_from_config",
    "import domino_pipeline.store.cache_format, domino_pipeline.store.chunk_reader, domino_pipeline.store.atomic_store",
    "import domino_pipeline.loading.cached, domino_pipeline.loading.collate",
    "import domino_pipeline.inputs.runs, domino_pipeline.compute.sampling, domino_pipeline.compute.scaling",
])
def test_the_cache_reader_imports_neither_warp_nor_the_model(statement):
    assert _heavy_modules_after(statement) == []


def test_the_uncached_datapipe_is_imported_on_first_use():
    assert "warp" in _heavy_modules_after("from datapipe import DoMINODataPipe")
