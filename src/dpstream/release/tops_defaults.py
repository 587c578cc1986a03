"""ToPS's defaults fitted to a stream of known length, the structures its model may choose
(:func:`model_structures`), and the warning of a release that cannot be useful.

The paper's defaults (a hold-out of :data:`PAPER_HOLD` values, hierarchies of :data:`PAPER_MAX_RANGE`
values, candidate thresholds ``1, 2, ..., B``) suit streams of millions of values.  A stream of a few
thousand (one meter's month of quarter-hours, one key of ``release --key-column``) gets nothing
from them: the hold-out swallows it, and with B = 5 theta can only be 1, ..., 5.  Given the
stream's **expected length** N (``expected_length=``, ``release --expected-length``: a public
number, said by the publisher, never read from the data), :func:`fit_defaults` sets what was not
given from N, B and the window of interest:

* the hold-out: ``N / 8`` (:data:`HOLD_FRACTION`), at least :data:`MIN_HOLD`, whole periods (or
  windows) when one fits, at most the paper's; refused when it would exceed a quarter of N;
* the tree: the smallest power of the fan-out covering the released values and the window, at
  most the paper's ``2^20`` (fewer levels, less noise on each);
* the grid of candidate thresholds: multiples of ``B / 1024`` (:data:`THRESHOLD_UNITS`) instead of
  integers;
* the smoothed levels: blocks of ``b^s`` values at most a quarter of the released values
  (:data:`MIN_BLOCKS`), so the first block, predicted from the prior alone, is at most a quarter.

Without N nothing changes: the paper's values, as before.  A value given explicitly is kept as it is.

:func:`release_warning` decides from public parameters only (epsilon, B, the grid, the hold-out,
N, r, b, s), never from the data, whether the released values will be mostly chance, mostly the
prior or mostly noise, and says why in one line; ToPS issues it as a :class:`ReleaseWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from dpstream._checks import check_bound, check_length, check_nonnegative_int, check_positive_int
from dpstream.hierarchy import num_levels
from dpstream.thresholds.model import SHARES, model_candidates
from dpstream.thresholds.noisy_max import nm_e_slope

__all__ = [
    "HOLD_FRACTION",
    "MIN_BLOCKS",
    "MIN_HOLD",
    "MODEL_MAX_LEAVES",
    "PAPER_HOLD",
    "PAPER_MAX_RANGE",
    "PAPER_THRESHOLD_STEP",
    "THRESHOLD_UNITS",
    "FittedDefaults",
    "ReleaseWarning",
    "check_threshold_choice",
    "fit_defaults",
    "fit_params",
    "model_structures",
    "public_hold",
    "release_warning",
    "warn_if_useless",
]

#: The paper's hold-out, tree size and spacing of candidate thresholds: the defaults without an expected length.
PAPER_HOLD = 65536
PAPER_MAX_RANGE = 2**20
PAPER_THRESHOLD_STEP = 1.0
#: With an expected length N: the hold-out is N / HOLD_FRACTION values, at least MIN_HOLD, at most N / 4.
HOLD_FRACTION = 8
MIN_HOLD = 64
#: With an expected length: blocks of b^s values fit at least this many times in the released values.
MIN_BLOCKS = 4
#: With an expected length: the candidate thresholds are multiples of B / THRESHOLD_UNITS.
THRESHOLD_UNITS = 1024
#: A private choice among K candidates is mostly chance when its hold-out times its budget is below this times ln K.
CHANCE_FACTOR = 16
#: Fewer candidate thresholds than this (``B / threshold_step``) are too coarse a grid.
MIN_CANDIDATES = 8


def public_hold(threshold: float | None, **given: object) -> int:
    """``hold``, or 0 with a public ``threshold`` (refusing a chosen one's options; the default hold stands for 0)."""
    if threshold is None:
        return given["hold"]  # type: ignore[return-value]
    passes = {"hold": (None, 65536, 0), "threshold_epsilon": (None,), "threshold_method": ("model",),
              "selection": ("permute-and-flip",), "profile_bins": (0,), "query_length": (None,)}
    if wrong := [name for name, value in given.items() if value not in passes[name]]:
        raise ValueError(f"a public threshold is not chosen from a hold-out: {', '.join(wrong)} "
                         f"{'does' if len(wrong) == 1 else 'do'} not apply with threshold.")
    return 0


def check_threshold_choice(*, threshold_method: str, epsilon: float | None, threshold_epsilon: float,
                           budget_given: bool, upper_bound: float, levels: int, threshold_step: float, hold: int,
                           max_range: int, fanout: int, c: float, share: float, rho: float | None = None) -> None:
    """Refuse now the parameters of a threshold choice that could not run when the hold-out ends.

    The model rounds each of its noise scales to 40 significant bits, a numerator of at most 2^40
    and a denominator below 2^62 (:mod:`dpstream.thresholds.model`): its prior's scale, at most
    2^21 grid units over its share of the budget (``share`` of ``threshold_epsilon``, the rest buys
    a period's profile), must stay at most 2^40, and its drift counts' scale, 1 over its share, above 2^-23.
    It also squares thresholds, noise scales (at most ``B h / epsilon``) and the scale of the values
    (at least ``threshold_step / ln 2``): they must lie in [1e-150, 1e150]; under zCDP (``rho``) the
    noise is ``B sqrt(h / (2 rho))``, and NM-E is refused.  NM-E compares
    ``slope * theta`` with integer counts exactly, which needs ``slope * B`` below 2^62.
    """
    if rho is not None and threshold_method != "model":
        raise ValueError(f"threshold_method={threshold_method!r} (the paper's choice, tuned to Laplace noise) is not "
                         "offered under zCDP (rho); use the model threshold.")
    if threshold_method == "model":
        low, high = 2.0**-19 / SHARES["prior"] / share, 2.0**23 / SHARES["drift"] / share
        if not low <= threshold_epsilon < high:
            name = "threshold_epsilon" if budget_given else (
                "epsilon (the budget of the threshold too, unless threshold_epsilon)" if rho is None else
                f"sqrt(2 rho), rho = {rho:.4g} (the threshold's budget under zCDP, unless threshold_epsilon)")
            raise ValueError(f"{name} must be in [{low:.3g}, {high:.3g}) for the exact noise of the model threshold, "
                             f"got {threshold_epsilon!r}.")
        noise = upper_bound * levels / epsilon if rho is None else upper_bound * math.sqrt(levels / (2.0 * rho))
        if not (noise <= 1e150 and threshold_step >= 1e-150):
            raise ValueError(f"the model threshold squares the noise scale upper_bound * h / epsilon ({noise:g}) "
                             f"and threshold_step ({threshold_step:g}): both must lie in [1e-150, 1e150].")
        return
    slope = nm_e_slope(hold, stream_epsilon=epsilon, max_range=max_range, fanout=fanout, c=c)
    if not slope * upper_bound < 2.0**62:
        raise ValueError(f"NM-E's largest offset slope * upper_bound must stay below 2^62, got "
                         f"{slope * upper_bound:g}; raise c or epsilon, or lower hold.")


class ReleaseWarning(UserWarning):
    """The public parameters of a release make its values mostly chance, the prior or noise (see the module)."""


@dataclass(frozen=True)
class FittedDefaults:
    """What :func:`fit_defaults` decided: the hold-out, the tree, the grid's step and the largest s allowed."""

    hold: int | None
    max_range: int
    threshold_step: float
    #: The largest number of smoothed levels a block may have (None: any below h).
    max_smoothed_levels: int | None = None
    #: N, the expected length fitted to (None: the paper's values).
    expected_length: int | None = None


def fit_defaults(expected_length: int | None, *, upper_bound: float, fanout: int, hold: int | None,
                 max_range: int | None, threshold_step: float | None, query_length: int | None = None,
                 period: int | None = None) -> FittedDefaults:
    """The defaults of ToPS for a stream of ``expected_length`` values (None: the paper's), the given ones kept.

    ``hold`` 0 stands for a public threshold (no hold-out, no grid).

    >>> fit_defaults(None, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None)
    FittedDefaults(hold=65536, max_range=1048576, threshold_step=1.0, max_smoothed_levels=None, expected_length=None)
    >>> fit_defaults(2880, upper_bound=5.0, fanout=16, hold=None, max_range=None, threshold_step=None, period=96)
    FittedDefaults(hold=288, max_range=4096, threshold_step=0.0048828125, max_smoothed_levels=2, expected_length=2880)
    >>> fit_defaults(200, upper_bound=5.0, fanout=16, hold=None, max_range=None,
    ...              threshold_step=None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: expected_length 200 is too short to choose a threshold from a hold-out (its hold-out of 64 values ...
    """
    if expected_length is None:
        return FittedDefaults(hold=PAPER_HOLD if hold is None else hold,
                              max_range=PAPER_MAX_RANGE if max_range is None else max_range,
                              threshold_step=PAPER_THRESHOLD_STEP if threshold_step is None else threshold_step)
    length = check_length(expected_length, "expected_length")
    upper_bound = check_bound(upper_bound)
    fanout = check_positive_int(fanout, "fanout", minimum=2)
    window = period or query_length
    if hold is None:
        hold = _fitted_hold(length, window)
    elif check_nonnegative_int(hold, "hold") >= length:
        raise ValueError(f"hold {hold} leaves nothing of expected_length {length} to release: lower hold (or leave "
                         "it out: it is fitted to expected_length).")
    released = length - hold
    if max_range is None:
        cover = max(released, window or 0, fanout)
        max_range = min(PAPER_MAX_RANGE, fanout ** math.ceil(math.log(cover) / math.log(fanout) - 1e-9))
    if threshold_step is None:
        threshold_step = upper_bound / THRESHOLD_UNITS
    levels = num_levels(check_positive_int(max_range, "max_range", minimum=2), fanout)
    most = 0
    while most + 1 < levels and fanout ** (most + 1) * MIN_BLOCKS <= released:
        most += 1
    return FittedDefaults(hold=hold, max_range=max_range, threshold_step=threshold_step, max_smoothed_levels=most,
                          expected_length=length)


def fit_params(params: dict[str, Any]) -> FittedDefaults:
    """ToPS's constructor arguments ``params`` (as stored in its snapshots) made what a snapshot records, in place,
    and the defaults fitted: ``threshold`` and ``expected_length`` only when given (so snapshots without them stay
    as they were), ``hold`` 0 with a public threshold (:func:`public_hold`), and with an expected length the
    fitted ``hold``, ``max_range`` and ``threshold_step`` (a snapshot continues as it was under other rules)."""
    for name in ("threshold", "expected_length"):
        if params[name] is None:
            del params[name]
    period, query_length = params["period"], params["query_length"]
    params["hold"] = public_hold(params.get("threshold"), hold=params["hold"], selection=params["selection"],
                                 threshold_epsilon=params["threshold_epsilon"], profile_bins=params["profile_bins"],
                                 threshold_method=params["threshold_method"],
                                 query_length=None if period else query_length)
    fitted = fit_defaults(params.get("expected_length"), upper_bound=params["upper_bound"], fanout=params["fanout"],
                          hold=params["hold"], max_range=params["max_range"], threshold_step=params["threshold_step"],
                          query_length=query_length, period=period)
    if fitted.expected_length is not None:
        params.update(hold=fitted.hold, max_range=fitted.max_range, threshold_step=fitted.threshold_step)
    return fitted


def _fitted_hold(length: int, window: int | None) -> int:
    """N / 8 values, at least :data:`MIN_HOLD`, whole windows when one fits, at most the paper's; or refuse."""
    hold = max(MIN_HOLD, -(-length // HOLD_FRACTION))
    if window is not None and window <= hold:
        hold = hold // window * window
    hold = min(hold, PAPER_HOLD)
    if hold * 4 > length:
        raise ValueError(f"expected_length {length} is too short to choose a threshold from a hold-out (its hold-out "
                         f"of {hold:,} values must be at most a quarter of the stream: at least {4 * hold:,} values): "
                         "give a public threshold, or hold.")
    return hold


def warn_if_useless(tops: Any) -> None:
    """Issue the :class:`ReleaseWarning` of :func:`release_warning` for a ToPS's public parameters, if any."""
    warning = release_warning(
        epsilon=tops.stream_epsilon, rho=tops.rho, threshold_epsilon=tops.threshold_epsilon,
        upper_bound=tops.upper_bound,
        hold=tops.hold, threshold_step=tops.threshold_step, threshold_method=tops.threshold_method,
        public_threshold=tops.public_threshold, fanout=tops.fanout, levels=tops.levels,
        smoothed_levels=tops.smoothed_levels, max_smoothed_levels=tops.fitted.max_smoothed_levels,
        expected_length=tops.fitted.expected_length, period=tops.period)
    if warning is not None:
        warnings.warn(warning, ReleaseWarning, stacklevel=4)  # the caller of ToPS(...), through Params' recording


def release_warning(*, epsilon: float | None, threshold_epsilon: float, upper_bound: float, hold: int,
                    threshold_step: float, threshold_method: str, public_threshold: float | None, fanout: int,
                    levels: int, smoothed_levels: int | None, max_smoothed_levels: int | None,
                    expected_length: int | None, period: int | None, rho: float | None = None) -> str | None:
    """One line saying why the release's values will be mostly chance, the prior or noise, or None.

    From public parameters only:

    * **chance**: the threshold's private choice among K candidates, from ``hold`` values with
      ``threshold_epsilon``, cannot tell them apart when ``hold * threshold_epsilon < 16 ln K``
      (the model's first step, the median, has a score range of ``hold / 2`` and an eighth of the budget);
    * **a coarse grid**: fewer than :data:`MIN_CANDIDATES` candidates ``step, ..., B``;
    * **the prior**: a forced s whose first block (predicted from the prior alone) covers more
      than half of the ``expected_length - hold`` released values;
    * **noise**: a released value's noise (that of one node of the lowest measured level, spread
      over its ``b^s`` values, for the least noisy s allowed, with theta = B or the public theta)
      has a standard deviation above B (under zCDP, ``rho``: Gaussian noise of ``theta sqrt((h - s) / (2 rho))``).

    >>> common = dict(upper_bound=5.0, threshold_method="model", public_threshold=None, fanout=16, levels=5,
    ...               smoothed_levels=None, max_smoothed_levels=None, expected_length=None, period=None)
    >>> text = release_warning(epsilon=0.05, threshold_epsilon=0.05, hold=96, threshold_step=1.0, **common)
    >>> [part[:48] for part in text.split("; ")]
    ['theta is chosen from 96 held-out values at thres', 'theta can only be 1, 2, ..., 5 (threshold step 1']
    >>> release_warning(epsilon=1.0, threshold_epsilon=1.0, hold=288, threshold_step=5 / 1024, **common) is None
    True
    """
    reasons, fixes = [], []
    if public_threshold is None:
        count = (model_candidates(upper_bound, threshold_step).size if threshold_method == "model"
                 else math.floor(upper_bound / threshold_step + 1e-9))
        if count > 1 and hold * threshold_epsilon < CHANCE_FACTOR * math.log(count):
            reasons.append(f"theta is chosen from {hold:,} held-out values at threshold epsilon {threshold_epsilon:g}: "
                           f"too few to tell {count} candidates apart (hold x epsilon {hold * threshold_epsilon:.3g}, "
                           f"below {CHANCE_FACTOR} ln {count} = {CHANCE_FACTOR * math.log(count):.0f}), so theta, s "
                           "and the prior are mostly chance")
            fixes += ["the hold-out (or give the expected length)", "the threshold's budget"]
        units = math.floor(upper_bound / threshold_step + 1e-9)
        if units < MIN_CANDIDATES:
            shown = [f"{threshold_step * k:g}" for k in range(1, units + 1)]
            shown = shown if units <= 4 else [*shown[:2], "...", shown[-1]]
            reasons.append(f"theta can only be {', '.join(shown)} (threshold step {threshold_step:g} with "
                           f"B = {upper_bound:g})")
            fixes.append("the grid's resolution")
    released = None if expected_length is None else expected_length - hold
    if period is None and smoothed_levels is not None and released and fanout**smoothed_levels * 2 > released:
        reasons.append(f"blocks of b^s = {fanout**smoothed_levels:,} values (s = {smoothed_levels}) leave more than "
                       f"half of the {released:,} released values to the smoother's prior")
        fixes.append("the expected length (or lower s)")
    if period is None:
        allowed = [smoothed_levels] if smoothed_levels is not None else range(
            levels if max_smoothed_levels is None else min(levels, max_smoothed_levels + 1))
        theta = upper_bound if public_threshold is None else public_threshold
        noise, h = min((math.sqrt(2.0) * theta * (levels - s) / epsilon if rho is None else
                        theta * math.sqrt((levels - s) / (2.0 * rho))) / fanout**s for s in allowed), levels
        if noise > upper_bound:
            most = "=" if len(allowed) == 1 else "at most"
            budget = f"epsilon {epsilon:g}" if rho is None else f"rho {rho:g}"
            reasons.append(f"every released value carries noise of standard deviation about {noise / upper_bound:,.0f} "
                           f"x B ({budget}, {h} levels, s {most} {max(allowed)})")
            fixes.append(f"{budget.split()[0]} (or s)")
    if not reasons:
        return None
    fixes = list(dict.fromkeys(fixes))
    raise_ = ", ".join(fixes[:-1]) + (" or " if len(fixes) > 1 else "") + fixes[-1]
    return "; ".join(reasons) + f": raise {raise_}, or give a public threshold"


#: Most leaves a chunk's hierarchy has when the model chooses its structure for windows of a given length
#: (:func:`model_structures`).  A stream draws a chunk's noise at once and keeps its leaves' consistent share, 16
#: bytes a leaf: 2^16 leaves are 1 MB and about 70,000 draws a stream, what one stream per key can afford (2^20
#: leaves, s = 0 at the default r, were 16 MB).
MODEL_MAX_LEAVES = 1 << 16


def model_structures(max_range: int, fanout: int, leaves: tuple[int, ...] = (), forced: tuple[int, ...] | None = None,
                     windows: bool = True) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """The values of s and the leaf lengths among ``leaves`` the model may choose for chunks of ``max_range`` values
    when it scores ``windows`` of a given length: those whose chunk has at most :data:`MODEL_MAX_LEAVES` leaves (all
    of them when a chunk is that short; at least the top level); the values of s ``forced`` by the user, and without
    ``windows`` None (every value of s).  Public parameters only.

    >>> model_structures(2**20, 16, (96, 48, 24, 12))
    ((1, 2, 3, 4), (96, 48, 24))
    >>> model_structures(4096, 16, (12,))
    ((0, 1, 2), (12,))
    >>> model_structures(2**20, 16, windows=False)
    (None, ())
    """
    if not windows:
        return forced, leaves
    levels = num_levels(max_range, fanout)
    allowed = tuple(s for s in range(levels) if -(-max_range // fanout**s) <= MODEL_MAX_LEAVES) or (levels - 1,)
    small = tuple(leaf for leaf in leaves if -(-max_range // leaf) <= MODEL_MAX_LEAVES)
    return allowed if forced is None else forced, small
