"""zCDP paths: discrete Gaussian noise on the grid (L2 sensitivity), the binary tree and the unit aggregate under
rho, their guarantees, and the error bars against the linear map of the noise found by brute force."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.accounting import ZcdpGuarantee, rho_for, zcdp_epsilon
from dpstream.hierarchy.tree import consistent_leaf_variance
from dpstream.noise.discrete_gaussian_law import discrete_gaussian_pmf
from dpstream.noise.grid_gaussian import GridGaussian, discrete_gaussian_variance
from dpstream.noise.sampler import ExactNoise, FloatNoise, ZeroNoise
from dpstream.noise.source import NoiseSource
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.registry import REGISTRY

_NS = 10**9


class OneHot:
    """A stub sampler whose draws, in order, are the entries of ``vector`` (zeros after it): the released values
    on zero data are then one column of the linear map from the nodes' noise to the outputs."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector, self.used = vector, 0

    def _next(self, size) -> np.ndarray:
        n = int(np.prod(size))
        out = np.zeros(n, dtype=np.int64)
        part = self.vector[self.used : self.used + n]
        out[: part.size] = part
        self.used += n
        return out.reshape(size)

    def gaussian_units(self, sigma2, size):
        return self._next(size)

    def laplace_units(self, scale, size):
        return self._next(size)

    def laplace(self, scale, size):  # pragma: no cover - the exact paths never ask
        raise NotImplementedError


def _linear_map(run, nodes: int) -> np.ndarray:
    """Columns: the outputs of ``run(sampler)`` with unit noise on each node in turn."""
    return np.stack([run(OneHot(np.eye(nodes, dtype=np.int64)[k])) for k in range(nodes)], axis=1)


@pytest.mark.parametrize(("bound", "rho", "granularity", "levels"), [(1.0, 0.5, 0.25, 4), (10.0, 0.01, None, 20),
                                                                     (3.0, 2.0, 0.1, 1)])
def test_sigma_is_the_l2_sensitivity_over_sqrt_2_rho_rounded_up(bound, rho, granularity, levels):
    noise = GridGaussian.choose(bound, rho, granularity, levels=levels)
    exact = Fraction(noise.units**2 * levels) / (2 * Fraction(rho))
    assert noise.sigma2 >= exact and noise.sigma2 <= exact * (1 + 2.0**-29)
    assert noise.spent_rho <= rho and noise.spent_rho == pytest.approx(rho, rel=1e-8)
    assert noise.units == math.ceil(Fraction(bound) / Fraction(noise.granularity))


def test_the_discrete_gaussian_variance_is_summed_from_its_law():
    for sigma2 in (Fraction(1, 4), Fraction(3), Fraction(50)):
        x = np.arange(-400, 401)
        assert discrete_gaussian_variance(sigma2) == pytest.approx(
            float(np.sum(x**2 * discrete_gaussian_pmf(x, sigma2.numerator, sigma2.denominator))), rel=1e-12)
    assert discrete_gaussian_variance(Fraction(1, 4)) < 0.25


