"""ToPS end to end (``dpstream.release.tops``): hold-out, NM-E wiring, truncation, streaming
equivalence, privacy statement, and every documented error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream import HierarchicalPerturber, ToPS
from dpstream.noise import FloatNoise, KeyedBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import laplace_units_variance
from dpstream.noise.source import NoiseSource
from dpstream.privacy import EVENT_LEVEL
from dpstream.release import optimal_smoothed_levels
from dpstream.smoothers import MovingAverageSmoother, make_smoother
from dpstream.thresholds import noisy_max_epsilon, noisy_max_threshold

B = 100.0
HOLD = 200


def tops(epsilon=1.0, upper_bound=B, **kwargs) -> ToPS:
    """The paper's ToPS (NM-E); the default model threshold is tested in test_tops_model.py."""
    base = dict(hold=HOLD, max_range=1000, fanout=16, smoothed_levels=1, seed=2024, threshold_method="nm-e")
    base.update(kwargs)
    return ToPS(epsilon=epsilon, upper_bound=upper_bound, **base)


def stream(n: int, seed: int = 0) -> np.ndarray:
    """Skewed integer values in [0, B] (like transaction sizes): truncation matters."""
    return np.minimum(np.random.default_rng(seed).geometric(0.08, n), B).astype(float)


def released_one_by_one(t: ToPS, values) -> np.ndarray:
    """Feed a fresh ToPS one value at a time; the hold-out gives None, the rest floats."""
    out = [t.release_one(v) for v in values]
    assert all(x is None for x in out[: t.hold])
    assert all(type(x) is float for x in out[t.hold :])
    return np.array(out[t.hold :], dtype=np.float64)


# -- batch == pieces == one at a time ------------------------------------------------------------


@pytest.mark.parametrize("s", [0, 1, 2])
def test_batch_pieces_and_single_values_identical(s, smoother_case):
    name, params = smoother_case
    values = stream(HOLD + 3500, seed=1)  # three and a half chunks of r = 1000 (not a power of 16)
    kwargs = dict(smoother=name, smoothed_levels=s, **params)
    whole = tops(**kwargs).release(values)
    assert whole.shape == (values.size - HOLD,)
    cuts = np.sort(np.random.default_rng(s).integers(0, values.size, 12))
    t = tops(**kwargs)
    pieces = np.concatenate([t.release(part) for part in np.split(values, cuts)])
    single = released_one_by_one(tops(**kwargs), values.tolist())
    assert np.array_equal(whole, pieces)
    assert np.array_equal(whole, single)


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(0, HOLD + 2300), max_size=8),
    s=st.integers(0, 2),
    smoother=st.sampled_from(["recent", "mean", "median", "moving_average", "exponential"]),
    one_by_one=st.sets(st.integers(0, 8)),
)
def test_random_mix_of_batches_and_single_values(cuts, s, smoother, one_by_one):
    """Any mix of release() pieces and release_one() calls gives the batch output bit for bit."""
    values = stream(HOLD + 2300, seed=2)
    whole = tops(smoother=smoother, smoothed_levels=s).release(values)
    t = tops(smoother=smoother, smoothed_levels=s)
    out = []
    for i, part in enumerate(np.split(values, sorted(cuts))):
        if i in one_by_one:
            out.extend(x for x in (t.release_one(v) for v in part.tolist()) if x is not None)
        else:
            out.extend(t.release(part).tolist())
    assert np.array_equal(whole, np.array(out))


def test_fanout_4_power_of_fanout_range():
    values = stream(HOLD + 1100, seed=3)
    kwargs = dict(max_range=256, fanout=4, smoothed_levels=2, smoother="moving_average", window=5)
    assert np.array_equal(tops(**kwargs).release(values), released_one_by_one(tops(**kwargs), values))


def test_same_seed_same_output_different_seed_differs():
    values = stream(HOLD + 1500, seed=4)
    a = tops(seed=7).release(values)
    assert np.array_equal(a, tops(seed=7).release(values))
    assert not np.array_equal(a, tops(seed=8).release(values))
    assert np.array_equal(a, tops(seed=np.random.default_rng(7)).release(values))


