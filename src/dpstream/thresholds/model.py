"""Choosing theta and s together for the error model of the actual pipeline, privately.

``threshold="model"`` in :class:`~dpstream.release.ToPS`.  NM-E (Eq. 6) scores a threshold by a
fixed stand-in for the noise of a tree it does not model (no consistency, no smoother, s from
Eq. 7) and a constant ``c = 60`` that turns counts into bias; this method scores every pair
``(theta, s)`` with :class:`~dpstream.thresholds.error_model.ErrorModel` for the windows the
user cares about (:class:`~dpstream.thresholds.error_model.QueryLengths`), and also releases
the first block's prior.  On the held-out values it runs four private steps, with the budget
``epsilon`` of the threshold split in fixed shares (:data:`SHARES`):

1. **Scale** (1/8): the median ``q50`` by permute-and-flip on the rank score
   ``-|#{v <= t} - m/2|`` (sensitivity 1) over the candidate grid.  The model then treats the
   values as exponential with that median: scale ``lam = q50 / ln 2``, spread
   ``Var(min(v, theta))`` of that exponential, and excess above ``theta`` of ``lam`` per value
   above it.  This is the model's one shape assumption; the data enter the threshold choice
   through exact counts (step 3), the assumption only through ``lam``.
2. **Drift** (1/4): the hold-out cut into 4 blocks; the number of values above ``q50`` in each
   (one change moves one count by 1: L1 sensitivity 1, discrete Laplace of scale
   ``1 / eps``).  The spread of the block fractions beyond their sampling and privacy noise
   (both known) measures how much the level moves between blocks of ``m / 4`` values; it is
   converted to values with the exponential's density at its median, and extrapolated to
   other block sizes as a random walk (``delta^2(bs)`` proportional to ``bs``).  A negative
   estimate counts as no drift.
3. **Selection** (3/8): every pair ``(theta, s)`` scores
   ``U = -sqrt(R_s(theta)^2 / lam^2 + m_theta^2 + ...)``: the model's noise, smoothing and
   prior errors (public after steps 1-2) in units of one value's excess, and the exact count
   ``m_theta`` of held-out values above theta standing for the truncation bias
   ``lam m_theta`` (with its variance term for short windows).  The count is the same for
   every s, so the best s for each theta is the one with the least public error, and only
   theta is selected: U is 1-Lipschitz and decreasing in every count, so it has sensitivity 1
   and is monotone, and a private selection (:mod:`dpstream.thresholds.select`,
   permute-and-flip by default) picks theta; s follows from it.
   With ``period=`` (leaves of one period, :class:`~dpstream.release.periodic.PeriodicPerturber`)
   the public error is the noise of windows that start at a period boundary (whole leaves: no
   smoothing error) for each number ``d`` of measured levels, and ``d`` follows from theta.
   With a window length ``L`` and no period (``leaves=``, :func:`window_leaves`), hierarchies
   whose leaves are ``L / k`` values (``k`` in :data:`LEAF_DIVISORS`, counted from the stream's
   first value) are scored alongside the blocks of ``b^s``, each with every ``d``, for windows of
   ``L`` that start anywhere (noise, smoothing and drift as for blocks,
   :meth:`~dpstream.thresholds.error_model.ErrorModel.leaf_components`); the structure follows
   from theta as s does, so the selection and its budget are unchanged.  Then the drift of step
   2 is taken ``DRIFT_MARGIN`` standard errors *above* its estimate (the most the counts cannot
   rule out): a block longer than the window predicts every window inside it from the past,
   and at a small budget the counts cannot show that the level is stable on that scale.
4. **Prior** (1/4): the mean of ``min(v, theta)`` over the hold-out, with discrete Laplace noise
   on a grid (sensitivity ``theta``), starts the smoother instead of ``theta / 2``.

Candidates are ``step * 1.02^j`` rounded up to multiples of ``step``, and the largest multiple
of ``step`` up to B: a 2% grid, where
the paper scores every multiple of ``step``.  The fewer candidates a private selection has to
beat, the less its noise favours the many useless large thresholds.

Privacy
-------
``epsilon``-DP (the sum of the four steps' spent budgets, each at most its share) at event
level on the held-out values, by sequential composition; only ``theta``, ``s`` and the prior
leave.  The stream after the hold-out is untouched (parallel composition with the perturber).
Under zCDP (a perturber with ``rho``, ``stream_rho`` here) the four steps are unchanged and still
pure ``epsilon``-DP, which is ``epsilon^2 / 2``-zCDP (Bun and Steinke, Proposition 1.4): a zCDP
ToPS states them so, composed with the hierarchy's rho
(:func:`~dpstream.release.tops_privacy.tops_privacy`); only the model's noise term changes, to the
Gaussian node variance.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass, field
from fractions import Fraction

import numpy as np

from dpstream._checks import check_bound, check_choice, check_epsilon, check_positive_int
from dpstream.hierarchy import num_levels
from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.noise.discrete_laplace_law import discrete_laplace
from dpstream.thresholds.error_model import DataSummary, ErrorModel, QueryLengths, aligned_noise_factors
from dpstream.thresholds.select import SELECTIONS, select, selection_epsilon, selection_probabilities

__all__ = [
    "DRIFT_MARGIN",
    "GRID_RATIO",
    "LEAF_DIVISORS",
    "MIN_LEAF",
    "SHARES",
    "ModelChoice",
    "model_candidates",
    "model_selection_laws",
    "model_threshold",
    "noisy_mean",
    "selection_scores",
    "window_leaves",
]

#: Budget shares of the four steps (they sum to 1).
SHARES = {"scale": 0.125, "drift": 0.25, "selection": 0.375, "prior": 0.25}

#: Drift counts only beyond this many standard errors of its estimate for stationary values.
DRIFT_MARGIN = 1.0

#: Ratio of consecutive candidate thresholds.
GRID_RATIO = 1.02

#: With a window length L and no period: leaves of L / k values are scored for these k.
LEAF_DIVISORS = (1, 2, 4, 8)

#: The shortest leaf :func:`window_leaves` proposes.
MIN_LEAF = 16

_DRIFT_BLOCKS = 4
_LN2 = math.log(2.0)
_DENSITY_AT_MEDIAN = 0.5 * _LN2  # t f(t) at the median t of any exponential: ln(2) / 2


@dataclass(frozen=True, kw_only=True)
class ModelChoice:
    """What :func:`model_threshold` chose, and the private estimates it used (all public: each is a
    differentially private output of the hold-out, or a function of those alone).

    Attributes
    ----------
    threshold, smoothed_levels, prior : float, int or None, float
        theta, s (None with a period) and the smoother's start a_0.
    measured_levels : int or None
        With a period, or leaves of a window: d, the measured levels of the periodic hierarchy.
    leaf : int or None
        When a hierarchy with leaves of a fraction of the window was chosen (``leaves=`` of
        :func:`model_threshold`): the leaf length; then ``smoothed_levels`` is None.
    scale : float
        ``lam = q50 / ln 2`` from the private median.
    drift : float
        The private drift rate ``q`` (``delta^2(bs) = q bs``).
    epsilon_spent : float
        What the four steps spent together (at most ``epsilon``).
    details : dict
        The private median, the selection mechanism and the noisy block fractions.

    Privacy
    -------
    The model's expected squared error of a query at this choice is NOT among them: it is an
    exact function of the held-out count above theta, outside the guarantee.  It is kept in the
    private attribute ``_predicted_error`` (None when unknown, e.g. after a snapshot), for studies
    only -- it is no field, so it is neither printed (``repr``), compared, nor stored in a
    snapshot (``dataclasses.asdict``).  ``predicted_error=`` is still accepted by the constructor
    (snapshots of earlier versions hold it) and kept there.  The fields are keywords only (the
    predicted error used to be the fourth positional one).
    """

    threshold: float
    smoothed_levels: int
    prior: float
    scale: float
    drift: float
    epsilon_spent: float
    details: dict = field(default_factory=dict)
    measured_levels: int | None = None
    leaf: int | None = None
    predicted_error: InitVar[float | None] = None

    def __post_init__(self, predicted_error: float | None) -> None:
        object.__setattr__(self, "_predicted_error", predicted_error)

    def __getattr__(self, name: str) -> object:
        if name == "predicted_error":
            raise AttributeError(
                "ModelChoice.predicted_error is private (an exact function of the held-out count above theta, "
                "outside the guarantee); a study reads choice._predicted_error."
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


del ModelChoice.predicted_error  # the InitVar's default, left on the class: reading it goes to __getattr__


def window_leaves(query_length: int, *, max_range: int, fanout: int) -> tuple[int, ...]:
    """Leaf lengths scored for windows of ``query_length`` values: ``L / k`` for ``k`` in
    :data:`LEAF_DIVISORS` that divide ``L``, of at least :data:`MIN_LEAF` values, at most ``r``,
    and not already a block ``b^s`` of the usual hierarchy.  Public: parameters only.

    >>> window_leaves(1440, max_range=2**20, fanout=16)
    (1440, 720, 360, 180)
    >>> window_leaves(4096, max_range=2**20, fanout=16)  # 4096 = 16^3 is a usual block
    (2048, 1024, 512)
    """
    length = check_positive_int(query_length, "query_length")
    max_range = check_positive_int(max_range, "max_range", minimum=2)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    blocks = {fanout**s for s in range(num_levels(max_range, fanout))}
    return tuple(length // k for k in LEAF_DIVISORS
                 if length % k == 0 and MIN_LEAF <= length // k <= max_range and length // k not in blocks)


def model_candidates(upper_bound: float, step: float = 1.0) -> np.ndarray:
    """Candidate thresholds: ``step * 1.02^j`` rounded up to multiples of ``step``, and B's multiple.

    >>> model_candidates(10.0).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    >>> c = model_candidates(1657.0); c.size < 400, float(c[-1]) <= 1657
    (True, True)
    """
    upper_bound = check_bound(upper_bound)
    step = check_bound(step, "threshold_step")
    top = math.floor(upper_bound / step + 1e-9)
    if top < 1:
        raise ValueError(
            f"threshold_step must be <= upper_bound so that there is a candidate threshold, "
            f"got threshold_step={step!r} with upper_bound={upper_bound!r}."
        )
    count = int(math.log(top) / math.log(GRID_RATIO)) + 2
    units = np.unique(np.ceil(GRID_RATIO ** np.arange(count) - 1e-9).astype(np.int64))
    return step * np.append(units[units < top], top).astype(np.float64)


def _exponential_summary(candidates: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Excess mean, excess second moment and truncated variance of an exponential of ``scale``."""
    tail = np.exp(-candidates / scale)
    mean = scale * (1.0 - tail)
    square = 2.0 * scale**2 * (1.0 - tail * (1.0 + candidates / scale))
    return scale * tail, 2.0 * scale**2 * tail, np.maximum(square - mean**2, 0.0)


