"""Volume points of the synthetic runs, in the body frame: the tunnel box above the ground outside
the body, a third of them clustered near the wall as in a CFD mesh, generated a block at a time
so that a run of any size fits in bounded memory.

    for block in volume_blocks(shape, n_points, np.random.SeedSequence(7), box):
        ...
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from synthetic.body import CarShape, body_points, inside_body, outward_normals

# Volume points keep this distance from the smooth body (per 4.5 m of body length), so that none
# falls inside the faceted STL.
WALL_MARGIN = 0.04
VOLUME_BLOCK_POINTS = 1 << 20  # volume points generated and written at a time
Box = tuple[tuple[float, float, float], tuple[float, float, float]]


def wall_margin(shape: CarShape) -> float:
    """The distance volume points keep from the smooth body, scaled with its length."""
    return WALL_MARGIN * shape.length / 4.5


def _near_wall_points(shape: CarShape, n: int, rng: np.random.Generator) -> np.ndarray:
    """Points offset outward from random body points, denser close to the wall."""
    s, t = rng.uniform(0.002, 0.998, n), rng.uniform(0.0, 2.0 * np.pi, n)
    offset = wall_margin(shape) + rng.exponential(0.12 * shape.length / 4.5, (n, 1))
    return body_points(shape, s, t) + outward_normals(shape, s, t) * offset


def volume_block(shape: CarShape, n_points: int, rng: np.random.Generator, box: Box) -> np.ndarray:
    """``n_points`` points in ``box`` (the body frame's), outside the body with a margin, in random order."""
    low, high = np.array(box[0]), np.array(box[1])
    kept: list[np.ndarray] = []
    count = 0
    while count < n_points:
        batch = n_points - count + 64
        near = _near_wall_points(shape, batch // 3, rng)
        uniform = rng.uniform(low, high, (batch - len(near), 3))
        candidates = np.concatenate([near, uniform])
        ok = ~inside_body(shape, candidates, wall_margin(shape)) & np.all((candidates >= low) & (candidates <= high), 1)
        candidates = candidates[ok][: n_points - count]
        kept.append(candidates)
        count += len(candidates)
    points = np.concatenate(kept)
    return points[rng.permutation(len(points))]


def volume_blocks(shape: CarShape, n_points: int, seed: np.random.SeedSequence, box: Box,
                  block_points: int = VOLUME_BLOCK_POINTS) -> Iterator[np.ndarray]:
    """The volume points of a run in blocks of ``block_points`` (each from its own random
    stream, spawned from ``seed``)."""
    n_blocks = -(-n_points // block_points)
    for k, child in enumerate(seed.spawn(n_blocks)):
        size = min(block_points, n_points - k * block_points)
        yield volume_block(shape, size, np.random.default_rng(child), box)


def volume_points(shape: CarShape, n_points: int, rng: np.random.Generator, box: Box) -> np.ndarray:
    """All ``n_points`` volume points of a body at once (for small runs and benchmarks)."""
    seed = np.random.SeedSequence(int(rng.integers(2**63)))
    return np.concatenate(list(volume_blocks(shape, n_points, seed, box)) or [np.zeros((0, 3))])
