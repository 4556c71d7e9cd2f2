"""Drawing from a cache on object storage and from local disk through the same read path.

For a preset (``bench``: 1M surface cells; ``full``: 8.8M) it reuses or builds one run's cache
(the ``features`` layout, as benchmark_scale.py does; ``--cache`` reads an existing one and
writes nothing there), then measures, each in a fresh process:

* local (``--local-repeats`` processes in turn): the same draws served from arrays in memory
  (the floor: the same rows, the same item code), warm from the page cache, the I/O floor (the
  warm draw's byte ranges read again and each CRC32C computed, nothing assembled), and cold
  (every cache file unmapped and evicted first);
* object storage: the cache uploaded to an S3 server started on 127.0.0.1 in a temporary folder
  (SeaweedFS, ``make bench-setup``; or moto's server, ``--server moto``) and read straight
  from it, then with 10 / 30 / 80 ms added to every request by a delaying proxy (s3_proxy.py,
  its own process): request waves, requests and MB per draw (steady state, and a run's first
  draw), the draw time, the server floor (the same byte ranges fetched as one concurrent batch,
  nothing decoded) and a wave of one 4 KB GET;
* draws/s with 1 and 2 DataLoader workers, locally and from the server;
* a latency model, draw = cpu + waves x rtt + MB / bandwidth (rtt measured on each row's
  network, cpu and bandwidth the medians over the rows), checked against every row's draws,
  and its projection (rtt = this server's + a cloud round trip) to one 8-GPU
  node with 12 workers per GPU (GB/s, GETs/s, GETs per epoch of 484 runs).

Prints Markdown tables and the acceptance checks; writes JSON. Run it at normal priority while
background jobs run under ``nice``, and repeat it where a ratio sits near its bound.

    make bench-setup    # SeaweedFS's weed binary, once
    python benchmarks/benchmark_object_store.py --preset full --cache /data/full/cache \
        --work /tmp/objstore --json docs/benchmark_object_store.json
    python benchmarks/benchmark_object_store.py --preset full --cache /data/full/cache --local-only   # about a minute
    python benchmarks/benchmark_object_store.py --preset tiny --draws 3 --work /tmp/objstore_tiny   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_scale import GRID, SAMPLES, _evict, _python, build, ensure_processed  # noqa: E402
from s3_servers import start  # noqa: E402

LATENCIES_MS = (0, 10, 30, 80)
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                    "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def _dataset(location, preset: str):
    from domino_pipeline.loading.cached import CachedDoMINODataset
    return CachedDoMINODataset(location, model_type="combined", seed=0, **SAMPLES[preset])


def _serve_from_memory(ds) -> None:
    """Make ``ds``'s open run answer every read from arrays loaded whole into memory."""
    from domino_pipeline.store.cache_format import layout_arrays
    from domino_pipeline.store.cache_run import _from_memory

    run = ds.run(0)
    arrays = {name: run.read(name) for name in layout_arrays(ds.neighbor_layout)}
    run.source.close()  # unmap the files read: an eviction must reach their pages
    run.read_many = lambda reads, staged=None: [_from_memory(arrays[n], s, e) for n, s, e in reads]
    run.stage = lambda spans: {}
    run.read = lambda name, selection=slice(None), allocate=None: arrays[name][selection]


def _timed(ds, epoch: int) -> float:
    ds.set_epoch(epoch)
    started = time.perf_counter()
    ds[0]
    return time.perf_counter() - started


def child_local(cache: Path, preset: str, n: int) -> dict:
    """In-memory floor, warm and cold draws of the local cache, medians (ms), each epoch's
    side by side: the in-memory draw, the disk draw once untimed (its bytes now in the page
    cache) then, its files unmapped, timed (warm: the pages a worker has not touched yet are
    mapped again as it reads them), the I/O floor (the warm draw's byte ranges read again as one
    wave and each CRC32C computed, nothing assembled: locally the reads are views of mapped
    files, so the checksum pass is what touches their bytes), then every cache file unmapped
    and evicted and the draw again (cold)."""
    memory, disk = _dataset(cache, preset), _dataset(cache, preset)
    memory[0], disk[0]  # open the run, keep what every draw reads
    _serve_from_memory(memory)
    source = disk.run(0).source
    seen = _recording(source)
    times = {"memory": [], "warm": [], "io_floor": [], "cold": []}
    for epoch in range(1, n + 1):
        times["memory"].append(_timed(memory, epoch))
        _timed(disk, epoch)
        source.close()
        del seen[:]
        times["warm"].append(_timed(disk, epoch))
        times["io_floor"].append(_fetch_timed(source, seen, checksum=True))
        source.close()  # a mapped page cannot be evicted; the next draw opens the files again
        _evict(cache)
        times["cold"].append(_timed(disk, epoch))
    paired = {"warm_over_memory": statistics.median(w / m for w, m in zip(times["warm"], times["memory"])),
              "cold_over_warm": statistics.median(c / w for c, w in zip(times["cold"], times["warm"]))}
    return paired | {f"{k}_draw_ms" if k != "io_floor" else "io_floor_ms": 1000 * statistics.median(v)
                     for k, v in times.items()}


