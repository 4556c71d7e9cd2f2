"""Processing one raw run from local disk and straight from an S3 server, side by side, with the
decode floor of the bytes it reads.

For a synthetic run (``--preset bench``: 1M surface cells, 2M volume points, a 600k-triangle
STL; ``--volume-points 20000000`` for the 20M-point run), its volume stored as DrivAerML
publishes it by default (inline base64, uncompressed, in two ``.00.part`` pieces), each
measurement in a fresh process, in turn, ``--repeats`` times (medians):

* local disk: process_data's work on the run folder (process_all, one process);
* SeaweedFS (S3 on 127.0.0.1, ``make bench-setup``), read with unsigned requests; its large
  pieces have multipart ETags (``<md5>-<n>``, as DrivAerML's), so they are checked by size and
  only the arrays read are fetched: with no added latency, and with 30 ms added to every
  request by a delaying proxy (s3_proxy.py, its own process);
* the decode floor: the arrays the block readers read, their encoded bytes held in memory,
  decoded by plain base64 and zlib calls, nothing else (and the STL parsed by VTK from a file
  in the page cache, which processing does too).

Reported: MB/s of the run's file bytes, the client's CPU seconds and those of the server (and
proxy) processes meanwhile (they run on the same cores here, a remote server would not), bytes
fetched over the files' bytes, peak RSS, each
against local disk; the block readers' MB/s (arrays decoded inside processing, in the threads
that read blocks ahead: their seconds include waits for the GIL the writing holds) against the
floor; a projection for a whole DrivAerML run (49.9 GB of files, 160M volume points) over a
1 GB/s link; and ``--kill-trials`` times: a run killed (SIGKILL) during its download, then
the batch run again: the killed run completes and equals a clean run, and the finished run is
not fetched again.

    make bench-setup     # SeaweedFS's weed binary, once
    python benchmarks/benchmark_raw_remote.py --preset bench --work /tmp/raw_remote --json docs/benchmark_raw_remote.json
    nice -n 19 python benchmarks/benchmark_raw_remote.py --preset bench --volume-points 20000000 --work /tmp/raw_20m
    python benchmarks/benchmark_raw_remote.py --preset tiny --repeats 1 --kill-trials 1 --work /tmp/raw_tiny   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3_proxy import FaultProxy  # noqa: E402
from s3_servers import public_read_policy, start  # noqa: E402

BUCKET, PREFIX = "caemldatasets", "drivaer/dataset"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
               "AWS_ALLOW_HTTP": "true"}
ANONYMOUS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
# one DrivAerML run (run_1, docs/datasets.md): file bytes, volume points, and bytes per point of
# the arrays read as points with three fields (Points 12, UMeanTrim 12, pMeanTrim 4, nutMeanTrim 4)
DRIVAERML = {"volume": 49_052_296_843, "boundary": 659_606_189, "stl": 142_346_740,
             "points": 160_000_000, "cells": 8_828_095, "point_bytes": 32}


def _options():
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.configuration.config_files import compose_files
    from domino_pipeline.inputs.processing.process_options import ProcessOptions

    config = load_config(compose_files(ROOT / "conf", "config", []))
    return ProcessOptions.from_config(config.dataset, config.physics, config.process)


# ----------------------------------------------------------------------------- children


def child_process(raw: str, out: str, anonymous: bool) -> dict:
    """process_all of one run from ``raw`` (a folder or an s3:// URL) into ``out``: seconds,
    bytes fetched, the files' bytes and the seconds the block readers spent decoding arrays."""
    from domino_pipeline.inputs.vtk import array_data as vtk_array_data, xml_stream as vtk_xml_stream
    from domino_pipeline.inputs.processing.process_runs import process_all
    from domino_pipeline.inputs.raw_files.raw_reading import RemoteAccess

    decoding = [0.0]
    original = vtk_xml_stream.VtkXmlFile.read

    def timed(self, section, name, start, stop):
        began = time.perf_counter()
        try:
            return original(self, section, name, start, stop)
        finally:
            decoding[0] += time.perf_counter() - began

    vtk_xml_stream.VtkXmlFile.read = timed
    assert vtk_array_data.ArrayData  # the code timed is the readers' own
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    [result] = process_all(raw, out, _options(), access=RemoteAccess(anonymous=anonymous))
    seconds = time.perf_counter() - began
    if result.status != "processed":
        raise RuntimeError(f"{raw}: {result.message}")
    return {"seconds": seconds, "fetched": result.bytes, "read_seconds": decoding[0]}


def child_floor(run_dir: str) -> dict:
    """The decode floor of the run's arrays that processing reads (module docstring)."""
    import base64
    import zlib

    from domino_pipeline.inputs.meshes.mesh_rows import SurfaceRows
    from domino_pipeline.inputs.meshes.vtk_reader import read_stl_triangles
    from domino_pipeline.inputs.raw_files.run_folder import run_files
    from domino_pipeline.inputs.meshes.surface_stream import surface_arrays
    from domino_pipeline.inputs.meshes.volume_stream import open_rows, volume_arrays

    options = _options()
    files = run_files(Path(run_dir), options.dataset)
    spans = []
    for path, keys in ((files.surface, lambda f: surface_arrays(f, list(options.surface_variables), SurfaceRows())),
                       (files.volume, lambda f: volume_arrays(f, list(options.volume_variables), options.volume_source))):
        file = open_rows(path)
        for key in keys(file):
            data = file.array_data(*key)
            first, end = data.stream_span(0, data.n_bytes)
            spans.append((data, bytes(file.source.read(first, end - first)), data.block_starts if data.blocks is not None else None))
    encoded = sum(len(text) for _, text, _ in spans)
    began = time.perf_counter()
    for data, text, starts in spans:
        raw = base64.b64decode(text) if data.base64 else text
        if starts is not None:
            for k in range(len(starts) - 1):
                zlib.decompress(raw[starts[k]:starts[k + 1]])
    decode = time.perf_counter() - began
    began = time.perf_counter()
    read_stl_triangles(files.stl)
    return {"decode_seconds": decode, "encoded_bytes": encoded, "stl_seconds": time.perf_counter() - began}


def _run_child(kind: str, args: dict, env: dict | None = None) -> dict:
    """Run a child of ``kind`` with ``args``: its JSON result, with its peak RSS (wait4: the
    child's own lifetime, its imports included)."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", kind, json.dumps(args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise RuntimeError(f"child {kind} failed ({code}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]) | {"peak_mib": usage.ru_maxrss / 1024,
                                                        "cpu_s": usage.ru_utime + usage.ru_stime}


# ----------------------------------------------------------------------------- setup


def make_run(work: Path, preset: str, volume_points: int | None, data_mode: str, compressor: str) -> Path:
    """The synthetic run (made once): run_1 in DrivAerML's layout, its volume in two pieces."""
    from synthetic_data import generate_runs
    from synthetic.vtk_xml_writer import Encoding

    raw = work / "raw"
    if (raw / "run_1").is_dir():
        return raw
    generate_runs(raw / ".making", 1, preset, 0, Encoding(data_mode, compressor), volume_points=volume_points)
    os.rename(raw / ".making" / "run_1", raw / "run_1")
    return raw


def upload(raw: Path, endpoint: str, bucket: str) -> None:
    """Every file under ``raw`` to ``s3://bucket/PREFIX/`` (multipart uploads beyond 5 MiB, so
    large pieces get ``<md5>-<n>`` ETags as DrivAerML's do). Every request says ``Content-Type:
    binary/octet-stream`` (what S3 stores for an object put without one): SeaweedFS otherwise
    gzips each uploaded part whose first bytes compress (base64 text does) and gunzips it on
    every GET, about 7 s of CPU per GB served, on the cores the client shares; S3 stores and
    serves the bytes as sent."""
    import obstore
    from obstore.store import S3Store

    binary = {"content-type": "binary/octet-stream"}
    store = S3Store(bucket, endpoint=endpoint, access_key_id="bench", secret_access_key="bench",
                    region="us-east-1", client_options={"allow_http": True, "timeout": "600s",
                                                        "default_headers": binary})
    for path in sorted(p for p in raw.rglob("*") if p.is_file() and not p.name.startswith(".")):
        obstore.put(store, f"{PREFIX}/{path.relative_to(raw).as_posix()}", path.read_bytes(),
                    attributes={"Content-Type": binary["content-type"]})
    _public(endpoint, bucket)


def _public(endpoint: str, bucket: str) -> None:
    """Give ``bucket`` a public dataset's policy: anyone may list and read it. moto refuses
    unsigned GETs without one (and signed PUTs with one: so it comes after the upload);
    SeaweedFS started without identities lets anyone in either way."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}?policy", method="PUT",
                                                  data=json.dumps(public_read_policy(bucket)).encode(),
                                                  headers={"Content-Type": "application/json"})).close()


def _bucket(server, name: str) -> None:
    """Create bucket ``name`` on ``server`` unless it exists (its data folder is kept)."""
    import urllib.error

    try:
        server.bucket(name)
    except urllib.error.HTTPError as err:
        if err.code != 409:
            raise


def _env(endpoint: str) -> dict:
    """A child's environment: no credentials at all, the S3 endpoint given."""
    env = {k: v for k, v in os.environ.items() if k not in ANONYMOUS}
    return env | {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                  "PYTHONPATH": str(ROOT)}


class DelayProxy:
    """s3_proxy.py in its own process, adding ``delay_ms`` to every request."""

    def __init__(self, upstream: str, delay_ms: float) -> None:
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "s3_proxy.py"), upstream,
                                         "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True)
        self.endpoint = self.process.stdout.readline().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


