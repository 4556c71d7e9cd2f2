"""The shared sampling: deterministic per (seed, epoch, index), the requested sizes, clear errors,
and the law itself.

The law tests draw many times from a small run and compare each stored row's inclusion frequency
with the inclusion probability of the law, computed here independently of the implementation:
uniform (k / N) for geometry and volume; for the surface, successive sampling proportional to area
(``successive_inclusion``: a numerical integral over the exponential race) over the whole surface
in exact mode, averaged over the N cyclic windows otherwise. Bounds are 4.5 binomial standard
deviations per row; each test also checks that the bounds reject the old non-cyclic windows
(their tent and edge effects), so that passing means something.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import DEFAULTS, typed_config

from domino_pipeline.compute.sampling import (
    SamplingLaw,
    TooFewPointsError,
    choose_uniform,
    choose_weighted,
    cyclic_window,
    draw_rng,
    part_window,
    read_window,
    sample_draw,
    sampling_law,
)

COUNTS = {"geometry": 1000, "surface": 5000, "volume": 20000}
Z = 4.5  # standard deviations a row's frequency may stray from its probability


def _draw(seed=0, epoch=0, index=0, counts=COUNTS, areas=None, law=SamplingLaw(4, 10), **kw):
    areas = np.ones(counts["surface"], dtype=np.float32) if areas is None else areas
    args = dict(counts=counts, geometry_points=300, surface_points=100, volume_points=400,
                read_surface_areas=lambda a, b: areas[a:b], law=law)
    args.update(kw)
    return sample_draw(seed, epoch, index, **args)


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("geometry_rows", "surface_rows", "volume_rows"))


def test_same_key_same_draw_and_different_keys_differ():
    assert _same(_draw(1, 2, 3), _draw(1, 2, 3))
    for other in (_draw(2, 2, 3), _draw(1, 3, 3), _draw(1, 2, 4)):
        assert not _same(_draw(1, 2, 3), other)


def _cyclic_span(rows: np.ndarray, n: int) -> int:
    """The length of the shortest cyclic stretch of n rows that holds ``rows`` (sorted)."""
    gaps = np.diff(np.r_[rows, rows[0] + n])
    return n - int(gaps.max()) + 1


def test_rows_have_the_requested_sizes_and_lie_in_one_cyclic_window():
    for index in range(50):
        d = _draw(index=index)
        for rows, n, size in ((d.geometry_rows, 1000, 300), (d.surface_rows, 5000, 100),
                              (d.volume_rows, 20000, 400)):
            assert len(rows) == size and np.all(np.diff(rows) > 0) and 0 <= rows[0] and rows[-1] < n
        assert _cyclic_span(d.surface_rows, 5000) <= 4 * 100
        assert _cyclic_span(d.volume_rows, 20000) <= 10 * 400


def test_parts_are_independent_of_the_model_type():
    both = _draw()
    surface_only = _draw(volume_points=None)
    volume_only = _draw(surface_points=None, read_surface_areas=None)
    assert surface_only.volume_rows is None and volume_only.surface_rows is None
    assert np.array_equal(both.surface_rows, surface_only.surface_rows)
    assert np.array_equal(both.volume_rows, volume_only.volume_rows)
    assert np.array_equal(both.geometry_rows, volume_only.geometry_rows)


def test_exact_and_null_factors_read_all_areas_and_windows_wrap():
    areas = np.ones(COUNTS["surface"], dtype=np.float32)
    for law in (SamplingLaw(exact=True), SamplingLaw(surface_window_factor=None)):
        seen = []
        _draw(law=law, read_surface_areas=lambda a, b: seen.append((a, b)) or areas[a:b])
        assert seen == [(0, COUNTS["surface"])]
    values = np.arange(10)
    np.testing.assert_array_equal(read_window(lambda a, b: values[a:b], 8, 4, 10), [8, 9, 0, 1])
    assert cyclic_window(np.random.default_rng(0), 10, 12) == (0, 10)


def test_the_law_comes_from_the_config():
    assert sampling_law(DEFAULTS.sampling) == SamplingLaw(8, 8, False) == SamplingLaw()
    sampling = typed_config("sampling.surface_window_factor=null", "sampling.volume_window_factor=3",
                            "sampling.exact=true").sampling
    law = sampling_law(sampling)
    assert law == SamplingLaw(None, 3, True) and law.window("volume", 10, 1000) == 1000
    validation = typed_config("sampling.val_exact=true").sampling
    assert not sampling_law(validation).exact and sampling_law(validation, validation=True).exact
    assert not sampling_law(DEFAULTS.sampling, validation=True).exact
    with pytest.raises(ValueError, match="volume_window_factor must be an integer >= 1"):
        SamplingLaw(volume_window_factor=-2)


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(TooFewPointsError, match="volume points: 20000 rows, fewer than the 30000"):
        _draw(volume_points=30000)
    with pytest.raises(TooFewPointsError, match="STL vertices: 1000 rows"):
        _draw(geometry_points=1001)
    with pytest.raises(TooFewPointsError, match="surface cells"):
        _draw(surface_points=5001)


@pytest.mark.slow
def test_weighted_choice_matches_torch_multinomial_without_replacement():
    weights = np.array([1, 1, 2, 4, 8, 16, 0.5, 3], dtype=np.float32)
    trials, size = 20000, 3
    ours = np.zeros(len(weights))
    rng = np.random.default_rng(0)
    for _ in range(trials):
        ours[choose_weighted(rng, weights, size)] += 1
    generator = torch.Generator().manual_seed(0)
    ref = np.zeros(len(weights))
    w = torch.from_numpy(weights).expand(trials, -1).contiguous()
    taken = torch.multinomial(w, size, replacement=False, generator=generator).numpy()
    np.add.at(ref, taken.reshape(-1), 1)
    np.testing.assert_allclose(ours / trials, ref / trials, atol=0.02)
    assert ours[5] > ours[4] > ours[3] > ours[0]


def test_weighted_choice_of_everything_is_everything():
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(choose_weighted(rng, np.ones(7), 7), np.arange(7))
    np.testing.assert_array_equal(choose_uniform(rng, 7, 7, "x"), np.arange(7))


# ----------------------------------------------------------------------------- the law


def successive_inclusion(weights: np.ndarray, k: int) -> np.ndarray:
    """Inclusion probabilities of successive sampling of ``k`` of len(weights) items
    proportional to ``weights``, without replacement (independent of the implementation).

    Item i is drawn iff fewer than k others beat its exponential clock X_i ~ Exp(w_i):
    pi_i = integral over t of w_i exp(-w_i t) P(#{j != i: X_j < t} <= k - 1) dt, the count a
    Poisson-binomial computed by dynamic programming on a grid of t, integrated by trapezoids.
    """
    w = np.asarray(weights, dtype=np.float64)
    n = len(w)
    if k >= n:
        return np.ones(n)
    t = np.concatenate([[0.0], np.geomspace(1e-7, 60.0, 6000)]) / w.min()
    p = 1.0 - np.exp(-np.outer(w, t))  # (n, T): P(X_j < t)
    dist = np.zeros((n, k, len(t)))  # per i: P(count of others below t = c), c < k
    dist[:, 0] = 1.0
    for j in range(n):
        pj = np.where(np.arange(n)[:, None] == j, 0.0, p[j][None, :])[:, None, :]  # skip i == j
        shifted = np.concatenate([np.zeros((n, 1, len(t))), dist[:, :-1]], axis=1)
        dist = dist * (1.0 - pj) + shifted * pj
    integrand = w[:, None] * np.exp(-np.outer(w, t)) * dist.sum(axis=1)
    return np.trapezoid(integrand, t, axis=1)


def windowed_inclusion(weights: np.ndarray, k: int, width: int, cyclic: bool = True) -> np.ndarray:
    """Inclusion probabilities of successive sampling inside a window of ``width`` consecutive
    rows with a uniform start: cyclic (every start), or the old non-cyclic one (starts
    0..n-width)."""
    n = len(weights)
    starts = range(n) if cyclic else range(n - width + 1)
    total = np.zeros(n)
    for start in starts:
        rows = (start + np.arange(width)) % n
        total[rows] += successive_inclusion(weights[rows], k)
    return total / len(starts)


def old_window_inclusion(n: int, width: int, k: int) -> np.ndarray:
    """Uniform k of a non-cyclic window of ``width`` rows (the old law): each row's chance."""
    r = np.arange(n)
    starts = np.minimum(r, n - width) - np.maximum(0, r - width + 1) + 1
    return starts / (n - width + 1) * k / width


def inclusion_counts(part: str, n: int, points: int, trials: int, law: SamplingLaw,
                     areas: np.ndarray | None = None) -> np.ndarray:
    """How often each of ``n`` stored rows is drawn in ``trials`` draws of ``part``."""
    counts = {"geometry": n, "surface": n, "volume": n}
    areas = np.ones(n) if areas is None else areas
    sizes = {"geometry_points": points if part == "geometry" else 1,
             "surface_points": points if part == "surface" else None,
             "volume_points": points if part == "volume" else None}
    hits = np.zeros(n, dtype=np.int64)
    for index in range(trials):
        draw = sample_draw(7, 0, index, counts=counts, read_surface_areas=lambda a, b: areas[a:b],
                           law=law, **sizes)
        hits[getattr(draw, f"{part}_rows")] += 1
    return hits


def assert_rows_follow(hits: np.ndarray, probability: np.ndarray, trials: int,
                       alternative: np.ndarray | None = None) -> None:
    """Every row within Z binomial standard deviations of its probability; and, when given,
    an ``alternative`` law (the old windows) that these bounds reject: 2 Z away somewhere."""
    sd = np.sqrt(probability * (1 - probability) / trials)
    stray = np.abs(hits / trials - probability) / np.maximum(sd, 1e-12)
    assert stray.max() < Z, f"row {stray.argmax()}: {stray.max():.1f} sd from the law"
    if alternative is not None:
        assert (np.abs(alternative - probability) / sd).max() > 2 * Z, "the test cannot tell the laws apart"


def assert_tenths_within(hits: np.ndarray, probability: np.ndarray, trials: int,
                         tolerance: float = 0.05) -> np.ndarray:
    """Each tenth of the stored order is drawn within ``tolerance`` of its expected count, a
    bound at least 4 standard deviations wide (so the test means something); the ratios."""
    tenths = np.array_split(np.arange(len(hits)), 10)
    expected = np.array([probability[t].sum() * trials for t in tenths])
    got = np.array([hits[t].sum() for t in tenths])
    assert tolerance * expected.min() >= 4 * np.sqrt(expected.max()), "too few draws for the bound"
    ratios = got / expected
    assert np.all(np.abs(ratios - 1) < tolerance), ratios
    return ratios


@pytest.mark.parametrize("points", [300, 900])  # a minority of the vertices, and nearly all
@pytest.mark.slow
def test_geometry_vertices_are_uniform_without_replacement(points):
    n, trials = 1000, 3000
    hits = inclusion_counts("geometry", n, points, trials, SamplingLaw())
    uniform = np.full(n, points / n)
    old = old_window_inclusion(n, points, points)
    assert_rows_follow(hits, uniform, trials, alternative=old)
    assert_tenths_within(hits, uniform, trials)
    tent = np.array([old[t].sum() for t in np.array_split(np.arange(n), 10)]) / (n / 10 * points / n)
    assert tent[0] < 0.95 or tent[5] > 1.05  # the old window fails the tenths bound


@pytest.mark.parametrize("law", [SamplingLaw(volume_window_factor=5), SamplingLaw(exact=True)])
@pytest.mark.slow
def test_volume_rows_are_uniform(law):
    n, points, trials = 2000, 40, 12000
    hits = inclusion_counts("volume", n, points, trials, law)
    uniform = np.full(n, points / n)
    assert_rows_follow(hits, uniform, trials, alternative=old_window_inclusion(n, points, points))
    assert_tenths_within(hits, uniform, trials)


@pytest.mark.slow
def test_successive_inclusion_reference_is_sound():
    w = np.array([1.0, 2.0, 3.0, 4.0])
    # two of four by enumeration of the ordered picks (a, b): w_a / W * w_b / (W - w_a)
    exact = np.zeros(4)
    for a, b in itertools.permutations(range(4), 2):
        exact[[a, b]] += w[a] / w.sum() * w[b] / (w.sum() - w[a])
    np.testing.assert_allclose(successive_inclusion(w, 2), exact, atol=1e-5)
    big = np.random.default_rng(1).lognormal(size=30)
    assert abs(successive_inclusion(big, 7).sum() - 7) < 1e-4


@pytest.fixture(scope="module")
def areas() -> np.ndarray:
    """Cell areas spread over two orders of magnitude, in the stored (random) order."""
    return np.random.default_rng(3).lognormal(sigma=1.2, size=40)


@pytest.mark.slow
def test_exact_surface_is_area_weighted_over_the_whole_surface(areas):
    points, trials = 5, 20000
    hits = inclusion_counts("surface", len(areas), points, trials, SamplingLaw(exact=True), areas)
    exact = successive_inclusion(areas, points)
    assert_rows_follow(hits, exact, trials, alternative=windowed_inclusion(areas, points, 10))
    assert hits.argmax() == areas.argmax()


@pytest.mark.slow
def test_windowed_surface_follows_the_cyclic_window_law(areas):
    points, factor, trials = 5, 2, 20000
    law = SamplingLaw(surface_window_factor=factor)
    hits = inclusion_counts("surface", len(areas), points, trials, law, areas)
    windowed = windowed_inclusion(areas, points, factor * points)
    old = windowed_inclusion(areas, points, factor * points, cyclic=False)
    assert_rows_follow(hits, windowed, trials, alternative=old)


@pytest.mark.slow
def test_windowed_surface_has_no_edge_in_the_stored_order():
    n, points, trials = 1000, 20, 6000
    hits = inclusion_counts("surface", n, points, trials, SamplingLaw(surface_window_factor=8))
    uniform = np.full(n, points / n)
    assert_rows_follow(hits, uniform, trials, alternative=old_window_inclusion(n, 8 * points, points))
    assert_tenths_within(hits, uniform, trials)


@pytest.mark.slow
def test_windowed_surface_caps_the_largest_cells():
    """What the window costs: in a window of 2 x the sample, the largest cells are drawn at
    most at the window's rate, below the exact law's rate."""
    areas = np.ones(40)
    areas[:4] = 30.0
    exact = successive_inclusion(areas, 5)
    windowed = windowed_inclusion(areas, 5, 10)
    assert np.all(windowed[:4] < exact[:4]) and np.all(windowed[4:] > exact[4:])


def test_window_start_is_uniform():
    starts = [cyclic_window(draw_rng(0, 0, i, "volume"), 10, 6)[0] for i in range(4000)]
    counts = np.bincount(starts, minlength=10)
    assert counts.shape == (10,) and np.all(np.abs(counts / 4000 - 0.1) < 0.02)


# ----------------------------------------------------------------------------- pairs of rows


def next_row_given_row(n: int, points: int, trials: int, law: SamplingLaw) -> float:
    """P(stored row i+1 drawn | row i drawn) over ``trials`` volume draws, pooled over all i
    (cyclic neighbours: row n-1 pairs with row 0)."""
    pairs = singles = 0
    for index in range(trials):
        drawn = np.zeros(n, dtype=bool)
        drawn[sample_draw(7, 0, index, counts={"geometry": 1, "surface": 1, "volume": n}, geometry_points=1,
                          surface_points=None, volume_points=points, read_surface_areas=None, law=law).volume_rows] = True
        pairs += int(np.count_nonzero(drawn & np.roll(drawn, -1)))
        singles += points
    return pairs / singles


def window_pair_probability(points: int, width: int) -> float:
    """P(i+1 | i) of ``points`` uniform rows of a cyclic window of ``width`` (uniform start):
    both rows lie in it for width - 1 of the n starts, then both are drawn with probability
    k (k - 1) / (w (w - 1)); divided by P(i drawn) = k / n, that is (k - 1) / w."""
    return (points - 1) / width


@pytest.mark.parametrize("factor", [1, 8])
@pytest.mark.slow
def test_volume_pairs_of_stored_neighbours_follow_the_window_law(factor):
    """A window of the sample itself draws stored neighbours together almost always; the
    default window of 8 x the sample 1 / 8 of the time. The exact law: (k - 1) / (n - 1)."""
    n, points, trials = 20000, 40, 3000
    measured = next_row_given_row(n, points, trials, SamplingLaw(volume_window_factor=factor))
    expected = window_pair_probability(points, factor * points)
    sd = np.sqrt(expected * (1 - expected) / (points * trials))
    assert abs(measured - expected) < Z * sd + 1e-3, (measured, expected)
    exact = next_row_given_row(n, points, trials, SamplingLaw(exact=True))
    assert abs(exact - (points - 1) / (n - 1)) < 1e-3
    assert measured > 20 * exact  # what an O(sample) read costs: a window of w rows gives ~ k / w


@pytest.mark.parametrize("epoch", range(8))
def test_part_window_is_the_window_a_draw_takes_its_rows_from(epoch):
    law = SamplingLaw(surface_window_factor=4, volume_window_factor=2)
    counts = {"geometry": 50, "surface": 1000, "volume": 900}
    seen = []

    def read_areas(a: int, b: int) -> np.ndarray:
        seen.append((a, b))
        return np.ones(b - a, dtype=np.float32)
    draw = sample_draw(3, epoch, 7, counts=counts, geometry_points=10, surface_points=100,
                       volume_points=200, read_surface_areas=read_areas, law=law)
    for part, rows, points in (("surface", draw.surface_rows, 100), ("volume", draw.volume_rows, 200)):
        start, width = part_window(3, epoch, 7, part, counts[part], points, law)
        assert width == law.window(part, points, counts[part]) < counts[part]
        assert np.all((rows - start) % counts[part] < width), part
    start, width = part_window(3, epoch, 7, "surface", 1000, 100, law)
    assert seen[0][0] == start and sum(b - a for a, b in seen) == width
