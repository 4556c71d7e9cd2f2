"""The raw-remote benchmark runs end to end on tiny data, and its SeaweedFS holds the bytes as sent."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import benchmark_raw_remote as bench  # noqa: E402
from s3_servers import SeaweedFS, weed_binary  # noqa: E402

sys.path.remove(str(ROOT / "benchmarks"))

needs_weed = pytest.mark.skipif(weed_binary() is None, reason="SeaweedFS is a benchmark dependency "
                                "(make bench-setup), not a test one")


@pytest.mark.slow
def test_the_benchmark_runs_on_tiny_data(tmp_path):
    out = tmp_path / "raw_remote.json"
    done = subprocess.run([sys.executable, "benchmarks/benchmark_raw_remote.py", "--preset", "tiny",
                           "--repeats", "1", "--kill-trials", "1", "--server", "moto",
                           "--work", str(tmp_path / "work"), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert sorted(result["table"]) == ["SeaweedFS", "SeaweedFS +30 ms", "local disk"]
    assert all(0 < t["fetched_over_files"] <= 1.05 for n, t in result["table"].items() if n != "local disk")
    [kill] = result["kill_trials"]
    assert kill["rerun_ok"] and kill["equals_clean_run"] and not kill["finished_run_fetched_again"]


@pytest.mark.slow
@needs_weed
def test_uploaded_multipart_text_is_stored_as_sent(tmp_path):
    """SeaweedFS gzips parts that look compressible unless told they are binary: the benchmark's
    upload must leave them as sent (else the server gunzips on every GET, on the client's cores)."""
    run = tmp_path / "raw" / "run_1"
    run.mkdir(parents=True)
    numbers = (b"<DataArray>" + b"0123456789" * 100 + b"\n") * 12_000  # 12 MiB of text: multipart, compressible
    (run / "volume_1.vtu.00.part").write_bytes(base64.b64encode(numbers)[: 12 << 20])
    size = (run / "volume_1.vtu.00.part").stat().st_size
    with SeaweedFS(tmp_path / "server") as server:
        server.bucket("caemldatasets")
        bench.upload(tmp_path / "raw", server.endpoint, "caemldatasets")
        stored = sum(p.stat().st_size for p in (tmp_path / "server").glob("*.dat"))
    assert stored >= size, f"{stored} bytes stored of {size} uploaded: the server compressed them"