# ----------------------------------------------------------------------------- the runs


def cpu_seconds(pid: int) -> float:
    """The CPU seconds (user + system) process ``pid`` has used so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _with_servers_cpu(figures_of, pids: list[int]) -> dict:
    """``figures_of()`` with ``server_cpu_s``: the CPU the server processes ``pids`` used meanwhile."""
    before = sum(cpu_seconds(pid) for pid in pids)
    figures = figures_of()
    return figures | {"server_cpu_s": sum(cpu_seconds(pid) for pid in pids) - before}


def measure(raw: Path, work: Path, server, repeats: int) -> dict:
    """Every mode ``repeats`` times in turn; the list of figures of each."""
    url, endpoint = f"s3://{BUCKET}/{PREFIX}", server.endpoint
    proxy = DelayProxy(endpoint, 30.0)
    rows: dict[str, list[dict]] = {"local disk": [], "SeaweedFS": [], "SeaweedFS +30 ms": [], "floor": []}
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    servers = [server.process.pid]
    try:
        for k in range(repeats):
            rows["local disk"].append(_with_servers_cpu(lambda: _run_child(
                "process", {"raw": str(raw), "out": str(work / "out_local"), "anonymous": True}, env), servers))
            rows["SeaweedFS"].append(_with_servers_cpu(lambda: _run_child(
                "process", {"raw": url, "out": str(work / "out_s3"), "anonymous": True}, _env(endpoint)), servers))
            rows["SeaweedFS +30 ms"].append(_with_servers_cpu(lambda: _run_child(
                "process", {"raw": url, "out": str(work / "out_s3_30"), "anonymous": True}, _env(proxy.endpoint)),
                servers + [proxy.process.pid]))
            rows["floor"].append(_run_child("floor", {"run_dir": str(raw / "run_1")}, env))
            print(f"repeat {k + 1}/{repeats}: " + ", ".join(
                f"{name} {r[-1].get('seconds', r[-1].get('decode_seconds')):.2f} s" for name, r in rows.items()),
                flush=True)
    finally:
        proxy.stop()
    _check_same(work / "out_local" / "run_1.zarr", work / "out_s3" / "run_1.zarr")
    _check_same(work / "out_local" / "run_1.zarr", work / "out_s3_30" / "run_1.zarr")
    return rows


def _check_same(a: Path, b: Path) -> None:
    """The two processed runs' arrays are equal bit for bit (else RuntimeError)."""
    import zarr

    x, y = zarr.open_group(str(a), mode="r"), zarr.open_group(str(b), mode="r")
    for name in x.array_keys():
        if x[name][...].tobytes() != y[name][...].tobytes():
            raise RuntimeError(f"{b}: array {name} differs from {a}")