def test_the_tree_draws_the_discrete_gaussian_end_to_end():
    # unit grid, tau = 1 unit, h = 3 levels, rho = 1/2: sigma^2 = 3 units^2; the count after 1 value is one leaf
    tree = BinaryTreeCounter(rho=0.5, upper_bound=1.0, max_range=8, granularity=1.0, seed=3)
    assert tree._arithmetic.noise.sigma2 == 3
    counts = tree.release(np.zeros(8 * 40_000)).reshape(-1, 8)[:, 0].astype(np.int64)
    support = np.arange(-6, 7)
    observed = np.array([np.sum(counts == x) for x in support] + [np.sum(np.abs(counts) > 6)])
    law = discrete_gaussian_pmf(support, 3, 1)
    expected = np.append(law, 1.0 - law.sum()) * counts.size
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_the_tree_under_zcdp_states_rho_and_what_it_implies():
    tree = BinaryTreeCounter(rho=0.125, upper_bound=2.0, max_range=1024, seed=0)
    guarantee = tree.privacy(1e-5)
    assert isinstance(guarantee, ZcdpGuarantee) and guarantee.rho == tree.spent_rho <= 0.125
    assert guarantee.epsilon == zcdp_epsilon(guarantee.rho, 1e-5) and guarantee.delta == 1e-5
    assert "discrete Gaussian" in str(guarantee) and "L2 sensitivity tau sqrt(h)" in str(guarantee)
    # sigma^2 = tau^2 h / (2 rho): sqrt(h) where Laplace pays h
    assert tree.noise_scale == pytest.approx(2.0 * math.sqrt(10 / 0.25), rel=1e-6)
    with pytest.raises(ValueError, match="not both"):
        BinaryTreeCounter(epsilon=1.0, rho=0.5, upper_bound=1.0)
    with pytest.raises(ValueError, match="exact discrete Gaussian noise only"):
        BinaryTreeCounter(rho=0.5, upper_bound=1.0, noise=FloatNoise(rng=np.random.default_rng(0)))


def test_the_registry_entry_spends_the_rho_of_its_target():
    entry = REGISTRY["bt-zcdp"]
    options = {"epsilon": 2.0, "upper_bound": 5.0, "max_range": 64, "clip": False, "granularity": None,
               "delta": 1e-6}
    tree = entry.build(options, seed=1)
    assert tree.rho == rho_for(2.0, 1e-6) and tree.privacy(1e-6).epsilon <= 2.0
    with pytest.raises(ValueError, match="needs delta"):
        entry.build({**options, "delta": None}, seed=1)
    again = BinaryTreeCounter.from_state(tree.state)  # a snapshot restores through the binary tree's kind
    assert again.rho == tree.rho


def test_the_trees_error_bars_are_the_linear_map_of_its_noise():
    h, n = 3, 21  # trees of 8 values: three trees, the last cut
    tree = BinaryTreeCounter(rho=0.5, upper_bound=1.0, max_range=8, granularity=1.0, seed=0)
    nodes = 3 * sum(2 ** (h - k) for k in range(h))

    def run(sampler):
        return BinaryTreeCounter(rho=0.5, upper_bound=1.0, max_range=8, granularity=1.0,
                                 noise=NoiseSource(noise=sampler)).release(np.zeros(n))

    m = _linear_map(run, nodes)
    variance = tree._arithmetic.node_variance
    np.testing.assert_allclose(tree.standard_errors(np.arange(n)), np.sqrt((m**2).sum(axis=1) * variance))
    counts = np.cumsum(m, axis=0)
    np.testing.assert_allclose(tree.count_standard_errors(np.arange(1, n + 1)),
                               np.sqrt((counts**2).sum(axis=1) * variance))
    for start, stop in ((0, 21), (3, 5), (5, 13), (7, 20), (8, 16), (2, 2)):
        want = math.sqrt(float((m[start:stop].sum(axis=0) ** 2).sum()) * variance)
        assert tree.range_standard_error(start, stop) == pytest.approx(want, abs=1e-12)


def test_the_laplace_trees_error_bars_use_the_discrete_laplace_variance():
    tree = BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, max_range=8, granularity=1.0, seed=0)
    a = math.exp(-1.0 / 3.0)  # scale tau h / eps = 3 units
    assert tree.count_standard_errors([1])[0] == pytest.approx(math.sqrt(2 * a / (1 - a) ** 2))


def _aggregate(**extra) -> UnitAggregate:
    return UnitAggregate(bucket=1800, window=7200, unit_bound=4.0, granularity=1.0, unit="meter", **extra)