# -- hold-out, threshold, truncation -------------------------------------------------------------


def test_hold_out_is_not_released():
    t = tops()
    values = stream(HOLD + 10, seed=5)
    assert t.release(values[:150]).shape == (0,)
    assert t.threshold is None and t.position == 150
    np.testing.assert_array_equal(t.state["held"], values[:150])
    assert t.state["perturber"] is None
    assert [t.release_one(v) for v in values[150:HOLD - 1]] == [None] * (HOLD - 1 - 150)
    assert t.threshold is None
    assert t.release_one(values[HOLD - 1]) is None  # the last held value chooses theta
    assert t.threshold is not None and t.position == HOLD
    assert t.state["held"] is None and t.state["perturber"] is not None
    out = t.release(values[HOLD:])
    assert out.shape == (10,) and t.position == HOLD + 10


def test_threshold_is_nm_e_on_the_hold_out_with_the_right_budgets():
    """theta = NM-E on the first `hold` values with threshold_epsilon as the selection budget and
    epsilon as Eq. 6's stream budget, drawn first from the one noise source; then the perturber
    (same source, the grid of B) releases min(v, theta).  Re-built here from the public parts."""
    values = stream(HOLD + 2500, seed=6)
    kwargs = dict(epsilon=0.3, threshold_epsilon=0.9, c=45.0, threshold_step=0.5, smoothed_levels=1, seed=99,
                  threshold_method="nm-e")
    t = tops(**kwargs)
    out = t.release(values)
    source = NoiseSource(seed=99)
    theta = noisy_max_threshold(
        values[:HOLD],
        epsilon=0.9,
        stream_epsilon=0.3,
        upper_bound=B,
        max_range=1000,
        fanout=16,
        noise=source.sampler(),
        c=45.0,
        step=0.5,
    )
    assert t.threshold == theta  # a multiple of 0.5 is on the grid 2^-14 already
    assert theta % 0.5 == 0 and 0 < theta <= B
    assert t.granularity == 2.0**-14  # the largest power of two <= B / 2^20
    p = HierarchicalPerturber(threshold=theta, epsilon=0.3, max_range=1000, fanout=16, smoothed_levels=1,
                              granularity=2.0**-14, noise=source)
    assert np.array_equal(out, p.release(np.minimum(values[HOLD:], theta)))


def test_float_path_is_the_float_algorithm_on_one_generator():
    """noise=FloatNoise(rng), the studies' path: NM-E's float Laplace first, then the perturber's,
    from the one generator, no grid."""
    values = stream(HOLD + 2500, seed=6)
    out = tops(seed=None, noise=FloatNoise(rng=np.random.default_rng(5))).release(values)
    rng = np.random.default_rng(5)
    theta = noisy_max_threshold(values[:HOLD], epsilon=1.0, upper_bound=B, max_range=1000, fanout=16,
                                noise=FloatNoise(rng=rng))
    p = HierarchicalPerturber(threshold=theta, epsilon=1.0, max_range=1000, fanout=16, smoothed_levels=1,
                              noise=FloatNoise(rng=rng))
    assert np.array_equal(out, p.release(np.minimum(values[HOLD:], theta)))
    assert tops(seed=None, noise=FloatNoise(rng=np.random.default_rng(5))).granularity is None


def test_truncation_once_the_replayed_noise_is_subtracted():
    """s = 0: every released value is min(v, theta), rounded to the grid, plus its leaf's noise.
    The hierarchy's noise is drawn at the first release after the hold-out, so a perturber on a
    copy of the noise source at that point, fed zeros, releases exactly that noise; the difference
    is the rounded min(v, theta) up to the rounding of one addition."""
    values = stream(HOLD + 1200, seed=7)
    t = tops(smoothed_levels=0)
    assert t.release(values[:HOLD]).shape == (0,)
    theta = t.threshold
    replay = NoiseSource.from_state(t.state["noise"])  # a copy of the source
    out = t.release(values[HOLD:])
    assert 1 <= theta < values.max()  # some values are truncated
    noise = HierarchicalPerturber(
        threshold=theta, epsilon=1.0, max_range=1000, fanout=16, smoothed_levels=0, granularity=t.granularity,
        noise=replay,
    ).release(np.zeros(1200))
    assert np.all(noise != 0)
    np.testing.assert_allclose(out - noise, np.minimum(values[HOLD:], theta), rtol=0, atol=1e-12 * np.abs(out).max())


