"""Where count-of-counts noise comes from: exact discrete Laplace at scales rounded up from the
budget, drawn from the bit source the release names, never from numpy's float samplers; the
public bound K for every method; the memory check before any allocation.

The privacy checks are exact: a recording sampler captures every scale a release asks for, and
the budget they spend, ``sum of sensitivity / scale``, is compared in rationals with epsilon.
"""

from __future__ import annotations

import ast
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpstream.count_of_counts import (
    BottomUpCountOfCounts,
    CountOfCountsData,
    LevelHistograms,
    TopDownCountOfCounts,
    estimate_level,
    estimate_max_size,
)
from dpstream.count_of_counts.consistency import release_source
from dpstream.count_of_counts.estimators import BYTES_PER_CELL, CHUNK_CELLS, dense_memory, format_bytes, noise_scale
from dpstream.noise import ExactNoise, FloatNoise, ZeroNoise, discrete_laplace_pmf
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.postprocess import LaplaceCounts

ALPHA = 1e-9  # failure probability of each statistical assertion
SENSITIVITY = {"hc": 1, "hg": 1, "naive": 2}


class Recording:
    """A noise sampler that records every (scale, size) it is asked for and returns zeros."""

    def __init__(self) -> None:
        self.calls: list[tuple[Fraction, object]] = []

    def laplace_units(self, scale, size):
        self.calls.append((scale, size))
        return ZeroNoise().laplace_units(scale, size)

    def laplace(self, scale, size):  # pragma: no cover - a release path must never ask for float noise
        raise AssertionError("float Laplace noise asked for")


def _data() -> CountOfCountsData:
    paths = [("r", "a", "a1"), ("r", "a", "a2"), ("r", "b", "b1")]
    return CountOfCountsData.from_leaf_sizes(paths, {"a1": [1, 2, 2, 9], "a2": [3, 40], "b1": [0, 1, 1, 1, 7]})


@pytest.mark.parametrize("epsilon", [1.0, 0.3, 0.7, 1e-3, 5.0])
@pytest.mark.parametrize("methods", [("hc",), ("hg",), ("naive",), ("hg", "hc", "naive")])
def test_top_down_levels_spend_at_most_epsilon_exactly(epsilon, methods):
    recording = Recording()
    TopDownCountOfCounts(epsilon=epsilon, method=methods, max_size=50, noise=recording).release(_data())
    assert len(recording.calls) == 3  # one batch of noise per level
    level_methods = methods * 3 if len(methods) == 1 else methods
    spent = sum(Fraction(SENSITIVITY[m]) / scale for m, (scale, _) in zip(level_methods, recording.calls))
    assert spent <= Fraction(epsilon)  # exact rationals: never worse than asked
    for method, (scale, _) in zip(level_methods, recording.calls):
        asked = SENSITIVITY[method] * 3 / Fraction(epsilon)
        assert asked <= scale < asked + Fraction(1, 2**20)  # rounded up by less than one step of 2^-20
        assert (scale * 2**20).denominator == 1


@pytest.mark.parametrize("method", ["hc", "hg", "naive"])
def test_bottom_up_and_the_estimate_of_k_spend_what_they_claim(method):
    recording = Recording()
    mechanism = BottomUpCountOfCounts(epsilon=0.3, method=method, max_size_epsilon=0.01, noise=recording)
    release = mechanism.release(_data())
    k_calls = recording.calls[:-1]
    (leaf_scale, _) = recording.calls[-1]
    assert Fraction(SENSITIVITY[method]) / leaf_scale <= Fraction(0.3)
    if method == "hg":  # hg needs no K: nothing is spent on it
        assert k_calls == [] and release.max_size is None
        assert mechanism.privacy().epsilon == 0.3
    else:
        [(k_scale, k_size)] = k_calls
        assert k_size == 1 and 1 / k_scale <= Fraction(0.01)
        # zero noise: K is the largest group (40) plus the margin ceil(5 sqrt 2 * scale)
        assert release.max_size == 40 + math.ceil(5 * math.sqrt(2) * float(k_scale))
        assert mechanism.privacy().epsilon == pytest.approx(0.31)


