"""Posterior means of the per-step counts under the prior of Cao et al. (DBSec 2023, Eqs. 7-8).

The MAP estimate of :mod:`~dpstream.postprocess.estimators` is the posterior *mode*.  Under an
L1 (Laplace) likelihood a mode sticks to kinks and is not what minimises the squared error; the
posterior *mean* is (it is the Bayes estimator for the MSE).  This module computes it.

Model, per step ``t`` (steps are treated independently, as by the MAP of Section 5):

* prior (Eq. 8): ``R^t ~ Multinomial(n, P^t)``, ``P^t`` from Eq. 7 (:func:`prior_marginals`);
* likelihood: every cell carries independent noise of scale ``b = sensitivity / epsilon``,
  either continuous Laplace (density ``exp(-|x| / b) / 2b``) or discrete Laplace, the
  two-sided geometric law ``P[X = x] = tanh(1 / 2b) exp(-|x| / b)`` on the integers.

The counts are integers.  On integer counts both likelihoods are proportional to the same
kernel ``exp(-|r~_l - r_l| / b)`` (their normalising constants do not depend on ``r``), so the
exact posterior is *the same function of the released counts* under both; the ``likelihood``
parameter matters where a method uses the noise variance (``2 b^2`` for Laplace,
``2 a / (1 - a)^2`` with ``a = exp(-1 / b)`` for discrete Laplace; see :func:`noise_variance`),
and it makes the discrete model refuse non-integer releases (impossible under it).

Exact method.  The multinomial is a product of independent cells conditioned on their sum:
``Pr(r) = n! prod_l P_l^{r_l} / r_l!`` on ``{sum r = n}``.  With the per-cell likelihood the
posterior is ``prod_l w_l(r_l)`` on ``{sum r = n}``, ``w_l(k) = P_l^k / k! exp(-|r~_l - k| / b)``,
and the posterior mean of cell ``l`` is

    ``E[r_l | r~] = sum_k k w_l(k) D_l(n - k) / sum_k w_l(k) D_l(n - k)``,

``D_l`` the convolution of the other cells' weights (truncated at ``n``).  Prefix and suffix
convolutions give every ``D_l`` with at most ``3m - 6`` convolutions: at most ``O(m n^2)`` per
step, exact for the sum constraint, vectorised over the steps.  For numerical range, every
cell's weights are first *tilted* by ``exp(theta k)`` (which multiplies the posterior by the
constant ``exp(theta n)``) with ``theta`` from the approximation below, so that the independent
tilted cells already sum to ``n`` on average; each cell is then scaled to a largest weight of 1
and weights below ``exp(-50)`` of it are dropped (the convolutions skip them: each cell keeps
the window, found by bisection, where its log-concave weights are within 50 of their largest,
about +-10 standard deviations or 50 noise scales).  The dropped terms change a mean by about
``exp(-50) (n + 1) sqrt(2 pi Var S)`` relative (``S`` the tilted cells' sum), below 1e-15 up to
``n`` of several million.  Cost: about ``3 sum_j W_{<j} W_j`` multiply-adds a step (``W`` the
window widths, ``W_{<j}`` their running sum capped at ``n + 1``); the paper's setting takes
0.05-0.2 million a step, 100 locations with ``n = 10,000`` take 300-500 million.

Approximation (large windows).  The multinomial is also independent Poisson cells of rates
``lambda_l = n P_l e^theta`` conditioned on their sum, for any ``theta``.  Dropping the
condition and choosing ``theta`` so that the cells' posterior means sum to ``n`` (the saddle
point of the sum constraint, or exponential tilting) gives the per-cell posterior of a Poisson
prior under the Laplace kernel, whose moments have closed forms in the Poisson distribution
function: with ``u = lambda e^{1/b}``, ``d = lambda e^{-1/b}`` and ``K = floor(r~)``,

    ``sum_k k^(j) w(k) = e^{-r~/b} u^j sum_{k <= K-j} u^k / k!  +  e^{r~/b} d^j sum_{k > K-j} d^k / k!``

(``k^(j)`` the falling factorial), the partial sums taken as log incomplete gamma functions
(continued fraction / series in the far tails where they underflow).  ``O(m)`` per step and
Newton iteration.  If the cells' posteriors were Gaussian the tilted means would be exact
(conditioning independent Gaussians on their sum shifts each along its variance, as the tilt
does).  The first correction for their skewness (a local Edgeworth expansion of the other
cells' sum, to first order in the third cumulants ``k_l``; ``V = sum v_l``, ``K_3 = sum k_l``) is

    ``E[r_l | S = n] ~ mu_l + (v_l K_3 / V - k_l) / (2 V)``,

which sums to zero over the cells; it is applied where ``V >= 4``.  The remaining error is of
order ``1 / V`` relative to a standard deviation and largest with few cells and wide
posteriors.  Measured against the exact method: the paper's setting (``n = 200``, three
locations, every epsilon of Fig. 4(a)) and ``n`` up to 3,000, at most 0.4 counts off (root mean
square at most 0.1; MSE within 0.1 %); 100 locations, at most 1e-3 counts off.  With ``V`` of a
few units (narrow posteriors: few users, or large epsilon) the lattice matters and errors reach
0.25 counts; those steps are cheap for the exact method, which ``exact=None`` then uses.

Measured MSE (``benchmarks/postprocess_mean_study.py``, 50 rounds, paired 95 % intervals): on
the paper's setting and on an 8-location ring, with discrete or continuous Laplace noise, the
posterior mean beats the MLE at every epsilon from 0.02 to 2 (by 4 % and 8 % at epsilon = 2,
where the MAP is about 50 % and 25 % worse than the MLE) and the MAP up to 36 %, with one tie
(epsilon = 0.02 on the ring, where both return nearly the prior).

Departures from the paper.  The estimator is the posterior mean, not the mode (Eq. 5); the
prior is Eq. 8 with the exact ``ln r!`` on integer counts (no Stirling form, no continuous
relaxation); the likelihood is Eq. 6 restricted to integer counts.

Everything here is post-processing: deterministic, no randomness, no privacy budget spent.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammainc, gammaincc, gammaln

from dpstream._checks import check_choice, check_positive_int
from dpstream.noise import double_geometric_variance, laplace_variance
from dpstream.postprocess.estimate import Estimate, check_marginals, check_noisy, mle_estimate, prior_marginals
from dpstream.postprocess.exact_posterior import EXACT_MAX_COST, exact_cost, exact_means, weight_windows
from dpstream.postprocess.mechanism import COUNT_SENSITIVITY, LaplaceCounts, laplace_scale

__all__ = [
    "LIKELIHOODS",
    "EXACT_MAX_COST",
    "default_likelihood",
    "noise_variance",
    "check_likelihood",
    "posterior_mean",
    "posterior_mean_solve",
]

#: The two per-cell noise laws a release may have used (same scale ``b``; see the module docstring).
LIKELIHOODS = ("laplace", "discrete_laplace")


#: Below this an incomplete gamma function has lost its digits to underflow; the tail formulas take over.
_TINY = 1e-280
_MAX_ITERATIONS = 100


def default_likelihood() -> str:
    """The likelihood :class:`~dpstream.postprocess.mechanism.LaplaceCounts` declares for its release.

    >>> default_likelihood() in LIKELIHOODS
    True
    """
    return LaplaceCounts.likelihood


def noise_variance(scale: float, likelihood: str) -> float:
    """Variance of one cell's noise of scale ``b``: ``2 b^2`` (Laplace) or ``2 a / (1 - a)^2``,
    ``a = exp(-1 / b)`` (discrete Laplace, always below ``2 b^2``).

    >>> noise_variance(1.0, "laplace"), round(noise_variance(1.0, "discrete_laplace"), 6)
    (2.0, 1.841347)
    """
    likelihood = check_choice(likelihood, "likelihood", LIKELIHOODS)
    return laplace_variance(scale) if likelihood == "laplace" else double_geometric_variance(scale)


def check_likelihood(likelihood: str | None, noisy: np.ndarray) -> str:
    """``likelihood`` (None: :func:`default_likelihood`); the discrete model needs integer counts."""
    likelihood = default_likelihood() if likelihood is None else check_choice(likelihood, "likelihood", LIKELIHOODS)
    if likelihood == "discrete_laplace":
        bad = np.argwhere(noisy != np.round(noisy))
        if bad.size:
            row, col = bad[0]
            # one quoted name: two far apart would read as one long quoted run, which an error line cuts
            raise ValueError(f"the likelihood discrete_laplace needs integer noisy counts; row {row + 1}, column "
                             f"{col + 1} is {float(noisy[row, col])!r} (for counts released with continuous "
                             "Laplace noise pass likelihood='laplace').")
    return likelihood


# -- partial sums of the exponential series ---------------------------------------------------


def _log_head(top: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``ln sum_{k=0}^{top} x^k / k!`` for integer-valued ``top`` (``-inf`` below 0) and ``x > 0``.

    It is ``x + ln Q(top + 1, x)`` (Q the regularised upper incomplete gamma function).  Where Q
    underflows (``x`` far above ``top``) the continued fraction ``Gamma(a, x) = e^{-x} x^a h``
    (modified Lentz) gives ``a ln x - ln Gamma(a) + ln h``, ``a = top + 1``.
    """
    out = np.full(np.broadcast(top, x).shape, -np.inf)
    top, x = np.broadcast_to(top, out.shape), np.broadcast_to(x, out.shape)
    some = top >= 0
    a, xs = top[some] + 1.0, x[some]
    q = gammaincc(a, xs)
    with np.errstate(divide="ignore"):
        value = xs + np.log(q)
    tail = ~(q > _TINY)
    if tail.any():
        at, xt = a[tail], xs[tail]
        tiny = 1e-300
        b = xt + 1.0 - at
        c = np.full_like(b, 1.0 / tiny)
        d = 1.0 / b
        h = d.copy()
        open_ = np.ones(b.shape, dtype=bool)
        for i in range(1, 2000):
            an = -i * (i - at)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            d = 1.0 / d
            delta = d * c
            h = np.where(open_, h * delta, h)
            open_ &= np.abs(delta - 1.0) > 4e-16
            if not open_.any():
                break
        value[tail] = at * np.log(xt) - gammaln(at) + np.log(h)
    out[some] = value
    return out


