"""LaplaceCounts (``dpstream.postprocess.mechanism``): exact discrete Laplace noise on integer
counts at the scale sensitivity / epsilon rounded up, integer outputs, every output possible
under every neighbour, and the scale the MAP / MLE estimators assume.

The law is checked against the exact pmf by a chi-square test (failure probability ALPHA).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpstream.noise import SeededBits, SystemBits, ZeroNoise, discrete_laplace_pmf
from dpstream.postprocess import LaplaceCounts, laplace_scale

ALPHA = 1e-9


def test_noisy_counts_are_integers_with_the_discrete_laplace_law():
    truth = np.tile(np.array([[7, 0, 3]]), (100_000, 1))
    mechanism = LaplaceCounts(epsilon=0.5, seed=12)
    noisy = mechanism.release(truth)
    assert noisy.dtype == np.int64 and noisy.shape == truth.shape and mechanism.granularity == 1
    assert mechanism.likelihood == "discrete_laplace"
    assert mechanism.noise_scale == Fraction(4)  # Delta = 2: one user moving changes two cells by one
    noise = (noisy - truth).ravel()
    window = np.arange(-30, 31)
    observed = np.concatenate(([np.sum(noise < -30)], np.bincount(noise[np.abs(noise) <= 30] + 30, minlength=61),
                               [np.sum(noise > 30)]))
    pmf = discrete_laplace_pmf(window, 4, 1)
    tail = (1.0 - pmf.sum()) / 2
    expected = noise.size * np.concatenate(([tail], pmf, [tail]))
    assert stats.chisquare(observed, expected).pvalue > ALPHA


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 0.05, 7.0])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_the_scale_is_rounded_up_and_the_estimators_assume_it(epsilon, sensitivity):
    mechanism = LaplaceCounts(epsilon=epsilon, sensitivity=sensitivity, noise=ZeroNoise())
    exact = Fraction(sensitivity) / Fraction(epsilon)
    assert exact <= mechanism.noise_scale < exact + Fraction(1, 2**20)
    assert Fraction(sensitivity) / mechanism.noise_scale <= Fraction(epsilon)  # the claimed epsilon holds exactly
    assert mechanism.scale == float(mechanism.noise_scale) == laplace_scale(epsilon, sensitivity)
    counts = np.array([[4, 1], [0, 5]])
    assert mechanism.release(counts).tolist() == counts.tolist()


def test_sources_and_replays():
    assert isinstance(LaplaceCounts(epsilon=1.0).noise.bits, SystemBits)
    assert isinstance(LaplaceCounts(epsilon=1.0, seed=3).noise.bits, SeededBits)
    counts = np.arange(12).reshape(4, 3)
    np.testing.assert_array_equal(LaplaceCounts(epsilon=1.0, seed=3).release(counts),
                                  LaplaceCounts(epsilon=1.0, seed=3).release(counts))
    assert "exact discrete Laplace" in LaplaceCounts(epsilon=1.0).privacy().composition
    with pytest.raises(ValueError, match="give seed or noise, not both"):
        LaplaceCounts(epsilon=1.0, seed=1, noise=ZeroNoise())


def test_counts_must_be_integers():
    mechanism = LaplaceCounts(epsilon=1.0, seed=0)
    assert mechanism.release(np.array([[3.0, 2.0]])).dtype == np.int64  # integer-valued floats are counts
    for bad, shown in (([[3.0, 2.5]], "counts\\[0, 1\\] = 2.5"), ([[1.0], [np.nan]], "counts\\[1, 0\\] = nan")):
        with pytest.raises(ValueError, match=f"counts must hold integers, got {shown}"):
            mechanism.release(np.array(bad))
    with pytest.raises(ValueError, match="non-empty T x m"):
        mechanism.release(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="sensitivity"):
        LaplaceCounts(epsilon=1.0, sensitivity=0)
