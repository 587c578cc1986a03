"""The statistics of the audit: distinguishing events, Clopper-Pearson bounds, the support test.

A mechanism ``M`` is (epsilon, delta)-DP when ``Pr[M(x) in E] <= e^epsilon Pr[M(x') in E] + delta``
for every event ``E`` and neighbours ``x, x'``.  The auditor runs ``M`` ``n`` times on each of two
neighbours A and B (:meth:`MechanismAdapter.sample`) and reduces every output to a 1-D statistic
``s`` (:meth:`MechanismAdapter.statistic`).

1. Selection.  On the first half of the runs it scores candidate events on ``s``: every interval
   ``[lo, hi]`` between points of a grid (the distinct values of ``s`` when there are few, else
   quantiles concentrated in the tails, plus the half-lines), and, for a discrete ``s``, the sets
   of values with the largest empirical ratio (likelihood-ratio sets), each in both directions
   (A over B and B over A).  The score is the bound of step 2 computed on that half; the
   ``events`` best distinct events are kept.
2. Bounds.  On the other half, independent of the choice, every kept event ``E`` with numerator
   input X and denominator input Y gets one-sided Clopper-Pearson bounds ``p_lo <= Pr[M(X) in E]``
   and ``Pr[M(Y) in E] <= p_hi``, each at confidence ``1 - alpha / (2 events)`` (Bonferroni over
   the ``2 events`` bounds), and ``eps_lb = log((p_lo - delta) / p_hi)``.  With probability at
   least ``1 - alpha`` every bound holds, and then ``eps_lb <= epsilon`` for a correct mechanism:
   the check fails when the largest ``eps_lb`` exceeds the claimed epsilon.
3. Support.  Every distinct output of the runs on A must be possible under B and vice versa
   (:meth:`MechanismAdapter.possible_under`, exact: no statistics).  An output impossible under
   the neighbour is an event of probability > 0 under one input and 0 under the other: no
   (epsilon, 0) guarantee survives it.  For additive noise on a grid, :func:`on_lattice` tests
   membership: ``(output - neighbour's true answer) / granularity`` must be an integer.  Noise
   with no declared grid (floating-point Laplace) cannot pass: a float ``x + L`` is almost never
   ``x' + L'`` for a float ``L'`` the sampler can produce (Mironov, CCS 2012).

The auditor's own randomness comes from one seeded generator, so an audit is replayed exactly.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream._checks import check_positive_int, check_probability
from dpstream.rng import Seed, make_rng

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_EVENTS",
    "AuditResult",
    "Event",
    "MechanismAdapter",
    "UnverifiableSupport",
    "audit_mechanism",
    "clopper_pearson",
    "epsilon_lower_bound",
    "format_table",
    "granularity_of",
    "on_lattice",
]

#: Family-wise error of an audit: a correct mechanism fails with probability at most this.
DEFAULT_ALPHA = 1e-3
#: Events chosen on the first half of the runs and bounded on the second.
DEFAULT_EVENTS = 4
#: A statistic with at most this many distinct values is treated as discrete.
_MAX_DISCRETE = 64
#: Quantile points of the grid of a continuous statistic, per tail.
_TAIL_POINTS = 24


class UnverifiableSupport(Exception):
    """Raised by :meth:`MechanismAdapter.possible_under` when it cannot decide membership; the
    support test then fails with this reason."""


class MechanismAdapter(ABC):
    """A mechanism as the auditor sees it: two neighbours, a sampler and an exact support test.

    Attributes
    ----------
    name : str
        Short name (the registry key).
    neighbours : tuple
        The inputs A and B, neighbours under the mechanism's relation, chosen adversarially.
    claimed_epsilon, claimed_delta : float
        The guarantee the mechanism states (its ``privacy()`` where it has one).
    samples : int
        Default number of runs per input.
    """

    name: str = ""
    #: What the statistic ``s`` is, in words (the event descriptions of the audit's report use it).
    statistic_name: str = "s"
    neighbours: tuple[Any, Any]
    claimed_epsilon: float
    claimed_delta: float = 0.0
    samples: int = 100_000
    #: The epsilon the output law truly spends on the two neighbours, where it is known and the pair cannot
    #: show the whole claim: the largest ``|log(P_A(o) / P_B(o))|`` over outputs ``o``, which no event
    #: exceeds (None: the claim).  The report divides the bound by it too (``lb/spent``).
    spends: float | None = None

    @abstractmethod
    def sample(self, x: Any, n: int, rng: np.random.Generator) -> np.ndarray:
        """Outputs of ``n`` independent runs on input ``x``: shape ``(n,)`` or ``(n, k)``."""

    def statistic(self, outputs: np.ndarray) -> np.ndarray:
        """The 1-D statistic the events are about (default: the outputs, or their first column)."""
        outputs = np.asarray(outputs)
        return outputs if outputs.ndim == 1 else outputs[:, 0]

    @abstractmethod
    def possible_under(self, x: Any, outputs: np.ndarray) -> np.ndarray:
        """For each output (row), whether it has probability > 0 under input ``x`` (exactly).

        Raises :class:`UnverifiableSupport` when the mechanism does not describe its support.
        """


@dataclass(frozen=True)
class Event:
    """An event on the statistic: ``low <= s <= high``, or ``s in members`` when members is set."""

    low: float = -math.inf
    high: float = math.inf
    members: tuple[float, ...] | None = None

    def contains(self, s: np.ndarray) -> np.ndarray:
        """Whether each value of ``s`` is in the event.

        >>> Event(low=1.0).contains(np.array([0.0, 1.0, 2.0])).tolist()
        [False, True, True]
        """
        if self.members is not None:
            return np.isin(s, np.asarray(self.members, dtype=np.float64))
        return (s >= self.low) & (s <= self.high)

    def describe(self, statistic: str = "s") -> str:
        """The event in plain words, about ``statistic``.

        >>> Event(low=17.5).describe("the released value")
        'the released value is at least 17.5'
        >>> Event(low=-40.49, high=-7.431).describe("the log-likelihood ratio")
        'the log-likelihood ratio is between -40.49 and -7.431'
        """
        return self._written(_IN_WORDS, statistic, shown=6)

    def __str__(self) -> str:
        return self._written(_IN_SYMBOLS, "s", shown=4)

    def _written(self, forms: dict[str, str], statistic: str, *, shown: int) -> str:
        """The event in one of the ``forms`` (by kind: a set, one value, a half-line, an interval)."""
        if self.members is not None:
            more = ", ..." if len(self.members) > shown else ""
            values = ", ".join(f"{v:.4g}" for v in self.members[:shown]) + more
            kind = "set" if len(self.members) > 1 else "one"
        else:
            values = ""
            kind = ("at most" if self.low == -math.inf else "at least" if self.high == math.inf
                    else "value" if self.low == self.high else "between")
        return forms[kind].format(s=statistic, values=values, low=f"{self.low:.4g}", high=f"{self.high:.4g}")


#: How :meth:`Event.describe` and ``str(event)`` write each kind of event.
_IN_WORDS = {"set": "{s} is one of {values}", "one": "{s} is {values}", "value": "{s} is {low}",
             "at most": "{s} is at most {high}", "at least": "{s} is at least {low}",
             "between": "{s} is between {low} and {high}"}
_IN_SYMBOLS = {"set": "{s} in {{{values}}}", "one": "{s} in {{{values}}}", "value": "{low} <= {s} <= {high}",
               "at most": "{s} <= {high}", "at least": "{s} >= {low}", "between": "{low} <= {s} <= {high}"}


@dataclass(frozen=True)
class AuditResult:
    """What the audit of one mechanism found.

    Attributes
    ----------
    epsilon_lower_bound : float
        The largest ``log((p_lo - delta) / p_hi)`` over the events bounded (0 when none is
        positive): with probability ``>= 1 - alpha`` the true epsilon is at least this.
    event : str
        The event that gave it, with the numerator input: ``"A: s >= 1.2"`` bounds
        ``Pr[s(M(A)) >= 1.2] / Pr[s(M(B)) >= 1.2]``.
    confidence : float
        Confidence of every single Clopper-Pearson bound (after the Bonferroni correction).
    events : int
        Number of events bounded.
    samples : int
        Runs per input (half choose the events, half bound them).
    support_ok, support_detail
        The support test's verdict and explanation.
    """

    name: str
    claimed_epsilon: float
    claimed_delta: float
    epsilon_lower_bound: float
    event: str
    confidence: float
    events: int
    samples: int
    support_ok: bool
    support_detail: str
    seconds: float
    #: The best event in plain words: which input makes it likelier, and what it says about the output.
    description: str = ""
    #: The epsilon the output law spends on the neighbours, where below the claim (``MechanismAdapter.spends``).
    spent: float | None = None

    @property
    def fraction(self) -> float:
        """The lower bound as a fraction of the claim: how close the audit came to it (1 = reached)."""
        return self.epsilon_lower_bound / self.claimed_epsilon

    @property
    def spent_fraction(self) -> float:
        """The lower bound as a fraction of what the output law spends on the neighbours (the claim when
        unknown): how close the audit came to what its runs can see."""
        return self.epsilon_lower_bound / (self.claimed_epsilon if self.spent is None else self.spent)

    @property
    def epsilon_ok(self) -> bool:
        """The empirical lower bound does not exceed the claimed epsilon."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    @property
    def passed(self) -> bool:
        """Both checks pass."""
        return self.epsilon_ok and self.support_ok