def test_keyed_release_is_replayed_by_its_key():
    """key=: NM-E draws from ("tops", "nm-e") and chunk c from ("tops", c); the same key and stream
    give the same release, another key another one."""
    key = bytes(range(100, 132))
    values = stream(HOLD + 2500, seed=8)
    first = tops(seed=None, key=key)
    out = first.release(values)
    assert np.array_equal(out, tops(seed=None, key=key).release(values))
    assert not np.array_equal(out, tops(seed=None, key=bytes(32)).release(values))
    theta = noisy_max_threshold(values[:HOLD], epsilon=1.0, upper_bound=B, max_range=1000, fanout=16,
                                seed=KeyedBits(key=key, identity=("tops", "nm-e")))
    assert first.threshold == theta
    assert "keyed ChaCha20" in first.privacy().noise


def test_granularity_and_noise_options():
    t = tops(granularity=0.25)
    assert t.granularity == 0.25
    out = t.release(stream(HOLD + 300, seed=9))
    assert t.threshold % 0.25 == 0 and out.size == 300
    with pytest.raises(ValueError, match="granularity must be at most the bound 100"):
        tops(granularity=200.0)
    with pytest.raises(ValueError, match="granularity applies to exact noise only"):
        tops(seed=None, granularity=0.5, noise=FloatNoise(rng=np.random.default_rng(0)))
    with pytest.raises(ValueError, match="give at most one of seed, noise and key"):
        tops(noise=ZeroNoise())
    with pytest.raises(ValueError, match="above the 2\\^40"):
        tops(granularity=1e-11)  # refused before the hold-out, for the largest theta, B


def test_smoothed_levels_default_and_structure():
    t = ToPS(epsilon=0.05, upper_bound=B, hold=10, max_range=2**20, fanout=16, seed=0, threshold_method="nm-e")
    assert t.levels == 5
    assert t.smoothed_levels == optimal_smoothed_levels(0.05, 2**20, 16)
    t = ToPS(epsilon=0.05, upper_bound=B, hold=10, max_range=2**20, fanout=16, seed=0)  # the model chooses s
    assert t.levels == 5 and t.smoothed_levels is None
    t.release(np.full(20, 3.0))
    assert t.smoothed_levels == t.model_choice.smoothed_levels in range(5)
    t = tops(smoothed_levels=0)
    assert (t.levels, t.smoothed_levels, t.max_range, t.fanout) == (3, 0, 1000, 16)


def test_privacy_statement():
    """The budgets recomputed from the rounded-up scales: never above those asked, and within
    2^-20 of them (the scales are rounded to multiples of 2^-k with k >= 20 here)."""
    values = stream(HOLD + 10, seed=3)
    for epsilon, threshold_epsilon, expected in [(1.0, None, 1.0), (0.5, 2.0, 2.0), (3.0, 0.1, 3.0), (0.3, 0.7, 0.7)]:
        t = tops(epsilon=epsilon, threshold_epsilon=threshold_epsilon)
        for guarantee in (t.privacy(), (t.release(values), t.privacy())[1]):  # before and after theta
            assert expected * (1 - 2**-20) <= guarantee.epsilon <= expected
            assert guarantee.delta == 0.0
            assert guarantee.neighbours is EVENT_LEVEL
            assert f"first {HOLD} values" in guarantee.composition
            assert guarantee.noise.startswith("exact discrete Laplace in grid units, seeded PCG64")
    assert t._stream.spent_epsilon <= 0.3 and noisy_max_epsilon(0.7, monotone=True) <= 0.7


