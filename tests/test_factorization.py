"""The square-root factorization under zCDP: its integer construction, its noise, its error bars, its CLI.

The privacy proof rests on the released units being the integer decoding of ``y = C x + z``, a function
of ``y`` alone (checked here against a decoder that sees only ``y``), with ``C`` integer and the
sensitivity its first column's norm; the error bars against explicit matrices; the law of the
released noise against the error bars by sampling; durability by killing ``release --state``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.noise.source import NoiseSource
from dpstream.release.factorization import (
    MAX_CHUNK,
    SqrtFactorization,
    integer_coefficients,
    shaped_noise,
    sqrt_coefficients,
)
from dpstream.release.registry import REGISTRY
from durable_faults import killed_until_finished

KEY = bytes(range(32))


def toeplitz(column: np.ndarray) -> np.ndarray:
    """The lower-triangular Toeplitz matrix whose first column is ``column``."""
    n = column.size
    return np.array([[column[r - k] if r >= k else 0 for k in range(n)] for r in range(n)], dtype=column.dtype)


def decode(y: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """The integer decoding of ``y`` alone, in Python integers: ``w_t = round((y_t - sum C_{t-k} w_k) / C_0)``
    (exact rationals)."""
    w: list[int] = []
    for t, value in enumerate(y.tolist()):
        rest = value - sum(int(coefficients[t - k]) * w[k] for k in range(t))
        w.append(round(Fraction(rest, int(coefficients[0]))))
    return np.array(w, dtype=np.int64)


def test_the_factor_squares_to_the_prefix_sums_and_the_integer_one_is_its_rounding():
    c = sqrt_coefficients(64)
    lower = toeplitz(c)
    np.testing.assert_allclose(lower @ lower, np.tril(np.ones((64, 64))), atol=1e-12)
    for bits in (8, 14, 20):
        integer = integer_coefficients(64, bits)
        assert integer[0] == 2**bits + 1 and integer.dtype == np.int64
        assert np.max(np.abs(integer - c * (2**bits + 1))) <= 0.5


def test_the_integer_coefficients_are_the_exact_roundings_on_every_machine():
    """``C_k`` comes from float operations (a product of correctly rounded ratios); every machine and every resumed
    run must build the same encoder, so it must be the exact ``round(s binom(2k, k) / 4^k)``, checked here in
    integers for the longest chunk or band and every coefficient width the factorizations use.

    ``P_k = floor(2^G c_k)`` by the exact recurrence loses less than one unit per step, so ``s c_k`` lies in
    ``[s P_k, s (P_k + k)] / 2^G``; where both ends round alike that is ``round(s c_k)``.  ``k = 1`` is the one
    tie (``s / 2``, ``s`` odd), rounded half to even as ``numpy.rint`` does.
    """
    guard, n = 256, MAX_CHUNK
    prefix = [1 << guard]
    for k in range(1, n):
        prefix.append(prefix[-1] * (2 * k - 1) // (2 * k))
    half = 1 << (guard - 1)
    for bits in range(8, 31):
        s = 2**bits + 1
        floor_, ceil_ = ((s * p + half) >> guard for p in prefix), ((s * (p + k) + half) >> guard
                                                                    for k, p in enumerate(prefix))
        exact = [low if low == high else None for low, high in zip(floor_, ceil_)]
        exact[1] = s // 2 if (s // 2) % 2 == 0 else s // 2 + 1
        assert None not in exact, f"undetermined at {bits} bits"
        assert integer_coefficients(n, bits).tolist() == exact, bits


@pytest.mark.parametrize("bits", [3, 8, 17])
def test_the_released_noise_is_the_decoding_of_y_alone(bits):
    rng = np.random.default_rng(bits)
    n = 40
    coefficients = integer_coefficients(n, bits)
    for _ in range(20):
        x = rng.integers(0, 2**10, n)
        z = rng.integers(-(2**30), 2**30, n)
        e = shaped_noise(z, coefficients)
        y = toeplitz(coefficients) @ x + z
        np.testing.assert_array_equal(decode(y, coefficients), x + e)
        np.testing.assert_array_equal(shaped_noise(-z, coefficients), -e)  # odd in z: unbiased
        # C e = z + s r with every |r| < 1/2: the rounding the error bars leave out
        assert np.max(np.abs(toeplitz(coefficients) @ e - z)) < (2**bits + 1) / 2
    with pytest.raises(ValueError, match="must be odd"):
        shaped_noise(np.array([1, 2]), np.array([8, 4]))


def test_the_mechanism_releases_x_plus_the_decoded_keyed_noise_of_each_chunk():
    m = SqrtFactorization(rho=0.5, upper_bound=10.0, max_range=16, key=KEY)
    values = np.random.default_rng(1).integers(0, 11, 40).astype(float)
    out = m.release(values)
    units = np.rint(out / m.granularity).astype(np.int64) - np.rint(values / m.granularity).astype(np.int64)
    sigma2 = m._arithmetic.noise.sigma2
    for chunk in range(3):
        z = NoiseSource(key=KEY, identity=("sqrt-factorization",)).sampler(chunk).gaussian_units(sigma2, 16)
        want = shaped_noise(np.asarray(z, dtype=np.int64), m.coefficients)
        np.testing.assert_array_equal(units[16 * chunk : 16 * chunk + 16], want[: len(units[16 * chunk :])][:16])


def test_the_noise_is_calibrated_to_the_integer_first_column():
    m = SqrtFactorization(rho=0.3, upper_bound=5.0, max_range=100, seed=0)
    grid = m._arithmetic.noise
    square = grid.units**2 * int(np.dot(m.coefficients, m.coefficients))
    assert grid.levels == int(np.dot(m.coefficients, m.coefficients))
    assert float(grid.sigma2) >= square / (2 * 0.3) and m.spent_rho <= 0.3
    assert m.spent_rho == pytest.approx(square / (2 * float(grid.sigma2)), rel=1e-12)
    columns = toeplitz(m.coefficients.astype(float))
    assert np.argmax(np.sum(columns**2, axis=0)) == 0  # the first column is the largest
    guarantee = m.privacy(1e-6)
    assert guarantee.rho == m.spent_rho and "first column" in str(guarantee)


def _brute_force(m: SqrtFactorization, ranges: list[tuple[int, int]], chunks: int) -> np.ndarray:
    """The variance of each range's linear noise from explicit matrices over ``chunks`` chunks."""
    n = m.max_range
    decoder = np.linalg.inv(toeplitz(m.coefficients.astype(float)))  # C^-1
    block = np.kron(np.eye(chunks), decoder)  # the released noise is block @ z (grid units)
    prefix = np.vstack((np.zeros(n * chunks), np.tril(np.ones((n * chunks, n * chunks))) @ block))
    unit = m._arithmetic.noise.variance_units * m.granularity**2
    return np.array([unit * np.sum((prefix[j] - prefix[i]) ** 2) for i, j in ranges])


