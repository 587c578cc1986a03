"""PAK's Mechanism 1 and its command-line methods (its optimizer, heuristics and studies are
tested in test_evaluation_pak_analysis.py and test_evaluation_streams.py)."""

import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.privacy import EVENT_LEVEL
from dpstream.release.pak import PAK, cap_threshold


@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.85, 0.99])
def test_privacy_is_epsilon_delta_for_every_budget_split(fraction):
    pak = PAK(epsilon=0.7, upper_bound=100, hold=100, max_range=1000, threshold_fraction=fraction)
    guarantee = pak.privacy()
    assert guarantee.epsilon == pytest.approx(0.7)
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
    tau = pak.threshold
    assert 0 < tau <= 500 and out.size == 4000
    counter = pak._stream
    assert counter.upper_bound == tau and counter.noise_scale == tau * 12 / 2.0
    # outputs minus their noise are the truncated values (zero-noise check through the tree's own noise)
    noise = np.diff(np.concatenate(([0.0], np.cumsum(out)))) - np.minimum(stream[2000:], tau)
    np.testing.assert_allclose(noise, counter.state.increments[:4000], atol=1e-6)


def test_uncapped_keeps_a_threshold_above_b_and_capped_falls_back():
    stream = _stream(3000)
    capped = PAK(epsilon=0.01, upper_bound=500, hold=1000, max_range=2048, seed=1)
    uncapped = PAK(epsilon=0.01, upper_bound=500, hold=1000, max_range=2048, capped=False, seed=1)
    capped.release(stream)
    uncapped.release(stream)
    assert capped.raw_threshold == uncapped.raw_threshold > 500
    assert capped.threshold == 500 and uncapped.threshold == uncapped.raw_threshold


def test_held_sum_is_the_truncated_sum_plus_lap_tau_over_eps2():
    # |Lap(tau/eps2)| < tau/eps2 * ln(1/beta) with probability 1 - beta; beta = 1e-6 over 20 runs.
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
    with pytest.raises(ValueError, match="noise"):
        PAK(epsilon=1.0, upper_bound=10, noise="cauchy")
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
        PAK(epsilon=1e-4, upper_bound=10, hold=10, max_range=10, beta=1e-3, noise="gaussian", delta=0.5)


def test_release_refuses_options_of_another_method(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("1\n2\n")
    for method, option in (("bt", ["--hold", "10"]), ("pak", ["--smoother", "mean"]), ("tops", ["--delta", "0.1"])):
        result = CliRunner().invoke(cli, ["release", str(source), "-o", str(tmp_path / "out.txt"), "--method",
                                          method, "--epsilon", "1", "--upper-bound", "5", *option])
        assert result.exit_code != 0
        assert f"{option[0]} does not apply to --method {method}" in result.output
        assert not (tmp_path / "out.txt").exists()