def local_figures(cache: Path, preset: str, n: int, repeats: int) -> dict:
    """``child_local`` in ``repeats`` fresh processes, one after another: the median of each
    figure (the ratios: of each repeat's median of its per-epoch ratios) over the repeats, and
    every repeat's figures."""
    runs = [_child(None, "--child-local", str(cache), preset, str(n)) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]} | {"repeats": runs}


def _fetch_timed(source, waves: list, checksum: bool = False) -> float:
    """Seconds to fetch every ranged request of the recorded ``waves`` again, as one wave (and,
    with ``checksum``, compute each one's CRC32C)."""
    import crc32c

    from domino_pipeline.storage.byte_reader import Request

    ranges = [Request(r.key, r.start, r.length) for wave in waves for r in wave if r.start is not None]
    started = time.perf_counter()
    for data, _ in source.fetch(ranges):
        if checksum:
            crc32c.crc32c(data)
    return time.perf_counter() - started


def _recording(source) -> list:
    """Record every request list ``source`` fetches (appended to the returned list)."""
    seen, fetch = [], source.fetch

    def recorded(requests):
        seen.append(list(requests))
        return fetch(requests)
    source.fetch = recorded
    return seen


def child_remote(url: str, preset: str, n: int) -> dict:
    """Waves, requests, MB and time per draw from object storage (first and steady, medians),
    and the server floor: each steady draw's byte ranges fetched as one batch right after it
    (also the median of each draw's ratio to, and excess over, its own floor)."""
    from domino_pipeline.storage.byte_reader import shared_reader
    from domino_pipeline.storage.object_store import split_url

    ds = _dataset(url, preset)
    source = shared_reader(split_url(url)[0])
    before = (source.waves, source.requests, source.bytes)
    ds[0]
    first = {"first_waves": source.waves - before[0], "first_requests": source.requests - before[1],
             "first_mb": (source.bytes - before[2]) / 1e6}
    seen = _recording(source)
    rows = []
    for epoch in range(1, n + 1):
        del seen[:]
        before = (source.waves, source.requests, source.bytes)
        ms = 1000 * _timed(ds, epoch)
        after = (source.waves, source.requests, source.bytes)
        ranges = [r for wave in seen for r in wave if r.start is not None]
        floor = 1000 * _fetch_timed(source, seen)
        rows.append((ms, floor, *(a - b for a, b in zip(after, before))))
    median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    return first | {"draw_ms": median(0), "floor_ms": median(1), "waves": median(2),
                    "requests": median(3), "mb_per_draw": median(4) / 1e6,
                    "draw_over_floor": statistics.median(r[0] / r[1] for r in rows),
                    "draw_less_floor_ms": statistics.median(r[0] - r[1] for r in rows),
                    "rtt_ms": _round_trip_ms(source, ranges[0].key, n)}


def _round_trip_ms(source, key: str, n: int) -> float:
    """A wave of one 4 KB ranged GET of object ``key``, median of ``n``."""
    from domino_pipeline.storage.byte_reader import Request

    times = []
    for _ in range(n):
        started = time.perf_counter()
        source.fetch([Request(key, 0, 4096)])
        times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def child_workers(location: str, preset: str, workers: int, items: int) -> dict:
    """Draws/s of a DataLoader with ``workers`` workers over one run, after a warm-up."""
    import torch

    ds = _dataset(location, preset)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                         sampler=[0] * (items + 2 * workers),
                                         multiprocessing_context=ds.worker_context or "spawn")
    stream = iter(loader)
    for _ in range(2 * workers):
        next(stream)
    started = time.perf_counter()
    for _ in range(items):
        next(stream)
    return {"draws_per_s": items / (time.perf_counter() - started)}