def test_releases_draw_keyed_noise_from_a_fresh_or_derived_key():
    data = _data()
    fresh = [TopDownCountOfCounts(epsilon=1.0, max_size=60).noise for _ in range(2)]
    assert all(source.keyed for source in fresh)  # unseeded: a fresh key from the OS CSPRNG
    draws = [source.child(1).sampler(0).laplace_units(Fraction(3), 8) for source in fresh]
    assert not (draws[0] == draws[1]).all()
    one = TopDownCountOfCounts(epsilon=1.0, max_size=60, seed=7).release(data)
    two = TopDownCountOfCounts(epsilon=1.0, max_size=60, seed=7).release(data)
    assert one.rows() == two.rows()
    key = bytes(range(32))
    assert (
        BottomUpCountOfCounts(epsilon=1.0, max_size=60, key=key).release(data).rows()
        == BottomUpCountOfCounts(epsilon=1.0, max_size=60, key=key).release(data).rows()
    )
    with pytest.raises(ValueError, match="not both"):
        TopDownCountOfCounts(epsilon=1.0, seed=1, noise=ZeroNoise())
    with pytest.raises(ValueError, match="not both"):
        TopDownCountOfCounts(epsilon=1.0, seed=1, key=key)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        TopDownCountOfCounts(epsilon=1.0, key=b"short")
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        BottomUpCountOfCounts(epsilon=1.0, noise=np.random.default_rng(0))


def _spaced(groups: int, gap: int) -> CountOfCountsData:
    """One region (a one-level tree) of groups of sizes gap, 2 gap, ..., groups * gap."""
    return CountOfCountsData.from_leaf_sizes([("r",)], {"r": gap * np.arange(1, groups + 1)})