# -- parameter errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, shown",
    [
        (dict(epsilon=0), ValueError, ("epsilon", "0")),
        (dict(epsilon=-1), ValueError, ("epsilon", "-1")),
        (dict(epsilon=math.nan), ValueError, ("epsilon", "nan")),
        (dict(epsilon=math.inf), ValueError, ("epsilon", "inf")),
        (dict(epsilon="1"), TypeError, ("epsilon", "'1'")),
        (dict(epsilon=True), TypeError, ("epsilon", "True")),
        (dict(epsilon=None), TypeError, ("epsilon", "None")),
        (dict(upper_bound=0), ValueError, ("upper_bound", "0")),
        (dict(upper_bound=-5), ValueError, ("upper_bound", "-5")),
        (dict(upper_bound="100"), TypeError, ("upper_bound", "'100'")),
        (dict(hold=0), ValueError, ("hold", "0")),
        (dict(hold=1.5), TypeError, ("hold", "1.5")),
        (dict(hold=-3), ValueError, ("hold", "-3")),
        (dict(fanout=1), ValueError, ("fanout", "1")),
        (dict(fanout=2.0), TypeError, ("fanout", "2.0")),
        (dict(max_range=1), ValueError, ("max_range", "1")),
        (dict(smoother="foo"), ValueError, ("smoother", "'foo'")),
        (dict(smoother="recent", window=3), ValueError, ("window", "'recent'")),
        (dict(smoother="exponential", window=3), ValueError, ("window", "'exponential'")),
        (dict(smoother="moving_average", alpha=0.5), ValueError, ("alpha", "'moving_average'")),
        (dict(smoother="exponential", alpha=1.5), ValueError, ("alpha", "1.5")),
        (dict(smoother="exponential", alpha=-0.5), ValueError, ("alpha", "-0.5")),
        (dict(smoother="moving_average", window=0), ValueError, ("window", "0")),
        (dict(smoother="moving_average", window=2.5), TypeError, ("window", "2.5")),
        (dict(smoothed_levels=3), ValueError, ("smoothed_levels", "3")),  # h = 3 for r = 1000, b = 16
        (dict(smoothed_levels=-1), ValueError, ("smoothed_levels", "-1")),
        (dict(smoothed_levels=1.0), TypeError, ("smoothed_levels", "1.0")),
        (dict(threshold_step=200), ValueError, ("threshold_step", "200")),
        (dict(threshold_step=0), ValueError, ("threshold_step", "0")),
        (dict(threshold_epsilon=0), ValueError, ("threshold_epsilon", "0")),
        (dict(threshold_epsilon="x"), TypeError, ("threshold_epsilon", "'x'")),
        (dict(c=-60), ValueError, ("c", "-60")),
        (dict(clip=1), TypeError, ("clip", "1")),
        (dict(clip="yes"), TypeError, ("clip", "'yes'")),
        (dict(clip=None), TypeError, ("clip", "None")),
        (dict(seed=-1), ValueError, ("seed", "-1")),
        (dict(seed="x"), TypeError, ("seed", "'x'")),
        (dict(seed=2.5), TypeError, ("seed", "2.5")),
    ],
)
def test_bad_parameters_raise_documented_errors(kwargs, error, shown):
    with pytest.raises(error) as info:
        tops(**kwargs)
    message = str(info.value)
    for text in shown:
        assert text in message, message


def test_non_string_smoother_is_a_type_error():
    with pytest.raises(TypeError, match="smoother.*3"):
        tops(smoother=3)


def test_smoother_instance_is_accepted():
    values = stream(HOLD + 600, seed=8)
    by_instance = tops(smoother=MovingAverageSmoother(window=4)).release(values)
    by_name = tops(smoother="moving_average", window=4).release(values)
    assert np.array_equal(by_instance, by_name)
    assert np.array_equal(by_name, tops(smoother=make_smoother("moving_average", window=4)).release(values))


