"""NM-E, the threshold optimizer of ToPS (Section 3.3, Eq. 4-6, Algorithm 1 lines 1-2).

For each candidate theta the score (Eq. 6) is

    q_theta(V) = -(3 m theta / (c r eps')) * sqrt(2 (b - 1) log_b(r)^3) - m_theta,
    m_theta    = |{i in [m] : v_i >= theta}|                                  (Eq. 5)

The first term is a data-independent stand-in for the standard deviation of a range query's
noise in a fan-out ``b`` hierarchy over ranges up to ``r`` with budget ``eps'`` (the budget of
the *stream*, whose noise the term models); the second, scaled, stands in for the truncation
bias.  Report-noisy-max with noise of scale ``1 / eps`` picks theta.

Exact path (the default).  The data enter the score only through the integer counts
``m_theta``; report-noisy-max adds discrete Laplace noise of scale ``1 / eps`` (rounded up,
:func:`~dpstream.noise.laplace.noisy_max_scale`) to ``-m_theta`` and subtracts the public first
term, a float, comparing the noisy scores exactly
(:func:`~dpstream.noise.laplace.report_noisy_max_counts`).  ``noise=FloatNoise(rng)`` computes the float
scores and adds numpy's float Laplace, as the studies do (NOT for publication).

Algorithm 1 writes ``m_theta <- |{i | v_i <= theta}|``.  That contradicts Eq. 5 and the
derivation (m_theta approximates the mass *above* theta, which causes the bias) and would make
the score decrease in theta on both terms, so the smallest candidate would always win.  We
implement Eq. 5.  With ``c = 60`` the factor ``3m / (c r)`` equals Algorithm 1's ``m / (20 r)``.
"""

from __future__ import annotations

import math

import numpy as np

from dpstream._checks import check_bound, check_epsilon, check_positive_int
from dpstream.noise.bits import BitsSeed
from dpstream.noise.laplace import noisy_max_epsilon, report_noisy_max_counts
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler

__all__ = [
    "NM_E_CONSTANT",
    "nm_e_counts",
    "nm_e_scores",
    "nm_e_slope",
    "noisy_max_epsilon",
    "noisy_max_threshold",
    "threshold_candidates",
]

#: The constant c of Eq. 6; the paper uses 60 for all datasets and settings.
NM_E_CONSTANT = 60.0

#: Candidate grids larger than this are refused (they would take gigabytes of memory).
_MAX_CANDIDATES = 50_000_000


def threshold_candidates(upper_bound: float, step: float = 1.0) -> np.ndarray:
    """The candidate thresholds ``step, 2 step, ..., floor(B / step) step`` (the paper: 1..B).

    >>> threshold_candidates(4.5)
    array([1., 2., 3., 4.])
    """
    upper_bound = check_bound(upper_bound)
    step = check_bound(step, "threshold_step")
    count = math.floor(upper_bound / step + 1e-9)
    if count < 1:
        raise ValueError(
            f"threshold_step must be <= upper_bound so that there is a candidate threshold, "
            f"got threshold_step={step!r} with upper_bound={upper_bound!r}."
        )
    if count > _MAX_CANDIDATES:
        raise ValueError(
            f"upper_bound / threshold_step must be at most {_MAX_CANDIDATES} candidates, got {count}; "
            "raise threshold_step."
        )
    return step * np.arange(1, count + 1, dtype=np.float64)


