"""ToPS with the model threshold (its default) and the perturber's prior."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream import HierarchicalPerturber, ToPS
from dpstream.noise import ZeroNoise
from dpstream.noise.bits import SeededBits
from dpstream.thresholds.model import model_threshold

B, HOLD = 100.0, 2000


def stream(n, seed=0):
    return np.minimum(np.random.default_rng(seed).exponential(8.0, n).round(), B)


def tops(**kwargs):
    options = dict(epsilon=0.5, upper_bound=B, hold=HOLD, max_range=4096, seed=7)
    options.update(kwargs)
    return ToPS(**options)


# -- the perturber's prior -------------------------------------------------------------------------


def test_prior_is_the_first_blocks_prediction():
    p = HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, fanout=16, smoothed_levels=1,
                              noise=ZeroNoise(), prior=3.25)
    out = p.release(np.full(40, 4.0))
    assert p.prior == 3.25
    np.testing.assert_array_equal(out[:15], 3.25)  # the first block, but its last value
    assert out[15] == pytest.approx(16 * 4.0 - 15 * 3.25)  # the block sums to its (noiseless) estimate
    np.testing.assert_array_equal(out[16:31], 4.0)  # then the Recent smoother's prediction


def test_prior_default_and_bounds():
    assert HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, seed=0).prior == 5.0
    assert HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, seed=0, prior=50.0).prior == 10.0
    with pytest.raises(ValueError, match="prior must be a finite number >= 0, got -1.0"):
        HierarchicalPerturber(threshold=10.0, epsilon=1.0, max_range=256, seed=0, prior=-1.0)


# -- ToPS ------------------------------------------------------------------------------------------


def test_model_is_the_default_and_is_wired_as_documented():
    """theta, s and the prior are model_threshold's on the hold-out, drawn first from the noise
    source's bits; then the perturber (on the grid, with that prior) releases min(v, theta)."""
    values = stream(HOLD + 3000, seed=1)
    t = tops()
    t.release(values)
    assert t.threshold_method == "model" and t.model_choice is not None
    choice = model_threshold(values[:HOLD], epsilon=0.5, stream_epsilon=0.5, upper_bound=B, max_range=4096,
                             fanout=16, seed=SeededBits(seed=7))
    assert choice == t.model_choice
    assert (t.threshold, t.smoothed_levels) == (choice.threshold, choice.smoothed_levels)
    # the arithmetic, without noise: ZeroNoise makes the model's steps draw from a fixed seed
    quiet = tops(noise=ZeroNoise(), seed=None)
    out = quiet.release(values)
    c = quiet.model_choice
    p = HierarchicalPerturber(threshold=c.threshold, epsilon=0.5, max_range=4096, fanout=16,
                              smoothed_levels=c.smoothed_levels, granularity=quiet.granularity, noise=ZeroNoise(),
                              prior=c.prior)
    assert np.array_equal(out, p.release(np.minimum(values[HOLD:], c.threshold)))
    assert c == model_threshold(values[:HOLD], epsilon=0.5, stream_epsilon=0.5, upper_bound=B, max_range=4096,
                                fanout=16, seed=SeededBits(seed=0))


def test_batch_equals_one_value_at_a_time():
    values = stream(HOLD + 1500, seed=2)
    batch = tops(query_length=60).release(values)
    one = tops(query_length=60)
    streamed = [one.release_one(v) for v in values]
    assert np.array_equal(batch, [v for v in streamed if v is not None])


def test_forced_levels_are_kept():
    t = tops(smoothed_levels=0)
    assert t.smoothed_levels == 0
    t.release(stream(HOLD + 10))
    assert t.smoothed_levels == 0 and t.model_choice.smoothed_levels == 0


def test_privacy_statement_of_the_model():
    t = tops(threshold_epsilon=0.8)
    before = t.privacy()
    assert before.epsilon == 0.8 and "model threshold" in before.composition and "h - s" in before.composition
    t.release(stream(HOLD + 10))
    after = t.privacy()
    assert after.epsilon <= 0.8 and after.epsilon >= 0.79
    assert f"h - s = {t.levels - t.smoothed_levels}" in after.composition


def test_paper_method_is_kept():
    t = tops(threshold_method="nm-e")
    t.release(stream(HOLD + 10))
    assert t.model_choice is None and "NM-E" in t.privacy().composition


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(threshold_method="median"), ValueError, "threshold_method must be one of nm-e, model"),
        (dict(query_length=0), ValueError, "query_length"),
        (dict(selection="gumbel"), ValueError, "selection must be one of"),
        (dict(threshold_method=3), TypeError, "threshold_method must be a string"),
        (dict(threshold_method="nm-e", query_length=60), ValueError, "apply to threshold_method='model' only"),
        (dict(threshold_method="nm-e", selection="exponential"), ValueError, "apply to threshold_method='model'"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        tops(**kwargs)


def test_the_predicted_error_is_private_not_a_field_printed_or_stored():
    """The model's predicted error is an exact function of the held-out count above theta: no field of
    the (public) choice, not in its repr, not in a snapshot; a study reads the private attribute."""
    import dataclasses

    from dpstream.durable.encoding import encode
    from dpstream.thresholds.model import ModelChoice

    t = tops()
    t.release(stream(HOLD + 100, seed=2))
    choice = t.model_choice
    assert "predicted_error" not in {f.name for f in dataclasses.fields(ModelChoice)}
    assert "predicted_error" not in repr(choice) and "predicted_error" not in dataclasses.asdict(choice)
    assert "predicted_error" not in str(encode(t.state, "state"))
    with pytest.raises(AttributeError, match="private"):
        choice.predicted_error  # noqa: B018
    fresh = model_threshold(stream(HOLD, seed=2), epsilon=0.5, stream_epsilon=0.5, upper_bound=B, max_range=4096,
                            fanout=16, seed=SeededBits(seed=7))
    assert fresh._predicted_error > 0  # kept, privately, for studies
    # a snapshot of an earlier version holds it: still read, kept private
    old = {**dataclasses.asdict(choice), "predicted_error": 12.5}
    assert ModelChoice(**old) == choice and ModelChoice(**old)._predicted_error == 12.5
