"""Benchmark the geometry engine: exact all-points kNN and signed distance, Warp vs scipy.

    python benchmarks/benchmark_geometry.py                      # full sizes: several minutes on 2 CPU cores
    python benchmarks/benchmark_geometry.py --quick              # small sizes: under a minute
    python benchmarks/benchmark_geometry.py --json outputs/benchmark_geometry.json
    python benchmarks/benchmark_geometry.py --sizes drivaerml --devices cuda --inputs /tmp/g  # a GPU, DrivAerML's sizes

Inputs come from synthetic_data (no files written there): the surface cell centres of a
car-like body (1M cells), its STL (~600k triangles), volume points around it (1M) and a
128 x 64 x 48 grid over the volume box. Cases:

- all-points kNN, k = 7, on the surface centres at two sizes (250k, 1M), with geometry.knn's
  Warp kernel, geometry.knn's cKDTree backend (same exact result, same tie order), and plain
  scipy cKDTree build + query (float64, workers=-1) as the reference library cost;
- signed distance of the grid plus the volume points to the STL, with geometry.signed_distance
  and physicsnemo's signed_distance_field (winding-number sign), side by side;
- on CUDA: the Warp kernels on the GPU and physicsnemo.nn.functional.knn where it runs;
- the kNN host preparation (Z-order sort, density counts, points to the device) of a cache
  build's neighbour search over the largest surface in 4 query blocks: how many times it runs
  and how long, against one preparation per block (the code before ``KnnIndex``), side by side.

``--devices cuda`` plans the CUDA cases only; ``--require-cuda`` fails (exit 1) unless CUDA is
present and every case ran (without it, only a failed CPU case fails the run).

Each case runs in a fresh spawned process: inputs are loaded from .npy files, the kernels are
warmed up on a tiny input, the peak RSS is reset to the current RSS (Linux clear_refs) and read
as the baseline; the case's peak memory is the peak RSS (VmHWM, the per-process figure behind
ru_maxrss) reached during the timed repetitions minus that baseline: inputs excluded, outputs
and all temporaries included. Times are medians of the
repetitions (wall clock; the process CPU time is reported too, since this machine is shared).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # synthetic_data.py, as from the repository
K = 7
# brute_knn_size: on CUDA without cuML, physicsnemo's knn forms an N x N distance matrix
# (1M points: 4 TB), so there it is compared with Warp at this size only (20k: 1.6 GB).
FULL = {"knn_sizes": (250_000, 1_000_000), "brute_knn_size": 20_000, "stl_triangles": 600_000,
        "volume_points": 1_000_000, "grid": (128, 64, 48)}
QUICK = {"knn_sizes": (25_000, 100_000), "brute_knn_size": 5_000, "stl_triangles": 20_000,
         "volume_points": 50_000, "grid": (32, 16, 12)}
# drivaerml: a DrivAerML run's 8.8M surface cells and its car's STL (~600k triangles, the synthetic
# full preset's), SDF of DoMINO's default 128 x 64 x 64 grid plus 1M volume points; tiny: a smoke run
SIZES = {"quick": QUICK, "full": FULL,
         "drivaerml": {"knn_sizes": (8_800_000,), "brute_knn_size": 20_000, "stl_triangles": 600_400,
                       "volume_points": 1_000_000, "grid": (128, 64, 64)},
         "tiny": {"knn_sizes": (3_000,), "brute_knn_size": 1_000, "stl_triangles": 2_000,
                  "volume_points": 2_000, "grid": (16, 8, 8)}}


# ------------------------------------------------------------------------------------- inputs


def write_inputs(scratch: Path, sizes: dict, seed: int) -> dict[str, Path]:
    """Generate the car inputs once and save them as .npy files for the case processes; inputs
    written before for the same sizes and seed (``inputs.json`` beside them) are reused."""
    import synthetic_data as sd

    record = scratch / "inputs.json"
    wanted = json.loads(json.dumps({"sizes": sizes, "seed": seed}))
    if record.is_file() and json.loads(record.read_text())["made"] == wanted:
        return {name: Path(path) for name, path in json.loads(record.read_text())["paths"].items()}
    scratch.mkdir(parents=True, exist_ok=True)

    rng = np.random.default_rng(seed)
    shape = sd.random_shape(rng)
    paths = {}
    surface = _surface_centres(sd, shape, max(sizes["knn_sizes"]), rng)
    for n in (*sizes["knn_sizes"], sizes["brute_knn_size"]):
        paths[f"surface_{n}"] = _save(scratch / f"surface_{n}.npy", surface[rng.permutation(len(surface))[:n]])
    vertices, faces = sd.stl_mesh(shape, sizes["stl_triangles"])
    paths["stl_vertices"] = _save(scratch / "stl_vertices.npy", vertices.astype(np.float32))
    paths["stl_faces"] = _save(scratch / "stl_faces.npy", faces.astype(np.int32))
    volume = sd.volume_points(shape, sizes["volume_points"], rng)
    queries = np.concatenate([_grid(sd.VOLUME_BOX, sizes["grid"]), volume]).astype(np.float32)
    paths["sdf_queries"] = _save(scratch / "sdf_queries.npy", queries)
    record.write_text(json.dumps({"made": wanted, "paths": {k: str(v) for k, v in paths.items()}}) + "\n")
    return paths


def _surface_centres(sd, shape, n_cells: int, rng: np.random.Generator) -> np.ndarray:
    mesh = sd.boundary_mesh(shape, n_cells, rng)
    return sd.ragged_face_geometry(mesh.vertices, mesh.offsets, mesh.connectivity)[0].astype(np.float32)


def _grid(box, resolution) -> np.ndarray:
    axes = [np.linspace(lo, hi, n) for lo, hi, n in zip(box[0], box[1], resolution)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)


def _save(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


# -------------------------------------------------------------------------------------- cases


def _maxrss_mb() -> float:
    """Peak resident memory of this process in MB.

    On Linux this is VmHWM, the high-water mark of this process image. ru_maxrss would also
    count the parent's resident memory at the fork that precedes a spawned child's exec, which
    hides the case's own peak; it is the fallback where /proc is missing.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux units: KiB