def _child(env: dict | None, *args: str) -> dict:
    """Run this script's child mode ``args`` in a fresh process (``env`` added); its JSON."""
    _, _, output = _python_env(env or {}, str(Path(__file__).resolve()), *args)
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def _python_env(env: dict, *args: str) -> tuple[float, float, str]:
    """``_python(*args)`` with ``env`` added to the environment."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return _python(*args)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def _start_proxy(endpoint: str, latency_ms: int):
    """The delaying proxy (s3_proxy.py) in its own process: (process, its endpoint)."""
    import subprocess
    proc = subprocess.Popen([sys.executable, "benchmarks/s3_proxy.py", endpoint, "--delay-ms", str(latency_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    return proc, proc.stdout.readline().strip()


def upload(cache: Path, server) -> str:
    """The cache uploaded to a new bucket of ``server``; its URL."""
    server.bucket("bench")
    env = TEST_CREDENTIALS | {"AWS_ENDPOINT_URL": server.endpoint}
    url = "s3://bench/cache"
    _python_env(env, "-c", f"from domino_pipeline.store.object_cache import upload_folder; "
                           f"upload_folder({str(cache)!r}, {url!r})")
    return url


def remote_figures(url: str, endpoint: str, preset: str, n: int) -> dict:
    """``child_remote`` by added latency: 0 ms straight to the server, the others through the
    delaying proxy; after the upload's writes are flushed and one untimed pass (the server
    settles after a large upload)."""
    os.sync()
    _child(TEST_CREDENTIALS | {"AWS_ENDPOINT_URL": endpoint}, "--child-remote", url, preset, "3")
    figures = {}
    for latency in LATENCIES_MS:
        proxy, proxied = (None, endpoint) if latency == 0 else _start_proxy(endpoint, latency)
        try:
            env = TEST_CREDENTIALS | {"AWS_ENDPOINT_URL": proxied}
            figures[latency] = _child(env, "--child-remote", url, preset, str(n))
        finally:
            if proxy is not None:
                proxy.kill()
                proxy.wait()
    return figures


def measure(preset: str, work: Path, n: int, server_kind: str, items: int, cache: Path | None,
            local_repeats: int) -> dict:
    """Every figure of the module docstring for one preset (``cache``: an existing cache to
    read instead of building one under ``work``)."""
    cache = _cache(preset, work, cache)
    result = {"preset": preset, "server": server_kind,
              "local": local_figures(cache, preset, n, local_repeats)}
    data = work / "s3_server"
    shutil.rmtree(data, ignore_errors=True)
    try:
        with start(server_kind, data) as server:
            started = time.perf_counter()
            url = upload(cache, server)
            result["upload_s"] = time.perf_counter() - started
            result["remote"] = remote_figures(url, server.endpoint, preset, n)
            env = TEST_CREDENTIALS | {"AWS_ENDPOINT_URL": server.endpoint}
            result["workers"] = {f"{where} {w}": _child(env, "--child-workers", loc, preset, str(w), str(items))
                                 for where, loc in (("local", str(cache)), ("s3", url)) for w in (1, 2)}
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return result


def _cache(preset: str, work: Path, cache: Path | None) -> Path:
    """``cache`` if given, else the preset's cache under ``work`` (built there if missing)."""
    if cache is None:
        cache = work / preset / "cache"
        if not (cache / "manifest.json").is_file():
            build(ensure_processed(work, preset), cache, "features", GRID[preset])
    return cache


def model(result: dict) -> dict:
    """draw = cpu + waves x rtt + MB / bandwidth against each row's measured draw time: ``rtt``
    measured on the row's network (a wave of one 4 KB GET: the server's own round trip plus the
    added latency and the proxy's), ``cpu`` (a draw's own work: draw less its floor) and
    ``bandwidth`` (MB over floor less rtt) the medians over the rows, which do not depend on
    the latency: one disturbed row does not set them. (predicted ms, error) by L, and the
    constants (``rtt_ms``: the 0 ms row's, the server's own)."""
    rows = result["remote"]
    bandwidth = statistics.median(r["mb_per_draw"] / max(r["floor_ms"] - r["rtt_ms"], 1e-3)
                                  for r in rows.values())  # MB per ms = GB/s
    cpu = statistics.median(r["draw_less_floor_ms"] for r in rows.values())
    out = {"constants": {"cpu_ms": cpu, "rtt_ms": rows[0]["rtt_ms"], "bandwidth_gb_s": bandwidth}}
    for latency, figures in rows.items():
        predicted = cpu + figures["waves"] * figures["rtt_ms"] + figures["mb_per_draw"] / bandwidth
        out[latency] = {"predicted_ms": predicted,
                        "error": abs(predicted - figures["draw_ms"]) / figures["draw_ms"]}
    return out


