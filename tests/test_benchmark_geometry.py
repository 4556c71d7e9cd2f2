"""benchmarks/geometry_vs_vtk.py and benchmarks/cell_centres_memory.py on tiny inputs: the
figures they report hold what they say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import import_benchmark

pytestmark = pytest.mark.slow


def test_geometry_against_vtk_on_a_tiny_boundary(tiny_raw_dir: Path, tmp_path: Path) -> None:
    benchmark = import_benchmark("geometry_vs_vtk")
    result = benchmark.main(["--vtp", str(tiny_raw_dir / "run_1" / "boundary_1.vtp"), "--warp", "0.15",
                             "--edge-points", "0.1", "--hexahedra", "500", "--json", str(tmp_path / "r.json")])
    given = result["as_given"]  # the synthetic boundary has warped pentagons and hexagons of its own
    assert given["cells_by_vertex_count"].keys() == {3, 4, 5, 6}
    assert given["area_relative_difference"]["max"] > 0.05
    warped = result["warped"]
    assert {5, 6} <= warped["cells_by_vertex_count"].keys() and warped["cells"] == given["cells"]
    assert warped["total_area"]["vtk"] > warped["total_area"]["openfoam"]  # triangles of warped polygons overstate
    assert 0 < result["hexahedra"]["centre_shift_over_diagonal"]["max"] < 0.2
    assert (tmp_path / "r.json").is_file()


def test_cell_centres_memory_reads_both_volumes_by_blocks() -> None:
    results = import_benchmark("cell_centres_memory").main(["--cells", "1000", "--rows", "128"])
    assert [r["cells"] for r in results] == [1000, 4096]
    for r in results:
        side = round(r["cells"] ** (1 / 3))
        assert r["streamed"] and r["rows"] == r["cells"] and r["peak_rss_mb"] > 0
        np.testing.assert_allclose(r["mean_centre"], [side / 2] * 3, atol=0.05)