def _reset_peak() -> bool:
    """Reset the peak RSS to the current RSS (Linux clear_refs), so loading and warm-up don't count."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _run_case(case: dict) -> dict:
    """Child process: load inputs, warm up, then time ``repeats`` runs and measure peak memory."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import warp as wp

    wp.config.quiet = True
    run, warm = _case_function(case)
    warm()
    reset = _reset_peak()
    baseline = _maxrss_mb()
    walls, cpus = [], []
    for _ in range(case["repeats"]):
        t0, c0 = time.perf_counter(), time.process_time()
        output = run()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    peak = _maxrss_mb() - baseline
    if case.get("save"):
        for name, array in output.items():
            np.save(Path(case["save"]) / f"{case['id']}_{name}.npy", array)
    return {"seconds": statistics.median(walls), "cpu_seconds": statistics.median(cpus),
            "all_seconds": walls, "peak_mb": peak, "baseline_mb": baseline, "peak_reset": reset}


def _case_function(case: dict):
    """(run, warm-up) closures of one case; inputs loaded here, before the baseline."""
    kind, device = case["kind"], case["device"]
    if kind.startswith("knn"):
        points = np.load(case["inputs"]["points"])
        tiny = points[:2000]
        return _knn_functions(kind, points, tiny, device, case.get("threads"))
    vertices = np.load(case["inputs"]["stl_vertices"])
    faces = np.load(case["inputs"]["stl_faces"])
    queries = np.load(case["inputs"]["sdf_queries"])
    return _sdf_functions(kind, vertices, faces, queries, device, case.get("threads"))


def _knn_functions(kind: str, points: np.ndarray, tiny: np.ndarray, device: str, threads: int | None):
    from domino_pipeline.compute import geometry

    if kind in ("knn_warp", "knn_ckdtree"):
        backend = kind.removeprefix("knn_")

        def run(p=points):
            index, distance = geometry.knn(p, K, device=device, backend=backend, cpu_threads=threads)
            return {"index": index, "distance": distance}

        return run, lambda: run(tiny)
    if kind == "knn_scipy":
        from scipy.spatial import cKDTree

        def run(p=points):
            p64 = p.astype(np.float64)
            distance, index = cKDTree(p64).query(p64, k=K, workers=-1)
            return {"index": index.astype(np.int32), "distance": distance.astype(np.float32)}

        return run, lambda: run(tiny)
    if kind == "knn_physicsnemo":
        import torch
        from physicsnemo.nn.functional import knn as pn_knn

        def run(p=points):
            t = torch.from_numpy(p).to(device)
            index, distance = pn_knn(t, t, K)
            torch.cuda.synchronize()
            return {"index": index.cpu().numpy().astype(np.int32), "distance": distance.cpu().numpy()}

        return run, lambda: run(tiny)
    raise ValueError(f"unknown kNN case kind {kind!r}")