GPUS, WORKERS_PER_GPU, RUNS = 8, 12, 484
STEP_S = (0.16, 0.5, 1.0)  # seconds per training step (batch 1: one draw per GPU per step)
REAL_RTT_MS = (10, 30)  # a request's round trip to a cloud object store


def projection(result: dict) -> dict:
    """One 8-GPU node (one draw per GPU per step): GB/s and GETs/s it reads at each step time, a
    draw steady (its run open) and a draw that opens its run (the usual case with hundreds of
    runs and ``max_open_runs`` 8); the draws/s 12 workers per GPU supply by the latency model
    at a cloud round trip; GETs per epoch of 484 runs."""
    base, constants = result["remote"][0], result["model"]["constants"]
    kinds = {"steady": (base["mb_per_draw"], base["requests"], base["waves"]),
             "run opened": (base["first_mb"], base["first_requests"], base["first_waves"])}
    out = {"per_step": [], "supply": [], "epoch_requests": {}}
    for kind, (mb, requests, waves) in kinds.items():
        for step in STEP_S:
            out["per_step"].append({"draw": kind, "step_s": step, "node_gb_s": GPUS * mb / step / 1000,
                                    "node_requests_s": GPUS * requests / step})
        for rtt in REAL_RTT_MS:
            draw_ms = constants["cpu_ms"] + waves * (constants["rtt_ms"] + rtt) + mb / constants["bandwidth_gb_s"]
            out["supply"].append({"draw": kind, "rtt_ms": rtt, "draw_ms": draw_ms,
                                  "draws_s_per_gpu": WORKERS_PER_GPU * 1000 / draw_ms})
        out["epoch_requests"][kind] = RUNS * requests
    return out


def projection_table(projected: dict) -> str:
    """The projection as two Markdown tables and a line."""
    rows = ["| draw | step s | node GB/s | node GETs/s |", "|---|---|---|---|"]
    rows += [f"| {r['draw']} | {r['step_s']} | {r['node_gb_s']:.2f} | {r['node_requests_s']:.0f} |"
             for r in projected["per_step"]]
    rows += ["", "| draw | round trip ms | draw ms (model) | draws/s per GPU, 12 workers |", "|---|---|---|---|"]
    rows += [f"| {r['draw']} | {r['rtt_ms']} | {r['draw_ms']:.0f} | {r['draws_s_per_gpu']:.0f} |"
             for r in projected["supply"]]
    epoch = projected["epoch_requests"]
    rows.append(f"\nGETs per epoch of {RUNS} runs: {epoch['steady']:.0f} with runs open, "
                f"{epoch['run opened']:.0f} when every draw opens its run")
    return "\n".join(rows)


def checks(result: dict) -> list[str]:
    """The acceptance lines: figure, bound, whether it holds."""
    remote, fits = result["remote"], result["model"]
    lines = local_checks(result["local"]) + [
        f"steady waves per draw {remote[0]['waves']:.0f} (<= 2); first draw {remote[0]['first_waves']} (<= 4)",
        f"draw / server floor at 0 ms {remote[0]['draw_over_floor']:.2f}x (<= 1.5; medians "
        f"{remote[0]['draw_ms']:.1f} / {remote[0]['floor_ms']:.1f} ms)"]
    for latency in LATENCIES_MS[1:]:
        r = remote[latency]
        lines.append(f"draw at +{latency} ms {r['draw_ms']:.0f} ms, floor {r['floor_ms']:.0f} ms: draw - floor "
                     f"{r['draw_less_floor_ms']:.1f} ms (<= 2.5 L = {2.5 * latency:.0f} ms)")
    worst = max(fits[latency]["error"] for latency in LATENCIES_MS)
    lines.append(f"latency model worst error {100 * worst:.0f}% (<= 25%)")
    return lines