def _log_tail(top: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``ln sum_{k > top} x^k / k!`` for integer-valued ``top`` (``x`` below 0) and ``x > 0``.

    It is ``x + ln P(top + 1, x)`` (P the regularised lower incomplete gamma function).  Where P
    underflows (``x`` far below ``top``) the series ``sum_j x^j / (a (a+1) ... (a+j))`` gives
    ``a ln x - ln Gamma(a) + ln(series)``, ``a = top + 1``.
    """
    top, x = np.broadcast_arrays(top, x)
    out = x.astype(np.float64).copy()
    some = top >= 0
    a, xs = top[some] + 1.0, x[some]
    p = gammainc(a, xs)
    with np.errstate(divide="ignore"):
        value = xs + np.log(p)
    tail = ~(p > _TINY)
    if tail.any():
        at, xt = a[tail], xs[tail]
        term = 1.0 / at
        total = term.copy()
        for j in range(1, 2000):
            term = term * xt / (at + j)
            total += term
            if np.all(term <= 1e-17 * total):
                break
        value[tail] = at * np.log(xt) - gammaln(at) + np.log(total)
    out[some] = value
    return out


def _cell_moments(log_rate: np.ndarray, noisy: np.ndarray, scale: float,
                  skew: bool = False) -> tuple[np.ndarray, ...]:
    """Mean and variance (and with ``skew`` the third central moment) of every cell's posterior
    under a Poisson(``e^log_rate``) prior and the kernel ``exp(-|r~ - k| / b)`` (the module
    docstring's closed form).  Cells of rate 0 are 0."""
    moments = [np.zeros(log_rate.shape) for _ in range(3 if skew else 2)]
    live = np.isfinite(log_rate)
    lr, y = log_rate[live], noisy[live]
    inv = 1.0 / scale
    lu, ld = lr + inv, lr - inv
    u, d = np.exp(lu), np.exp(ld)
    top = np.floor(y)
    logs = []
    for j in range(4 if skew else 3):
        low = -y * inv + j * lu + _log_head(top - j, u)
        high = y * inv + j * ld + _log_tail(top - j, d)
        logs.append(np.logaddexp(low, high))
    f1, f2 = np.exp(logs[1] - logs[0]), np.exp(logs[2] - logs[0])  # E[k], E[k (k - 1)]
    moments[0][live] = f1
    moments[1][live] = np.maximum(f2 + f1 - f1 * f1, 0.0)
    if skew:
        f3 = np.exp(logs[3] - logs[0])  # E[k (k - 1) (k - 2)]
        square = f2 + f1
        moments[2][live] = f3 + 3.0 * f2 + f1 - 3.0 * f1 * square + 2.0 * f1 ** 3
    return tuple(moments)


def _solve_tilt(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int,
                tolerance: float = 1e-12) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``theta`` per step with ``sum_l E[k_l]`` = ``users`` under rates ``e^{log_rate + theta}``.

    The sum is increasing in ``theta`` with derivative ``sum_l Var[k_l]``: Newton steps (at most
    4 in ``theta``, i.e. a factor e^4 in the rates) safeguarded by bisection once bracketed.
    Returns ``theta``, the means and variances there, and the iterations used.
    """
    steps = log_rate.shape[0]
    theta = np.zeros(steps)
    lo, hi = np.full(steps, -np.inf), np.full(steps, np.inf)
    mean = np.empty(log_rate.shape)
    var = np.empty(log_rate.shape)
    active = np.arange(steps)
    iterations = 0
    while active.size and iterations < _MAX_ITERATIONS:
        iterations += 1
        mu, v = _cell_moments(log_rate[active] + theta[active, None], noisy[active], scale)
        mean[active], var[active] = mu, v
        excess = mu.sum(axis=1) - users
        slope = v.sum(axis=1)
        t = theta[active]
        lo[active] = np.where(excess < 0, t, lo[active])
        hi[active] = np.where(excess > 0, t, hi[active])
        done = np.abs(excess) <= tolerance * users
        width = hi[active] - lo[active]
        closed = np.isfinite(lo[active]) & np.isfinite(hi[active]) & (width <= 1e-14 * (1 + np.abs(t)))
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.clip(-excess / slope, -4.0, 4.0)
        step = np.where(slope > 0, step, np.where(excess < 0, 4.0, -4.0))
        proposal = t + step
        a_lo, a_hi = lo[active], hi[active]
        inside = (proposal > a_lo) & (proposal < a_hi)
        bracketed = np.isfinite(a_lo) & np.isfinite(a_hi)
        theta[active] = np.where(done, t, np.where(inside | ~bracketed, proposal, 0.5 * (a_lo + a_hi)))
        active = active[~(done | closed)]
    return theta, mean, var, iterations


def _approximate_means(log_rate: np.ndarray, noisy: np.ndarray, scale: float, users: int, mean: np.ndarray,
                       var: np.ndarray) -> np.ndarray:
    """The tilted means with the first Edgeworth correction of the sum constraint (module docstring),
    ``E[r_l | S = n] ~ mu_l + (v_l K_3 / V - k_l) / 2V`` (``k_l`` the cell's third cumulant, ``V`` and
    ``K_3`` the sums over cells), applied where ``V >= 4`` (an expansion in ``1 / V``; on a narrower
    lattice it is no guide).  The tilt's residual goes to the cells in proportion to ``v_l``, and the
    Euclidean projection onto ``{r >= 0, sum r = n}`` (a no-op unless a count came out negative)
    keeps the answer a count vector."""
    third = _cell_moments(log_rate, noisy, scale, skew=True)[2]
    total = var.sum(axis=1, keepdims=True)
    positive = total > 0
    share = np.where(positive, var / np.where(positive, total, 1.0), 1.0 / var.shape[1])
    correction = (share * third.sum(axis=1, keepdims=True) - third) / (2.0 * np.where(positive, total, 1.0))
    residual = mean.sum(axis=1, keepdims=True) - users
    counts = mean + np.where(total >= 4.0, correction, 0.0) - residual * share
    return mle_estimate(counts, users=users).counts


# -- public functions -------------------------------------------------------------------------


def posterior_mean_solve(noisy: object, marginals: object, *, users: int, epsilon: float,
                         sensitivity: float = COUNT_SENSITIVITY, likelihood: str | None = None,
                         exact: bool | None = None):
    """Posterior mean of every step's counts given the marginals ``P^t`` (``T x m``).

    Parameters
    ----------
    noisy : array_like
        ``T x m`` released counts.
    marginals : array_like
        ``T x m`` prior marginals ``P^t`` (rows are normalised).
    users : int
        The public number ``n`` of users.
    epsilon, sensitivity : float
        The release's per-step budget and L1 sensitivity: noise scale ``sensitivity / epsilon``.
    likelihood : {'laplace', 'discrete_laplace'} or None
        The noise law of the release (None: what :class:`LaplaceCounts` declares).  The
        posterior mean is the same under both (module docstring); the discrete law requires
        integer ``noisy``.
    exact : bool or None
        True: the exact ``O(m n^2)`` dynamic programme; False: the tilted-Poisson approximation;
        None: per step, exact when its convolutions cost at most :data:`EXACT_MAX_COST`
        (always for the paper's setting; the approximation for wide posteriors, e.g. 10,000
        users at 100 locations).  Steps whose cost, guessed from windows of +-10 posterior
        standard deviations, exceeds four times that are not examined further.

    Returns
    -------
    Estimate
        ``counts`` (``>= 0``, rows summing to ``n``), ``multipliers`` the tilts ``theta`` per
        step, ``kkt_residual`` the largest ``|sum_l E_theta[r_l] - n|`` left by the tilt search
        (the approximation's only equation; it is moved onto the counts in proportion to their
        posterior variances), ``iterations`` of that search.

    Examples
    --------
    A noisy release that is nearly exact leaves nearly the truth; a noisier one is pulled
    towards the prior ``n P = (2, 3, 5)``, and every row sums to ``n``:

    >>> posterior_mean_solve([[3.0, 0.0, 7.0]], [[0.2, 0.3, 0.5]], users=10, epsilon=60.0).counts.round(6).tolist()
    [[3.0, 0.0, 7.0]]
    >>> est = posterior_mean_solve([[3.0, 0.0, 7.0]], [[0.2, 0.3, 0.5]], users=10, epsilon=0.01)
    >>> bool(abs(est.counts - [2, 3, 5]).max() < 0.05), round(float(est.counts.sum()), 9)
    (True, 10.0)
    """
    y = check_noisy(noisy)
    p = check_marginals(marginals, y.shape)
    n = check_positive_int(users, "users")
    scale = laplace_scale(epsilon, sensitivity)
    check_likelihood(likelihood, y)
    with np.errstate(divide="ignore"):
        log_rate = np.log(n * p)
    theta, mean, var, iterations = _solve_tilt(log_rate, y, scale, n)
    residual = mean.sum(axis=1) - n
    tilted = log_rate + theta[:, None]
    counts = np.empty(y.shape)
    chosen = np.zeros(y.shape[0], dtype=bool)
    if exact is None or exact:
        # Windows cost ~90 log-gamma evaluations a cell: skip the steps whose cost, guessed from
        # windows of +-10 posterior standard deviations, is far above the budget.
        guess = exact_cost(None, None, n, width=np.minimum(20.0 * np.sqrt(var) + 3.0, n + 1.0))
        candidates = np.flatnonzero(np.ones_like(chosen) if exact else guess <= 4 * EXACT_MAX_COST)
        lo, hi = weight_windows(tilted[candidates], y[candidates], scale, n)
        cost = exact_cost(lo, hi, n)
        keep = np.ones(candidates.size, dtype=bool) if exact else cost <= EXACT_MAX_COST
        chosen[candidates[keep]] = True
        if keep.any():
            counts[chosen] = exact_means(tilted[chosen], y[chosen], scale, n, lo[keep], hi[keep], cost[keep])
    if not chosen.all():
        rest = ~chosen
        counts[rest] = _approximate_means(tilted[rest], y[rest], scale, n, mean[rest], var[rest])
    sums = counts.sum(axis=1)
    return Estimate(counts=counts, multipliers=theta, kkt_residual=float(np.max(np.abs(residual))),
                    sum_residual=float(np.max(np.abs(sums - n))), iterations=iterations)


def posterior_mean(noisy: object, transition: object, *, users: int, epsilon: float, prior: str = "frequency",
                   sensitivity: float = COUNT_SENSITIVITY, likelihood: str | None = None, exact: bool | None = None):
    """Posterior-mean post-processing with the marginals of :func:`prior_marginals` (Eq. 7):
    :func:`posterior_mean_solve` for a public transition matrix.

    >>> est = posterior_mean([[30.0, 5.0, 70.0], [40.0, 50.0, -3.0]], [[0, 0, 1], [.5, 0, .5], [0, 1, 0]],
    ...                      users=100, epsilon=0.5, prior="uniform")
    >>> est.counts.sum(axis=1).round(9).tolist()
    [100.0, 100.0]
    """
    y = check_noisy(noisy)
    return posterior_mean_solve(y, prior_marginals(y, transition, prior), users=users, epsilon=epsilon,
                                sensitivity=sensitivity, likelihood=likelihood, exact=exact)
