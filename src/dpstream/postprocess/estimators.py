"""MAP and MLE post-processing of noisy count streams (Cao et al., DBSec 2023, Section 5).

Given the noisy counts ``R~`` (``T x m``), the number of users ``n`` and the marginals
``P^t`` of Eq. 7, the MAP estimate of Section 5.3 minimises, independently for every step,

    ``f_t(r) = c * sum_l |r_l - r~_l|  +  sum_l [ G(r_l) - r_l ln P^t_l ]``
    subject to ``sum_l r_l = n`` and ``r >= 0``,

with ``c = 1 / lambda`` (Eq. 6), ``lambda = Delta / epsilon`` rounded up as
:class:`~dpstream.postprocess.mechanism.LaplaceCounts` rounds it
(:func:`~dpstream.postprocess.mechanism.laplace_scale`), ``Delta = sensitivity`` (default 2, one
user moving to another location; 1 for add/remove-one-user neighbours).  The likelihood term is
that of the discrete Laplace noise the release draws, ``P[r~ | r]`` proportional to
``exp(-|r~ - r| / lambda)`` per cell for integer counts -- the same expression as the density of
``Lap(lambda)``, so the objective is unchanged and its minimisation over real ``r`` is the usual
relaxation of the integer problem.  ``G(r) = ln r!`` comes from the multinomial
prior of Eq. 8 (the constant ``ln n!`` dropped).  ``form="exact"`` uses ``G = lnGamma(r + 1)``,
which is strictly convex; ``form="stirling"`` uses the paper's Stirling form (Eqs. 9-10),
``G(r) = ln(2 pi r)/2 + r ln(r / e)``.  Taken literally that function tends to ``-infinity`` as
``r -> 0`` and is concave on ``(0, 1/2)``, so Eq. 10 has no minimiser on ``r >= 0`` (setting
any count to 0 makes the objective ``-infinity``).  We therefore use Eq. 10 where it is convex,
``r >= 1/2``, continued below ``1/2`` by its tangent at the inflection point ``1/2``: the one
C^1 convex function that agrees with Eq. 10 wherever Eq. 10 is convex.

Solver.  The problem separates by time step; each step is separable convex with one
equality.  For a multiplier ``mu`` the minimiser of ``f_l(r) - mu r`` over ``r >= 0`` is
``median(g(v - c), max(r~_l, 0), g(v + c))`` with ``v = mu + ln P_l`` and ``g`` the inverse
of ``G'`` clamped at 0 (inverse digamma minus one for the exact form, a Lambert-W closed form
for the Stirling form).  Sum over ``l`` is continuous (exact form) and non-decreasing in
``mu``; a safeguarded Newton iteration with bisection finds ``mu`` for all steps at once.
The answer comes with the KKT residual: how far ``mu`` lies from the subdifferential of each
``f_l`` at ``r_l`` (with the ``r >= 0`` multiplier), and the largest ``|sum_l r_l - n|``.

The MLE baseline (no prior) is :func:`~dpstream.postprocess.estimate.mle_estimate`.

Everything here is post-processing: no randomness, no privacy budget spent.
"""

from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln, lambertw

from dpstream._checks import check_choice, check_positive_int
from dpstream._deprecation import moved_names
from dpstream.postprocess.estimate import PRIORS, Estimate, check_marginals, check_noisy, mle_estimate, prior_marginals
from dpstream.postprocess.mechanism import COUNT_SENSITIVITY, laplace_scale

__all__ = [
    "FORMS",
    "PRIORS",
    "Estimate",
    "prior_marginals",
    "map_estimate",
    "map_solve",
    "mle_estimate",
    "map_objective",
    "kkt_residual",
    "round_counts",
]

#: The one entry point and its methods moved to :mod:`dpstream.postprocess.dispatch`.
__getattr__ = moved_names(
    __name__,
    {"METHODS": "dpstream.postprocess.dispatch:METHODS", "postprocess": "dpstream.postprocess.dispatch:postprocess"},
)

FORMS = ("exact", "stirling")

_EULER = 0.5772156649015329
#: Stirling form: the inflection point of Eq. 10's ``G`` and ``G'`` there, ``1 - ln 2``.
_KINK = 0.5
_KINK_SLOPE = 1.0 - np.log(2.0)
_MAX_ITERATIONS = 200


# -- the two forms of G = ln r! ---------------------------------------------------------------


