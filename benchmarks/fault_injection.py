"""Fault injection against a built cache and its writers: is every defect caught, named, and
never a traceback; does every interrupted or concurrent writer end in one whole cache?

Corruption (``--faults N``): on a fresh copy of a built 4-run tiny cache per trial, one random
byte flip, deletion or truncation of one file, by kind: shard (chunk data and index), an array's
``zarr.json``, a run's ``zarr.json`` (attributes), ``manifest.json``, ``scaling_factors.json``.
Detected means ``cache_data.py cache.validate=true`` exits 1 with a PROBLEM line and no Python
traceback. Prints the detection rate per kind.

Writers (``--scenarios N``), each N times, counted "as expected" when:
- ``kill-cache``: ``cache_data.py`` killed (SIGKILL) at a random moment, then rerun: exits 0,
  validates, and holds the same arrays as a clean build;
- ``kill-process``: ``process_data.py`` killed at a random moment: no pool worker outlives it,
  and a rerun processes every run;
- ``two-writers``: a second ``cache_data.py`` started while the first runs (and the first paused
  with SIGSTOP for a moment, then resumed): both exit 0 and the cache validates;
- ``reader-during-rebuild``: a process draws in a loop while ``cache.rebuild=true`` rebuilds
  every run with other settings: every item equals the item of the cache as it was opened, and
  no error is raised.

Reliability classes (``--reliability N``, each N times; reliability_faults.py): every crafted
fault of crafted_faults.py (index offsets near 2**64 and overlapping entries, counts, shapes and
chunk shapes, generations linked or copied from another run, a run folder linked outside, all
with checksums recomputed) ends in one error naming the run in validate and in a draw, in little
memory; a run of another writer with a deleted chunk (Zarr v3 and v2) is refused naming array
and chunk; zero-area STL triangles are dropped and counted; a rewrite keeping size and mtime is
seen by a rerun; a zombie writer's temporary goes on the rerun; a DataLoader worker killed while
its batches are held is named with its signal.

    python benchmarks/fault_injection.py --faults 60 --scenarios 5 --reliability 2 --work /tmp/faults
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from reliability_faults import ROOT, _python, _stage, reliability_trials

KINDS = ("shard", "array zarr.json", "run zarr.json", "manifest.json", "scaling_factors.json")
FAULTS = ("flip", "delete", "truncate")


def prepare(work: Path) -> tuple[Path, Path, Path]:
    """Raw runs, processed runs and a clean cache of 4 tiny runs under ``work`` (reused)."""
    raw, processed, cache = work / "raw", work / "processed", work / "cache"
    if not (cache / "manifest.json").is_file():
        shutil.rmtree(work, ignore_errors=True)
        _python("synthetic_data.py", "--preset", "tiny", "--runs", "4", "--seed", "3", "--out", str(raw),
                "--volume-points", "20000")  # volume shards of several inner chunks
        _python("process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={processed}")
        done = _python(*_stage("cache_data.py", processed, cache))
        if done.returncode:
            raise SystemExit(f"clean build failed:\n{done.stdout}{done.stderr}")
    return raw, processed, cache


def _files_of(cache: Path, kind: str) -> list[Path]:
    if kind == "manifest.json":
        return [cache / "manifest.json"]
    if kind == "scaling_factors.json":
        return [cache / "scaling_factors.json"]
    files = [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "cache" and ".lock" not in p.name]
    if kind == "shard":
        return [p for p in files if "/c/" in p.as_posix()]
    if kind == "run zarr.json":
        return [p for p in files if p.name == "zarr.json" and p.parent.name.startswith("g")]
    return [p for p in files if p.name == "zarr.json" and not p.parent.name.startswith("g")]


def inject(path: Path, fault: str, rng: random.Random) -> str:
    """Apply ``fault`` to ``path``; a description of what was done."""
    data = bytearray(path.read_bytes())
    if fault == "delete":
        path.unlink()
        return f"deleted {path.name}"
    if fault == "truncate":
        size = rng.randrange(0, len(data))
        path.write_bytes(bytes(data[:size]))
        return f"truncated {path.name} to {size} of {len(data)} bytes"
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"flipped a bit at byte {offset} of {path.name}"


def corruption_trials(processed: Path, cache: Path, work: Path, n: int, rng: random.Random) -> dict:
    """``n`` trials; per file kind: trials, detected, tracebacks, and the undetected ones."""
    tally = {kind: Counter() for kind in KINDS}
    missed = []
    for trial in range(n):
        kind, fault = KINDS[trial % len(KINDS)], rng.choice(FAULTS)
        copy = work / "trial"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(cache, copy)
        what = inject(rng.choice(_files_of(copy, kind)), fault, rng)
        result = _python(*_stage("cache_data.py", processed, copy, "cache.validate=true"))
        output = result.stdout + result.stderr
        detected = result.returncode == 1 and "PROBLEM" in output and "Traceback" not in output
        tally[kind]["trials"] += 1
        tally[kind]["detected"] += detected
        tally[kind]["traceback"] += "Traceback" in output
        if not detected:
            missed.append({"kind": kind, "fault": what, "output": output[-800:]})
    return {"per_kind": {k: dict(v) for k, v in tally.items()}, "missed": missed}


def _kill_at_random(command: list[str], rng: random.Random, limit: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.5, limit))
    kids = children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.children = kids  # type: ignore[attr-defined]
    return proc


def children(pid: int) -> set[int]:
    """The pids of ``pid``'s child processes (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _same_arrays(a: Path, b: Path) -> bool:
    import numpy as np
    import zarr

    from domino_pipeline.store.manifest import read_manifest

    runs_a, runs_b = read_manifest(a)["runs"], read_manifest(b)["runs"]
    if sorted(runs_a) != sorted(runs_b):
        return False
    for name in runs_a:
        ga = zarr.open_group(str(a / runs_a[name]["path"]), mode="r")
        gb = zarr.open_group(str(b / runs_b[name]["path"]), mode="r")
        if any(not np.array_equal(ga[k][...], gb[k][...]) for k, _ in ga.arrays()):
            return False
    return True