# -- bounds --------------------------------------------------------------------------------


def clopper_pearson(k: np.ndarray | int, n: int, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper-Pearson bounds on a binomial proportion, each at confidence ``1 - gamma``.

    ``lower`` is the ``gamma`` quantile of ``Beta(k, n - k + 1)`` (0 when ``k = 0``) and ``upper``
    the ``1 - gamma`` quantile of ``Beta(k + 1, n - k)`` (1 when ``k = n``).

    >>> lower, upper = clopper_pearson(np.array([0, 5, 10]), 10, 0.025)
    >>> np.round(lower, 4).tolist(), np.round(upper, 4).tolist()
    ([0.0, 0.1871, 0.6915], [0.3085, 0.8129, 1.0])
    """
    from scipy import stats  # imported here: scipy.stats costs half a second at every CLI start

    k = np.asarray(k, dtype=np.float64)
    safe_low = np.maximum(k, 1.0)
    safe_high = np.minimum(k, n - 1.0)
    lower = np.where(k > 0, stats.beta.ppf(gamma, safe_low, n - safe_low + 1.0), 0.0)
    upper = np.where(k < n, stats.beta.isf(gamma, safe_high + 1.0, n - safe_high), 1.0)
    return lower, upper


def epsilon_lower_bound(
    k_num: np.ndarray | int, k_den: np.ndarray | int, n: int, *, delta: float, gamma: float
) -> np.ndarray:
    """``log((p_lo - delta) / p_hi)`` from ``k_num`` of ``n`` runs on one input and ``k_den`` of ``n``
    on the other; ``-inf`` where ``p_lo <= delta``.

    >>> bound = epsilon_lower_bound(7000, 3000, 10000, delta=0.0, gamma=0.001)
    >>> bool(0.75 < bound < math.log(7 / 3)), float(epsilon_lower_bound(0, 0, 10, delta=0.0, gamma=0.1))
    (True, -inf)
    """
    p_lo = clopper_pearson(k_num, n, gamma)[0]
    p_hi = clopper_pearson(k_den, n, gamma)[1]
    numerator = np.asarray(p_lo - delta, dtype=np.float64)
    out = np.full(np.broadcast(numerator, p_hi).shape, -np.inf)
    np.log(numerator / p_hi, out=out, where=numerator > 0)
    return out


# -- events --------------------------------------------------------------------------------


def _interval_counts(sorted_values: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_values, highs, side="right") - np.searchsorted(sorted_values, lows, side="left")


def _grid(pooled: np.ndarray) -> tuple[np.ndarray, bool]:
    """Points between which the candidate intervals run, and whether the statistic is discrete."""
    distinct = np.unique(pooled)
    if distinct.size <= _MAX_DISCRETE:
        return distinct, True
    tail = np.geomspace(min(0.5, 5.0 / pooled.size), 0.5, _TAIL_POINTS)
    levels = np.concatenate((tail, 1.0 - tail))
    return np.unique(np.quantile(pooled, levels, method="inverted_cdf")), False


def _candidates(sel: tuple[np.ndarray, np.ndarray]) -> list[tuple[Event, int, int, int]]:
    """Every candidate event with its numerator input (0 = A, 1 = B) and its counts on ``sel``."""
    sorted_sel = [np.sort(s) for s in sel]
    grid, discrete = _grid(np.concatenate(sel))
    points = grid if discrete else np.concatenate(([-np.inf], grid, [np.inf]))
    i, j = np.triu_indices(points.size)
    keep = (points[i] < np.inf) & (points[j] > -np.inf) & ~((points[i] == -np.inf) & (points[j] == np.inf))
    lows, highs = points[i][keep], points[j][keep]
    counts = [_interval_counts(s, lows, highs) for s in sorted_sel]
    out = []
    for num in (0, 1):
        out.extend(
            (Event(low=float(lo), high=float(hi)), num, int(a), int(b))
            for lo, hi, a, b in zip(lows, highs, counts[num], counts[1 - num], strict=True)
        )
    if discrete:
        per_value = [_interval_counts(s, grid, grid) for s in sorted_sel]
        for num in (0, 1):
            ratio = (per_value[num] + 0.5) / (per_value[1 - num] + 0.5)
            order = np.argsort(-ratio, kind="stable")
            k_num, k_den = np.cumsum(per_value[num][order]), np.cumsum(per_value[1 - num][order])
            for size in range(1, grid.size):
                members = tuple(float(v) for v in np.sort(grid[order[:size]]))
                out.append((Event(members=members), num, int(k_num[size - 1]), int(k_den[size - 1])))
    return out


def _choose_events(
    sel: tuple[np.ndarray, np.ndarray], *, delta: float, gamma: float, events: int
) -> list[tuple[Event, int]]:
    """The ``events`` candidates with the best bound on the selection half, duplicates dropped."""
    candidates = _candidates(sel)
    n = sel[0].size
    k_num = np.array([c[2] for c in candidates])
    k_den = np.array([c[3] for c in candidates])
    scores = epsilon_lower_bound(k_num, k_den, n, delta=delta, gamma=gamma)
    chosen, seen = [], set()
    for index in np.argsort(-scores, kind="stable"):
        event, num, a, b = candidates[index]
        if (num, a, b) in seen:  # the same runs: the same event on this half
            continue
        seen.add((num, a, b))
        chosen.append((event, num))
        if len(chosen) == events:
            break
    return chosen


# -- support -------------------------------------------------------------------------------


def granularity_of(mechanism: object) -> float | None:
    """The grid step a mechanism declares for its noisy values (attribute ``granularity``), or None.

    >>> class Exact:
    ...     granularity = 0.25
    >>> granularity_of(Exact()), granularity_of(object())
    (0.25, None)
    """
    value = getattr(mechanism, "granularity", None)
    try:
        value = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def on_lattice(
    outputs: np.ndarray,
    origin: np.ndarray | float,
    granularity: np.ndarray | float | None,
    *,
    what: str = "the mechanism",
) -> np.ndarray:
    """Whether ``(outputs - origin) / granularity`` is an integer, up to float64 rounding.

    ``origin`` is the neighbour's true answer: an output of additive noise on the grid
    ``granularity * Z`` is possible under the neighbour exactly when it lies on the shifted grid.
    The rounding allowance is ``max(1e-6 granularity, 16 ulp(|outputs| + |origin|))``; a grid so
    fine that this allowance reaches a quarter of a step cannot be checked in float64 and raises
    :class:`UnverifiableSupport`, as does a missing granularity (None or NaN).

    >>> on_lattice(np.array([2.5, 2.75, 2.6]), 1.0, 0.25).tolist()
    [True, True, False]
    >>> on_lattice(np.array([2.5]), 1.0, None, what="Laplace")
    Traceback (most recent call last):
    dpstream.audit.core.UnverifiableSupport: Laplace declares no grid for its noise (no granularity): ...
    """
    outputs = np.asarray(outputs, dtype=np.float64)
    g = np.asarray(np.nan if granularity is None else granularity, dtype=np.float64)
    if not np.all(np.isfinite(g) & (g > 0)):
        raise UnverifiableSupport(
            f"{what} declares no grid for its noise (no granularity): a floating-point noisy value is "
            "almost never possible under the neighbour, so every float output counts as suspicious"
        )
    difference = outputs - origin
    steps = difference / g
    allowance = np.maximum(1e-6 * g, 16.0 * np.finfo(np.float64).eps * (np.abs(outputs) + np.abs(origin)))
    if np.any(allowance >= g / 4.0):
        raise UnverifiableSupport(
            f"{what}'s grid {float(np.min(g)):.3g} is too fine to check in float64 at values of magnitude "
            f"{float(np.max(np.abs(outputs))):.3g}"
        )
    return np.abs(steps - np.rint(steps)) * g <= allowance


def _show(row: np.ndarray) -> str:
    row = np.asarray(row)
    return repr(row.item()) if row.size == 1 else np.array2string(row, precision=17, separator=", ")


def _support_test(adapter: MechanismAdapter, outputs: tuple[np.ndarray, np.ndarray]) -> tuple[bool, str]:
    problems, checked = [], 0
    for label, other_label, runs, other in (("A", "B", outputs[0], adapter.neighbours[1]),
                                            ("B", "A", outputs[1], adapter.neighbours[0])):
        distinct = np.unique(runs, axis=0)
        checked += len(distinct)
        try:
            possible = np.asarray(adapter.possible_under(other, distinct), dtype=bool)
        except UnverifiableSupport as reason:
            return False, f"cannot verify: {reason}"
        if possible.shape != (len(distinct),):
            raise ValueError(
                f"{adapter.name}: possible_under must return one bool per output, "
                f"got shape {possible.shape} for {len(distinct)} outputs."
            )
        if not possible.all():
            impossible = distinct[~possible]
            problems.append(
                f"{len(impossible)} of {len(distinct)} distinct outputs on input {label} are impossible "
                f"under input {other_label} (e.g. {_show(impossible[0])})"
            )
    if problems:
        return False, "; ".join(problems)
    return True, f"all {checked} distinct outputs are possible under the neighbour"


# -- the audit -----------------------------------------------------------------------------


def audit_mechanism(
    adapter: MechanismAdapter,
    *,
    samples: int | None = None,
    seed: Seed = None,
    alpha: float = DEFAULT_ALPHA,
    events: int = DEFAULT_EVENTS,
) -> AuditResult:
    """Audit one mechanism: an empirical lower bound on epsilon and the support test.

    Parameters
    ----------
    adapter : MechanismAdapter
        The mechanism, its neighbours and its claim.
    samples : int, optional
        Runs per input (default ``adapter.samples``); half choose the events, half bound them.
    seed : int, Generator or None
        The auditor's randomness (the mechanism's too: the adapter draws from it).
    alpha : float
        Family-wise error: a correct mechanism fails the epsilon check with probability at most
        ``alpha`` (every bound is at confidence ``1 - alpha / (2 events)``).
    events : int
        Number of events bounded on the second half.

    Returns
    -------
    AuditResult
    """
    n = check_positive_int(adapter.samples if samples is None else samples, "samples", minimum=4)
    alpha = check_probability(alpha, "alpha", open_low=True)
    events = check_positive_int(events, "events")
    rng = make_rng(seed)
    start = time.perf_counter()
    outputs = tuple(np.asarray(adapter.sample(x, n, rng)) for x in adapter.neighbours)
    for x_label, out in zip("AB", outputs, strict=True):
        if out.ndim not in (1, 2) or out.shape[0] != n:
            raise ValueError(
                f"{adapter.name}: sample must return {n} outputs (an array of shape (n,) or (n, k)) "
                f"for input {x_label}, got shape {out.shape}."
            )
    support_ok, support_detail = _support_test(adapter, outputs)  # type: ignore[arg-type]
    statistics = [np.asarray(adapter.statistic(out), dtype=np.float64) for out in outputs]
    for x_label, s in zip("AB", statistics, strict=True):
        if s.shape != (n,) or not np.all(np.isfinite(s)):
            raise ValueError(
                f"{adapter.name}: statistic must give {n} finite values for input {x_label}, got shape {s.shape}."
            )
    half = n // 2
    delta = float(adapter.claimed_delta)
    gamma = alpha / (2.0 * events)
    chosen = _choose_events((statistics[0][:half], statistics[1][:half]), delta=delta, gamma=gamma, events=events)
    held = (statistics[0][half:], statistics[1][half:])
    k_num = np.array([int(event.contains(held[num]).sum()) for event, num in chosen])
    k_den = np.array([int(event.contains(held[1 - num]).sum()) for event, num in chosen])
    bounds = epsilon_lower_bound(k_num, k_den, n - half, delta=delta, gamma=gamma)
    best = int(np.argmax(bounds))
    best_event, best_num = chosen[best]
    return AuditResult(
        name=adapter.name,
        claimed_epsilon=float(adapter.claimed_epsilon),
        claimed_delta=delta,
        epsilon_lower_bound=max(0.0, float(bounds[best])),
        event=f"{'AB'[best_num]}: {best_event}",
        confidence=1.0 - gamma,
        events=len(chosen),
        samples=n,
        support_ok=support_ok,
        support_detail=support_detail,
        seconds=time.perf_counter() - start,
        description=_in_words(best_event, best_num, adapter.statistic_name),
        spent=None if adapter.spends is None else float(adapter.spends),
    )


def _in_words(event: Event, numerator: int, statistic: str) -> str:
    """``"on input A more often than on B: the released value is at least 17.5"``."""
    more, less = "AB"[numerator], "AB"[1 - numerator]
    return f"{event.describe(statistic)} (more often on input {more} than on {less})"


def format_table(results: list[AuditResult]) -> str:
    """A plain-text table of audit results, one row per mechanism, the best events in words, then
    the failures' reasons.

    ``lb/claim`` is the lower bound as a fraction of the claimed epsilon, ``lb/spent`` as a fraction of
    what the output law spends on the neighbours where that is known to be less (the lines under the
    table say how much; elsewhere it is the claim).  The best event names
    the input on which it is likelier (its numerator) and an interval or set of values of the
    statistic ``s``: ``A: s <= 2`` bounds ``Pr[s(M(A)) <= 2] / Pr[s(M(B)) <= 2]``.

    >>> row = AuditResult("toy", 1.0, 0.0, 0.93, "A: s >= 1", 0.9999, 4, 1000, True, "fine", 0.1,
    ...                   "s is at least 1 (more often on input A than on B)")
    >>> print(format_table([row]))  # doctest: +NORMALIZE_WHITESPACE
    mechanism  claimed eps  delta  eps lower bound  lb/claim  lb/spent  best event  support  result  runs/input  seconds
    toy        1            0      0.930            0.93      0.93      A: s >= 1   ok       pass    1000        0.1
    <BLANKLINE>
    best events (the event on which the bound rests, likelier on the first input named):
    toy: s is at least 1 (more often on input A than on B)
    """
    header = ("mechanism", "claimed eps", "delta", "eps lower bound", "lb/claim", "lb/spent", "best event", "support",
              "result", "runs/input", "seconds")
    rows = [
        (
            r.name,
            f"{r.claimed_epsilon:g}",
            f"{r.claimed_delta:.3g}",
            f"{r.epsilon_lower_bound:.3f}",
            f"{r.fraction:.2f}",
            f"{r.spent_fraction:.2f}",
            r.event if len(r.event) <= 32 else r.event[:29] + "...",
            "ok" if r.support_ok else "FAIL",
            "pass" if r.passed else "FAIL",
            str(r.samples),
            f"{r.seconds:.1f}",
        )
        for r in results
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in (header, *rows)
    ]
    described = [r for r in results if r.description]
    if described:
        lines += ["", "best events (the event on which the bound rests, likelier on the first input named):"]
        lines += [f"{r.name}: {r.description}" for r in described]
    short = [r for r in results if r.spent is not None]
    if short:
        lines += ["", "what the output law spends on the neighbours, where less than the claim (lb/spent is the bound "
                  "over it):"]
        lines += [f"{r.name}: eps {r.spent:.3g} of the claimed {r.claimed_epsilon:g}" for r in short]
    for r in results:
        if not r.epsilon_ok:
            lines.append(f"{r.name}: epsilon lower bound {r.epsilon_lower_bound:.3f} > claimed {r.claimed_epsilon:g} "
                         f"(event {r.event}, every bound at confidence {r.confidence:.6g})")
        if not r.support_ok:
            lines.append(f"{r.name}: support: {r.support_detail}")
    return "\n".join(lines)
