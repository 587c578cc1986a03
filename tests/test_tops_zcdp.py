"""ToPS under zCDP: the hierarchy's L2 sensitivity by brute force, the rho stated against the noise drawn, the
threshold's pure epsilon composed as epsilon^2 / 2, the registry entry tops-zcdp and its durable --state."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.accounting import ZcdpGuarantee, rho_for, rho_of_pure
from dpstream.cli import cli
from dpstream.cli._durable import seed_key
from dpstream.hierarchy.tree import aggregate_levels, level_sizes
from dpstream.noise.grid import float_up
from dpstream.noise.sampler import ExactNoise, FloatNoise, ZeroNoise
from dpstream.noise.source import NoiseSource
from dpstream.release import HierarchicalPerturber, ToPS
from dpstream.release.periodic import PeriodicPerturber
from dpstream.release.registry import REGISTRY
from dpstream.release.tops_privacy import zcdp_threshold_epsilon
from dpstream.release.tops_zcdp import ZcdpToPS
from dpstream.thresholds.error_model import DataSummary, ErrorModel, QueryLengths

#: Small hierarchies, two chunks each: (constructor, keywords).  Fan-outs 2, 3 and 4, smoothed levels, a chunk that
#: is not a whole number of trees (padded leaves), periods with a phase, one and several measured levels.
SHAPES = [
    (HierarchicalPerturber, dict(max_range=16, fanout=2, smoothed_levels=0)),
    (HierarchicalPerturber, dict(max_range=16, fanout=2, smoothed_levels=2)),
    (HierarchicalPerturber, dict(max_range=10, fanout=2, smoothed_levels=1)),
    (HierarchicalPerturber, dict(max_range=27, fanout=3, smoothed_levels=1)),
    (HierarchicalPerturber, dict(max_range=16, fanout=4, smoothed_levels=1)),
    (PeriodicPerturber, dict(period=3, phase=1, max_range=12, fanout=2, levels=2)),
    (PeriodicPerturber, dict(period=2, phase=1, max_range=16, fanout=3, levels=3)),
]
THETA = 3  # grid units (granularity 1): every value is 0, 1, 2 or 3


def _make(cls, params, **noise):
    return cls(threshold=THETA, rho=0.5, granularity=1.0, **params, **(noise or {"seed": 0}))


def _measured(cls, params, units: np.ndarray) -> np.ndarray:
    """Every node sum the hierarchy measures on a stream of grid units: the leaf sums the mechanism itself releases
    without noise (each leaf's released values sum to its estimate, here its true sum), grouped by its public layout
    (:meth:`leaves`), then summed up its measured levels per chunk (:func:`aggregate_levels`, padded trees)."""
    perturber = _make(cls, params, noise=ZeroNoise())
    released = perturber.release(units.astype(np.float64))
    sums = np.add.reduceat(released, perturber.leaves().starts(units.size))
    # the layout is the mechanism's: a leaf's released values sum to its true sum, an integer (a group that cut a
    # leaf would hold the smoother's predictions, fractions of earlier leaves)
    np.testing.assert_allclose(sums, np.rint(sums), atol=1e-6)
    leaves = np.rint(sums).astype(np.int64)
    chunks = leaves.reshape(-1, perturber.blocks_per_chunk)  # whole chunks are released
    return np.concatenate([level for chunk in chunks
                           for level in aggregate_levels(chunk, perturber.fanout, perturber.measured_levels)])


@pytest.mark.parametrize(("cls", "params"), SHAPES)
def test_the_l2_sensitivity_is_theta_sqrt_levels_by_brute_force_over_every_allowed_change(cls, params):
    """Change every position to every other allowed value: the L2 change of all measured nodes is at most
    theta sqrt(d), and reaches it (a value moved from 0 to theta)."""
    perturber = _make(cls, params)
    n = 2 * perturber.max_range - perturber.phase  # two chunks of released positions
    base = np.random.default_rng(1).integers(0, THETA + 1, size=n)
    measured = _measured(cls, params, base)
    assert measured.size == 2 * sum(level_sizes(perturber.blocks_per_chunk, perturber.fanout,
                                                 perturber.measured_levels))
    bound = THETA * math.sqrt(perturber.measured_levels)
    worst = 0.0
    for position, value in itertools.product(range(n), range(THETA + 1)):
        moved = base.copy()
        moved[position] = value
        change = np.linalg.norm(_measured(cls, params, moved) - measured)
        assert change <= bound * (1 + 1e-12), (position, value)
        if base[position] in (0, THETA) and abs(value - base[position]) == THETA:
            assert math.isclose(change, bound), (position, value)
        worst = max(worst, change)
    assert math.isclose(worst, bound)


#: Chunks released to compare the noise drawn with its law.
CHUNKS = 200


class _Recording(ExactNoise):
    """The exact sampler, recording the laws and sizes it is asked for."""

    def __init__(self, seed: int) -> None:
        super().__init__(bits=seed)
        self.calls, self.draws = [], []

    def gaussian_units(self, sigma2, size):
        out = super().gaussian_units(sigma2, size)
        self.calls.append((Fraction(sigma2), int(np.prod(size))))
        self.draws.append(out)
        return out


@pytest.mark.parametrize(("cls", "params"), SHAPES)
def test_the_stated_rho_is_the_l2_sensitivity_squared_over_twice_the_variance_of_the_noise_drawn(cls, params):
    recording = _Recording(seed=3)
    perturber = _make(cls, params, noise=NoiseSource(noise=recording))
    perturber.release(np.full(CHUNKS * perturber.max_range - perturber.phase, float(THETA)))
    sizes = level_sizes(perturber.blocks_per_chunk, perturber.fanout, perturber.measured_levels)
    assert [size for _, size in recording.calls] == [sum(sizes)] * CHUNKS  # every node of every chunk, one law
    (sigma2,) = {sigma2 for sigma2, _ in recording.calls}
    rho = float_up(Fraction(THETA**2 * perturber.measured_levels) / (2 * sigma2))  # Delta_2^2 / (2 sigma^2)
    guarantee = perturber.privacy()
    assert isinstance(guarantee, ZcdpGuarantee) and guarantee.rho == rho == perturber.spent_rho <= 0.5
    assert sigma2 >= Fraction(THETA**2 * perturber.measured_levels, 1)  # rho 0.5: sigma^2 = Delta_2^2, rounded up
    draws = np.concatenate(recording.draws).astype(np.float64)
    # the draws' variance is sigma^2 (sigma >= 3 units: the discrete Gaussian's is sigma^2 to 1e-70), within 6
    # standard errors of a sample variance, sigma^2 sqrt(2 / n)
    assert abs(draws.var() - float(sigma2)) <= 6 * float(sigma2) * math.sqrt(2 / draws.size)


def _tops(**extra) -> ToPS:
    return ToPS(upper_bound=100, hold=1000, max_range=4096, seed=1, **extra)


def _stream() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 20, size=5000).astype(float)


def test_the_threshold_choice_is_composed_as_epsilon_squared_over_two_with_the_hierarchys_rho():
    tops = _tops(rho=0.02)
    assert tops.privacy().rho == 0.02  # before the hold-out ends: both parts at most rho
    tops.release(_stream())
    guarantee = tops.privacy(1e-6)
    selection = rho_of_pure(tops.model_choice.epsilon_spent)
    assert tops.threshold_epsilon == zcdp_threshold_epsilon(0.02) and selection <= 0.02
    assert guarantee.rho == max(selection, tops._stream.spent_rho) <= 0.02
    assert "model threshold" in guarantee.composition and "(eps^2 / 2)" in guarantee.composition
    # a threshold budget above the hierarchy's rho sets the release's rho: the selection is counted, not dropped
    costly = _tops(rho=0.02, threshold_epsilon=1.0)
    costly.release(_stream())
    assert costly.privacy().rho == rho_of_pure(costly.model_choice.epsilon_spent) > 0.4
    public = ToPS(rho=0.02, upper_bound=100, threshold=30, max_range=4096, seed=1)
    public.release(_stream())
    assert public.privacy().rho == public._stream.spent_rho  # nothing spent on a public theta


def test_zcdp_tops_refuses_what_it_cannot_state():
    with pytest.raises(ValueError, match="not both"):
        _tops(epsilon=1.0, rho=0.5)
    with pytest.raises(ValueError, match="nm-e"):
        _tops(rho=0.5, threshold_method="nm-e")
    with pytest.raises(ValueError, match="w_event applies to the pure-DP ToPS"):
        ToPS(rho=0.5, upper_bound=100, threshold=30, max_range=4096, w_event=4, seed=1)
    with pytest.raises(ValueError, match="exact discrete Gaussian noise only"):
        ToPS(rho=0.5, upper_bound=100, hold=1000, max_range=4096, noise=FloatNoise(rng=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="needs delta"):
        ZcdpToPS(epsilon=1.0, delta=None, upper_bound=100, hold=1000, max_range=4096, seed=1)


def test_the_error_model_scores_gaussian_noise_and_the_leaves_of_a_window_and_periods_run_under_zcdp():
    windows = _tops(rho=0.05, query_length=96)
    windows.release(_stream())
    periods = _tops(rho=0.05, period=48)
    periods.release(_stream())
    for tops in (windows, periods):
        assert isinstance(tops._stream, PeriodicPerturber) and tops._stream.rho == 0.05
        assert tops.privacy().rho <= 0.05


def test_the_registry_entry_spends_the_rho_of_its_target_and_restores_as_tops():
    entry = REGISTRY["tops-zcdp"]
    options = {"epsilon": 1.0, "delta": 1e-6, "upper_bound": 100, "max_range": 4096, "clip": False, "hold": 1000,
               "fanout": 16, "smoother": None, "window": None, "alpha": None, "threshold_epsilon": None,
               "threshold_step": None, "granularity": None, "threshold_method": "model", "query_length": None,
               "smoothed_levels": None, "period": None}
    tops = entry.build(options, seed=1)
    assert isinstance(tops, ZcdpToPS) and tops.rho == rho_for(1.0, 1e-6)
    first = tops.release(_stream()[:3000])
    assert tops.privacy(1e-6).epsilon <= 1.0
    again = ZcdpToPS.from_state(tops.state)
    assert type(again) is ToPS and again.rho == tops.rho
    whole = entry.build(options, seed=1).release(_stream())
    np.testing.assert_array_equal(np.concatenate((first, again.release(_stream()[3000:]))), whole)
    assert ZcdpToPS(**tops.get_params(), seed=1).get_params() == tops.get_params()


def test_a_keyed_state_release_continues_without_drawing_any_position_twice(tmp_path):
    """release --method tops-zcdp --state: the output is the library's keyed release, and a grown input continues it
    byte for byte (each chunk's noise is a function of the key and the chunk)."""
    values = np.random.default_rng(2).gamma(2.0, 4.0, size=6000).clip(0, 50).round(2)
    options = ["--method", "tops-zcdp", "--epsilon", "1", "--delta", "1e-6", "--upper-bound", "50", "--hold", "500",
               "--max-range", "1024", "--seed", "9"]

    def release(stop: int, name: str):
        (tmp_path / f"{name}.txt").write_text("".join(f"{v:g}\n" for v in values[:stop]))
        return CliRunner().invoke(cli, ["release", str(tmp_path / f"{name}.txt"), "-o", str(tmp_path / f"{name}.out"),
                                        "--state", str(tmp_path / f"{name}.state"), *options])

    assert release(6000, "whole").exit_code == 0
    want = ZcdpToPS(epsilon=1, delta=1e-6, upper_bound=50, hold=500, max_range=1024, key=seed_key(9)).release(values)
    assert (tmp_path / "whole.out").read_text() == "".join(f"{v!r}\n" for v in want.tolist())
    for stop in (300, 1700, 2048, 6000):
        result = release(stop, "grown")
        assert result.exit_code == 0, result.output
        assert "0.024356-zCDP, so (1, 1e-06)-DP" in result.output or stop == 300
    assert (tmp_path / "grown.out").read_bytes() == (tmp_path / "whole.out").read_bytes()


def test_the_error_model_prices_gaussian_noise_in_variance_d_where_laplace_pays_d_squared():
    queries = QueryLengths.random(4096)
    laplace = ErrorModel(epsilon=1.0, max_range=4096, fanout=16, queries=queries)
    gaussian = ErrorModel(epsilon=None, rho=0.5, max_range=4096, fanout=16, queries=queries)
    summary = DataSummary.from_values(np.arange(100.0) % 10, np.array([5.0, 9.0]))
    for s in range(laplace.levels):
        d = laplace.levels - s
        pure, zcdp = laplace.components(summary, s), gaussian.components(summary, s)
        # 2 (theta d / 1)^2 against theta^2 d / (2 * 0.5): a ratio of 2 d; the other parts do not depend on the noise
        np.testing.assert_allclose(pure["noise"] / zcdp["noise"], 2 * d)
        for part in ("smoothing", "truncation", "prior"):
            np.testing.assert_array_equal(pure[part], zcdp[part])
    with pytest.raises(ValueError, match="one of them"):
        ErrorModel(epsilon=1.0, rho=0.5, max_range=4096, fanout=16, queries=queries)