def scenario_kill_cache(processed: Path, cache: Path, work: Path, rng: random.Random) -> bool:
    target = work / "killed_cache"
    shutil.rmtree(target, ignore_errors=True)
    _kill_at_random(_stage("cache_data.py", processed, target), rng, 8.0)
    rerun = _python(*_stage("cache_data.py", processed, target))
    valid = _python(*_stage("cache_data.py", processed, target, "cache.validate=true"))
    return rerun.returncode == 0 and valid.returncode == 0 and _same_arrays(target, cache)


def scenario_kill_process(raw: Path, processed: Path, work: Path, rng: random.Random) -> bool:
    target = work / "killed_processed"
    shutil.rmtree(target, ignore_errors=True)
    command = ["process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={target}", "process.num_processes=2"]
    proc = _kill_at_random(command, rng, 4.0)
    deadline = time.time() + 10
    while any(alive(p) for p in proc.children) and time.time() < deadline:
        time.sleep(0.05)
    orphans = [p for p in proc.children if alive(p)]
    rerun = _python(*command)
    return not orphans and rerun.returncode == 0 and len(list(target.glob("run_*.zarr"))) == 4


def scenario_two_writers(processed: Path, cache: Path, work: Path, rng: random.Random) -> bool:
    target = work / "two_writers"
    shutil.rmtree(target, ignore_errors=True)
    first = subprocess.Popen([sys.executable, *_stage("cache_data.py", processed, target)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(rng.uniform(0.5, 4.0))
    first.send_signal(signal.SIGSTOP)  # a paused writer holds its run; the second waits for it
    second = subprocess.Popen([sys.executable, *_stage("cache_data.py", processed, target)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(rng.uniform(0.5, 3.0))
    first.send_signal(signal.SIGCONT)
    codes = [first.wait(timeout=300), second.wait(timeout=300)]
    valid = _python(*_stage("cache_data.py", processed, target, "cache.validate=true"))
    return codes == [0, 0] and valid.returncode == 0 and _same_arrays(target, cache)


READER = """
import json, sys, numpy as np
from datapipe import CachedDoMINODataset
cache, reference, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
kw = dict(model_type="combined", surface_points=256, volume_points=512, geometry_points=400, seed=0)
ds, ref = CachedDoMINODataset(cache, **kw), CachedDoMINODataset(reference, **kw)
ds.set_epoch(0); ds[0]
print("open", flush=True)
import time
end, draws, mixed = time.time() + seconds, 0, 0
while time.time() < end:
    i = draws % len(ds)
    ds.set_epoch(draws); ref.set_epoch(draws)
    a, b = ds[i], ref[i]
    mixed += any(not np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
    draws += 1
print(json.dumps({"draws": draws, "mixed": mixed}))
"""


def scenario_reader_during_rebuild(processed: Path, cache: Path, work: Path, rng: random.Random) -> bool:
    target = work / "rebuilt"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(cache, target)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(target), str(cache), "12"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader.stdout.readline()  # the reader holds the old generation open before the rebuild starts
    time.sleep(rng.uniform(0.5, 3.0))
    rebuild = _python(*_stage("cache_data.py", processed, target, "cache.rebuild=true",
                              "geometry.permutation_seed=7"))
    out, err = reader.communicate(timeout=120)
    if reader.returncode or rebuild.returncode:
        print(f"reader-during-rebuild: reader exit {reader.returncode}: {err[-600:]}\n"
              f"rebuild exit {rebuild.returncode}: {(rebuild.stdout + rebuild.stderr)[-600:]}", file=sys.stderr)
        return False
    result = json.loads(out.strip().splitlines()[-1])
    if result["mixed"] or not result["draws"]:
        print(f"reader-during-rebuild: {result}", file=sys.stderr)
    return result["mixed"] == 0 and result["draws"] > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/domino_faults"))
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--scenarios", type=int, default=5)
    parser.add_argument("--reliability", type=int, default=2, help="trials of each class of reliability_faults.py")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    raw, processed, cache = prepare(args.work)
    report = {"corruption": corruption_trials(processed, cache, args.work, args.faults, rng), "writers": {}}
    scenarios = {"kill-cache": lambda: scenario_kill_cache(processed, cache, args.work, rng),
                 "kill-process": lambda: scenario_kill_process(raw, processed, args.work, rng),
                 "two-writers": lambda: scenario_two_writers(processed, cache, args.work, rng),
                 "reader-during-rebuild": lambda: scenario_reader_during_rebuild(processed, cache, args.work, rng)}
    for name, run in scenarios.items():
        report["writers"][name] = sum(bool(run()) for _ in range(args.scenarios))
    report["reliability"] = reliability_trials(raw, processed, cache, args.work, args.reliability)
    print("| file kind | trials | detected | tracebacks |\n|---|---|---|---|")
    for kind, counts in report["corruption"]["per_kind"].items():
        print(f"| {kind} | {counts.get('trials', 0)} | {counts.get('detected', 0)} | {counts.get('traceback', 0)} |")
    for item in report["corruption"]["missed"]:
        print(f"MISSED {item['kind']}: {item['fault']}")
    for name, ok in report["writers"].items():
        print(f"{name}: {ok} of {args.scenarios} as expected")
    print("| class | trials | as expected |\n|---|---|---|")
    for name, counts in report["reliability"].items():
        print(f"| {name} | {counts['trials']} | {counts['expected']} |")
        for seen in counts["missed"]:
            print(f"MISSED {name}: {seen}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    perfect = (not report["corruption"]["missed"] and all(v == args.scenarios for v in report["writers"].values())
               and all(c["expected"] == c["trials"] for c in report["reliability"].values()))
    return 0 if perfect else 1


if __name__ == "__main__":
    sys.exit(main())
