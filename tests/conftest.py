"""Shared fixtures: a zero-noise stand-in and independent reference smoothers.

The reference smoothers re-compute Appendix D's predictions directly from their definitions
(as restated in ``dpstream.smoothers.predictors``' module docstring), with plain Python loops
and ``np.mean`` / ``np.median`` over explicit histories -- no running totals, no heaps -- so
they share no arithmetic with the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def zero_noise(monkeypatch):
    """Replace the hierarchy's Laplace draws by zeros (same shapes), so tree arithmetic is exact.

    ``draw_noise_levels`` looks ``laplace_noise`` up in ``dpstream.hierarchy.tree`` at call
    time, so patching that name silences every perturber's noise.  It does not touch the
    threshold optimizer's noise (``dpstream.noise.laplace``).
    """

    def fake(rng, scale, size):
        assert scale > 0
        return np.zeros(size)

    monkeypatch.setattr("dpstream.hierarchy.tree.laplace_noise", fake)


def reference_predictions(name: str, prior: float, observations, **params) -> np.ndarray:
    """Prediction after each observation a_1..a_K, straight from Appendix D's definitions.

    ``prior`` is a_0.  After observing a_1..a_k:

    * recent:          a_k
    * mean:            mean(a_0, ..., a_k)
    * median:          median(a_1, ..., a_k)
    * moving_average:  mean of the last min(w, k + 1) of a_0, ..., a_k
    * exponential:     e_0 = a_0, e_k = alpha a_k + (1 - alpha) e_{k-1}
    """
    history = [float(prior)]
    out = []
    e = float(prior)
    for value in np.asarray(observations, dtype=np.float64).tolist():
        history.append(value)
        k = len(history) - 1
        if name == "recent":
            out.append(value)
        elif name == "mean":
            out.append(float(np.mean(history)))
        elif name == "median":
            out.append(float(np.median(history[1:])))
        elif name == "moving_average":
            w = params.get("window", 8)
            out.append(float(np.mean(history[-min(w, k + 1) :])))
        elif name == "exponential":
            alpha = params.get("alpha", 0.6)
            e = alpha * value + (1.0 - alpha) * e
            out.append(e)
        else:  # pragma: no cover - test misuse
            raise AssertionError(name)
    return np.array(out, dtype=np.float64)


@pytest.fixture
def reference_smoother():
    """The independent re-computation of Appendix D (see :func:`reference_predictions`)."""
    return reference_predictions


#: Every smoother with a non-default parameter where it has one, as (name, params).
SMOOTHER_CASES = (
    ("recent", {}),
    ("mean", {}),
    ("median", {}),
    ("moving_average", {"window": 3}),
    ("exponential", {"alpha": 0.3}),
)


@pytest.fixture(params=SMOOTHER_CASES, ids=[name for name, _ in SMOOTHER_CASES])
def smoother_case(request):
    """Each of the five smoothers, as (name, params); constant data, safe under hypothesis."""
    return request.param
