"""Where a family's cases stand on disk, so that a rerun after a kill skips finished cases and
redoes half-done ones.

A case i is finished when its record ``records/case_<i>.json`` exists and its run folder has
been renamed into place: ``run_<i>/`` (converged) or ``not_converged/run_<i>/`` (not converged,
or a solver step failed). Outputs are staged in ``.partial_run_<i>/`` and renamed only after
the record is written, so a folder named ``run_<i>`` is always complete. Anything else of case
i (a staging folder, a record without its folder, a case folder in the work directory) is a
half-done case: removed, and the case built again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

NOT_CONVERGED = "not_converged"
RECORDS = "records"


def run_folder(root: Path, index: int, converged: bool) -> Path:
    """The final run folder of case ``index``."""
    return root / f"run_{index}" if converged else root / NOT_CONVERGED / f"run_{index}"


def staging_folder(root: Path, index: int) -> Path:
    """The folder case ``index``'s outputs are written to before the rename."""
    return root / f".partial_run_{index}"


def record_path(root: Path, index: int) -> Path:
    """The JSON record of case ``index`` (its parameters, convergence and timings)."""
    return root / RECORDS / f"case_{index}.json"


def read_record(root: Path, index: int) -> dict | None:
    """Case ``index``'s record, or None when it has none."""
    path = record_path(root, index)
    return json.loads(path.read_text()) if path.is_file() else None


def is_finished(root: Path, index: int) -> bool:
    """Whether case ``index`` has its record and its run folder in place."""
    record = read_record(root, index)
    return record is not None and run_folder(root, index, bool(record["converged"])).is_dir()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary name and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def clear_half_done(root: Path, index: int, work: Path) -> None:
    """Remove every trace of an unfinished case ``index`` (staging folder, record, run folders
    and its case folder under ``work``)."""
    for folder in (staging_folder(root, index), run_folder(root, index, True),
                   run_folder(root, index, False), work / f"case_{index}"):
        shutil.rmtree(folder, ignore_errors=True)
    record_path(root, index).unlink(missing_ok=True)


def pending(root: Path, indices: list[int]) -> list[int]:
    """The cases of ``indices`` still to build (not finished)."""
    return [i for i in indices if not is_finished(root, i)]


def commit_case(root: Path, index: int, record: dict) -> Path:
    """Finish case ``index``: write its record, then rename its staging folder into place."""
    write_atomic(record_path(root, index), json.dumps(record, indent=1, sort_keys=True) + "\n")
    final = run_folder(root, index, bool(record["converged"]))
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging_folder(root, index), final)
    return final
