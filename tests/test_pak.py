"""PAK's Mechanism 1 and its command-line methods (its optimizer, heuristics and studies are
tested in test_evaluation_pak_analysis.py and test_evaluation_streams.py)."""

import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.noise import FloatNoise, KeyedBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import discrete_laplace
from dpstream.privacy import EVENT_LEVEL
from dpstream.release.pak import PAK, cap_threshold


@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.85, 0.99])
def test_privacy_is_epsilon_delta_for_every_budget_split(fraction):
    pak = PAK(epsilon=0.7, upper_bound=100, hold=100, max_range=1000, threshold_fraction=fraction)
    guarantee = pak.privacy()
    assert 0.7 * (1 - 1e-9) <= guarantee.epsilon <= 0.7 + 1e-15  # eps1 + eps2' (a float sum) or eps'
    assert guarantee.delta == 1 / 1100**2
    assert pak.threshold_epsilon + pak.sum_epsilon == pytest.approx(0.7)
    explicit = PAK(epsilon=0.7, upper_bound=100, hold=100, max_range=1000, threshold_fraction=fraction, delta=1e-9)
    assert explicit.privacy().delta == 1e-9
    assert guarantee.neighbours is EVENT_LEVEL


def test_cap_falls_back_to_b():
    assert cap_threshold(5.0, 10.0) == 5.0
    assert cap_threshold(10.0, 10.0) == 10.0
    assert cap_threshold(1e6, 10.0) == 10.0 and cap_threshold(1e6, 10.0, capped=False) == 1e6
    assert cap_threshold(0.0, 10.0, capped=False) == 10.0


def _stream(size, seed=0):
    return np.minimum(np.random.default_rng(seed).geometric(0.15, size), 500).astype(float)


def test_mechanism_1_truncates_at_tau_and_scales_the_tree_to_tau():
    stream = _stream(6000)
    pak = PAK(epsilon=2.0, upper_bound=500, hold=2000, max_range=4096, seed=3)
    out = pak.release(stream)
    tau, g = pak.threshold, pak.granularity
    assert g == 2.0**-12  # the largest power of two <= 500 / 2^20
    assert 0 < tau <= 500 and out.size == 4000 and tau % g == 0
    counter = pak._stream
    assert counter.upper_bound == tau and counter.granularity == g
    assert counter.noise_scale == pytest.approx(tau * 12 / 2.0, rel=1e-9)
    # outputs minus their noise are the truncated values: exactly, in grid units
    noise = (out - np.minimum(stream[2000:], tau)) / g
    np.testing.assert_array_equal(noise, counter.state["counter"]["increments"][:4000])


def test_held_sum_is_exact_on_the_grid_and_keyed_noise_is_recomputed():
    """The held-out sum is (the integer sum of the truncated values in grid units + one discrete
    Laplace draw of scale tau_units / eps2, rounded up) times g; with key= the draw is the first
    of the identity ("pak", "sum")."""
    stream = _stream(1500)
    key = bytes(range(32))
    pak = PAK(epsilon=3.0, upper_bound=500, hold=1000, max_range=1024, threshold_fraction=0.5, key=key)
    pak.release(stream)
    g, tau = pak.granularity, pak.threshold
    tau_units = round(tau / g)
    truncated_units = int(np.rint(np.minimum(stream[:1000], tau) / g).sum())
    exact = Fraction(tau_units) / Fraction(1.5)
    k = 30
    while math.ceil(exact * 2**k) > 2**40:
        k -= 1
    scale = Fraction(math.ceil(exact * 2**k), 2**k)
    draw = discrete_laplace(KeyedBits(key=key, identity=("pak", "sum")), scale.numerator, scale.denominator, 1)[0]
    assert pak.held_sum == (truncated_units + int(draw)) * g
    again = PAK(epsilon=3.0, upper_bound=500, hold=1000, max_range=1024, threshold_fraction=0.5, key=key)
    assert np.array_equal(again.release(stream), PAK(epsilon=3.0, upper_bound=500, hold=1000, max_range=1024,
                                                     threshold_fraction=0.5, key=key).release(stream))
    assert again.threshold == tau and again.held_sum == pak.held_sum


def test_gaussian_threshold_is_float_only():
    with pytest.raises(ValueError, match="threshold_noise='gaussian' is float-only"):
        PAK(epsilon=1.0, upper_bound=10, threshold_noise="gaussian")
    pak = PAK(epsilon=1.0, upper_bound=500, hold=1000, max_range=256, threshold_noise="gaussian", beta=0.3,
              noise=FloatNoise(rng=0))
    assert pak.release(_stream(1100)).size == 100 and pak.granularity is None


def test_float_path_is_the_float_algorithm_on_one_generator():
    """noise=FloatNoise(rng) (the studies): S-PAK's float draw, then the sum's float Laplace, then
    the tree's, all from one generator; no grid."""
    stream = _stream(1500)
    pak = PAK(epsilon=3.0, upper_bound=500, hold=1000, max_range=1024, noise=FloatNoise(rng=4))
    pak.release(stream)
    rng = np.random.default_rng(4)
    from dpstream.thresholds.smooth_sensitivity import pak_threshold

    raw = pak_threshold(stream[:1000], epsilon=0.85 * 3.0, delta=1 / 2024**2, upper_bound=500,
                        sampler=FloatNoise(rng=rng))
    assert pak.raw_threshold == raw
    tau = cap_threshold(raw, 500)
    assert pak.held_sum == float(np.minimum(stream[:1000], tau).sum()) + rng.laplace(0.0, tau / (3.0 - 0.85 * 3.0))


