"""The sampling benchmarks: sampling_ab.py's table and verdict from finished training runs (the
training itself is the demo's, covered by test_train.py), and sampling_reads.py on tiny data."""

from __future__ import annotations

import json

import pytest
from conftest import import_benchmark


def _write_run(out, loss: float, epochs: int = 2) -> None:
    out.mkdir(parents=True)
    records = [{"kind": "epoch", "epoch": e, "val_loss": loss + (epochs - e),
                "val_rel_l2/surface/pMeanTrim": loss * 10} for e in range(1, epochs + 1)]
    (out / "epochs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_report_only_prints_the_table_and_the_verdict(tmp_path, capsys):
    sampling_ab = import_benchmark("sampling_ab")
    for seed, default, exact in ((1, 0.045, 0.044), (2, 0.047, 0.048)):
        _write_run(sampling_ab.train_dir(tmp_path, "default", seed), default)
        _write_run(sampling_ab.train_dir(tmp_path, "exact", seed), exact)
    sampling_ab.main(["--work", str(tmp_path), "--seeds", "1", "2", "--epochs", "2", "--report-only",
                      "--json", str(tmp_path / "ab.json")])
    out = capsys.readouterr().out
    assert "| validation loss | 0.0450 / 0.0440 | 0.0470 / 0.0480 | 0.0460 ± 0.0014 | 0.0460 ± 0.0028 |" in out
    assert "| rel. L2 surface/pMeanTrim |" in out and "within the exact law's seed-to-seed range" in out
    verdict = json.loads((tmp_path / "ab.json").read_text())["verdict"]
    assert verdict["within_exact_range"] and verdict["exact_min_loss"] == 0.044
    _write_run(sampling_ab.train_dir(tmp_path, "default", 3), 0.060)
    _write_run(sampling_ab.train_dir(tmp_path, "exact", 3), 0.046)
    sampling_ab.main(["--work", str(tmp_path), "--seeds", "1", "2", "3", "--epochs", "2", "--report-only"])
    assert "OUTSIDE the exact law's seed-to-seed range" in capsys.readouterr().out


@pytest.mark.slow
def test_sampling_reads_runs_on_tiny(tmp_path, capsys):
    sampling_reads = import_benchmark("sampling_reads")
    sampling_reads.main(["--preset", "tiny", "--work", str(tmp_path), "--draws", "2",
                         "--json", str(tmp_path / "reads.json")])
    assert "| exact |" in capsys.readouterr().out
    laws = json.loads((tmp_path / "reads.json").read_text())["laws"]
    assert set(laws) == set(sampling_reads.LAWS) and all(r["mb"]["volume"] > 0 for r in laws.values())


def test_volume_draw_designs_on_small_sizes(tmp_path, capsys):
    designs = import_benchmark("volume_draw_designs")
    designs.main(["--rows", "50000", "--points", "256", "--chunk-rows", "256", "--draws", "40",
                  "--json", str(tmp_path / "designs.json")])
    assert "| window 8x (default) |" in capsys.readouterr().out
    result = json.loads((tmp_path / "designs.json").read_text())["designs"]
    assert result["window 1x"]["p_next"] > 0.99 and result["8 short windows"]["p_next"] > 0.95
    assert abs(result["window 8x (default)"]["p_next"] - 255 / (8 * 256)) < 0.03
    assert result["8 aligned chunks"]["chunks"] == 8 and 8.5 < result["window 8x (default)"]["chunks"] < 9.5
    assert result["exact"]["p_next"] < 0.02