def test_standard_errors_equal_brute_force_linear_algebra():
    m = SqrtFactorization(epsilon=1.0, delta=1e-6, upper_bound=3.0, max_range=12, seed=0)
    ranges = [(0, 1), (0, 5), (0, 12), (0, 13), (3, 9), (5, 6), (11, 12), (7, 30), (12, 24), (0, 36), (2, 2),
              (13, 35)]
    want = _brute_force(m, ranges, chunks=3)
    starts, stops = np.array(ranges).T
    np.testing.assert_allclose(m.range_standard_errors(starts, stops) ** 2, want, rtol=1e-9)
    np.testing.assert_allclose(m.count_standard_errors(np.array([5, 13, 36])) ** 2, want[[1, 3, 9]], rtol=1e-9)
    np.testing.assert_allclose(m.standard_errors([5, 11]) ** 2, want[[5, 6]], rtol=1e-9)
    assert m.range_standard_error(0, 12) ** 2 == pytest.approx(want[2], rel=1e-9)
    with pytest.raises(ValueError, match="need 0 <= start <= stop"):
        m.range_standard_errors([3], [2])


def test_the_variance_is_the_ideal_factorizations_and_the_rounding_a_few_grid_steps():
    m = SqrtFactorization(rho=0.5, upper_bound=1.0, max_range=4096, seed=0)
    c = sqrt_coefficients(4096)
    ideal = (m.noise_scale**2 / 1.0) * np.cumsum(c**2)  # continuous noise of the same sigma, exact L
    got = m.count_standard_errors(np.arange(1, 4097)) ** 2
    np.testing.assert_allclose(got, ideal, rtol=1e-3)
    bound = m.rounding_bounds([4096])[0]
    assert bound < 0.5 * np.sum(c) * m.granularity * 1.01 and bound < 1e-4 * got[-1] ** 0.5