def _trigamma(x: np.ndarray) -> np.ndarray:
    """psi'(x) for x > 0: ``psi'(x) = sum_{k<6} 1/(x+k)^2 + psi'(x+6)`` and the asymptotic
    series ``1/z + 1/(2z^2) + 1/(6z^3) - 1/(30z^5) + 1/(42z^7) - 1/(30z^9)`` at ``z = x + 6``
    (relative error < 1e-10).  Only Newton steps use it, so it sets their speed, not the answer;
    scipy's ``polygamma(1, x)`` is about thirty times slower."""
    total = np.zeros_like(x)
    for shift in range(6):
        total += 1.0 / (x + shift) ** 2
    z = x + 6.0
    w = 1.0 / (z * z)
    tail = w * (1.0 / 6.0 - w * (1.0 / 30.0 - w * (1.0 / 42.0 - w / 30.0)))
    return total + (1.0 + 0.5 / z + tail) / z


def _inverse_digamma(v: np.ndarray) -> np.ndarray:
    """x with digamma(x) = v, for v > digamma(1) (so x > 1), by Newton from exp(v) + 1/2."""
    x = np.exp(v) + 0.5
    active = np.arange(v.size)
    for _ in range(50):
        xa, va = x[active], v[active]
        step = (digamma(xa) - va) / _trigamma(xa)
        x[active] = np.maximum(xa - step, 0.5 * xa)
        keep = np.abs(step) > 1e-13 * xa
        if not keep.any():
            break
        active = active[keep]
    return x


def _g(r: np.ndarray, form: str) -> np.ndarray:
    """``G(r)``, the form's stand-in for ``ln r!``."""
    if form == "exact":
        return gammaln(r + 1.0)
    high = np.maximum(r, _KINK)
    value = 0.5 * np.log(2.0 * np.pi * high) + high * np.log(high) - high
    return np.where(r >= _KINK, value, value + _KINK_SLOPE * (r - _KINK))


def _g_slope(r: np.ndarray, form: str) -> np.ndarray:
    """``G'(r)``."""
    if form == "exact":
        return digamma(r + 1.0)
    high = np.maximum(r, _KINK)
    return np.log(high) + 0.5 / high


def _g_curvature(r: np.ndarray, form: str) -> np.ndarray:
    """``G''(r)`` (0 on the Stirling form's linear piece)."""
    if form == "exact":
        return _trigamma(r + 1.0)
    return np.where(r > _KINK, 1.0 / np.maximum(r, _KINK) - 0.5 / np.maximum(r, _KINK) ** 2, 0.0)


def _g_slope_at_zero(form: str) -> float:
    return -_EULER if form == "exact" else _KINK_SLOPE


def _g_inverse(v: np.ndarray, form: str) -> np.ndarray:
    """The ``r >= 0`` with ``G'(r) = v``, 0 where ``v <= G'(0)`` (the smallest such r)."""
    out = np.zeros_like(v)
    inside = v > _g_slope_at_zero(form)
    if not inside.any():
        return out
    if form == "exact":
        out[inside] = _inverse_digamma(v[inside]) - 1.0
    else:
        # ln r + 1/(2r) = v with r = 1/(2w), w in (0, 1]:  w - ln w = v + ln 2  ->  w = -W0(-e^{-(v + ln 2)})
        z = np.maximum(-np.exp(-(v[inside] + np.log(2.0))), -np.exp(-1.0))  # the branch point, up to rounding
        w = -lambertw(z, 0).real
        out[inside] = 0.5 / np.clip(np.nan_to_num(w, nan=1.0), 1e-300, 1.0)
    return out


# -- the MAP solver ---------------------------------------------------------------------------


def _response(mu: np.ndarray, log_p: np.ndarray, y_plus: np.ndarray, slope_y: np.ndarray,
              weight: float, form: str) -> tuple[np.ndarray, np.ndarray]:
    """Minimiser ``r(mu)`` of every ``f_l(r) - mu r`` over ``r >= 0``, and ``dr/dmu``."""
    base = log_p + mu[:, None]
    up = base - weight            # G'(r) = up when r > r~  (regime A)
    down = base + weight          # G'(r) = down when r < r~ (regime B)
    above = up > slope_y
    below = down < slope_y
    r = y_plus.copy()
    r[above] = _g_inverse(up[above], form)
    r[below] = _g_inverse(down[below], form)
    moving = (above | below) & (r > 0)
    slope = np.zeros_like(r)
    curvature = _g_curvature(r[moving], form)
    slope[moving] = 1.0 / np.maximum(curvature, 1e-12)  # the Stirling form's G'' vanishes at r = 1/2
    return r, slope


