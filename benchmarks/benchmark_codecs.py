"""The Blosc codec of processed runs: ratio and speed of zstd at levels 5, 3, 1 and lz4 (byte
shuffle, 1 MiB chunks, as run_layout.py chunks its arrays) on the arrays of real solver
output (the committed OpenFOAM fixture, tests/data/openfoam, processed) and of a synthetic run
(``--preset``), one core, medians of ``--repeats``.

    python benchmarks/benchmark_codecs.py --preset demo --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CODECS = (("zstd", 5), ("zstd", 3), ("zstd", 1), ("lz4", 5))
ARRAYS = ("surface_mesh_centers", "surface_fields", "volume_mesh_centers", "volume_fields")


def processed_arrays(run_dir: Path, *overrides: str) -> dict[str, np.ndarray]:
    """The processed arrays of one raw run, in memory (process_in_memory)."""
    from domino_pipeline.configuration.config import load_config
    from domino_pipeline.configuration.config_files import compose_files
    from domino_pipeline.inputs.processing.process_options import ProcessOptions
    from domino_pipeline.inputs.processing.process_runs import process_in_memory

    config = load_config(compose_files(ROOT / "conf", "config", list(overrides)))
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    arrays, _, _ = process_in_memory(run_dir, options)
    return {name: arrays[name] for name in ARRAYS if name in arrays}


def measure(data: np.ndarray, cname: str, level: int, repeats: int) -> dict[str, float]:
    """Ratio, encode and decode MB/s of ``data`` in 1 MiB chunks."""
    from numcodecs import Blosc

    codec = Blosc(cname=cname, clevel=level, shuffle=Blosc.SHUFFLE)
    raw = np.ascontiguousarray(data, dtype=np.float32).tobytes()
    step = 1 << 20
    chunks = [raw[i:i + step] for i in range(0, len(raw), step)]
    encode, decode = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        encoded = [codec.encode(chunk) for chunk in chunks]
        encode.append(time.perf_counter() - began)
        began = time.perf_counter()
        for chunk in encoded:
            codec.decode(chunk)
        decode.append(time.perf_counter() - began)
    return {"ratio": len(raw) / sum(len(e) for e in encoded),
            "encode_mb_s": len(raw) / statistics.median(encode) / 1e6,
            "decode_mb_s": len(raw) / statistics.median(decode) / 1e6}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo", help="the synthetic run's preset (synthetic_data.py)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    from numcodecs import blosc

    blosc.set_nthreads(1)
    from synthetic_data import generate_runs

    sources = {"OpenFOAM fixture run_1": processed_arrays(ROOT / "tests" / "data" / "openfoam" / "run_1",
                                                          "dataset=openfoam", "process.volume_source=cells")}
    with tempfile.TemporaryDirectory() as tmp:
        generate_runs(Path(tmp), 1, args.preset, 0)
        sources[f"synthetic {args.preset} run_1"] = processed_arrays(Path(tmp) / "run_1")
    print("| source | array | MB | codec | ratio | encode MB/s | decode MB/s |")
    print("|---|---|---|---|---|---|---|")
    for source, arrays in sources.items():
        for name, data in arrays.items():
            for cname, level in CODECS:
                m = measure(data, cname, level, args.repeats)
                print(f"| {source} | {name} | {data.nbytes / 1e6:.1f} | {cname} {level} | {m['ratio']:.3f} | "
                      f"{m['encode_mb_s']:.0f} | {m['decode_mb_s']:.0f} |")


if __name__ == "__main__":
    main()