def test_the_released_noise_has_the_law_of_the_error_bars():
    """4,000 chunks of 8 zeros (seeded): the prefix sums' mean and variance against the standard errors.  The sample
    variance of N Gaussian draws has relative standard deviation sqrt(2 / (N - 1)) = 2.2%: 5 of them allowed."""
    m = SqrtFactorization(rho=2.0, upper_bound=1.0, max_range=8, seed=3)
    runs = 4000
    prefix = np.cumsum(m.release(np.zeros(8 * runs)).reshape(runs, 8), axis=1)
    se = m.count_standard_errors(np.arange(1, 9))
    assert np.all(np.abs(prefix.mean(axis=0)) <= 5 * se / math.sqrt(runs))
    np.testing.assert_allclose(prefix.var(axis=0, ddof=1), se**2, rtol=5 * math.sqrt(2 / (runs - 1)))


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(epsilon=1.0), "needs delta"),
    (dict(rho=0.5, delta=1e-6), "not with rho"),
    (dict(rho=0.5, max_range=MAX_CHUNK + 1), "must be at most 65536"),
    (dict(rho=-1.0), "rho"),
    (dict(rho=0.5, epsilon=1.0), "not both"),
    (dict(epsilon=-1.0, delta=1e-6), "epsilon"),
    (dict(epsilon=1.0, delta=2.0), "delta"),
    (dict(), "a budget is needed"),
    (dict(rho=0.5, granularity=2.0**-40), "sampler's limit"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        SqrtFactorization(upper_bound=1.0, **kwargs)
    assert "\n" not in str(error.value)


def test_release_sqrt_zcdp_on_the_command_line_and_resumed_after_kills(tmp_path, monkeypatch):
    values = tmp_path / "values.txt"
    values.write_text("".join(f"{v % 7}\n" for v in range(3000)))
    base = ["release", str(values), "--method", "sqrt-zcdp", "--epsilon", "1", "--delta", "1e-6", "--upper-bound",
            "10", "--max-range", "512"]
    plain = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "plain.txt"), "--seed", "2"])
    assert plain.exit_code == 0 and "0.024356-zCDP, so (1, 1e-06)-DP" in plain.output, plain.output
    assert "square-root factorization with bound B = 10, chunks of 512 values" in plain.output
    assert len((tmp_path / "plain.txt").read_text().split()) == 3000
    too_long = CliRunner().invoke(cli, [*base[:-2], "-o", str(tmp_path / "x.txt")])
    assert too_long.exit_code != 0 and "must be at most 65536" in too_long.output
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 200)  # many commits to kill
    state = [*base, "--checkpoint-seconds", "0", "--seed", "4"]
    whole = CliRunner().invoke(cli, [*state, "-o", str(tmp_path / "whole.txt"), "--state", str(tmp_path / "w.state")])
    assert whole.exit_code == 0, whole.output
    result, kills = killed_until_finished(monkeypatch, lambda: CliRunner().invoke(
        cli, [*state, "-o", str(tmp_path / "out.txt"), "--state", str(tmp_path / "o.state")],
        catch_exceptions=False), seed=7, tries=60)
    assert result.exit_code == 0 and kills >= 3, result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()  # the same keyed noise
    assert len((tmp_path / "out.txt").read_text().split()) == 3000
    assert REGISTRY["sqrt-zcdp"].durable


def test_error_model_names_the_public_parameters_that_rebuild_the_factor():
    """A factorization's error model is its own (the square-root factor's parameters), not the binary tree's it
    inherits its streaming from: the standard errors of a factorization rebuilt from it are the mechanism's."""
    m = SqrtFactorization(epsilon=1.0, delta=1e-6, upper_bound=2.0, max_range=64, seed=0)
    model = m.error_model()
    assert set(model) == {"square_root"}
    rebuilt = SqrtFactorization(**model["square_root"], seed=1)
    positions = np.arange(0, 200, 7)
    np.testing.assert_array_equal(rebuilt.standard_errors(positions), m.standard_errors(positions))
