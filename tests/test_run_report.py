"""The summary a batch stage prints (run_report.py): failed runs with their message, every
note, and the count of each status."""

from __future__ import annotations

from domino_pipeline.runtime.run_report import RunResult, summarize


def test_the_summary_names_failed_runs_and_notes_then_counts_each_status():
    results = [RunResult("run_1", "built"), RunResult("run_2", "failed", "boundary_2.vtp: empty file"),
               RunResult("run_3", "skipped", "current", notes=["curator .npz"]),
               RunResult("run_4", "stale", "settings differ")]
    assert summarize(results, ("built", "skipped", "stale", "failed")).splitlines() == [
        "FAILED run_2: boundary_2.vtp: empty file",
        "note run_3: curator .npz",
        "4 runs: 1 built, 1 skipped, 1 stale, 1 failed"]
    assert summarize(results, ("built", "stale"), named=("failed", "stale")).splitlines() == [
        "FAILED run_2: boundary_2.vtp: empty file", "STALE run_4: settings differ",
        "note run_3: curator .npz", "4 runs: 1 built, 1 stale"]


def test_an_empty_batch_says_so():
    assert summarize([], ("built", "failed")) == "0 runs: 0 built, 0 failed"
