"""The exact posterior mean of one step's counts: windows of the cell weights and their convolutions.

The method is derived in :mod:`~dpstream.postprocess.posterior` (its "Exact method"): on
``{sum r = n}`` the posterior is ``prod_l w_l(r_l)`` with the log weights of :func:`log_weight`;
every cell keeps the window (:func:`weight_windows`) where its log-concave weights are within 50
of their largest, and prefix and suffix convolutions give each cell's mean
(:func:`exact_means`) at a cost of :func:`exact_cost` multiply-adds a step.  Both the per-step
posterior mean and the temporal estimator (:mod:`~dpstream.postprocess.temporal`, whose
``quad`` adds a Gaussian factor per cell) run it.

Deterministic post-processing: no randomness, no privacy budget spent.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

__all__ = ["EXACT_MAX_COST", "exact_cost", "exact_means", "log_weight", "weight_windows"]

#: ``posterior_mean(exact=None)`` runs the exact method on every step whose convolutions take at most
#: this many multiply-adds (about 4 ms a step), the approximation on the others.
EXACT_MAX_COST = 1_000_000

#: Tilted cell weights below ``exp(-_DROP)`` of the cell's largest are left out of the exact method.
_DROP = 50.0
#: Floats per work array of the exact method (the steps are processed in chunks of this size).
_CHUNK = 4_000_000


def log_weight(k: np.ndarray, log_rate: np.ndarray, noisy: np.ndarray, scale: float,
               quad: np.ndarray | float = 0.0) -> np.ndarray:
    """``k ln lambda - ln k! - |r~ - k| / b - quad k^2 / 2``, concave in the integer ``k`` for ``quad >= 0``
    (``quad`` carries a Gaussian factor per cell, as :mod:`~dpstream.postprocess.temporal` uses it)."""
    return k * log_rate - gammaln(k + 1.0) - np.abs(noisy - k) / scale - 0.5 * quad * k * k


def weight_windows(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int,
                   quad: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the interval ``[lo, hi]`` of ``k`` in ``0..n`` where the (tilted) log weight is
    within 50 (``_DROP``) of its largest: the weights are log-concave, so three integer bisections
    (the mode, then either end) find it.  Cells of rate 0 get ``[0, 0]``."""
    lo = np.zeros(log_rate.shape, dtype=np.int64)
    hi = np.zeros(log_rate.shape, dtype=np.int64)
    live = np.isfinite(log_rate)
    lr, y = log_rate[live], noisy[live]
    q = 0.0 if quad is None else quad[live]
    rounds = int(users).bit_length() + 1

    def weight(k):
        return log_weight(k.astype(np.float64), lr, y, scale, q)

    # The mode: the first k whose forward difference is negative.
    a, b = np.zeros(lr.shape, dtype=np.int64), np.full(lr.shape, users, dtype=np.int64)
    for _ in range(rounds):
        mid = (a + b) // 2
        falling = weight(mid + 1) < weight(mid)
        b, a = np.where(falling, mid, b), np.where(falling, a, np.minimum(mid + 1, b))
    mode = a
    floor = weight(mode) - _DROP
    a, b = np.zeros_like(mode), mode.copy()  # the first k >= floor on [0, mode]
    for _ in range(rounds):
        mid = (a + b) // 2
        above = weight(mid) >= floor
        b, a = np.where(above, mid, b), np.where(above, a, np.minimum(mid + 1, b))
    lo[live] = a
    a, b = mode.copy(), np.full(lr.shape, users, dtype=np.int64)  # the last k >= floor on [mode, n]
    for _ in range(rounds):
        mid = (a + b + 1) // 2
        above = weight(mid) >= floor
        a, b = np.where(above, mid, a), np.where(above, b, np.maximum(mid - 1, a))
    hi[live] = a
    return lo, hi


def _convolve(a: np.ndarray, b: np.ndarray, cap: int) -> np.ndarray:
    """Row-wise full convolutions of two arrays of weights (``rows x A`` and ``rows x B``), cut at
    ``cap`` columns and scaled to a row maximum of 1 (the scale cancels in every mean)."""
    if a.shape[1] < b.shape[1]:
        a, b = b, a
    width = min(a.shape[1] + b.shape[1] - 1, cap)
    out = np.zeros((a.shape[0], width))
    for i in range(min(b.shape[1], width)):  # the narrower array's columns
        stop = min(width, i + a.shape[1])
        out[:, i:stop] += b[:, i:i + 1] * a[:, :stop - i]
    peak = out.max(axis=1, keepdims=True)
    return out / np.where(peak > 0, peak, 1.0)


