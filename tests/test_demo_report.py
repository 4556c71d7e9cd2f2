"""benchmarks/demo_report.py: the test runs' table with the training mean beside the model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import import_benchmark


def test_the_training_mean_is_the_mean_of_the_training_runs_published_coefficients(monkeypatch, tmp_path):
    report = import_benchmark("demo_report")
    published = {"run_1.zarr": {"cd": 0.30, "cl": 0.10}, "run_2.zarr": {"cd": 0.20, "cl": 0.30},
                 "run_3.zarr": {"cd": 9.0, "cl": 9.0}}
    import domino_pipeline.processed.runs as runs
    monkeypatch.setattr(runs, "open_run",
                        lambda path: SimpleNamespace(attrs={"published": {"own": published[path.name]}}))
    (tmp_path / "split.json").write_text(json.dumps({"train": ["run_1.zarr", "run_2.zarr"], "val": [],
                                                     "test": ["run_3.zarr"]}))
    mean = report.training_mean(tmp_path, tmp_path / "split.json")
    assert mean == {"cd": pytest.approx(0.25), "cl": pytest.approx(0.20)}
    rows = [{"run": "run_3", "cd_pred": "0.26", "cd_true": "0.2", "cl_pred": "0.1", "cl_true": "0.4",
             "rel_l2_area_p": "0.05"}]
    [entry] = report.prediction_summary(rows, mean)
    assert entry["cd"] == {"pred": 0.26, "true": 0.2, "error_pct": pytest.approx(30.0), "training_mean": 0.25,
                           "training_mean_error_pct": pytest.approx(25.0)}
    table = report.format_predictions([entry])
    assert "cd mean" in table.splitlines()[0] and "+30.0    0.2500   +25.0" in table
    assert "Cd mean abs. error over the 1 test runs: the model 30.0%, the training mean 25.0%" in table
    published["run_2.zarr"] = {}
    with pytest.raises(ValueError, match="runs \\['run_2.zarr'\\] publish no Cd and Cl"):
        report.training_mean(tmp_path, tmp_path / "split.json")
