"""benchmarks/knn_rounds.py at tiny sizes: both kNNs run in one process and return the same rows."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_knn_rounds_compares_with_an_earlier_commit_row_for_row():
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    import knn_rounds

    results = knn_rounds.main(["--against", "HEAD", "--sizes", "400", "1500"])
    cases = [r["case"] for r in results]
    assert cases[:2] == ["all 400 points", "all 1,500 points"]
    assert len(cases) == 3 and cases[2].startswith("1,024 queries in ")  # 8,192 needs a larger cloud
    assert all(r["same_rows"] for r in results)
    assert all(before >= 1 and now >= 1 for before, now in (r["launches"] for r in results))
