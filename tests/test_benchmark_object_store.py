"""The object-store benchmark runs end to end on tiny data and writes its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _weed_installed() -> bool:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from s3_servers import weed_binary
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return weed_binary() is not None


@pytest.mark.slow
@pytest.mark.parametrize("server", ["moto", "seaweedfs"])
def test_the_benchmark_runs_on_tiny_data(tmp_path, server):
    if server == "seaweedfs" and not _weed_installed():
        pytest.skip("SeaweedFS is a benchmark dependency (make bench-setup), not a test one")
    out = tmp_path / "object_store.json"
    done = subprocess.run([sys.executable, "benchmarks/benchmark_object_store.py", "--preset", "tiny",
                           "--draws", "2", "--items", "2", "--work", str(tmp_path / "work"),
                           "--server", server, "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert sorted(result["remote"]) == ["0", "10", "30", "80"]
    assert all(r["waves"] >= 1 and r["mb_per_draw"] > 0 for r in result["remote"].values())
    assert result["local"]["warm_draw_ms"] > 0 and len(result["checks"]) == 8