def _bracket(p: np.ndarray, log_p: np.ndarray, y_plus: np.ndarray, n: int, weight: float,
             form: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The multipliers' starting bracket ``[lo, hi]`` and first guess, per step: at ``lo`` every
    count is 0; at ``hi`` the most likely location alone holds ``>= n`` users."""
    best = np.argmax(p, axis=1)
    rows = np.arange(p.shape[0])
    lo = _g_slope_at_zero(form) - weight - log_p.max(axis=1)
    hi = _g_slope(np.maximum(y_plus[rows, best], float(n)), form) + weight - log_p[rows, best]
    return lo, hi, np.clip(np.log(n + 0.5 * (p > 0).sum(axis=1)), lo, hi)


def _last_correction(counts: np.ndarray, slopes: np.ndarray, excess: np.ndarray, converged: np.ndarray,
                     sides: tuple[np.ndarray, np.ndarray], bracket: tuple[np.ndarray, np.ndarray], mu: np.ndarray,
                     y_plus: np.ndarray, n: int) -> np.ndarray:
    """The MAP solver's last correction, in place of ``counts`` and ``mu``; returns the rows that took
    the Newton step.

    Rows that met the tolerance take one Newton step in r (the counts that moved absorb the tiny
    excess).  Rows whose bracket closed on a jump of sum r(mu) (the Stirling form's linear piece)
    interpolate between the two sides of the jump (``sides``: the counts at the bracket's ends),
    both of which minimise the Lagrangian at that mu.  Rows still open at the iteration limit take
    the same interpolation (the caller counts them as unconverged).
    """
    r_lo, r_hi = sides
    lo, hi = bracket
    total = slopes.sum(axis=1)
    step = converged & (total > 0)
    before = counts[step]
    after = before - (excess[step] / total[step])[:, None] * slopes[step]
    kink = y_plus[step]  # a count on one side of its noisy value stays on that side
    below = np.where(before < kink, np.minimum(after, kink), after)
    counts[step] = np.where(before > kink, np.maximum(after, kink), below)
    jump = ~converged
    if jump.any():
        low_sum, high_sum = r_lo[jump].sum(axis=1), r_hi[jump].sum(axis=1)
        theta = np.clip((n - low_sum) / np.maximum(high_sum - low_sum, 1e-300), 0.0, 1.0)
        counts[jump] = r_lo[jump] + theta[:, None] * (r_hi[jump] - r_lo[jump])
        mu[jump] = 0.5 * (lo[jump] + hi[jump])
    return step


def map_solve(noisy: object, marginals: object, *, users: int, epsilon: float, form: str = "exact",
              tolerance: float = 1e-10, sensitivity: float = COUNT_SENSITIVITY) -> Estimate:
    """MAP estimate (Section 5.3) for given marginals ``P^t`` (``T x m``); see the module docstring.

    The likelihood assumes the counts were released with ``Lap(sensitivity / epsilon)`` per cell.

    ``tolerance`` is the accepted ``|sum_l r_l - n| / n`` before the last correction step,
    which then puts every row sum at ``n`` to rounding.

    >>> est = map_solve([[5.0, -1.0, 7.0]], [[0.2, 0.3, 0.5]], users=10, epsilon=1.0)
    >>> round(float(est.counts.sum()), 9), bool(est.kkt_residual < 1e-8)
    (10.0, True)
    """
    y = check_noisy(noisy)
    p = check_marginals(marginals, y.shape)
    n = check_positive_int(users, "users")
    weight = 1.0 / laplace_scale(epsilon, sensitivity)
    form = check_choice(form, "form", FORMS)
    steps = y.shape[0]
    with np.errstate(divide="ignore"):
        log_p = np.log(p)
    y_plus = np.maximum(y, 0.0)
    slope_y = _g_slope(y_plus, form)
    lo, hi, mu = _bracket(p, log_p, y_plus, n, weight, form)
    rows = np.arange(steps)
    counts = np.empty_like(y)
    slopes = np.zeros_like(y)
    r_lo = np.zeros_like(y)  # r(lo) = 0
    r_hi = _response(hi, log_p, y_plus, slope_y, weight, form)[0]
    excess = np.zeros(steps)
    previous = np.full(steps, np.inf)
    converged = np.zeros(steps, dtype=bool)
    closed_rows = np.zeros(steps, dtype=bool)
    active = rows.copy()
    iterations = 0
    tiny = 4 * np.finfo(float).eps
    while active.size and iterations < _MAX_ITERATIONS:
        iterations += 1
        r, slope = _response(mu[active], log_p[active], y_plus[active], slope_y[active], weight, form)
        counts[active], slopes[active] = r, slope
        f = r.sum(axis=1) - n
        excess[active] = f
        low_side, high_side = f < 0, f > 0
        lo[active[low_side]] = mu[active[low_side]]
        r_lo[active[low_side]] = r[low_side]
        hi[active[high_side]] = mu[active[high_side]]
        r_hi[active[high_side]] = r[high_side]
        done = np.abs(f) <= tolerance * n
        converged[active[done]] = True
        a_lo, a_hi, a_mu = lo[active], hi[active], mu[active]
        closed = ~done & (a_hi - a_lo <= tiny * np.maximum(1.0, np.abs(a_mu)))
        closed_rows[active[closed]] = True
        total_slope = slope.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = a_mu - f / total_slope
        # Newton while it halves |f| and stays inside the bracket, bisection otherwise.
        ok = (total_slope > 0) & (newton > a_lo) & (newton < a_hi) & (np.abs(f) <= 0.5 * previous[active])
        previous[active] = np.abs(f)
        # Converged rows keep the mu their counts answer, moved by the final Newton step below.
        mu[active] = np.where(done, np.where(total_slope > 0, newton, a_mu), np.where(ok, newton, 0.5 * (a_lo + a_hi)))
        active = active[~(done | closed)]
    step = _last_correction(counts, slopes, excess, converged, (r_lo, r_hi), (lo, hi), mu, y_plus, n)
    np.maximum(counts, 0.0, out=counts)
    flat = converged & ~step
    if flat.any():
        mu[flat] = _leave_kink(counts, flat, excess, mu, y, log_p, weight, form)
    sums = counts.sum(axis=1)
    return Estimate(
        counts=counts,
        multipliers=mu,
        kkt_residual=kkt_residual(counts, y, p, mu, epsilon=epsilon, form=form, sensitivity=sensitivity),
        sum_residual=float(np.max(np.abs(sums - n))),
        iterations=iterations,
        unconverged=int(np.count_nonzero(~converged & ~closed_rows)),
    )


def _subdifferential(
    counts: np.ndarray, noisy: np.ndarray, log_p: np.ndarray, weight: float, form: str
) -> tuple[np.ndarray, np.ndarray]:
    """Ends ``[low, high]`` of ``partial f_l(r_l)`` plus the normal cone of ``r >= 0``.

    ``f_l(r) = weight |r - r~_l| + G(r) - r ln P_l``: the one-sided slopes are
    ``G'(r) - ln P_l -+ weight``, the sign of each set by the side of ``r~_l`` that ``r`` lies on
    (both at ``r = r~_l``).  At ``r = 0`` the cone makes ``low = -inf``; where ``P_l = 0``,
    ``high = +inf``.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        smooth = _g_slope(counts, form) - log_p
    low = np.where(counts > noisy, smooth + weight, smooth - weight)
    high = np.where(counts < noisy, smooth - weight, smooth + weight)
    return np.where(counts > 0, low, -np.inf), high


def _leave_kink(
    counts: np.ndarray,
    flat: np.ndarray,
    excess: np.ndarray,
    mu: np.ndarray,
    noisy: np.ndarray,
    log_p: np.ndarray,
    weight: float,
    form: str,
) -> np.ndarray:
    """Rows where every count sits at a kink (its noisy value or 0) and the sum is off by at
    most ``tolerance * n``.  A surplus moves down the count whose subdifferential starts
    highest, a deficit moves up the one whose subdifferential ends lowest; then ``mu`` is
    clipped into the intersection of every count's subdifferential (a row with no excess keeps
    its ``mu`` when that already lies in it).  Updates ``counts`` in place and returns the rows'
    multipliers."""
    r, y, lp, e = counts[flat], noisy[flat], log_p[flat], excess[flat]
    low, high = _subdifferential(r, y, lp, weight, form)
    index = np.where(e > 0, np.argmax(low, axis=1), np.argmin(high, axis=1))
    rows = np.arange(r.shape[0])
    r[rows, index] = np.maximum(r[rows, index] - e, 0.0)
    counts[flat] = r
    low, high = _subdifferential(r, y, lp, weight, form)
    start, end = low.max(axis=1), high.min(axis=1)
    # An empty intersection (only by rounding): the midpoint minimises the residual.
    return np.where(start <= end, np.clip(mu[flat], start, np.maximum(start, end)), 0.5 * (start + end))


def kkt_residual(
    counts: np.ndarray,
    noisy: np.ndarray,
    marginals: np.ndarray,
    multipliers: np.ndarray,
    *,
    epsilon: float,
    form: str = "exact",
    sensitivity: float = COUNT_SENSITIVITY,
) -> float:
    """Largest distance of ``mu_t`` from ``partial f_l(r_l)`` (plus the normal cone of ``r >= 0``).

    Zero exactly at the MAP optimum (with its sum constraint met); each step's objective is
    convex, so these conditions are also sufficient.
    """
    weight = 1.0 / laplace_scale(epsilon, sensitivity)
    counts = np.asarray(counts, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_p = np.log(np.asarray(marginals, dtype=np.float64))
    low, high = _subdifferential(counts, np.asarray(noisy, dtype=np.float64), log_p, weight, form)
    mu = np.asarray(multipliers, dtype=np.float64)[:, None]
    distance = np.maximum(low - mu, 0.0) + np.maximum(mu - high, 0.0)
    distance = np.where(np.isfinite(distance), distance, np.where(counts > 0, np.inf, 0.0))
    return float(distance.max())


def map_objective(
    counts: object,
    noisy: object,
    marginals: object,
    *,
    epsilon: float,
    form: str = "exact",
    sensitivity: float = COUNT_SENSITIVITY,
) -> np.ndarray:
    """Per-step objective ``f_t`` (the negative log posterior up to constants; noise
    ``Lap(sensitivity / epsilon)`` per cell)."""
    r = np.asarray(counts, dtype=np.float64)
    y = np.asarray(noisy, dtype=np.float64)
    p = np.asarray(marginals, dtype=np.float64)
    weight = 1.0 / laplace_scale(epsilon, sensitivity)
    with np.errstate(divide="ignore", invalid="ignore"):
        prior = np.where(r > 0, r * np.log(p), 0.0)
    return (weight * np.abs(r - y) + _g(r, form) - prior).sum(axis=1)


# -- the MAP with the prior of Eq. 7, rounding --------------------------------------------------


def map_estimate(
    noisy: object,
    transition: object,
    *,
    users: int,
    epsilon: float,
    prior: str = "frequency",
    form: str = "exact",
    sensitivity: float = COUNT_SENSITIVITY,
) -> Estimate:
    """MAP post-processing (Eq. 5) with the marginals of :func:`prior_marginals`, for counts
    released with ``Lap(sensitivity / epsilon)`` per cell.

    >>> est = map_estimate([[30.0, 5.0, 70.0], [40.0, 50.0, -3.0]], [[0, 0, 1], [.5, 0, .5], [0, 1, 0]],
    ...                    users=100, epsilon=0.5, prior="uniform")
    >>> est.counts.sum(axis=1).round(9).tolist()
    [100.0, 100.0]
    """
    y = check_noisy(noisy)
    return map_solve(
        y, prior_marginals(y, transition, prior), users=users, epsilon=epsilon, form=form, sensitivity=sensitivity
    )


def round_counts(counts: object, users: int) -> np.ndarray:
    """Integer counts with every row summing to ``users`` (largest remainder; ties to the left).

    >>> round_counts([[1.5, 1.5, 2.0]], 5).tolist()
    [[2, 1, 2]]
    """
    r = np.asarray(counts, dtype=np.float64)
    n = check_positive_int(users, "users")
    floor = np.floor(r + 1e-9)
    remainder = r - floor
    short = (n - floor.sum(axis=1)).astype(np.int64)
    if np.any(short < 0) or np.any(short > r.shape[1]):
        raise ValueError("counts must be >= 0 with row sums equal to users before rounding.")
    order = np.argsort(-remainder, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(r.shape[1])[None, :].repeat(r.shape[0], axis=0), axis=1)
    return (floor + (rank < short[:, None])).astype(np.int64)