def kill_trials(work: Path, endpoint: str, trials: int) -> list[dict]:
    """``trials`` times: two tiny runs, the second killed during its download, the batch rerun
    (tests/test_raw_remote.py's check, repeated): each trial's outcome."""
    from synthetic_data import generate_runs, split_into_pieces

    raw = work / "kill_raw"
    if not raw.is_dir():
        generate_runs(raw, 2, "tiny", 1)
        for volume in raw.glob("run_*/volume_*.vtu"):
            split_into_pieces(volume, [volume.stat().st_size // 2])
        upload(raw, endpoint, "kill-trials")
    outcomes = []
    for trial in range(trials):
        out = work / f"kill_{trial}"
        shutil.rmtree(out, ignore_errors=True)
        proxy = FaultProxy(endpoint, slow_every=1, delay=0.05)
        try:
            outcomes.append(_kill_trial(out, proxy, raw))
        finally:
            proxy.stop()
    return outcomes


def _kill_trial(out: Path, proxy: FaultProxy, raw: Path) -> dict:
    url = f"s3://kill-trials/{PREFIX}"
    command = [sys.executable, "process_data.py", f"data.raw_dir={url}", f"data.processed_dir={out}",
               "process.num_processes=1"]
    child = subprocess.Popen(command, cwd=ROOT, env=_env(proxy.endpoint), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not ((out / "run_1.zarr").exists() and any("/run_2/volume_2" in p for _, p, _, _ in proxy.requests)):
        if child.poll() is not None or time.monotonic() > deadline:
            return {"killed_mid_download": False}
        time.sleep(0.005)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    proxy.requests.clear()
    proxy.delay = 0.0
    done = subprocess.run(command, cwd=ROOT, env=_env(proxy.endpoint), capture_output=True, text=True)
    paths = [urllib.parse.unquote(p) for _, p, _, _ in proxy.requests]
    clean = out.parent / f"{out.name}_clean"
    shutil.rmtree(clean, ignore_errors=True)
    subprocess.run([sys.executable, "process_data.py", f"data.raw_dir={raw}", f"data.processed_dir={clean}",
                    "process.num_processes=1"], cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)},
                   capture_output=True, check=True)
    try:
        _check_same(clean / "run_2.zarr", out / "run_2.zarr")
        same = True
    except (RuntimeError, FileNotFoundError):
        same = False
    return {"killed_mid_download": True, "rerun_ok": done.returncode == 0 and (out / "run_2.zarr").exists(),
            "equals_clean_run": same, "finished_run_fetched_again": any("run_1/" in p for p in paths)}


# ----------------------------------------------------------------------------- report


def summarize(rows: dict, files: int, kills: list[dict]) -> dict:
    """Medians, ratios, the acceptance checks and the projection."""
    median = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for name, runs in rows.items()}
    local = median["local disk"]
    floor = median["floor"]
    table = {}
    for name in ("local disk", "SeaweedFS", "SeaweedFS +30 ms"):
        m = median[name]
        table[name] = {"seconds": m["seconds"], "cpu_s": m["cpu_s"], "server_cpu_s": m["server_cpu_s"],
                       "mb_per_s": files / m["seconds"] / 1e6,
                       "fetched_over_files": m["fetched"] / files, "peak_mib": m["peak_mib"],
                       "vs_local_throughput": local["seconds"] / m["seconds"],
                       "vs_local_rss": m["peak_mib"] / local["peak_mib"]}
    encoded = floor["encoded_bytes"]
    block = {"block_reader_mb_per_s": encoded / local["read_seconds"] / 1e6,
             "floor_mb_per_s": encoded / floor["decode_seconds"] / 1e6,
             "block_reader_vs_floor": floor["decode_seconds"] / local["read_seconds"],
             "processing_vs_floor": (floor["decode_seconds"] + floor["stl_seconds"]) / local["seconds"]}
    checks = {
        "fetched / file bytes <= 1.05": all(t["fetched_over_files"] <= 1.05 for n, t in table.items() if n != "local disk"),
        "peak RSS from S3 <= 1.2 x local": table["SeaweedFS"]["vs_local_rss"] <= 1.2,
        "SeaweedFS (0 ms) >= 0.8 x local": table["SeaweedFS"]["vs_local_throughput"] >= 0.8,
        "SeaweedFS (+30 ms) >= 0.7 x local": table["SeaweedFS +30 ms"]["vs_local_throughput"] >= 0.7,
        "local >= 0.5 x decode floor (processing, STL included)": block["processing_vs_floor"] >= 0.5,
        "block readers >= 0.5 x decode floor": block["block_reader_vs_floor"] >= 0.5,
        "kill -9 then rerun": f"{sum(k.get('rerun_ok', False) and k.get('equals_clean_run', False) and not k.get('finished_run_fetched_again', True) for k in kills)} of {len(kills)}",
    }
    return {"table": table, "block_reader": block, "checks": checks, "projection": projection(median, files)}