def local_checks(local: dict) -> list[str]:
    """The local acceptance lines: warm over in-memory, cold over warm, with every repeat's."""
    each = lambda key: ", ".join(f"{r[key]:.2f}" for r in local["repeats"])  # noqa: E731
    return [f"local warm / in-memory {local['warm_over_memory']:.2f}x (<= 2; repeats {each('warm_over_memory')})",
            f"local cold / warm {local['cold_over_warm']:.2f}x (<= 2; repeats {each('cold_over_warm')})"]


def local_line(local: dict) -> str:
    """The local draw times, one line."""
    return (f"local: in-memory {local['memory_draw_ms']:.1f} ms, warm {local['warm_draw_ms']:.1f} ms "
            f"(I/O floor {local['io_floor_ms']:.1f} ms), cold {local['cold_draw_ms']:.1f} ms")


def table(result: dict) -> str:
    """One Markdown table of the remote figures by added latency, then the local ones."""
    head = ("| added ms | draw ms | floor ms | rtt ms | model ms | waves | first-draw waves | requests | "
            "first-draw requests | MB/draw | first-draw MB |\n|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [f"| {lat} | {r['draw_ms']:.1f} | {r['floor_ms']:.1f} | {r['rtt_ms']:.1f} | "
            f"{result['model'][lat]['predicted_ms']:.1f} | {r['waves']:.0f} | {r['first_waves']} | "
            f"{r['requests']:.0f} | {r['first_requests']} | {r['mb_per_draw']:.2f} | {r['first_mb']:.2f} |"
            for lat, r in result["remote"].items()]
    rows.append("\n" + local_line(result["local"]))
    constants = result["model"]["constants"]
    rows.append(f"model constants: cpu {constants['cpu_ms']:.1f} ms, rtt {constants['rtt_ms']:.1f} ms, "
                f"bandwidth {constants['bandwidth_gb_s']:.2f} GB/s")
    rows.append("draws/s: " + ", ".join(f"{k} workers {v['draws_per_s']:.1f}" for k, v in result["workers"].items()))
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench", choices=sorted(SAMPLES))
    parser.add_argument("--work", type=Path, default=Path("/tmp/domino_objstore"))
    parser.add_argument("--draws", type=int, default=9)
    parser.add_argument("--items", type=int, default=20, help="items per worker-throughput measurement")
    parser.add_argument("--local-repeats", type=int, default=3, help="processes measuring the local draws in turn")
    parser.add_argument("--server", default="seaweedfs", choices=("seaweedfs", "moto"),
                        help="the S3 server started on 127.0.0.1 (seaweedfs: make bench-setup)")
    parser.add_argument("--cache", type=Path, help="an existing cache to read (not written) instead of building one")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--local-only", action="store_true",
                        help="measure the local draws only (no server); --json then holds just those")
    parser.add_argument("--child-local", nargs=3, metavar=("CACHE", "PRESET", "N"))
    parser.add_argument("--child-remote", nargs=3, metavar=("URL", "PRESET", "N"))
    parser.add_argument("--child-workers", nargs=4, metavar=("LOCATION", "PRESET", "WORKERS", "ITEMS"))
    args = parser.parse_args(argv)
    if args.child_local:
        print(json.dumps(child_local(Path(args.child_local[0]), args.child_local[1], int(args.child_local[2]))))
        return
    if args.child_remote:
        print(json.dumps(child_remote(args.child_remote[0], args.child_remote[1], int(args.child_remote[2]))))
        return
    if args.child_workers:
        location, preset, workers, items = args.child_workers
        print(json.dumps(child_workers(location, preset, int(workers), int(items))))
        return
    if args.local_only:
        local = local_figures(_cache(args.preset, args.work, args.cache), args.preset, args.draws,
                              args.local_repeats)
        result = {"preset": args.preset, "local": local, "checks": local_checks(local)}
        print("\n".join([local_line(local), *result["checks"]]))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return
    result = measure(args.preset, args.work, args.draws, args.server, args.items, args.cache,
                         args.local_repeats)
    result["model"] = model(result)
    result["checks"] = checks(result)
    result["projection"] = projection(result)
    print(table(result))
    print(projection_table(result["projection"]))
    print("\n".join(result["checks"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