# -- stream value errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, error, shown",
    [
        (-1.0, ValueError, "-1"),
        (B + 0.5, ValueError, "100.5"),
        (math.nan, ValueError, "nan"),
        (math.inf, ValueError, "inf"),
        (-math.inf, ValueError, "-inf"),
    ],
)
@pytest.mark.parametrize("phase_start", [0, 150, HOLD + 30])  # in the hold-out, across it, after it
def test_batch_errors_name_global_position_and_value(bad, error, shown, phase_start):
    values = stream(HOLD + 100, seed=9)
    t = tops()
    t.release(values[:phase_start])
    batch = values[phase_start : phase_start + 80].copy()
    batch[57] = bad
    with pytest.raises(error) as info:
        t.release(batch)
    assert f"position {phase_start + 57} " in str(info.value)
    assert shown in str(info.value)


@pytest.mark.parametrize("bad, shown", [(-2.0, "-2"), (101.0, "101"), (math.nan, "nan"), (math.inf, "inf")])
@pytest.mark.parametrize("position", [5, HOLD + 7])
def test_release_one_errors_name_global_position_and_value(bad, shown, position):
    t = tops()
    for v in stream(position, seed=10):
        t.release_one(v)
    with pytest.raises(ValueError) as info:
        t.release_one(bad)
    assert f"position {position} " in str(info.value) and shown in str(info.value)


@pytest.mark.parametrize("bad", ["3", "abc", None, True, b"1", [1.0], np.array([[1.0]])])
def test_release_one_type_errors(bad):
    t = tops()
    t.release_one(1.0)
    with pytest.raises(TypeError) as info:
        t.release_one(bad)
    assert "position 1 " in str(info.value) and repr(bad) in str(info.value)


def test_batch_type_and_shape_errors():
    t = tops()
    with pytest.raises(TypeError, match="stream values must be numbers.*abc"):
        t.release("abc")
    with pytest.raises(TypeError, match="stream values must be numbers"):
        t.release([1.0, "x"])
    with pytest.raises(ValueError, match=r"one-dimensional.*\(2, 2\)"):
        t.release([[1.0, 2.0], [3.0, 4.0]])
    assert t.position == 0


@pytest.mark.parametrize("bad", [["5"], [True], "5"])
def test_batch_rejects_what_release_one_rejects(bad):
    with pytest.raises(TypeError):
        tops().release_one(bad[0] if isinstance(bad, list) else bad)
    with pytest.raises(TypeError):
        tops().release(bad)


def test_clip_clips_out_of_range_but_rejects_non_finite():
    values = stream(HOLD + 900, seed=11)
    wild = values.copy()
    wild[::7] = -5.0
    wild[3::11] = 1e6
    clipped = tops(clip=True).release(wild)
    assert np.array_equal(clipped, tops().release(np.clip(wild, 0.0, B)))
    assert np.array_equal(clipped, released_one_by_one(tops(clip=True), wild.tolist()))
    for bad in (math.nan, math.inf, -math.inf):
        t = tops(clip=True)
        with pytest.raises(ValueError, match="position 2 \\(0-based\\) must be a finite number"):
            t.release([1.0, 2.0, bad])
        t.release_one(1.0)
        with pytest.raises(ValueError, match="position 1 \\(0-based\\) must be a finite number"):
            t.release_one(bad)


@pytest.mark.parametrize("split", [50, HOLD - 5, HOLD + 300])
def test_failed_calls_leave_the_stream_unchanged(split):
    """A bad call in any phase (hold-out, straddling theta's choice, release) changes nothing: the
    rest of the stream releases exactly as on a fresh object with the same seed."""
    values = stream(HOLD + 1400, seed=12)
    reference = tops().release(values)
    t = tops()
    first = t.release(values[:split])
    position = t.position
    bad_batch = values[split : split + 40].copy()
    bad_batch[-1] = -1.0  # valid values first: the whole call must be rejected
    with pytest.raises(ValueError):
        t.release(bad_batch)
    with pytest.raises(TypeError):
        t.release(["x"])
    with pytest.raises(ValueError):
        t.release_one(math.nan)
    with pytest.raises(TypeError):
        t.release_one("1")
    assert t.position == position
    rest = t.release(values[split:])
    assert np.array_equal(np.concatenate([first, rest]), reference)