def _sdf_functions(kind: str, vertices, faces, queries, device: str, threads: int | None):
    tiny = queries[:: max(1, len(queries) // 2000)]
    if kind == "sdf_warp":
        from domino_pipeline.compute import geometry

        def run(q=queries):
            sdf, closest = geometry.signed_distance(vertices, faces, q, device=device, cpu_threads=threads)
            return {"sdf": sdf, "closest": closest}

        return run, lambda: run(tiny)
    if kind == "sdf_physicsnemo":
        import torch
        from physicsnemo.nn.functional import signed_distance_field

        def run(q=queries):
            args = [torch.from_numpy(a).to(device) for a in (vertices, faces.reshape(-1), q)]
            sdf, closest, _ = signed_distance_field(*args, use_sign_winding_number=True)
            return {"sdf": sdf.cpu().numpy(), "closest": closest.cpu().numpy()}

        return run, lambda: run(tiny)
    raise ValueError(f"unknown SDF case kind {kind!r}")


def run_in_fresh_process(case: dict) -> dict:
    """Run one case in a spawned child so that its peak memory is its own."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_run_case, case).result()


# ----------------------------------------------------------------------------------- planning


def plan_cases(paths: dict, sizes: dict, cuda: bool, repeats: int, sdf_repeats: int,
               cpu: bool = True) -> list[dict]:
    """The cases to run, in order; CUDA cases only when a GPU is present, CPU cases unless
    ``cpu`` is False."""
    cases = []
    for n in sizes["knn_sizes"] if cpu else ():
        for kind, threads in (("knn_warp", None), ("knn_warp", 1), ("knn_ckdtree", None), ("knn_scipy", None)):
            suffix = "_1thread" if threads == 1 else ""
            cases.append({"id": f"{kind}{suffix}_cpu_{n}", "kind": kind, "device": "cpu", "n": n,
                          "threads": threads, "repeats": repeats,
                          "inputs": {"points": str(paths[f"surface_{n}"])}})
    sdf_inputs = {k: str(paths[k]) for k in ("stl_vertices", "stl_faces", "sdf_queries")}
    for kind in ("sdf_warp", "sdf_physicsnemo") if cpu else ():
        cases.append({"id": f"{kind}_cpu", "kind": kind, "device": "cpu", "repeats": sdf_repeats,
                      "inputs": sdf_inputs})
    if cuda:
        # physicsnemo's knn runs cuML when installed, else a brute-force torch search.
        n_pn = max(sizes["knn_sizes"]) if importlib.util.find_spec("cuml") else sizes["brute_knn_size"]
        for kind, n in (("knn_warp", max(sizes["knn_sizes"])), ("knn_warp", n_pn), ("knn_physicsnemo", n_pn)):
            if any(c["id"] == f"{kind}_cuda_{n}" for c in cases):
                continue
            cases.append({"id": f"{kind}_cuda_{n}", "kind": kind, "device": "cuda:0", "n": n,
                          "repeats": repeats, "inputs": {"points": str(paths[f"surface_{n}"])}})
        for kind in ("sdf_warp", "sdf_physicsnemo"):
            cases.append({"id": f"{kind}_cuda", "kind": kind, "device": "cuda:0",
                          "repeats": repeats, "inputs": sdf_inputs})
    return cases


def run_cases(cases: list[dict], scratch: Path, query_counts: dict) -> list[dict]:
    """Run every case; a case that fails is recorded with its error and the rest go on."""
    from tqdm import tqdm

    results = []
    for case in tqdm(cases, desc="benchmark cases"):
        case = {**case, "save": str(scratch)}
        n = case.get("n", query_counts["sdf"])
        record = {"id": case["id"], "kind": case["kind"], "device": case["device"], "queries": n,
                  "threads": case.get("threads") or (1 if case["kind"] == "sdf_physicsnemo" else "all")}
        try:
            record.update(run_in_fresh_process(case))
            record["points_per_s"] = n / record["seconds"]
            record["bytes_per_query"] = record["peak_mb"] * 2**20 / n
        except Exception as err:  # a GPU library missing or out of memory: report, go on
            record["error"] = f"{type(err).__name__}: {err}"
        results.append(record)
    return results


def agreement(scratch: Path, results: list[dict]) -> dict[str, str]:
    """How the outputs of the cases compare, to show the fast paths give the same answer."""
    ok = {r["id"] for r in results if "error" not in r}
    notes = {}
    for r in results:
        if r["kind"] == "knn_warp" and "1thread" not in r["id"] and {r["id"].replace("warp", o) for o in ("scipy", "ckdtree")} <= ok:
            notes[r["id"]] = _knn_agreement(scratch, r["id"], r["id"].replace("warp", "scipy"),
                                            r["id"].replace("warp", "ckdtree"))
        if r["kind"] == "sdf_warp" and r["id"].replace("warp", "physicsnemo") in ok:
            notes[r["id"]] = _sdf_agreement(scratch, r["id"], r["id"].replace("warp", "physicsnemo"))
    return notes


def _knn_agreement(scratch: Path, case: str, scipy_case: str, backend_case: str) -> str:
    """Neighbour sets against plain cKDTree (ties may differ), rows against the cKDTree backend."""
    d = np.load(scratch / f"{case}_distance.npy").astype(np.float64)
    rd = np.load(scratch / f"{scipy_case}_distance.npy").astype(np.float64)
    i, ri = (np.sort(np.load(scratch / f"{c}_index.npy"), axis=1) for c in (case, scipy_case))
    same_rows = np.all(np.load(scratch / f"{case}_index.npy")
                       == np.load(scratch / f"{backend_case}_index.npy"), axis=1)
    rel = np.abs(d - rd).max() / max(np.abs(rd).max(), 1e-30)
    differ = ~np.all(i == ri, axis=1)
    ties = np.allclose(d[differ], rd[differ], rtol=1e-6, atol=0)
    return (f"neighbour sets differ from plain cKDTree's in {differ.sum()} of {len(d):,} rows "
            f"({'all' if ties else 'NOT all'} with equal distances, i.e. ties), rows identical to "
            f"the ckdtree backend in {np.mean(same_rows):.4%}, max distance difference {rel:.1e} "
            f"of the largest")


def _sdf_agreement(scratch: Path, case: str, ref: str) -> str:
    s, rs = (np.load(scratch / f"{c}_sdf.npy") for c in (case, ref))
    diff = np.abs(s.astype(np.float64) - rs).max()
    return f"max |sdf - physicsnemo| {diff:.1e}, same sign in {np.mean(np.sign(s) == np.sign(rs)):.6%}"


# --------------------------------------------------------------------- kNN host preparation


def _count_preparations(run) -> dict:
    """Run ``run()`` counting and timing the kNN host preparations (``KnnIndex`` builds)."""
    from domino_pipeline.compute import geometry

    seconds, original = [], geometry.KnnIndex.__init__

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        original(self, *args, **kwargs)
        seconds.append(time.perf_counter() - started)

    geometry.KnnIndex.__init__ = timed
    try:
        started = time.perf_counter()
        result = run()
        total = time.perf_counter() - started
    finally:
        geometry.KnnIndex.__init__ = original
    return {"count": len(seconds), "seconds": sum(seconds), "total_s": total, "result": result}


def host_preparation(points_path: Path, device: str, blocks: int = 4) -> dict:
    """The cache build's neighbour search (``preprocessing.all_surface_neighbors``) over
    ``blocks`` query blocks, against one search per block, each preparing its own index."""
    from domino_pipeline.compute import geometry, preprocessing

    points = np.load(points_path)
    prepared = SimpleNamespace(surface_points=points)
    settings = SimpleNamespace(num_neighbors_surface=K, device=device)
    geometry.knn(points[:1000], K, device=device)  # kernels compiled and loaded before timing
    rows = -(-len(points) // blocks)
    per_run = _count_preparations(lambda: preprocessing.all_surface_neighbors(prepared, settings, rows))
    per_block = _count_preparations(lambda: np.concatenate([
        preprocessing.surface_neighbors(prepared, settings, np.arange(start, min(start + rows, len(points))))
        for start in range(0, len(points), rows)]))
    same = bool(np.array_equal(per_run.pop("result"), per_block.pop("result")))
    return {"points": len(points), "blocks": blocks, "device": device, "per_run": per_run,
            "per_block": per_block, "same_neighbours": same}


def host_preparation_line(h: dict) -> str:
    once, before = h["per_run"], h["per_block"]
    return (f"kNN host preparation in a cache build ({h['points']:,} surface cells, {h['blocks']} query "
            f"blocks, {h['device']}): {once['count']} time(s), {once['seconds']:.2f} s of "
            f"{once['total_s']:.2f} s; one per block (before): {before['count']} times, "
            f"{before['seconds']:.2f} s of {before['total_s']:.2f} s; same neighbours: {h['same_neighbours']}")


# ------------------------------------------------------------------------------------- output


def markdown_table(results: list[dict]) -> str:
    header = ("| case | device | threads | queries | median s | CPU s | points/s | peak MB | bytes/query |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|")
    rows = [header]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['kind']} | {r['device']} | {r['threads']} | {r['queries']:,} | failed: "
                        f"{r['error'][:80]} | | | | |")
            continue
        rows.append(f"| {r['kind']} | {r['device']} | {r['threads']} | {r['queries']:,} | {r['seconds']:.2f} | "
                    f"{r['cpu_seconds']:.2f} | {r['points_per_s']:,.0f} | {r['peak_mb']:,.0f} | "
                    f"{r['bytes_per_query']:,.0f} |")
    return "\n".join(rows)


def environment() -> dict:
    import warp as wp

    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "warp": wp.config.version, "numpy": np.__version__,
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def brute_force_memory_note(sizes: dict, cuda: bool) -> str | None:
    """Why physicsnemo's kNN is not run at the largest size on CUDA: without cuML its torch search
    forms an N x N x 3 float32 difference array (its N x N distances beside it)."""
    n = max(sizes["knn_sizes"])
    if not cuda or importlib.util.find_spec("cuml") or n <= sizes["brute_knn_size"]:
        return None
    return (f"physicsnemo's knn at {n:,} points not run: without cuML it forms an N x N x 3 float32 array, "
            f"{n * n * 12 / 1e12:,.1f} TB; compared at {sizes['brute_knn_size']:,} points instead")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (--sizes quick)")
    parser.add_argument("--sizes", choices=list(SIZES), default=None,
                        help="full (default), quick, drivaerml (8.8M surface cells) or tiny")
    parser.add_argument("--inputs", type=Path, default=None,
                        help="keep the generated inputs here and reuse them (default: a temporary folder)")
    parser.add_argument("--inputs-only", action="store_true", help="write --inputs and stop")
    parser.add_argument("--no-host-preparation", action="store_true", help="skip the kNN host preparation line")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions per kNN case")
    parser.add_argument("--sdf-repeats", type=int, default=2, help="timed repetitions per SDF case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", type=Path, default=None, help="folder for the inputs (temp)")
    parser.add_argument("--devices", choices=("all", "cuda"), default="all",
                        help="cuda: only the CUDA cases (the CPU ones take most of the time)")
    parser.add_argument("--require-cuda", action="store_true",
                        help="fail unless CUDA is present and every case ran")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from domino_pipeline.compute import geometry

    sizes = SIZES[args.sizes or ("quick" if args.quick else "full")]
    if args.inputs_only:
        if args.inputs is None:
            raise SystemExit("benchmark_geometry: --inputs-only needs --inputs DIR")
        write_inputs(args.inputs, sizes, args.seed)
        return 0
    device = geometry.resolve_device("auto")
    cuda = device.startswith("cuda")
    if args.require_cuda and not cuda:
        print("benchmark_geometry: CUDA is required (--require-cuda) but Warp sees no CUDA device",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        scratch = Path(tmp)
        paths = write_inputs(args.inputs or scratch, sizes, args.seed)
        counts = {"sdf": len(np.load(paths["sdf_queries"], mmap_mode="r")),
                  "triangles": len(np.load(paths["stl_faces"], mmap_mode="r"))}
        cases = plan_cases(paths, sizes, cuda, args.repeats, args.sdf_repeats, cpu=args.devices == "all")
        results = run_cases(cases, scratch, counts)
        notes = agreement(scratch, results)
        skipped = brute_force_memory_note(sizes, cuda)
        if skipped:
            notes["knn_physicsnemo_cuda_largest"] = skipped
        preparation = None if args.no_host_preparation else host_preparation(
            paths[f"surface_{max(sizes['knn_sizes'])}"], device)
    print(f"\nkNN: k={K}, all surface points as queries. SDF: {counts['sdf']:,} queries "
          f"(grid {'x'.join(map(str, sizes['grid']))} + {sizes['volume_points']:,} volume points) "
          f"against an STL of {counts['triangles']:,} triangles.\n")
    print(markdown_table(results))
    for case, note in notes.items():
        print(f"- {case}: {note}")
    if preparation is not None:
        print(f"- {host_preparation_line(preparation)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"environment": environment(), "sizes": sizes, "counts": counts,
                   "results": results, "agreement": notes, "knn_host_preparation": preparation}
        args.json.write_text(json.dumps(payload, indent=2, default=list))
    failed = [r["id"] for r in results if "error" in r and (args.require_cuda or r["device"] == "cpu")]
    if preparation is not None and not preparation["same_neighbours"]:
        failed.append("knn_host_preparation")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
