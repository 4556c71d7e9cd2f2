"""Volume draw designs compared by what they read and how often stored neighbours meet.

For each design, ``--draws`` draws of ``--points`` rows from ``--rows`` stored rows (a uniform
random permutation of the mesh, as the cache stores the volume), simulated with numpy: the mean
number of ``--chunk-rows`` chunks a draw touches (a cached draw reads each touched chunk of the
four volume arrays whole, 48 bytes a row) and P(row i+1 drawn | row i drawn), pooled over draws.
The designs:

- ``window 1x``: one cyclic window of the sample itself (the earlier default);
- ``window 8x``: ``points`` rows uniformly inside one cyclic window of 8 x ``points`` rows (the
  default, ``sampling.volume_window_factor: 8``);
- ``8 aligned chunks``: 8 x ``points`` / ``chunk_rows`` whole chunks at independent uniform chunk
  positions, ``points`` rows uniformly inside them (not exactly uniform per row where the last
  chunk is partial);
- ``k short windows``: k cyclic windows of ``points`` / k rows at independent uniform starts;
- ``exact``: ``points`` rows uniformly from all rows.

    python benchmarks/volume_draw_designs.py --rows 2000000 --json docs/volume_draw_designs.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

BYTES_PER_ROW = 48  # volume_coordinates (3), volume_fields (5), volume_sdf (1), volume_closest (3), float32


def window(rng: np.random.Generator, n: int, k: int, width: int) -> np.ndarray:
    start = rng.integers(0, n)
    local = rng.choice(width, k, replace=False) if width > k else np.arange(k)
    return (start + local) % n


def aligned_chunks(rng: np.random.Generator, n: int, k: int, chunk: int, count: int) -> np.ndarray:
    chunks = rng.choice(-(-n // chunk), count, replace=False)
    rows = np.concatenate([np.arange(c * chunk, min(n, (c + 1) * chunk)) for c in chunks])
    return rng.choice(rows, k, replace=False)


def short_windows(rng: np.random.Generator, n: int, k: int, windows: int) -> np.ndarray:
    width = k // windows
    starts = rng.integers(0, n, windows)
    return np.unique((starts[:, None] + np.arange(width)).ravel() % n)


def designs(k: int, chunk: int) -> dict[str, Callable]:
    return {
        "window 1x": lambda rng, n: window(rng, n, k, k),
        "window 8x (default)": lambda rng, n: window(rng, n, k, 8 * k),
        f"{max(1, 8 * k // chunk)} aligned chunks": lambda rng, n: aligned_chunks(rng, n, k, chunk, max(1, 8 * k // chunk)),
        "8 short windows": lambda rng, n: short_windows(rng, n, k, 8),
        "64 short windows": lambda rng, n: short_windows(rng, n, k, 64),
        "exact": lambda rng, n: rng.choice(n, k, replace=False),
    }


def measure(draw: Callable, n: int, chunk: int, draws: int, seed: int) -> dict[str, float]:
    """Mean chunks touched, MB read (48 bytes a row of a touched chunk) and P(i+1 | i)."""
    rng = np.random.default_rng(seed)
    chunks, pairs, singles = [], 0, 0
    for _ in range(draws):
        rows = np.unique(draw(rng, n))
        chunks.append(len(np.unique(rows // chunk)))
        pairs += int(np.isin((rows + 1) % n, rows, assume_unique=True).sum())
        singles += len(rows)
    mean_chunks = float(np.mean(chunks))
    return {"chunks": mean_chunks, "mb": mean_chunks * chunk * BYTES_PER_ROW / 1e6, "p_next": pairs / singles}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--points", type=int, default=8192)
    parser.add_argument("--chunk-rows", type=int, default=8192)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = {name: measure(draw, args.rows, args.chunk_rows, args.draws, seed=0)
              for name, draw in designs(args.points, args.chunk_rows).items()}
    exact = (args.points - 1) / (args.rows - 1)
    print(f"{args.points} of {args.rows:,} rows, chunks of {args.chunk_rows} rows, {args.draws} draws; "
          f"exact law's P(i+1 | i) = {exact:.2e}")
    print("| design | chunks read | MB read | P(i+1 \\| i) | / exact law's |")
    print("|---|---:|---:|---:|---:|")
    for name, r in result.items():
        print(f"| {name} | {r['chunks']:.1f} | {r['mb']:.2f} | {r['p_next']:.3g} | {r['p_next'] / exact:.3g} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "points": args.points, "chunk_rows": args.chunk_rows,
                                         "draws": args.draws, "exact_p_next": exact, "designs": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
