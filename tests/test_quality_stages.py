"""cache_data.py and train.py leave a run the quality checks reject out, and name it with its
reason; process_data.py writes the table they read and says which runs it rejects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_train import TINY

from conftest import DEFAULTS
from domino_pipeline.store.manifest import read_manifest
from synthetic_data import generate_runs
from synthetic.defects import inject_defects

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC: list[str] = []  # the generator writes the default profile's (DrivAerML's) conventions


def _run(script: str, *overrides: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, script, *overrides], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> dict[str, Path]:
    """Three tiny runs, run_2's force files another run's, processed with process_data.py."""
    work = tmp_path_factory.mktemp("quality_stages")
    generate_runs(work / "raw", 3, preset="tiny", seed=3)
    inject_defects(work / "raw", {2: "foreign_forces"}, DEFAULTS.dataset)
    paths = {"raw": work / "raw", "processed": work / "processed", "cache": work / "cache", "work": work}
    done = _run("process_data.py", f"data.raw_dir={paths['raw']}", f"data.processed_dir={paths['processed']}",
                "process.num_processes=1", *SYNTHETIC)
    paths["process_output"] = done.stdout
    return paths


def test_process_data_writes_the_table_and_names_the_rejected_run(folder):
    assert (folder["processed"] / "statistics.csv").is_file()
    assert "(3 runs from their attributes, 0 from a pass over their arrays)" in folder["process_output"]
    assert "1 run excluded by quality: run_2 (Cd " in folder["process_output"]
    assert "robust scores not computed: 3 runs with statistics, at least 8 needed" in folder["process_output"]


def test_cache_data_and_train_leave_the_rejected_run_out_and_name_it(folder):
    common = [f"data.processed_dir={folder['processed']}", f"cache.dir={folder['cache']}",
              f"sampling.scaling_factors={folder['work'] / 'factors.json'}", *TINY, *SYNTHETIC]
    cached = _run("cache_data.py", "--config-name=cached", *common)
    assert "1 run excluded by quality: run_2 (Cd " in cached.stdout and "(own references)" in cached.stdout
    assert "2 runs: 2 built" in cached.stdout
    assert sorted(read_manifest(folder["cache"])["runs"]) == ["run_1", "run_3"]
    out = folder["work"] / "train"
    trained = _run("train.py", "--config-name=cached", *common, f"output_dir={out}", "train.epochs=1",
                   "train.val_fraction=0.5")
    assert "1 run excluded by quality: run_2 (Cd " in trained.stdout
    split = json.loads((out / "split.json").read_text())
    assert sorted(split["train"] + split["val"]) == ["run_1.zarr", "run_3.zarr"]