def _exact_rows(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int, lo: np.ndarray,
                hi: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Exact posterior means of a block of steps (module docstring): every cell's weights on its
    window, prefix and suffix convolutions (offsets add), ``D_l(n - k)`` gathered per row."""
    steps, m = log_rate.shape
    cap = users + 1
    weights, offsets = [], []
    for cell in range(m):
        width = int((hi[:, cell] - lo[:, cell]).max()) + 1
        k = lo[:, cell, None] + np.arange(width)
        inside = k <= hi[:, cell, None]
        with np.errstate(invalid="ignore"):
            log_w = np.where(np.isfinite(log_rate[:, cell, None]),
                             log_weight(k.astype(np.float64), log_rate[:, cell, None], noisy[:, cell, None], scale,
                                        quad[:, cell, None]),
                             np.where(k == 0, 0.0, -np.inf))
        log_w = np.where(inside, log_w, -np.inf)
        log_w -= log_w.max(axis=1, keepdims=True)
        weights.append(np.exp(log_w))
        offsets.append(lo[:, cell])
    prefix = {1: (weights[0], offsets[0])}  # cells 0..j-1 convolved: (weights, offset per row)
    for j in range(1, m - 1):
        prefix[j + 1] = (_convolve(prefix[j][0], weights[j], cap), prefix[j][1] + offsets[j])
    suffix = {m - 1: (weights[m - 1], offsets[m - 1])}  # cells j..m-1 convolved
    for j in range(m - 2, 0, -1):
        suffix[j] = (_convolve(weights[j], suffix[j + 1][0], cap), offsets[j] + suffix[j + 1][1])
    means = np.empty((steps, m))
    for cell in range(m):
        if m == 1:
            others = (np.ones((steps, 1)), np.zeros(steps, dtype=np.int64))
        elif cell == 0:
            others = suffix[1]
        elif cell == m - 1:
            others = prefix[m - 1]
        else:
            others = (_convolve(prefix[cell][0], suffix[cell + 1][0], cap), prefix[cell][1] + suffix[cell + 1][1])
        k = offsets[cell][:, None] + np.arange(weights[cell].shape[1])
        index = users - k - others[1][:, None]  # where D_l(n - k) sits in the others' array
        valid = (index >= 0) & (index < others[0].shape[1])
        gathered = np.take_along_axis(others[0], np.clip(index, 0, others[0].shape[1] - 1), axis=1)
        joint = weights[cell] * np.where(valid, gathered, 0.0)
        means[:, cell] = (joint * k).sum(axis=1) / joint.sum(axis=1)
    return means


def exact_cost(lo: np.ndarray, hi: np.ndarray, users: int, width: np.ndarray | None = None) -> np.ndarray:
    """Multiply-adds of the exact method per step (its convolutions), from the window widths."""
    width = (hi - lo + 1).astype(np.float64) if width is None else width
    running = np.minimum(np.cumsum(width, axis=1), users + 1.0)
    return 3.0 * (running[:, :-1] * width[:, 1:]).sum(axis=1) + width.sum(axis=1)


def exact_means(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int, lo: np.ndarray,
                hi: np.ndarray, cost: np.ndarray, quad: np.ndarray | None = None) -> np.ndarray:
    """The exact method on blocks of steps of similar cost (so the blocks' widths fit their rows)."""
    quad = np.zeros(log_rate.shape) if quad is None else quad
    order = np.argsort(cost, kind="stable")
    out = np.empty(log_rate.shape)
    start = 0
    while start < order.size:
        # A block holds as many steps as keep its largest work array under _CHUNK floats.
        per_row = np.minimum(np.cumsum((hi - lo + 1)[order[start:]], axis=1), users + 1).max(axis=1)
        stop = start + max(1, int(np.searchsorted(np.maximum.accumulate(per_row) * np.arange(1, per_row.size + 1),
                                                  _CHUNK, side="right")))
        rows = order[start:stop]
        out[rows] = _exact_rows(log_rate[rows], noisy[rows], scale, users, lo[rows], hi[rows], quad[rows])
        start = stop
    return out