def test_the_aggregate_under_zcdp_uses_the_l2_sensitivity_of_its_levels():
    plain, replaced = _aggregate(rho=0.5, seed=0), _aggregate(rho=0.5, replace=True, seed=0)
    # d = 2 levels of sensitivity C = 4: sigma^2 = C^2 d / (2 rho) = 32; replaced: 2 C^2 d / (2 rho)
    assert plain.noise_scale == pytest.approx(math.sqrt(32)) and replaced.noise_scale == pytest.approx(8.0)
    guarantee = plain.privacy()
    assert isinstance(guarantee, ZcdpGuarantee) and guarantee.rho == 0.5
    assert "L2 sensitivity per level C = 4" in str(guarantee)
    assert "sqrt(2) C = 5.65685" in str(replaced.privacy())
    mean = _aggregate(rho=0.5, statistic="mean", max_rows=4, seed=0)
    assert mean.privacy().rho == pytest.approx(0.5)  # the sum and the count at rho / 2 each
    with pytest.raises(ValueError, match="public partitions only"):
        _aggregate(rho=0.5, partition_selection="private", max_partitions=2, seed=0)


def test_the_aggregates_error_bar_is_the_linear_map_of_its_noise():
    agg = _aggregate(rho=0.5, seed=0)
    times = np.arange(0, 2 * 7200, 1800) * _NS  # four buckets a window, two windows

    def run(sampler):
        released = _aggregate(rho=0.5, noise=NoiseSource(noise=sampler))
        out = released.release(times, np.array(["a"] * times.size), np.zeros(times.size))
        return np.concatenate((out.values, released.flush().values))

    m = _linear_map(run, 2 * 5)  # two windows of four buckets and their window node
    per_bucket = np.sqrt((m**2).sum(axis=1) * agg._measures[0].arithmetic.node_variance)
    np.testing.assert_allclose(per_bucket, agg.standard_error())
    assert consistent_leaf_variance(4, 2) == pytest.approx(4 / 5)


def test_the_aggregate_under_zcdp_resumes_its_keyed_noise():
    times = np.arange(0, 3 * 7200, 600) * _NS
    units, values = np.array(["a", "b", "c"] * (times.size // 3)), np.full(times.size, 1.0)
    whole = _aggregate(rho=0.25, key=bytes(range(32)))
    want = np.concatenate((whole.release(times, units, values).values, whole.flush().values))
    first = _aggregate(rho=0.25, key=bytes(range(32)))
    got = [first.release(times[:17], units[:17], values[:17]).values]
    second = UnitAggregate.from_state(first.state)
    got += [second.release(times[17:], units[17:], values[17:]).values, second.flush().values]
    np.testing.assert_array_equal(np.concatenate(got), want)


def test_zero_noise_reaches_the_gaussian_paths():
    tree = BinaryTreeCounter(rho=0.5, upper_bound=1.0, max_range=8, noise=ZeroNoise())
    np.testing.assert_array_equal(tree.release(np.full(5, 0.5)), np.full(5, 0.5))
    assert ExactNoise(bits=0).gaussian_units(Fraction(4), 3).dtype == np.int64


def test_the_commands_take_gaussian_noise(tmp_path):
    from click.testing import CliRunner

    from dpstream.cli import cli

    rows = tmp_path / "rows.csv"
    times = np.arange(0, 2 * 86400, 1800)
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in times for m in range(3)))
    base = ["aggregate", str(rows), "--time-column", "time", "--unit-column", "meter", "--column", "kwh", "--bucket",
            "30m", "--unit-window", "1d", "--unit-bound", "30", "--epsilon", "1", "--seed", "1"]
    result = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "out.csv"), "--noise", "gaussian", "--delta", "1e-6",
                                      "--standard-error"])
    assert result.exit_code == 0, result.output
    assert "ρ = 0.024356 (ε = 1, δ = 1e-06); over 2 windows: ρ = 0.0487119 by composition" in result.output
    agg = UnitAggregate(rho=rho_for(1.0, 1e-6), bucket=1800, window=86400, unit_bound=30.0, seed=0)
    assert f"standard error of every released bucket's noise: {agg.standard_error():.6g}" in result.output
    refused = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "out2.csv"), "--delta", "1e-6"])
    assert refused.exit_code != 0 and "--delta applies with --noise gaussian only" in refused.output
    values = tmp_path / "values.txt"
    values.write_text("".join(f"{v % 7}\n" for v in range(40)))
    tree = CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "bt.txt"), "--method", "bt-zcdp",
                                    "--epsilon", "1", "--delta", "1e-6", "--upper-bound", "10", "--seed", "2"])
    assert tree.exit_code == 0 and "0.024356-zCDP, so (1, 1e-06)-DP" in tree.output, tree.output


