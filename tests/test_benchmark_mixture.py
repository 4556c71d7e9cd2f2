"""benchmark_mixture.py runs end to end on tiny data: both sides timed, the ratio the medians' ratio."""

from __future__ import annotations

import json
import math

import pytest
from conftest import import_benchmark


@pytest.mark.slow
def test_benchmark_mixture_times_both_sides(tmp_path, capsys):
    """Tiny runs processed and cached in ``tmp_path``, a few pairs of draws: finite positive medians
    for the single source and the mixture, and the ratio of medians is mixture / single."""
    bench = import_benchmark("benchmark_mixture")
    out = tmp_path / "mixture.json"
    assert bench.main(["--preset", "tiny", "--runs", "2", "--draws", "6", "--work", str(tmp_path / "work"),
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| single source, ms |" in printed and "against 1.1x" in printed
    figures = json.loads(out.read_text())
    single, mixture = figures["single"]["median_ms"], figures["mixture"]["median_ms"]
    assert all(math.isfinite(v) and v > 0 for v in (single, mixture))
    assert figures["ratio_of_medians"] == pytest.approx(mixture / single)
    assert len(figures["single_all_ms"]) == len(figures["mixture_all_ms"]) == figures["draws"] == 6
    assert figures["within_target"] == (figures["ratio_of_medians"] <= 1.1)
    assert figures["preset"] == "tiny" and figures["commit"] and figures["date"]
