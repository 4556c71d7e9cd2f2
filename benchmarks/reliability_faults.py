"""The fault classes of fault_injection.py beyond byte flips and killed writers: crafted metadata
(checksums recomputed), runs from other writers, STL slivers, rewrites that keep size and mtime,
dead writers left as zombies, DataLoader workers killed while their batches are held.

Each ``case_*`` function runs one trial in its own folder under ``work`` and returns
(as expected, what it saw). "As expected" always means: a one-line error naming the run (or the
worker) and the cause, or correct data; never zeros, wrong rows, a traceback or a multi-GB
allocation.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import crafted_faults

ROOT = Path(__file__).resolve().parents[1]
GRID = "geometry.interp_res=[16,8,8]"


def _python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a script of the repository (or ``-c`` code) in a fresh interpreter from its root."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _stage(script: str, processed: Path, cache: Path, *extra: str) -> list[str]:
    """The arguments of a cache stage (cache_data.py) on the tiny grid, on the CPU."""
    return [script, "--config-name=cached", f"data.processed_dir={processed}", f"cache.dir={cache}", GRID,
            "geometry.device=cpu", *extra]

MAX_RSS_MB = 1024  # a draw or a validation that reads a crafted shape must stay far below this

DRAW = """
import json, resource, sys
from datapipe import CachedDoMINODataset
ds = CachedDoMINODataset(sys.argv[1], model_type="combined", surface_points=256, volume_points=512,
                         geometry_points=400, seed=0)
outcome = "ok"
try:
    for i in range(len(ds)):
        ds[i]
except Exception as err:
    outcome = f"{type(err).__name__}: {err}"