def projection(median: dict, files: int) -> dict:
    """A whole DrivAerML run (points, three fields) in one process (its reading threads on the
    machine's cores, as here), over a 1 GB/s link: the
    processing time scaled from this run by volume points, the fetch at 1 GB/s, all bytes when
    checksums are verified, the arrays read only when not."""
    local = median["local disk"]
    scale = DRIVAERML["points"] / max(1, local["points"])
    process_s = local["seconds"] * scale
    total = DRIVAERML["volume"] + DRIVAERML["boundary"] + DRIVAERML["stl"]
    needed = DRIVAERML["points"] * DRIVAERML["point_bytes"] * 4 / 3 + DRIVAERML["boundary"] + DRIVAERML["stl"]
    return {"files_gb": total / 1e9, "processing_s_one_process": process_s,
            "fetch_verified_s_at_1GBps": total / 1e9, "fetch_unverified_s_at_1GBps": needed / 1e9,
            "run_s_verified": max(process_s, total / 1e9), "run_s_unverified": max(process_s, needed / 1e9)}


def print_report(report: dict, files: int, points: int) -> None:
    print(f"\none run, {points:,} volume points, {files / 1e6:.1f} MB of files; medians")
    print("| mode | s | client CPU s | server CPU s | MB/s of files | fetched / file bytes | peak RSS MiB | "
          "throughput vs local | RSS vs local |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t in report["table"].items():
        print(f"| {name} | {t['seconds']:.2f} | {t['cpu_s']:.1f} | {t['server_cpu_s']:.1f} | {t['mb_per_s']:.1f} | "
              f"{t['fetched_over_files']:.4f} | "
              f"{t['peak_mib']:.0f} | {t['vs_local_throughput']:.2f} | {t['vs_local_rss']:.2f} |")
    b = report["block_reader"]
    print(f"\nblock readers inside processing: {b['block_reader_mb_per_s']:.0f} MB/s of encoded array bytes; "
          f"decode floor (base64 + zlib from memory): {b['floor_mb_per_s']:.0f} MB/s "
          f"(ratio {b['block_reader_vs_floor']:.2f}); whole processing vs floor (+ STL parse): "
          f"{b['processing_vs_floor']:.2f}")
    p = report["projection"]
    print(f"\nprojection, one DrivAerML run ({p['files_gb']:.1f} GB of files), one process, 1 GB/s link: processing "
          f"{p['processing_s_one_process']:.0f} s; fetch {p['fetch_verified_s_at_1GBps']:.0f} s (checksums verified) or "
          f"{p['fetch_unverified_s_at_1GBps']:.1f} s (arrays read only); run {p['run_s_verified']:.0f} s / "
          f"{p['run_s_unverified']:.0f} s")
    print("\nchecks:")
    for name, ok in report["checks"].items():
        print(f"  {name}: {ok}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bench")
    parser.add_argument("--volume-points", type=int)
    parser.add_argument("--data-mode", default="binary", help="the run's VTK encoding (DrivAerML's volume: binary)")
    parser.add_argument("--compressor", default="none")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kill-trials", type=int, default=5)
    parser.add_argument("--server", default="seaweedfs", choices=("seaweedfs", "moto"))
    parser.add_argument("--work", type=Path, help="the run, the server's data and the outputs (required)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, values = args.child
        print(json.dumps({"process": child_process, "floor": child_floor}[kind](**json.loads(values))))
        return
    if args.work is None:
        parser.error("--work is required")
    args.work.mkdir(parents=True, exist_ok=True)
    raw = make_run(args.work, args.preset, args.volume_points, args.data_mode, args.compressor)
    files = sum(p.stat().st_size for p in (raw / "run_1").iterdir()
                if p.name.startswith(("drivaer_", "boundary_1.vtp", "volume_")))
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    with start(args.server, args.work / "server") as server:
        os.environ.update(CREDENTIALS)
        for bucket in (BUCKET, "kill-trials"):
            _bucket(server, bucket)
        upload(raw, server.endpoint, BUCKET)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        rows = measure(raw, args.work, server, args.repeats)
        kills = kill_trials(args.work, server.endpoint, args.kill_trials)
    points = json.loads((args.work / "out_local" / "run_1.zarr" / "zarr.json").read_text())["attributes"]["counts"]["volume_points"]
    for runs in rows.values():
        for r in runs:
            r["points"] = points
    report = summarize(rows, files, kills) | {"kill_trials": kills, "files_bytes": files, "volume_points": points,
                                              "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    print_report(report, files, points)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