def _chance_two_releases_agree(groups: int, gap: int, scale: Fraction) -> float:
    """A bound on the chance that two hg releases of :func:`_spaced` with independent noise are equal.

    Each group's size gets one discrete Laplace draw X (a = exp(-1/scale)).  While every |X| < gap/2
    the noisy sizes stay increasing and positive, so the isotonic fit and the rounding keep them
    and the release is the sizes plus the draws: two releases agree only if all draws do, each with
    P[X = X'] = sum_k pmf(k)^2 = tanh(1/(2 scale))^2 (1 + a^2) / (1 - a^2).  A draw reaches gap/2 with
    P[|X| >= m] = 2 a^m / (1 + a) (union bound over the groups of both releases).
    """
    a = math.exp(-1 / float(scale))
    same_draw = math.tanh(1 / (2 * float(scale))) ** 2 * (1 + a * a) / (1 - a * a)
    return same_draw**groups + 2 * groups * 2 * a ** (gap // 2) / (1 + a)


@pytest.mark.parametrize("make", [
    lambda **noise: TopDownCountOfCounts(epsilon=1.0, method="hg", **noise),
    lambda **noise: BottomUpCountOfCounts(epsilon=1.0, method="hg", **noise),
])
def test_every_release_spends_noise_of_its_own(make):
    groups, gap = 30, 200
    data = _spaced(groups, gap)
    bound = _chance_two_releases_agree(groups, gap, noise_scale("hg", 1.0))  # one level: all of epsilon on it
    assert bound <= ALPHA
    unseeded = make()
    assert unseeded.release(data).rows() != unseeded.release(data).rows()  # a new key for every release
    seeded, again = make(seed=7), make(seed=7)
    first, second = seeded.release(data).rows(), seeded.release(data).rows()
    assert first != second  # the next key of the seed's bits
    assert (first, second) == (again.release(data).rows(), again.release(data).rows())  # replayable
    # the first release keeps the key a seed has always given
    expected = release_source(seed=7).child(0).sampler(0).laplace_units(Fraction(1), 5)
    assert (make(seed=7).take_noise().child(0).sampler(0).laplace_units(Fraction(1), 5) == expected).all()


def test_a_given_key_serves_one_release_and_a_second_is_refused():
    data, key = _spaced(5, 200), bytes(range(32))
    top_down = TopDownCountOfCounts(epsilon=1.0, method="hg", key=key)
    top_down.release(data)
    for again in (lambda: top_down.release(data), lambda: top_down.estimates(data), lambda: top_down.noise):
        with pytest.raises(ValueError, match="second release under the same key would draw the same noise"):
            again()
    assert "exact discrete Laplace" in str(top_down.privacy(1))  # the statement is still there to print
    # an estimate of K is part of a release: planning one spends the key too
    bottom_up = BottomUpCountOfCounts(epsilon=1.0, max_size_epsilon=0.5, key=key)
    bottom_up.plan(data.tree, 1000)
    with pytest.raises(ValueError, match="made its release with the key it was given"):
        bottom_up.release(data)
    # a sampler handed in continues its sequence: zero noise releases the truth every time
    zero = TopDownCountOfCounts(epsilon=1.0, method="hg", noise=ZeroNoise())
    assert zero.release(data).rows() == zero.release(data).rows()


@pytest.mark.parametrize("method", ["hc", "hg", "naive"])
def test_a_regions_keyed_noise_does_not_depend_on_the_other_regions(method):
    truth = _data().truth(2)
    source = release_source(seed=5).child(2)
    whole = estimate_level(truth, method=method, epsilon=0.5, noise=source, max_size=60)
    for region in range(truth.n_nodes):
        sizes, counts = truth.region(region)
        alone = LevelHistograms.from_sorted(np.zeros(sizes.size, np.int64), sizes, counts, 1)
        part = estimate_level(alone, method=method, epsilon=0.5, noise=source, max_size=60, regions=[region])
        expected_sizes, expected_counts = whole.histograms.region(region)
        assert part.histograms.size.tolist() == expected_sizes.tolist()
        assert part.histograms.count.tolist() == expected_counts.tolist()


class StrictGenerator(np.random.Generator):
    """A generator whose float samplers raise: only ``integers`` (the bits) may be drawn."""

    def _refuse(self, *args, **kwargs):
        raise AssertionError("numpy's float sampler was called on a release path")

    geometric = laplace = exponential = normal = standard_normal = random = _refuse


def test_no_release_path_calls_numpys_float_samplers(monkeypatch):
    # every generator built from a seed (SeededBits, make_rng) is strict
    monkeypatch.setattr(np.random, "default_rng", lambda seed=None: StrictGenerator(np.random.PCG64(seed)))
    data = _data()
    TopDownCountOfCounts(epsilon=1.0, method=("hg", "hc", "naive"), max_size_epsilon=0.1, seed=1).release(data)
    BottomUpCountOfCounts(epsilon=1.0, max_size_epsilon=0.1, seed=StrictGenerator(np.random.PCG64(2))).release(data)
    estimate_max_size(10, 0.5, ExactNoise(bits=3))
    LaplaceCounts(epsilon=0.5, seed=2).release(np.array([[3, 2], [2, 3]]))
    with pytest.raises(AssertionError, match="float sampler"):  # the check itself works
        TopDownCountOfCounts(epsilon=1.0, max_size=5, noise=FloatNoise(rng=1)).release(data)


SOURCES = ["count_of_counts", "postprocess/mechanism.py", "noise/geometric.py"]


FLOAT_SAMPLERS = {"laplace", "geometric", "exponential", "normal", "standard_normal", "random"}
FLOAT_HELPERS = {"laplace_noise", "double_geometric_noise", "report_noisy_max", "report_noisy_max_counts"}


def test_the_release_modules_call_no_float_sampler():
    root = Path(__file__).resolve().parents[1] / "src" / "dpstream"
    for source in SOURCES:
        files = sorted((root / source).rglob("*.py")) if (root / source).is_dir() else [root / source]
        for path in files:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    assert node.func.attr not in FLOAT_SAMPLERS, f"{path.name}:{node.lineno} calls .{node.func.attr}"
                if isinstance(node, ast.ImportFrom):
                    names = {alias.name for alias in node.names}
                    assert not names & FLOAT_HELPERS, f"{path.name}:{node.lineno} imports {names & FLOAT_HELPERS}"
                    assert node.module not in (
                        "dpstream.noise.float_geometric",
                        "dpstream.noise.float_noise",
                        "dpstream.noise.laplace",
                    )


def test_hc_noise_follows_the_discrete_laplace_law_at_the_rounded_scale():
    # 20,000 regions of one group of size 0 at K = 1: Hc releases cell 0 (= 1) plus noise, and the
    # isotonic fit clips it to [0, 1].  The released size is 0 iff 1 + X >= 1, i.e. X >= 0.
    epsilon, n = 0.3, 20_000
    truth = LevelHistograms.from_groups(np.arange(n), np.zeros(n, dtype=np.int64), n)
    estimate = estimate_level(truth, method="hc", epsilon=epsilon, noise=ExactNoise(bits=5), max_size=1)
    scale = noise_scale("hc", epsilon)
    at_zero = float((estimate.histograms.size == 0).mean())
    expected = float(discrete_laplace_pmf(np.arange(0, 2000), scale.numerator, scale.denominator).sum())
    assert abs(at_zero - expected) <= math.sqrt(math.log(2 / ALPHA) / (2 * n))


def test_hg_applies_a_given_k_too():
    data = _data()  # the largest groups have sizes 9 and 40
    for mechanism in (TopDownCountOfCounts(epsilon=1e9, method="hg", max_size=5, seed=0),
                      BottomUpCountOfCounts(epsilon=1e9, method="hg", max_size=5, seed=0)):
        release = mechanism.release(data)
        assert release.max_size == 5
        for level, hist in enumerate(release.levels):
            assert hist.size.max() == 5 and np.array_equal(hist.groups(), data.groups(level))
            capped = np.minimum(data.truth(level).size, 5)  # exact at this epsilon: the truth capped at K
            expected = LevelHistograms.from_groups(
                np.repeat(data.truth(level).node, data.truth(level).count),
                np.repeat(capped, data.truth(level).count), hist.n_nodes)
            assert np.array_equal(hist.size, expected.size) and np.array_equal(hist.count, expected.count)
    assert TopDownCountOfCounts(epsilon=1e9, method="hg", seed=0).release(data).levels[0].size.max() == 40


def test_memory_is_checked_before_anything_is_drawn():
    recording = Recording()
    need = dense_memory(3, 10**8)
    assert need == (10**8 + 1) * BYTES_PER_CELL  # one region at a time at this K
    assert dense_memory(10**6, 99) == CHUNK_CELLS // 100 * 100 * BYTES_PER_CELL
    mechanism = TopDownCountOfCounts(epsilon=1.0, max_size=10**8, memory_limit=2**30, noise=recording)
    with pytest.raises(ValueError, match=r"the given K = 100,000,000 needs about 8.94 GiB of memory .* 1 GiB"):
        mechanism.release(_data())
    estimated = BottomUpCountOfCounts(epsilon=1.0, max_size_epsilon=1e-4, memory_limit=2**20, noise=recording)
    k = 40 + math.ceil(5 * math.sqrt(2) * 10_000)  # zero noise: the largest group plus the margin at scale 1e4
    need = format_bytes(dense_memory(3, k))  # the three leaves fit in one chunk
    with pytest.raises(ValueError, match=rf"the estimated K = {k:,} needs about {need} of memory .* 1 MiB"):
        estimated.release(_data())
    assert [size for _, size in recording.calls] == [1]  # only K's noise was drawn
    # hg keeps no dense rows: the limit does not apply
    TopDownCountOfCounts(epsilon=1.0, method="hg", max_size=10**8, memory_limit=1, seed=0).release(_data())


def test_tiny_budgets_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"sensitivity / epsilon must be at most 2\^40"):
        TopDownCountOfCounts(epsilon=1e-12, max_size=5, seed=0).release(_data())  # 3e12 per level
    assert discrete_laplace_scale(1, 1e-12) >= Fraction(10**12)


def test_float_noise_stays_available_for_studies():
    release = TopDownCountOfCounts(epsilon=1.0, max_size=60, noise=FloatNoise(rng=3)).release(_data())
    assert [int(hist.count.sum()) for hist in release.levels] == [11, 11, 11]
    assert "not for publication" in TopDownCountOfCounts(epsilon=1.0, noise=FloatNoise(rng=3)).privacy(3).composition