def test_uncapped_keeps_a_threshold_above_b_and_capped_falls_back():
    stream = _stream(3000)
    capped = PAK(epsilon=0.01, upper_bound=500, hold=1000, max_range=2048, seed=1)
    uncapped = PAK(epsilon=0.01, upper_bound=500, hold=1000, max_range=2048, capped=False, seed=1)
    capped.release(stream)
    uncapped.release(stream)
    assert capped.raw_threshold == uncapped.raw_threshold > 500
    assert capped.threshold == 500
    raw, g = uncapped.raw_threshold, uncapped.granularity
    assert g > capped.granularity  # tau ~ 1e6 at eps = 0.01: the tree's grid is coarsened
    assert raw <= uncapped.threshold < raw + g and uncapped.threshold % g == 0  # tau rounded up to it
    assert uncapped._stream.noise_scale_units.numerator <= 2**40


def test_held_sum_is_the_truncated_sum_plus_lap_tau_over_eps2():
    # |discrete Laplace of scale tau/eps2| < tau/eps2 * ln(1/beta) with probability >= 1 - beta;
    # beta = 1e-6 over 20 runs.
    stream = _stream(1500)
    for seed in range(20):
        pak = PAK(epsilon=3.0, upper_bound=500, hold=1000, max_range=1024, threshold_fraction=0.5, seed=seed)
        pak.release(stream)
        truncated = np.minimum(stream[:1000], pak.threshold).sum()
        assert abs(pak.held_sum - truncated) < pak.threshold / pak.sum_epsilon * math.log(1e6)


def test_batch_equals_one_at_a_time():
    stream = _stream(1300)
    batch, single = (PAK(epsilon=1.0, upper_bound=500, hold=1000, max_range=256, seed=7) for _ in range(2))
    out = batch.release(stream)
    streamed = [single.release_one(float(v)) for v in stream]
    assert streamed[:1000] == [None] * 1000
    np.testing.assert_array_equal(out, np.array(streamed[1000:]))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="threshold_fraction"):
        PAK(epsilon=1.0, upper_bound=10, threshold_fraction=1.0)
    with pytest.raises(ValueError, match="threshold_noise"):
        PAK(epsilon=1.0, upper_bound=10, threshold_noise="cauchy")
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        PAK(epsilon=1.0, upper_bound=10, noise="laplace")
    with pytest.raises(ValueError, match="give at most one of seed, noise and key"):
        PAK(epsilon=1.0, upper_bound=10, seed=1, noise=ZeroNoise())
    with pytest.raises(TypeError, match="capped"):
        PAK(epsilon=1.0, upper_bound=10, capped="yes")
    with pytest.raises(ValueError, match="position 1"):
        PAK(epsilon=1.0, upper_bound=10, hold=5).release([1.0, 11.0])


@pytest.mark.parametrize("method", ["pak", "pak-uncapped", "bt"])
def test_release_methods_on_the_command_line(tmp_path, method):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(str(v) for v in _stream(1500)) + "\n")
    target = tmp_path / "out.txt"
    hold = [] if method == "bt" else ["--hold", "1000"]
    result = CliRunner().invoke(cli, ["release", str(source), "-o", str(target), "--method", method, "--epsilon",
                                      "1", "--upper-bound", "500", *hold, "--max-range", "512", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "privacy:" in result.stderr
    lines = target.read_text().split()
    assert len(lines) == (1500 if method == "bt" else 500)


def test_threshold_parameters_are_checked_before_the_hold_out():
    with pytest.raises(ValueError, match="beta"):
        PAK(epsilon=1.0, upper_bound=10, beta=0.7)
    with pytest.raises(ValueError, match="multiplier"):
        PAK(epsilon=1.0, upper_bound=10, multiplier=0.9)
    with pytest.raises(ValueError, match="percentile"):
        PAK(epsilon=1.0, upper_bound=10, percentile=120)
    with pytest.raises(ValueError, match="kappa"):
        PAK(epsilon=1e-4, upper_bound=10, hold=10, max_range=10, beta=1e-3, threshold_noise="gaussian", delta=0.5,
            noise=FloatNoise(rng=0))
    with pytest.raises(ValueError, match="float-only"):  # on the exact path the Gaussian is refused first
        PAK(epsilon=1e-4, upper_bound=10, hold=10, max_range=10, beta=1e-3, threshold_noise="gaussian", delta=0.5)


def test_release_refuses_options_of_another_method(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("1\n2\n")
    for method, option in (("bt", ["--hold", "10"]), ("pak", ["--smoother", "mean"]), ("tops", ["--delta", "0.1"])):
        result = CliRunner().invoke(cli, ["release", str(source), "-o", str(tmp_path / "out.txt"), "--method",
                                          method, "--epsilon", "1", "--upper-bound", "5", *option])
        assert result.exit_code != 0
        assert f"{option[0]} does not apply to --method {method}" in result.output
        assert not (tmp_path / "out.txt").exists()
