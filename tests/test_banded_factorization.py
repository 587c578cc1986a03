"""The banded square-root factorization under zCDP: its integer construction over an unbounded stream, its
stability rule, its error bars, its durability, its CLI.

The privacy proof rests on the released units being the integer decoding of ``y = C x + z`` over the whole stream
(a function of ``y`` alone, checked against a decoder that sees only ``y``), with ``C`` the banded integer encoder
and the sensitivity its band's norm at every position (brute force); the error bars against explicit matrices;
durability by snapshots inside blocks and by killing ``release --state``.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.durable.encoding import decode, encode
from dpstream.durable.snapshots import keyless, with_key
from dpstream.noise.source import NoiseSource
from dpstream.release.banded import BLOCK, MAX_BAND, BandedFactorization, inverse_series, strict_bits
from dpstream.release.by_key import key_secret
from dpstream.release.factorization import integer_coefficients, shaped_noise, sqrt_coefficients
from dpstream.release.registry import REGISTRY
from dpstream.spark.streaming_rows import restore_stream, save_stream
from durable_faults import killed_until_finished

KEY = bytes(range(32))


def banded(coefficients: np.ndarray, size: int) -> np.ndarray:
    """The ``size x size`` lower-triangular banded Toeplitz matrix of ``coefficients``."""
    out = np.zeros((size, size), dtype=coefficients.dtype)
    for k, c in enumerate(coefficients[:size]):
        out += np.diag(np.full(size - k, c, dtype=coefficients.dtype), -k)
    return out


def decode_y(y: list[int], coefficients: np.ndarray) -> np.ndarray:
    """The integer decoding of ``y`` alone in Python integers: ``w_t = round((y_t - sum_{1<=k<b} C_k w_{t-k}) /
    C_0)`` (exact rationals)."""
    c, w = [int(v) for v in coefficients], []
    for t, value in enumerate(y):
        rest = value - sum(c[k] * w[t - k] for k in range(1, min(len(c), t + 1)))
        w.append(round(Fraction(rest, c[0])))
    return np.array(w, dtype=np.int64)


def keyed_z(m: BandedFactorization, blocks: int) -> np.ndarray:
    """The keyed ``z`` of the first ``blocks`` blocks, drawn as the mechanism draws them (block ``i`` its own bits)."""
    source = NoiseSource(key=KEY, identity=("banded-factorization",))
    sigma2 = m._arithmetic.noise.sigma2
    return np.concatenate([np.asarray(source.sampler(i).gaussian_units(sigma2, BLOCK), dtype=np.int64)
                           for i in range(blocks)])


def through_json(state):
    return decode(json.loads(json.dumps(encode(state, "state"), allow_nan=False)), "state")


def test_the_release_is_the_decoding_of_y_alone_across_blocks():
    m = BandedFactorization(rho=0.5, upper_bound=10.0, max_range=5, key=KEY)
    n = BLOCK + 300
    values = np.random.default_rng(1).integers(0, 11, n).astype(float)
    units = np.rint(m.release(values) / m.granularity).astype(np.int64)
    x = np.rint(values / m.granularity).astype(np.int64)
    z = keyed_z(m, 2)[:n]
    y = np.convolve(x, m.coefficients)[:n] + z  # C x + z, the band over the whole stream
    np.testing.assert_array_equal(decode_y(y.tolist(), m.coefficients), units)
    e = units - x  # a function of z alone: the one-shot decoding, and block by block with the history
    np.testing.assert_array_equal(e, shaped_noise(z, m.coefficients))
    np.testing.assert_array_equal(shaped_noise(-z, m.coefficients), -e)  # odd in z: unbiased
    first = shaped_noise(z[:BLOCK], m.coefficients)
    np.testing.assert_array_equal(shaped_noise(z[BLOCK:], m.coefficients, history=first[-4:]), e[BLOCK:])


def test_every_position_s_column_is_at_most_the_band_and_the_noise_is_calibrated_to_it():
    for band in (3, 7):
        m = BandedFactorization(rho=0.3, upper_bound=5.0, max_range=band, seed=0)
        encoder = banded(m.coefficients, 30).astype(float)
        norms = np.sum(encoder**2, axis=0)  # a value at position p moves column p
        stated = int(np.dot(m.coefficients, m.coefficients))
        assert np.max(norms) == stated and np.all(norms[: 30 - band + 1] == stated)
        grid = m._arithmetic.noise
        assert grid.levels == stated and float(grid.sigma2) >= grid.units**2 * stated / (2 * 0.3)
        assert m.spent_rho <= 0.3 and m.spent_rho == pytest.approx(grid.units**2 * stated / (2 * float(grid.sigma2)))
        guarantee = m.privacy(1e-6)
        assert guarantee.rho == m.spent_rho and "at every position" in str(guarantee)
        assert "parallel" not in str(guarantee)  # one measurement of the whole stream, no chunks


def test_the_stability_rule_strictly_decreasing_coefficients_and_a_decaying_inverse():
    for band, least in ((64, 11), (1024, 17), (4096, 20), (5000, 21)):
        assert strict_bits(band) == least
        assert np.all(np.diff(integer_coefficients(band, least)) < 0)
        assert not np.all(np.diff(integer_coefficients(band, least - 1)) < 0)  # the rule bites: ties below it
    m = BandedFactorization(epsilon=1.0, delta=1e-6, upper_bound=1.0, max_range=4096, seed=0)
    assert m.bits >= 20 and np.all(np.diff(m.coefficients) < 0)
    beta = m.prefix_weights()  # converges to 1 / C(1) (Enestrom-Kakeya: every root outside the unit disk)
    assert abs(beta[-1] * np.sum(m.coefficients) - 1.0) < 1e-9
    ratio = np.min(m.coefficients[:-1] / m.coefficients[1:])
    assert ratio > 1.0


def test_the_inverse_series_is_the_recursion():
    c = integer_coefficients(40, 12).astype(float)
    d = np.zeros(500)
    d[0] = 1.0 / c[0]
    for t in range(1, 500):
        k = min(t, 39)
        d[t] = -np.dot(c[k:0:-1], d[t - k : t]) / c[0]
    np.testing.assert_allclose(inverse_series(c, 500), d, rtol=0, atol=1e-15 / c[0])


def test_standard_errors_equal_brute_force_linear_algebra():
    m = BandedFactorization(epsilon=1.0, delta=1e-6, upper_bound=3.0, max_range=4, seed=0)
    n = m.prefix_weights().size  # 256: ranges below, across and beyond the truncation
    size = 3 * n
    prefix = np.vstack((np.zeros(size), np.cumsum(np.linalg.inv(banded(m.coefficients.astype(float), size)), axis=0)))
    unit = m._arithmetic.noise.variance_units * m.granularity**2
    ranges = [(0, 1), (0, 5), (0, n), (0, size), (3, 9), (5, 6), (n - 1, n), (7, n + 30), (n, 2 * n), (2, 2),
              (n + 5, size), (2 * n + 1, 2 * n + 2), (1, size), (n - 3, n + 3)]
    want = np.array([unit * np.sum((prefix[j] - prefix[i]) ** 2) for i, j in ranges])
    starts, stops = np.array(ranges).T
    np.testing.assert_allclose(m.range_standard_errors(starts, stops) ** 2, want, rtol=1e-9)
    np.testing.assert_allclose(m.count_standard_errors(np.array([5, n, size])) ** 2, want[[1, 2, 3]], rtol=1e-9)
    np.testing.assert_allclose(m.standard_errors([5, n - 1]) ** 2, want[[5, 6]], rtol=1e-9)
    assert m.range_standard_error(3, 9) ** 2 == pytest.approx(want[4], rel=1e-9)
    with pytest.raises(ValueError, match="need 0 <= start <= stop"):
        m.range_standard_errors([3], [2])


def test_short_ranges_are_the_square_root_s_and_long_ones_grow_as_l_pi_over_4b():
    m = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=256, seed=0)
    sigma2 = m.noise_scale**2  # z's variance over s^2, in the values' units
    c = sqrt_coefficients(256)
    got = m.count_standard_errors(np.arange(1, 257)) ** 2
    np.testing.assert_allclose(got, sigma2 * np.cumsum(c**2), rtol=1e-3)  # the unbanded factor up to the band
    long = 10**7
    ideal = long * np.pi / (4 * 256) * sigma2  # beta -> 1 / C(1) ~ 1 / (2 s sqrt(b / pi))
    assert m.range_standard_error(5 * long, 6 * long) ** 2 == pytest.approx(ideal, rel=0.02)
    bound = m.rounding_bounds([long])[0]
    assert bound < 1e-3 * m.count_standard_errors([long])[0]


@pytest.mark.parametrize("kind", ["key", "seed"])
def test_batches_one_at_a_time_and_snapshots_inside_blocks_release_the_same(kind):
    kwargs = {"key": KEY} if kind == "key" else {"seed": 7}
    values = np.random.default_rng(2).uniform(0, 10, BLOCK + 900)
    whole = BandedFactorization(rho=0.2, upper_bound=10.0, max_range=100, **kwargs).release(values)
    m = BandedFactorization(rho=0.2, upper_bound=10.0, max_range=100, **kwargs)
    out = []
    for lo, hi in ((0, 1000), (1000, 1010), (1010, BLOCK), (BLOCK, BLOCK + 500), (BLOCK + 500, BLOCK + 900)):
        if hi - lo <= 10:
            out += [m.release_one(v) for v in values[lo:hi]]
        else:
            out += m.release(values[lo:hi]).tolist()
        state = through_json(m.state)
        if kind == "key":  # the block's noise is recomputed from the key and the history, never stored
            assert state["counter"]["increments"] is None
        history = state["counter"]["masked_history" if kind == "key" else "history"]
        assert len(history) == (99 if hi >= BLOCK else 0)
        m = BandedFactorization.from_state(state)
    np.testing.assert_array_equal(np.array(out), whole)
    assert m.position == values.size and m.count == pytest.approx(float(np.sum(whole)))


def test_keyed_noise_is_a_function_of_the_key_and_the_position_never_twice():
    m = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=16, key=KEY)
    e = np.rint(m.release(np.zeros(2 * BLOCK)) / m.granularity).astype(np.int64)
    z = keyed_z(m, 2)
    assert not np.array_equal(z[:BLOCK], z[BLOCK:])  # every block its own bits
    np.testing.assert_array_equal(e, shaped_noise(z, m.coefficients))
    other = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=16, key=bytes(32))
    assert not np.array_equal(other.release(np.zeros(BLOCK)), e[:BLOCK] * m.granularity)
    snapshot = m.state
    snapshot["counter"] = {**snapshot["counter"], "masked_history": snapshot["counter"]["masked_history"][:3]}
    with pytest.raises(ValueError, match="must carry the decoded noise of the 15 positions before its block") as error:
        BandedFactorization.from_state(snapshot)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(epsilon=1.0), "needs delta"),
    (dict(rho=0.5, delta=1e-6), "not with rho"),
    (dict(rho=0.5, max_range=MAX_BAND + 1), f"the factorization's band\\) must be at most {MAX_BAND}, got 65537"),
    (dict(rho=0.5, max_range=1), "max_range must be an integer >= 2, got 1"),
    (dict(rho=-1.0), "rho"),
    (dict(epsilon=1.0, delta=2.0), "delta"),
    (dict(rho=0.5, granularity=2.0**-40), "sampler's limit"),
])
def test_bad_parameters_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        BandedFactorization(upper_bound=1.0, **kwargs)
    assert "\n" not in str(error.value)


def test_release_banded_zcdp_on_the_command_line_with_standard_errors_and_resumed_after_kills(tmp_path, monkeypatch):
    values = tmp_path / "values.txt"
    values.write_text("".join(f"{v % 7}\n" for v in range(BLOCK + 1000)))
    base = ["release", str(values), "--method", "banded-zcdp", "--epsilon", "1", "--delta", "1e-6", "--upper-bound",
            "10", "--max-range", "64"]
    plain = CliRunner().invoke(cli, [*base, "-o", str(tmp_path / "plain.txt"), "--seed", "2", "--standard-errors"])
    assert plain.exit_code == 0 and "0.024356-zCDP, so (1, 1e-06)-DP" in plain.output, plain.output
    assert "banded square-root factorization with bound B = 10, band of 64 values (no horizon)" in plain.output
    header, *rows = (tmp_path / "plain.txt").read_text().split()
    assert header == "value,standard_error" and len(rows) == BLOCK + 1000
    assert float(rows[5].split(",")[1]) > float(rows[0].split(",")[1]) > 0
    too_long = CliRunner().invoke(cli, [*base[:-2], "--max-range", "70000", "-o", str(tmp_path / "x.txt")])
    assert too_long.exit_code != 0 and "must be at most 65536, got 70000" in too_long.output
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 700)  # many commits to kill, some inside blocks
    state = [*base, "--checkpoint-seconds", "0", "--seed", "4"]
    whole = CliRunner().invoke(cli, [*state, "-o", str(tmp_path / "whole.txt"), "--state", str(tmp_path / "w.state")])
    assert whole.exit_code == 0, whole.output
    result, kills = killed_until_finished(monkeypatch, lambda: CliRunner().invoke(
        cli, [*state, "-o", str(tmp_path / "out.txt"), "--state", str(tmp_path / "o.state")],
        catch_exceptions=False), seed=7, tries=60)
    assert result.exit_code == 0 and kills >= 3, result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()  # the same keyed noise
    assert REGISTRY["banded-zcdp"].durable


def test_a_keyed_snapshot_holds_the_history_masked_by_a_keyed_pad_never_in_the_clear():
    # the history is decoded noise of released positions: beside the output, in the clear, it would give their values
    # back to whoever reads a snapshot stored without its key (a Spark checkpoint, the service's state column)
    m = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=16, key=KEY)
    m.release(np.zeros(BLOCK + 10))
    state = through_json(keyless(m.state))
    assert "history" not in state["counter"] and len(state["counter"]["masked_history"]) == 15
    assert not np.any(np.asarray(state["counter"]["masked_history"]) == m._history)
    again = BandedFactorization.from_state(with_key(state, KEY))
    np.testing.assert_array_equal(again._history, m._history)  # the pad is the key's: it comes off with the key
    np.testing.assert_array_equal(again.release(np.zeros(BLOCK)), m.release(np.zeros(BLOCK)))
    other = through_json(m.state)  # the same block, the same pad: the same masked history (no new pad per snapshot)
    assert other["counter"]["masked_history"].tolist() == m.state["counter"]["masked_history"].tolist()
    seeded = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=16, seed=1)
    seeded.release(np.zeros(BLOCK))  # an unkeyed source has no pad: its snapshot holds its noise anyway (tests only)
    assert seeded.state["counter"]["history"].tolist() == seeded._history.tolist()
    wrong = {**state, "counter": {**state["counter"], "history": state["counter"]["masked_history"]}}
    del wrong["counter"]["masked_history"]
    with pytest.raises(ValueError, match="keyed banded-factorization snapshot must carry its history masked") as error:
        BandedFactorization.from_state(with_key(wrong, KEY))
    assert "\n" not in str(error.value)


def test_the_spark_streaming_store_continues_a_banded_stream_across_a_block_as_the_library():
    secret, values = bytes(range(1, 33)), np.random.default_rng(4).uniform(0, 5, BLOCK + 700)

    def build(key):
        return REGISTRY["banded-zcdp"].build({"epsilon": 1.0, "delta": 1e-6, "upper_bound": 5.0, "max_range": 32,
                                              "clip": False, "granularity": None}, key=key)

    stored, out = None, []
    for lo, hi in ((0, 1000), (1000, BLOCK + 3), (BLOCK + 3, BLOCK + 700)):  # a micro-batch each, from the store
        stream = restore_stream("m", stored, build=build, secret=secret)
        out.append(stream.release(values[lo:hi]))
        stored = json.loads(json.dumps(save_stream(stream)))
        assert "history" not in stored["counter"]  # what Spark's checkpoint keeps: no noise in the clear
    alone = build(key_secret(secret, "m")).release(values)
    np.testing.assert_array_equal(np.concatenate(out), alone)


def test_a_history_beyond_the_exact_range_is_refused_not_wrapped_around():
    # 3 2^62 - 3 2^62 + 4 2^62 wraps to 0 in int64: the dot product must never see a history that can leave it
    with pytest.raises(OverflowError, match="left the exact integer range"):
        shaped_noise(np.array([0, 0]), np.array([9, 4, 3, 3]), history=np.array([2**62, -(2**62), 2**62]))
    m = BandedFactorization(rho=0.5, upper_bound=1.0, max_range=4, key=KEY)
    m.release(np.zeros(BLOCK + 1))
    state = m.state
    state["counter"]["masked_history"] = state["counter"]["masked_history"] ^ np.int64(1 << 61)  # damaged
    with pytest.raises(OverflowError, match="left the exact integer range"):
        BandedFactorization.from_state(state).release(np.zeros(1))


def test_per_key_banded_zcdp_resumed_after_kills_and_a_resume_with_another_band_or_grid_is_refused(tmp_path,
                                                                                                    monkeypatch):
    rows = tmp_path / "rows.csv"  # key "a" crosses a block of noise, key "b" does not
    keys = np.where(np.arange(BLOCK + 1400) % 5 == 4, "b", "a")  # 4,397 values of "a"
    rows.write_text("meter,kwh\n" + "".join(f"{k},{v % 7}\n" for v, k in enumerate(keys)))
    base = ["release", str(rows), "--method", "banded-zcdp", "--epsilon", "1", "--delta", "1e-6", "--upper-bound",
            "10", "--key-column", "meter", "--checkpoint-seconds", "0", "--seed", "3"]
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 900)
    whole = CliRunner().invoke(cli, [*base, "--max-range", "32", "-o", str(tmp_path / "whole.csv"), "--state",
                                     str(tmp_path / "w.state")])
    assert whole.exit_code == 0, whole.output
    result, kills = killed_until_finished(monkeypatch, lambda: CliRunner().invoke(
        cli, [*base, "--max-range", "32", "-o", str(tmp_path / "out.csv"), "--state", str(tmp_path / "o.state")],
        catch_exceptions=False), seed=3, tries=40)
    assert result.exit_code == 0 and kills >= 2, result.output
    assert (tmp_path / "out.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()  # every key's keyed noise
    assert (tmp_path / "out.csv").read_text().count("\na,") == int(np.sum(keys == "a")) > BLOCK
    monkeypatch.undo()
    for changed, said in ((["--max-range", "16"], "was made with max_range = 32; this command has max_range = 16"),
                          (["--max-range", "32", "--granularity", "0.5"], "was made with granularity = None")):
        refused = CliRunner().invoke(cli, [*base, *changed, "-o", str(tmp_path / "whole.csv"), "--state",
                                           str(tmp_path / "w.state")])
        assert refused.exit_code != 0 and said in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) == 1