def noisy_mean(values: np.ndarray, bound: float, *, epsilon: float, seed: BitsSeed = None) -> float:
    """Mean of ``min(v, bound)``, epsilon-DP with exact discrete Laplace noise on a grid.

    Values are rounded to the grid ``g = 2^(floor(log2 bound) - 20)`` (ties to even), their
    integer sum gets discrete Laplace noise of scale ``ceil(bound / g) / epsilon`` grid units
    (rounded up), and the result is clipped to ``[0, bound]``.

    Privacy
    -------
    epsilon-DP at event level: one value moves the integer sum by at most ``ceil(bound / g)``.

    >>> round(noisy_mean(np.full(10_000, 3.0), 10.0, epsilon=10.0, seed=0), 2)
    3.0
    """
    bound = check_bound(bound, "bound")
    epsilon = check_epsilon(epsilon)
    g = 2.0 ** (math.floor(math.log2(bound)) - 20)
    top = math.ceil(bound / g)
    units = np.minimum(np.rint(np.minimum(np.asarray(values, dtype=np.float64), bound) / g), top).astype(np.int64)
    scale = _round_up(Fraction(top) / Fraction(epsilon))
    noise = int(discrete_laplace(make_bits(seed), scale.numerator, scale.denominator, 1)[0])
    total = int(units.sum()) + noise
    return float(min(max(total * g / max(units.size, 1), 0.0), bound))