def nm_e_counts(values: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """``m_theta = |{i : v_i >= theta}|`` (Eq. 5) for every candidate, as int64, from one sort.

    Changing one value changes every count by at most 1 and all in the same direction.

    >>> nm_e_counts(np.array([1.0, 2.0, 5.0]), np.array([1.0, 2.0, 3.0])).tolist()
    [3, 2, 1]
    """
    values = np.sort(np.asarray(values, dtype=np.float64))
    return (values.size - np.searchsorted(values, candidates, side="left")).astype(np.int64)


def nm_e_slope(m: int, *, stream_epsilon: float, max_range: int, fanout: int, c: float = NM_E_CONSTANT) -> float:
    """The factor of theta in Eq. 6's first term, ``(3 m / (c r eps')) sqrt(2 (b - 1) log_b(r)^3)``.

    Public: it depends on the number of held-out values, not on them.

    >>> round(nm_e_slope(65536, stream_epsilon=1.0, max_range=2**20, fanout=16), 6)
    0.191366
    """
    stream_epsilon = check_epsilon(stream_epsilon, "stream_epsilon")
    max_range = check_positive_int(max_range, "max_range", minimum=2)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    c = check_bound(c, "c")
    log_r = math.log(max_range) / math.log(fanout)
    return 3.0 * m / (c * max_range * stream_epsilon) * math.sqrt(2.0 * (fanout - 1) * log_r**3)


def nm_e_scores(
    values: np.ndarray,
    candidates: np.ndarray,
    *,
    stream_epsilon: float,
    max_range: int,
    fanout: int,
    c: float = NM_E_CONSTANT,
) -> np.ndarray:
    """The noiseless scores q_theta(V) of Eq. 6 for every candidate, in O(m log m + |candidates|).

    ``m_theta`` for all candidates comes from one sort and one ``searchsorted``, never a pass
    over the data per candidate.  Changing one value changes every ``m_theta`` by at most 1 and
    all in the same direction, so the scores have sensitivity 1 and are monotone.

    >>> nm_e_scores(np.array([1.0, 2.0, 5.0]), np.array([1.0, 2.0, 3.0]),
    ...             stream_epsilon=1e9, max_range=16, fanout=16)
    array([-3., -2., -1.])
    """
    slope = nm_e_slope(np.asarray(values).size, stream_epsilon=stream_epsilon, max_range=max_range, fanout=fanout,
                       c=c)
    return -slope * candidates - nm_e_counts(values, candidates)


def noisy_max_threshold(
    values: np.ndarray,
    *,
    epsilon: float,
    upper_bound: float,
    max_range: int,
    fanout: int,
    seed: BitsSeed = None,
    noise: NoiseSampler | None = None,
    stream_epsilon: float | None = None,
    c: float = NM_E_CONSTANT,
    step: float = 1.0,
) -> float:
    """Choose theta by report-noisy-max over the scores of Eq. 6 (NM-E).

    Parameters
    ----------
    values : array of float
        The held-out first m values of the stream, in [0, upper_bound].
    epsilon : float
        Budget of this selection.
    seed : None, int, numpy Generator or bit source
        Bits of the exact sampler (None: the OS CSPRNG).
    noise : NoiseSampler, optional
        Instead of ``seed``: ``FloatNoise(rng)`` for the studies' float path, ``ZeroNoise()``
        for tests, or a part of a mechanism's noise source.
    stream_epsilon : float, optional
        Budget of the perturber whose noise the score models (Eq. 6's epsilon); defaults to
        ``epsilon``, the paper's setting.
    upper_bound, max_range, fanout, c, step
        B, r, b, the constant c and the candidate grid step (candidates step..B).

    Privacy
    -------
    ``noisy_max_epsilon(epsilon, monotone=True)`` (at most epsilon) -DP with respect to the
    held-out values, event level (neighbours differ in one value).  The counts ``-m_theta``
    have sensitivity 1 and are monotone, so discrete Laplace of scale ``1/epsilon`` suffices;
    the first term of Eq. 6 is public and compared exactly (see
    :func:`~dpstream.noise.laplace.report_noisy_max_counts`).  Only theta is released.

    >>> data = np.minimum(np.random.default_rng(3).geometric(0.2, 65536), 1000).astype(float)
    >>> theta = noisy_max_threshold(data, epsilon=1.0, upper_bound=1000, max_range=2**20,
    ...                             fanout=16, seed=3)
    >>> 10 <= theta <= 60
    True
    """
    epsilon = check_epsilon(epsilon)
    stream_epsilon = epsilon if stream_epsilon is None else check_epsilon(stream_epsilon, "stream_epsilon")
    if noise is not None and seed is not None:
        raise ValueError("give at most one of seed and noise, got both.")
    sampler = ExactNoise(bits=seed) if noise is None else noise
    candidates = threshold_candidates(upper_bound, step)
    if isinstance(sampler, FloatNoise):
        scores = nm_e_scores(
            values, candidates, stream_epsilon=stream_epsilon, max_range=max_range, fanout=fanout, c=c
        )
        return float(candidates[report_noisy_max_counts(sampler, scores, epsilon, monotone=True)])
    slope = nm_e_slope(np.asarray(values).size, stream_epsilon=stream_epsilon, max_range=max_range, fanout=fanout,
                       c=c)
    counts = -nm_e_counts(values, candidates)
    index = report_noisy_max_counts(sampler, counts, epsilon, offsets=slope * candidates, monotone=True)
    return float(candidates[index])