def test_numeric_types_for_release_one():
    values = stream(HOLD + 300, seed=13)
    a = released_one_by_one(tops(), values.tolist())
    b = released_one_by_one(tops(), [np.float64(v) for v in values])
    c = released_one_by_one(tops(), [int(v) for v in values])
    d = released_one_by_one(tops(), [np.int32(v) for v in values])
    assert np.array_equal(a, b) and np.array_equal(a, c) and np.array_equal(a, d)
    assert np.array_equal(a, tops().release(values.astype(np.int64)))


def test_a_copied_stream_continues_identically():
    """All streaming state lives in the object (its state and its generator): a deep copy taken
    mid-chunk releases exactly what the original releases, with no noise re-drawn."""
    import copy

    values = np.random.default_rng(8).integers(0, 30, size=5000).astype(float)
    tops = ToPS(epsilon=0.5, upper_bound=100, hold=500, max_range=1024, seed=4)
    tops.release(values[:1700])
    assert tops.state["perturber"] is not None and tops.state["perturber"]["noise"] is not None
    twin = copy.deepcopy(tops)
    assert np.array_equal(tops.release(values[1700:]), twin.release(values[1700:]))


# -- utility of the exact path against the float path ------------------------------------------


def leaf_variance_factor(fanout: int, levels: int) -> float:
    """[(X^T X)^-1]_jj of a full tree of ``levels`` measured levels, from its eigenvalues
    lambda_m = (b^(m+1) - 1) / (b - 1): sum_m (1 / lambda_m - 1 / lambda_{m-1}) / b^m."""
    inverse = [(fanout - 1) / (fanout ** (m + 1) - 1) for m in range(levels)]
    return sum((inverse[m] - (inverse[m - 1] if m else 0.0)) / fanout**m for m in range(levels))


@pytest.mark.parametrize("epsilon", [0.05, 0.1, 0.5, 1.0, 2.0, 10.0])
@pytest.mark.parametrize("theta", [1.0, 7.0, 60.0, 1657.0])
def test_exact_over_float_variance_on_pos_is_at_most_1_02(epsilon, theta):
    """Analytic utility cost of the exact path on POS (B = 1657, the default grid 2^-10, r = 2^20,
    b = 16, s of Eq. 7), for thetas from the smallest candidate to B.  Every released value is
    post-processing of the block estimates, each the block's sum plus its consistent leaf noise:
    variance v sigma^2 with v = [(X^T X)^-1]_jj.  Float: sigma^2 = 2 beta^2, beta = theta (h-s) / eps.
    Exact: the discrete Laplace variance 2a / (1-a)^2 of the rounded-up scale (in grid units, times
    g^2) for theta rounded up to the grid, plus at most g^2 / 12 per value of the b^s in a block
    from rounding the values (POS values are integers: there it is 0).  The ratio is <= 1.02."""
    bound = 1657.0
    p = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=2**20, fanout=16,
                              granularity=2.0**-10, noise=ZeroNoise())
    assert p.granularity == ToPS(epsilon=epsilon, upper_bound=bound, hold=10).granularity == 2.0**-10
    g, measured, block = p.granularity, p.measured_levels, p.block_size
    v = leaf_variance_factor(16, measured)
    exact = v * laplace_units_variance(p.noise_scale_units) * g**2 + block * g**2 / 12
    floating = v * 2 * (theta * measured / epsilon) ** 2
    assert exact / floating <= 1.02


def test_leaf_variance_factor_is_the_least_squares_diagonal(least_squares):
    for fanout, levels in [(4, 3), (16, 2), (2, 4)]:
        sizes = [fanout ** (levels - 1 - k) for k in range(levels)]
        diagonal = np.diag(least_squares.leaf_covariance(sizes, fanout))
        np.testing.assert_allclose(diagonal, leaf_variance_factor(fanout, levels), rtol=1e-12)
