"""benchmarks/benchmark_codecs.py on the OpenFOAM fixture and a tiny run: a row per source, array
and codec; ratios measured (the solver's cell centres compress, lz4 barely)."""

from __future__ import annotations

import pytest

from conftest import import_benchmark


@pytest.mark.slow
def test_the_codec_benchmark_prints_every_codec_for_every_array(capsys):
    benchmark = import_benchmark("benchmark_codecs")
    benchmark.main(["--preset", "tiny", "--repeats", "1"])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(rows) == 2 * len(benchmark.ARRAYS) * len(benchmark.CODECS)
    ratio = {(row[0].lstrip("| "), row[1], row[3]): float(row[4]) for row in rows}
    centres = ("OpenFOAM fixture run_1", "volume_mesh_centers")
    assert ratio[(*centres, "zstd 1")] > 1.1 and ratio[(*centres, "zstd 5")] >= ratio[(*centres, "zstd 1")]