def _round_up(value: Fraction) -> Fraction:
    """``value`` rounded up to a dyadic rational whose numerator stays below 2^40."""
    shift = max(0, 39 - value.numerator.bit_length() + value.denominator.bit_length())
    return Fraction(math.ceil(value * (1 << shift)), 1 << shift)


def _float_at_least(exact: Fraction) -> float:
    """The smallest float at or above ``exact``: a spent budget is never understated."""
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def _spent_laplace(sensitivity: int, scale: Fraction) -> float:
    """The ε that Laplace noise of ``scale`` spends on a sensitivity (rounded up to a float)."""
    return _float_at_least(Fraction(sensitivity) / scale)


def model_threshold(
    values: np.ndarray,
    *,
    epsilon: float,
    stream_epsilon: float | None,
    upper_bound: float,
    max_range: int,
    fanout: int,
    queries: QueryLengths | None = None,
    levels: tuple[int, ...] | None = None,
    selection: str = "permute-and-flip",
    step: float = 1.0,
    seed: BitsSeed = None,
    period: int | None = None,
    leaves: tuple[int, ...] = (),
    stream_rho: float | None = None,
) -> ModelChoice:
    """Choose theta, s and the prior privately from the held-out values (see the module docstring).

    Parameters
    ----------
    values : array of float
        The held-out values, in [0, upper_bound].
    epsilon : float
        Budget of the whole choice (split by :data:`SHARES`).
    stream_epsilon : float or None
        Budget of the perturber that will release the stream (the model's noise).
    stream_rho : float, optional
        Instead of ``stream_epsilon`` (None): the perturber's zCDP budget (its Gaussian noise scored; the choice
        stays ``epsilon``-DP, which a zCDP release counts as ``epsilon^2 / 2``).
    upper_bound, max_range, fanout, step
        B, r, b and the candidate grid's step.
    queries : QueryLengths, optional
        The windows that matter; default the paper's random queries over ``max_range`` values.
    levels : tuple of int, optional
        The values of s allowed (default every ``0 .. h - 1``).
    selection : str
        ``permute-and-flip`` (default), ``report-noisy-max`` or ``exponential``.
    seed : None, int, Generator or bit source
        Random bits of every step (None: the operating system's CSPRNG).
    period : int, optional
        Score the periodic hierarchy (leaves of ``period`` values) for windows that start at a
        period boundary, instead of blocks of ``b^s`` values (``levels`` is then unused).
    leaves : tuple of int
        Without a period: also score hierarchies whose leaves have these lengths (e.g.
        :func:`window_leaves`), each with every number of measured levels, for windows that
        start anywhere (:meth:`~dpstream.thresholds.error_model.ErrorModel.leaf_components`);
        the best structure for each theta is a public function of theta, as s is.

    Returns
    -------
    ModelChoice

    Privacy
    -------
    ``epsilon``-DP at event level on ``values``; see the module docstring.

    >>> rng = np.random.default_rng(3)
    >>> held = np.minimum(rng.geometric(0.15, 65536), 1000).astype(float)
    >>> choice = model_threshold(held, epsilon=0.1, stream_epsilon=0.1, upper_bound=1000,
    ...                          max_range=2**20, fanout=16, seed=1)
    >>> 20 <= choice.threshold <= 120, choice.smoothed_levels in range(5), choice.epsilon_spent <= 0.1
    (True, True, True)
    """
    epsilon = check_epsilon(epsilon)
    stream_epsilon = check_epsilon(stream_epsilon, "stream_epsilon") if stream_rho is None else None
    stream_rho = None if stream_rho is None else check_epsilon(stream_rho, "stream_rho")
    selection = check_choice(selection, "selection", tuple(SELECTIONS))
    max_range = check_positive_int(max_range, "max_range", minimum=2)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    values = np.asarray(values, dtype=np.float64)
    if values.size < 1:
        raise ValueError("the model threshold needs at least 1 held-out value, got 0.")
    levels = tuple(range(num_levels(max_range, fanout))) if levels is None else tuple(int(s) for s in levels)
    queries = QueryLengths.random(max_range) if queries is None else queries
    held = _HeldOut(values, make_bits(seed), model_candidates(upper_bound, step))
    structures = _Structures(max_range=max_range, fanout=fanout, queries=queries, levels=levels, period=period,
                             leaves=leaves, rho=stream_rho)
    return _four_steps(held, structures, epsilon=epsilon, stream_epsilon=stream_epsilon, selection=selection)