print(json.dumps({"outcome": outcome, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def case_crafted(fault: str, processed: Path, cache: Path, work: Path) -> tuple[bool, str]:
    """A crafted fault: validate exits 1 with a PROBLEM line naming the run and the cause, and a
    draw ends in one CacheError naming them, in little memory."""
    copy = work / "crafted"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(work / "crafted-outside-run_2", ignore_errors=True)
    shutil.copytree(cache, copy)
    name, phrase = crafted_faults.CRAFTS[fault](copy)
    valid = _python(*_stage("cache_data.py", processed, copy, "cache.validate=true"))
    lines = [line for line in valid.stdout.splitlines() if line.startswith(f"PROBLEM {name}:")]
    validated = valid.returncode == 1 and "Traceback" not in valid.stderr and any(phrase in line for line in lines)
    draw = subprocess.run([sys.executable, "-c", DRAW, str(copy)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    seen = _last_json(draw.stdout) if draw.returncode == 0 else {"outcome": draw.stderr[-400:], "rss_mb": 0}
    drawn = (seen["outcome"].startswith(("CacheError", "StaleCacheError", "RunMetadataError"))
             and phrase in seen["outcome"] and f"/{name}" in seen["outcome"] and seen["rss_mb"] < MAX_RSS_MB)
    return validated and drawn, f"validate: {lines[:1] or valid.stdout[-300:]}; draw: {seen}"


def _drop_all_chunks_mark(run: Path) -> None:
    meta = json.loads((run / "zarr.json").read_text())
    meta["attributes"].pop("all_chunks_written", None)
    (run / "zarr.json").write_text(json.dumps(meta))


def _as_zarr_v2(run: Path) -> None:
    """Rewrite a processed run as a Zarr v2 group of another writer (small chunks, no mark)."""
    import zarr

    source = zarr.open_group(str(run), mode="r")
    arrays = {name: source[name][...] for name in source.array_keys()}
    attrs = {k: v for k, v in source.attrs.items() if k not in ("format", "format_version", "all_chunks_written")}
    shutil.rmtree(run)
    group = zarr.open_group(str(run), mode="w", zarr_format=2)
    group.attrs.update(attrs)
    for name, data in arrays.items():
        group.create_array(name, shape=data.shape, dtype=data.dtype,
                           chunks=(max(1, len(data) // 4), *data.shape[1:]))[...] = data


def case_missing_chunk(form: str, processed: Path, work: Path) -> tuple[bool, str]:
    """A run of another writer (Zarr v3 without the all-chunks mark, or Zarr v2) with one chunk
    file deleted: the run is refused naming the array and the chunk, never cached as zeros."""
    inputs, cache = work / "other_writer", work / "other_writer_cache"
    for path in (inputs, cache):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(processed, inputs)
    run = inputs / "run_1.zarr"
    _as_zarr_v2(run) if form == "v2" else _drop_all_chunks_mark(run)
    chunks = sorted(p for p in (run / "volume_fields").rglob("*") if p.is_file() and not p.name.startswith((".", "zarr")))
    chunks[0].unlink()
    key = chunks[0].relative_to(run / "volume_fields").as_posix()
    result = _python(*_stage("cache_data.py", inputs, cache))
    output = result.stdout + result.stderr
    label = "curator-zarr-v2" if form == "v2" else "processed"
    refused = (result.returncode == 1 and "Traceback" not in output and "run_1.zarr" in output
               and f"array volume_fields ({label}) lacks chunks ['{key}']" in output)
    built = (cache / "run_1").is_dir() and any((cache / "run_1").glob("g*.zarr"))
    return refused and not built, output[-500:]


def _add_slivers(stl: Path) -> None:
    import numpy as np
    import pyvista as pv

    mesh = pv.read(stl)
    points, faces = np.array(mesh.points), mesh.faces.reshape(-1, 4)[:, 1:]
    middles = [(points[a] + points[b]) / 2 for a, b in faces[:3, :2]]
    extra = [[a, b, len(points) + i] for i, (a, b) in enumerate(faces[:3, :2])]
    points, faces = np.vstack([points, middles]), np.vstack([faces, extra])
    pv.PolyData(points, np.column_stack([np.full(len(faces), 3), faces]).ravel()).save(stl, binary=False)


def case_stl_slivers(raw: Path, work: Path) -> tuple[bool, str]:
    """Three zero-area triangles on existing edges: dropped and counted, no edge warnings, no
    zero area stored."""
    import zarr

    source, out = work / "sliver_raw", work / "sliver_processed"
    for path in (source, out):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(raw / "run_1", source / "run_1")
    _add_slivers(next((source / "run_1").glob("*.stl")))
    result = _python("process_data.py", f"data.raw_dir={source}", f"data.processed_dir={out}")
    output = result.stdout + result.stderr
    areas = zarr.open_group(str(out / "run_1.zarr"), mode="r")["stl_areas"][...] if result.returncode == 0 else None
    ok = (result.returncode == 0 and "dropped 3 zero-area triangles" in output and "open edges" not in output
          and "non-manifold" not in output and areas is not None and areas.min() > 0)
    return ok, output[-400:]


def case_kept_mtime(processed: Path, work: Path) -> tuple[bool, str]:
    """One byte of a processed run's metadata changed, size kept, mtime restored: a rerun of
    cache_data.py sees it (hashes the bytes and reports the run stale), without cache.validate."""
    inputs, cache = work / "kept_mtime", work / "kept_mtime_cache"
    for path in (inputs, cache):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(processed, inputs)
    first = _python(*_stage("cache_data.py", inputs, cache))
    meta = inputs / "run_1.zarr" / "zarr.json"
    before, text = meta.stat(), meta.read_text()
    at = text.index('"write_id": "') + len('"write_id": "')
    meta.write_text(text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:])
    os.utime(meta, ns=(before.st_atime_ns, before.st_mtime_ns))
    rerun = _python(*_stage("cache_data.py", inputs, cache))
    ok = (first.returncode == 0 and meta.stat().st_size == before.st_size
          and meta.stat().st_mtime_ns == before.st_mtime_ns and "Traceback" not in rerun.stderr
          and "STALE run_1: source: the processed run has changed" in rerun.stdout)
    return ok, rerun.stdout[-400:]


WRITER = """
import sys, time
from domino_pipeline.storage.atomic_store import atomic_directory
with atomic_directory(sys.argv[1]) as tmp:
    print(tmp, flush=True)
    time.sleep(120)
"""


def case_zombie_writer(raw: Path, processed: Path, work: Path) -> tuple[bool, str]:
    """A writer killed and left unreaped (a zombie, as without an init that reaps): a rerun of
    process_data.py removes its temporary."""
    target = work / "zombie_processed"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(processed, target)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target / "run_9.zarr")],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        tmp = Path(writer.stdout.readline().strip())
        os.kill(writer.pid, signal.SIGKILL)
        deadline = time.time() + 10
        while _state(writer.pid) != "Z" and time.time() < deadline:
            time.sleep(0.02)
        zombie = _state(writer.pid) == "Z"
        rerun = _python("process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={target}")
        return zombie and rerun.returncode == 0 and not tmp.exists(), f"zombie={zombie}, left={tmp.exists()}"
    finally:
        writer.wait()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


LOADER = """
import gc, json, os, signal, sys
from torch.utils.data import DataLoader, Dataset
from datapipe import CachedDoMINODataset, collate_items
from domino_pipeline.loading.worker_deaths import checked_batches
ds = CachedDoMINODataset(sys.argv[1], model_type="combined", surface_points=256, volume_points=512,
                         geometry_points=400, seed=0)
class Many(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i): return ds[i % len(ds)]
loader = DataLoader(Many(), batch_size=1, num_workers=2, collate_fn=collate_items)
held, pid, outcome = [], None, "no error"
try:
    for i, batch in enumerate(checked_batches(loader)):
        held.append(batch)
        if i == int(sys.argv[2]):
            it = next(o for o in gc.get_objects() if type(o).__name__ == "_MultiProcessingDataLoaderIter")
            pid = it._workers[0].pid
            os.kill(pid, signal.SIGKILL)
except Exception as err:
    outcome = f"{type(err).__name__}: {err}"
print(json.dumps({"pid": pid, "outcome": outcome}))
os._exit(0)
"""


def case_worker_killed(cache: Path, held: int) -> tuple[bool, str]:
    """A DataLoader worker killed while the main process holds ``held`` batches: one error
    naming the worker (its pid) and the signal, not a connection error."""
    run = subprocess.run([sys.executable, "-c", LOADER, str(cache), str(held)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    seen = _last_json(run.stdout) if run.stdout.strip() else {"pid": None, "outcome": run.stderr[-400:]}
    outcome = seen["outcome"]
    named = (outcome.startswith(("WorkerDiedError", "RuntimeError")) and str(seen["pid"]) in outcome
             and ("SIGKILL" in outcome or "Killed" in outcome))
    return named, outcome[:300]


def reliability_trials(raw: Path, processed: Path, cache: Path, work: Path, n: int) -> dict:
    """``n`` trials of every class; per class: trials, as expected, and what the misses saw."""
    classes = {f"crafted: {fault}": (lambda f=fault: case_crafted(f, processed, cache, work))
               for fault in crafted_faults.CRAFTS}
    classes |= {
        "chunk deleted, other writer (Zarr v3)": lambda: case_missing_chunk("v3", processed, work),
        "chunk deleted, other writer (Zarr v2)": lambda: case_missing_chunk("v2", processed, work),
        "zero-area STL triangles": lambda: case_stl_slivers(raw, work),
        "rewrite keeping size and mtime": lambda: case_kept_mtime(processed, work),
        "writer killed, left a zombie": lambda: case_zombie_writer(raw, processed, work),
        "worker killed, batches held": lambda: case_worker_killed(cache, 30),
    }
    report = {}
    for name, trial in classes.items():
        outcomes = [trial() for _ in range(n)]
        report[name] = {"trials": n, "expected": sum(bool(ok) for ok, _ in outcomes),
                        "missed": [seen for ok, seen in outcomes if not ok]}
    return report