def test_the_commands_state_the_guarantee_at_the_delta_asked_for(tmp_path):
    # --delta 1e-3 spent the rho of (1, 1e-3) but was stated at the default 1e-6: "(1.615, 1e-06)-DP"
    from click.testing import CliRunner

    from dpstream.cli import cli

    rows = tmp_path / "rows.csv"
    rows.write_text("time,meter,kwh\n" + "".join(f"{t},m{m},0.5\n" for t in range(0, 86400, 3600) for m in range(3)))
    for state in ([], ["--state", str(tmp_path / "state.json")]):
        result = CliRunner().invoke(cli, [
            "aggregate", str(rows), "-o", str(tmp_path / f"out{len(state)}.csv"), "--time-column", "time",
            "--unit-column", "meter", "--column", "kwh", "--bucket", "1h", "--unit-window", "1d", "--unit-bound", "24",
            "--epsilon", "1", "--seed", "1", "--noise", "gaussian", "--delta", "1e-3", *state])
        assert result.exit_code == 0, result.output
        assert f"{rho_for(1.0, 1e-3):g}-zCDP, so (1, 0.001)-DP" in result.output
        assert "(ε = 1, δ = 0.001); over 1 window:" in result.output
    values = tmp_path / "values.txt"
    values.write_text("".join(f"{v % 7}\n" for v in range(40)))
    tree = CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "bt.txt"), "--method", "bt-zcdp",
                                    "--epsilon", "1", "--delta", "1e-3", "--upper-bound", "10", "--seed", "2"])
    assert tree.exit_code == 0 and f"{rho_for(1.0, 1e-3):g}-zCDP, so (1, 0.001)-DP" in tree.output, tree.output


def test_missing_values_skipped_keep_the_zcdp_guarantee(tmp_path):
    # --missing skip restated the guarantee on the rows kept as a pure one, and refused zCDP releases
    from click.testing import CliRunner

    from dpstream.cli import cli

    values = tmp_path / "values.csv"
    values.write_text("value\n1\n\n2\n3\n")
    for method in ("bt-zcdp", "sqrt-zcdp", "banded-zcdp"):
        result = CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / f"{method}.txt"), "--method",
                                          method, "--epsilon", "1", "--delta", "1e-3", "--upper-bound", "5",
                                          "--max-range", "16", "--missing", "skip", "--seed", "1"])
        assert result.exit_code == 0, result.output
        assert f"{rho_for(1.0, 1e-3):g}-zCDP, so (1, 0.001)-DP" in result.output
        assert "on the stream of the rows kept" in result.output


def test_a_keyed_zcdp_release_says_the_rhos_add_up(tmp_path):
    from click.testing import CliRunner

    from dpstream.cli import cli

    rows = tmp_path / "keys.csv"
    rows.write_text("k,value\na,1\nb,2\na,3\n")
    common = ["--key-column", "k", "--column", "value", "--upper-bound", "5", "--seed", "1", "--epsilon", "1"]
    zcdp = CliRunner().invoke(cli, ["release", str(rows), "-o", str(tmp_path / "z.csv"), "--method", "bt-zcdp",
                                    "--delta", "1e-6", *common])
    pure = CliRunner().invoke(cli, ["release", str(rows), "-o", str(tmp_path / "p.csv"), "--method", "bt", *common])
    assert zcdp.exit_code == 0 and pure.exit_code == 0, zcdp.output + pure.output
    assert "(the rhos add up: k keys are (k rho)-zCDP" in zcdp.output and "epsilons add up" not in zcdp.output
    assert "(the epsilons add up)" in pure.output