def model_selection_laws(
    values: np.ndarray,
    choice: ModelChoice,
    *,
    epsilon: float,
    stream_epsilon: float,
    upper_bound: float,
    max_range: int,
    fanout: int,
    queries: QueryLengths | None = None,
    selection: str = "permute-and-flip",
    step: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact laws of the two private selections of :func:`model_threshold` on ``values``: the
    probability of every candidate as the median (step 1) and, given the public outputs of steps 1
    and 2 (``choice.scale`` and ``choice.drift``), as theta (step 3).  For audits: with the noisy
    prior's law (step 4, given theta) they are the likelihood of everything the model releases.
    Blocks of ``b^s`` values (no period, no leaves); at most 16 candidates for permute-and-flip
    (:func:`~dpstream.thresholds.select.selection_probabilities`).

    >>> held = np.array([0.0, 0.0, 2.0, 3.0, 5.0, 8.0])
    >>> choice = model_threshold(held, epsilon=1.0, stream_epsilon=1.0, upper_bound=8, max_range=16, fanout=4, seed=1)
    >>> median, theta = model_selection_laws(held, choice, epsilon=1.0, stream_epsilon=1.0, upper_bound=8,
    ...                                      max_range=16, fanout=4)
    >>> median.size == theta.size == 8, round(float(median.sum()), 9), round(float(theta.sum()), 9)
    (True, 1.0, 1.0)
    """
    held = _HeldOut(np.asarray(values, dtype=np.float64), None, model_candidates(upper_bound, step))
    queries = QueryLengths.random(max_range) if queries is None else queries
    structures = _Structures(max_range=max_range, fanout=fanout, queries=queries,
                             levels=tuple(range(num_levels(max_range, fanout))), period=None, leaves=())
    rows, _ = _public_errors(held.candidates, structures, m=held.m, scale=choice.scale, drift=choice.drift,
                             eps_prior=epsilon * SHARES["prior"], stream_epsilon=stream_epsilon)
    median = selection_probabilities("permute-and-flip", held.rank_scores(), epsilon=epsilon * SHARES["scale"])
    theta = selection_probabilities(selection, held.theta_scores(rows, queries)[1],
                                    epsilon=epsilon * SHARES["selection"], monotone=True)
    return median, theta


@dataclass(frozen=True, kw_only=True)
class _Structures:
    """The hierarchies the model scores: chunks of r values, fan-out b, the windows that matter, the
    allowed s, and a period or the leaf lengths of a window (see :func:`model_threshold`)."""

    max_range: int
    fanout: int
    queries: QueryLengths
    levels: tuple[int, ...]
    period: int | None
    leaves: tuple[int, ...]
    rho: float | None = None  # the perturber's zCDP budget (Gaussian noise), instead of its epsilon


def _four_steps(
    held: _HeldOut, structures: _Structures, *, epsilon: float, stream_epsilon: float | None, selection: str
) -> ModelChoice:
    """The four steps of :func:`model_threshold` on checked arguments, in the order they draw bits."""
    values = held.values

    # 1. scale: the median by permute-and-flip on ranks
    median, scale_spent = held.median(epsilon * SHARES["scale"])
    scale = median / _LN2

    # 2. drift: counts above the median in 4 blocks
    # With leaves of a window to choose from, the structures are scored with the most drift the
    # counts cannot rule out: a block longer than the window predicts every window inside it, and
    # at a small budget the counts cannot show that the level is stable on that scale.
    drift, drift_details, drift_spent = _drift(values, median, scale, epsilon * SHARES["drift"], held.bits,
                                               upper=bool(structures.leaves))

    # 3. selection of (theta, s)
    eps_prior = epsilon * SHARES["prior"]
    rows, shapes = _public_errors(held.candidates, structures, m=held.m, scale=scale, drift=drift,
                                  eps_prior=eps_prior, stream_epsilon=stream_epsilon)
    queries = structures.queries
    index, best, score, select_spent = held.select(rows, queries, selection, epsilon * SHARES["selection"])
    s, measured, leaf = shapes[best]
    theta = float(held.candidates[index])

    # 4. the prior
    prior = noisy_mean(values, theta, epsilon=eps_prior, seed=held.bits)
    parts = (scale_spent, drift_spent, select_spent, _prior_spent(theta, eps_prior))
    spent = _float_at_least(sum(map(Fraction, parts)))
    return ModelChoice(
        threshold=theta, smoothed_levels=s, prior=prior,
        predicted_error=score**2 * queries.mean_square * scale**2 / held.m**2, scale=scale, drift=drift,
        epsilon_spent=spent, details={"median": median, "selection": selection, **drift_details},
        measured_levels=measured, leaf=leaf,
    )


@dataclass(frozen=True)
class _HeldOut:
    """The held-out values of :func:`model_threshold`, its random bits and candidate thresholds, and
    the two private selections made on them."""

    values: np.ndarray
    bits: object
    candidates: np.ndarray
    ordered: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ordered", np.sort(self.values))

    @property
    def m(self) -> int:
        return self.values.size

    def rank_scores(self) -> np.ndarray:
        """Step 1's scores: ``-|#{v <= t} - m / 2|`` for every candidate ``t`` (sensitivity 1)."""
        at_most = np.searchsorted(self.ordered, self.candidates, side="right")
        return -np.abs(at_most - self.m / 2.0)

    def median(self, epsilon: float) -> tuple[float, float]:
        """Step 1: the candidate nearest the median by permute-and-flip on ranks, and its budget."""
        index = select("permute-and-flip", self.rank_scores(), epsilon=epsilon, seed=self.bits)
        return float(self.candidates[index]), selection_epsilon("permute-and-flip", epsilon)

    def select(self, rows: np.ndarray, queries: QueryLengths, selection: str,
               epsilon: float) -> tuple[int, int, float, float]:
        """Step 3's private part: the index of theta, the row of its best structure, its score and the budget.

        The counts enter every structure alike, so the best structure for a theta is the one with
        the least public error: a public function of theta.  Only theta is selected privately.
        """
        best_level, scores = self.theta_scores(rows, queries)
        index = select(selection, scores, epsilon=epsilon, monotone=True, seed=self.bits)
        return index, int(best_level[index]), float(scores[index]), selection_epsilon(selection, epsilon,
                                                                                       monotone=True)

    def theta_scores(self, rows: np.ndarray, queries: QueryLengths) -> tuple[np.ndarray, np.ndarray]:
        """Step 3's scores: the best structure of every candidate theta and the score of theta (sensitivity 1,
        monotone) from the exact count above it and that structure's public error."""
        above = self.m - np.searchsorted(self.ordered, self.candidates, side="left")  # m_theta = |{v >= theta}|
        kappa = queries.mean / queries.mean_square  # weight of the truncation's variance term
        best_level = np.argmin(rows, axis=0)
        public = rows[best_level, np.arange(self.candidates.size)]
        return best_level, selection_scores(above, public, kappa=kappa, m=self.m)


def _public_errors(
    candidates: np.ndarray,
    structures: _Structures,
    *,
    m: int,
    scale: float,
    drift: float,
    eps_prior: float,
    stream_epsilon: float | None,
) -> tuple[np.ndarray, list[tuple[int | None, int | None, int | None]]]:
    """Step 3's public part: the error of every structure at every candidate theta, in units of one
    value's excess (rows), and each row's structure ``(s, measured levels, leaf)``.

    The structures are blocks of ``b^s`` values for each allowed s, the leaves of ``leaves``
    with each number of measured levels, or, with ``period``, the periodic hierarchy with each
    number of measured levels (aligned windows are whole leaves: no smoothing error).
    """
    max_range, fanout, queries = structures.max_range, structures.fanout, structures.queries
    excess, excess_square, spread = _exponential_summary(candidates, scale)
    prior_noise = 2.0 * (candidates / (m * eps_prior)) ** 2  # variance of the noisy mean of step 4
    model = ErrorModel(epsilon=None if structures.rho is not None else stream_epsilon, max_range=max_range,
                       fanout=fanout, queries=queries, rho=structures.rho)
    rows, shapes = [], []
    if structures.period is not None:
        factors = aligned_noise_factors(period=structures.period, max_range=max_range, fanout=fanout, queries=queries)
        for d in factors:
            rows.append(model.node_variance(candidates, d) * factors[d] * m**2
                        / (queries.mean_square * scale**2))
            shapes.append((None, d, None))
        return np.array(rows), shapes
    for s in structures.levels:
        bs = fanout**s
        summary = DataSummary(candidates, excess, excess_square, spread, drift,
                              prior_noise + drift * (m + bs) / 2.0)
        parts = model.components(summary, s)
        rows.append((parts["noise"] + parts["smoothing"] + parts["prior"]) * m**2 / (queries.mean_square * scale**2))
        shapes.append((s, None, None))
    for leaf in structures.leaves:
        summary = DataSummary(candidates, excess, excess_square, spread, drift,
                              prior_noise + drift * (m + leaf) / 2.0)
        for d in model.leaf_levels(leaf):
            parts = model.leaf_components(summary, leaf, d)
            rows.append((parts["noise"] + parts["smoothing"] + parts["prior"]) * m**2
                        / (queries.mean_square * scale**2))
            shapes.append((None, d, leaf))
    return np.array(rows), shapes


def selection_scores(counts: np.ndarray, public: np.ndarray, *, kappa: float, m: int) -> np.ndarray:
    """The scores of step 3: ``-sqrt(P + (kappa m)^2 + (1 - kappa) c^2 + 2 kappa m c)`` for counts ``c``.

    ``P`` is the public part of the error (noise, smoothing, prior) in units of one value's
    excess; ``c^2 + kappa (2 m c - c^2)`` is the truncation error of the exponential stand-in
    (``E[L^2] mu^2 + E[L] tau^2`` with ``mu = lam c / m`` and ``E[((v - theta)^+)^2] = 2 lam^2 c / m``)
    in the same units, ``kappa = E[L] / E[L^2] <= 1``.  The constant ``(kappa m)^2`` makes the
    score 1-Lipschitz in ``c``: the derivative ``((1 - kappa) c + kappa m) / sqrt(...)`` is at
    most 1 when ``P + (kappa m)^2 >= (kappa m)^2``.  So a change of one value, which moves every
    count by at most 1 and all the same way, moves every score by at most 1, the same way.

    >>> selection_scores(np.array([0, 3]), np.array([16.0, 16.0]), kappa=0.0, m=10).tolist()
    [-4.0, -5.0]
    """
    counts = np.asarray(counts, dtype=np.float64)
    return -np.sqrt(public + (kappa * m) ** 2 + (1.0 - kappa) * counts**2 + 2.0 * kappa * m * counts)


def _prior_spent(theta: float, epsilon: float) -> float:
    g = 2.0 ** (math.floor(math.log2(theta)) - 20)
    top = math.ceil(theta / g)
    return _spent_laplace(top, _round_up(Fraction(top) / Fraction(epsilon)))


def _drift(values: np.ndarray, median: float, scale: float, epsilon: float, bits,
           upper: bool = False) -> tuple[float, dict, float]:
    """Random-walk drift rate ``q`` (``delta^2(bs) = q bs``) from noisy block counts above the median
    (``upper``: DRIFT_MARGIN standard errors above the estimate instead of below)."""
    m = values.size
    block = m // _DRIFT_BLOCKS
    noise_scale = _round_up(Fraction(1) / Fraction(epsilon))
    noise = discrete_laplace(bits, noise_scale.numerator, noise_scale.denominator, _DRIFT_BLOCKS)
    spent = _spent_laplace(1, noise_scale)
    if block < 16:
        return 0.0, {"drift_fractions": None}, spent
    blocks = values[: block * _DRIFT_BLOCKS].reshape(_DRIFT_BLOCKS, block)
    counts = (blocks > median).sum(axis=1) + noise
    fractions = counts / block
    f = float(np.clip(fractions.mean(), 0.05, 0.95))
    # per block: variance of the privacy noise (discrete Laplace, below 2 t^2) and of the sampling
    variance = 2.0 * float(noise_scale) ** 2 / block**2 + f * (1.0 - f) / block
    excess = float(np.mean(np.diff(fractions) ** 2)) - 2.0 * variance
    # count only drift beyond DRIFT_MARGIN standard errors of that estimate for stationary values
    # (three correlated differences: sd of their mean square ~ (4 sqrt(2) / 3) variance)
    margin = DRIFT_MARGIN * 4.0 * math.sqrt(2.0) / 3.0 * variance
    if upper:  # the most drift the counts cannot rule out
        margin = -margin
    rho2 = max(excess - margin, 0.0) / _DENSITY_AT_MEDIAN**2  # squared relative change of the level per block
    drift = rho2 * scale**2 / block
    return drift, {"drift_fractions": fractions.tolist()}, spent
