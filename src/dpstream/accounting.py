"""rho-zCDP accounting: the zCDP budget, its conversions to (epsilon, delta), and zCDP guarantees.

Zero-concentrated DP (Bun and Steinke, TCC 2016) bounds the Renyi divergence of a mechanism's
outputs on neighbours: ``D_alpha(M(x) || M(x')) <= rho alpha`` for every ``alpha > 1``.  It is the
natural accounting of Gaussian noise -- a query of L2 sensitivity ``Delta`` with (discrete)
Gaussian noise of variance ``sigma^2`` is ``Delta^2 / (2 sigma^2)``-zCDP (Canonne, Kamath and
Steinke, NeurIPS 2020, Theorem 14, for the discrete Gaussian on integer queries) -- and it
composes by adding rho's: ``k`` releases of ``rho`` each are ``k rho``-zCDP, whose (epsilon, delta)
grows like ``sqrt(k)`` while ``k rho`` is small next to ``ln(1 / delta)``, where pure DP grows like
``k``.  Pure epsilon-DP is ``epsilon^2 / 2``-zCDP (Bun and Steinke, Proposition 1.4), so pure parts
join a zCDP composition.

Conversions to (epsilon, delta), both valid for every rho-zCDP mechanism:

* the standard bound (Bun and Steinke, Proposition 1.3): ``epsilon = rho + 2 sqrt(rho ln(1/delta))``;
* the tighter bound of Canonne, Kamath and Steinke (Corollary 13; also Asoodeh et al. 2021):
  ``delta = exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1/alpha)^alpha`` for any
  ``alpha > 1``, i.e. ``epsilon = alpha rho + (ln(1/delta) + (alpha - 1) ln(1 - 1/alpha) - ln(alpha))
  / (alpha - 1)``.  Every ``alpha`` gives a valid statement; :func:`zcdp_epsilon` minimizes over
  ``alpha`` numerically and returns the smaller of the two bounds, rounded up, so an inexact
  minimum is only a little loose, never unsafe.

:class:`Zcdp` is the budget of a :class:`~dpstream.privacy.Part` (it composes like
:class:`~dpstream.privacy.EpsilonDelta`: sequential parts add, parallel parts take the largest);
:class:`ZcdpGuarantee` is a :class:`~dpstream.privacy.PrivacyGuarantee` whose ``epsilon`` and
``delta`` are those its ``rho`` implies at the ``delta`` it is stated at, so every reader of a
guarantee's (epsilon, delta) reads a true statement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dpstream._checks import MIN_EPSILON, check_epsilon, check_nonnegative, check_probability
from dpstream.privacy import Budget, Composition, EpsilonDelta, Part, PrivacyGuarantee, Relation

__all__ = [
    "DEFAULT_DELTA",
    "MAX_TARGET_DELTA",
    "Zcdp",
    "check_budget",
    "check_target_delta",
    "ZcdpGuarantee",
    "rho_for",
    "rho_of_pure",
    "zcdp_delta",
    "zcdp_epsilon",
    "zcdp_epsilon_standard",
    "zcdp_unit_statement",
]

#: The delta a zCDP guarantee states its implied (epsilon, delta) at unless told otherwise.
DEFAULT_DELTA = 1e-6

#: The largest delta of an (epsilon, delta) target a zCDP mechanism spends the rho of: an (epsilon, delta)
#: statement lets a person's data out with probability delta, so a larger one says too little to call private
#: (the cap of partition selection's delta, :data:`~dpstream.release.partition_selection.MAX_SELECTION_DELTA`).
MAX_TARGET_DELTA = 1e-3

#: Relative margin by which a converted epsilon is rounded up (float error of one evaluation is ~1e-15).
_MARGIN = 2.0**-40


def _rho(rho: object) -> float:
    return check_nonnegative(rho, "rho")


def _delta(delta: object) -> float:
    delta = check_probability(delta, "delta")
    if delta <= 0.0 or delta >= 1.0:
        raise ValueError(f"delta must lie strictly between 0 and 1 to convert zCDP, got {delta!r}.")
    return delta


def check_target_delta(delta: object) -> float:
    """The delta of a new release's (epsilon, delta) target (:func:`rho_for`): a real number in (0,
    :data:`MAX_TARGET_DELTA`].  Checked where a release starts (the commands without a state to continue, the
    service's creations), not when one is restored: a release begun at a larger delta continues at it.

    >>> check_target_delta(0.999999)
    Traceback (most recent call last):
    ValueError: the delta of an (epsilon, delta) target must lie in (0, 0.001] (a larger one lets the data out with \
that probability: the guarantee says little), got 0.999999.
    """
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta <= MAX_TARGET_DELTA:
        raise ValueError(f"the delta of an (epsilon, delta) target must lie in (0, {MAX_TARGET_DELTA:g}] (a larger "
                         f"one lets the data out with that probability: the guarantee says little), got {delta!r}.")
    return float(delta)


def check_budget(epsilon: object, rho: object) -> tuple[float | None, float | None]:
    """A mechanism's budget: exactly one of ``epsilon`` (pure DP, Laplace noise) and ``rho`` (zCDP, Gaussian
    noise), checked as budgets; the other stays None.

    >>> check_budget(1.0, None), check_budget(None, 0.5)
    ((1.0, None), (None, 0.5))
    >>> check_budget(1.0, 0.5)
    Traceback (most recent call last):
    ValueError: give epsilon (pure DP) or rho (zCDP), not both, got epsilon=1.0 and rho=0.5.
    """
    if rho is None:
        if epsilon is None:
            raise ValueError("a budget is needed: epsilon (pure DP) or rho (zCDP).")
        return check_epsilon(epsilon), None
    if epsilon is not None:
        raise ValueError(f"give epsilon (pure DP) or rho (zCDP), not both, got epsilon={epsilon!r} and rho={rho!r}.")
    return None, check_epsilon(rho, "rho")


def rho_of_pure(epsilon: float) -> float:
    """``epsilon^2 / 2``: the zCDP of a pure epsilon-DP mechanism (Bun and Steinke, Proposition 1.4).

    >>> rho_of_pure(1.0), rho_of_pure(0.1)
    (0.5, 0.005000000000000001)
    """
    epsilon = check_nonnegative(epsilon, "epsilon")
    return epsilon * epsilon / 2.0


def zcdp_epsilon_standard(rho: float, delta: float) -> float:
    """``rho + 2 sqrt(rho ln(1/delta))`` (Bun and Steinke, Proposition 1.3), rounded up.

    >>> round(zcdp_epsilon_standard(0.5, 1e-6), 6)
    5.756522
    """
    rho, delta = _rho(rho), _delta(delta)
    return (rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))) * (1.0 + _MARGIN)


def _cks_epsilon(rho: float, log_inv_delta: float, alpha: float) -> float:
    """Canonne-Kamath-Steinke's epsilon at one ``alpha > 1`` (valid for every alpha)."""
    if not 1.0 / alpha < 1.0:  # alpha - 1 below the float resolution (a huge rho): the bound tends to infinity there
        return math.inf
    a1 = alpha - 1.0
    return alpha * rho + (log_inv_delta + a1 * math.log1p(-1.0 / alpha) - math.log(alpha)) / a1


def _minimize(f, low: float, high: float, rounds: int = 200) -> float:
    """Golden-section search of ``f`` on ``[low, high]`` after a coarse scan (the least value found)."""
    points = [low + (high - low) * i / 64 for i in range(65)]
    best = min(range(65), key=lambda i: f(points[i]))
    a, b = points[max(best - 1, 0)], points[min(best + 1, 64)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(rounds):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return min(fc, fd, f(points[best]))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The epsilon a rho-zCDP mechanism satisfies at ``delta``: the tighter of Canonne-Kamath-Steinke's
    bound (minimized over alpha) and the standard one, rounded up (see the module docstring).

    >>> round(zcdp_epsilon(0.5, 1e-6), 4), zcdp_epsilon(0.5, 1e-6) < zcdp_epsilon_standard(0.5, 1e-6)
    (5.2215, True)
    >>> zcdp_epsilon(0.0, 1e-6)
    0.0
    """
    rho, delta = _rho(rho), _delta(delta)
    if rho == 0.0:
        return 0.0
    log_inv = math.log(1.0 / delta)
    # alpha - 1 searched on a log scale around the standard bound's optimum sqrt(ln(1/delta) / rho)
    centre = math.log(math.sqrt(log_inv / rho))
    best = _minimize(lambda x: _cks_epsilon(rho, log_inv, 1.0 + math.exp(x)), centre - 12.0, centre + 12.0)
    # a tiny rho (or a delta near 1) takes the bound below 0: (epsilon, delta)-DP then holds at epsilon = 0 too
    return max(0.0, min(best * (1.0 + _MARGIN), zcdp_epsilon_standard(rho, delta)))


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The delta at which a rho-zCDP mechanism is epsilon-DP (Canonne-Kamath-Steinke, Corollary 13):
    ``min over alpha > 1`` of ``exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) (1 - 1/alpha)^alpha``,
    at most 1.

    >>> bool(zcdp_delta(0.5, 5.2216) <= 1e-6 < zcdp_delta(0.5, 5.2214))
    True
    """
    rho, epsilon = _rho(rho), check_nonnegative(epsilon, "epsilon")
    if rho == 0.0:
        return 0.0

    def log_delta(x: float) -> float:
        alpha = 1.0 + math.exp(x)
        if not 1.0 / alpha < 1.0:  # alpha - 1 below the float resolution: the bound tends to infinity there
            return math.inf
        return (alpha - 1.0) * (alpha * rho - epsilon) - math.log(alpha - 1.0) + alpha * math.log1p(-1.0 / alpha)

    centre = math.log(max(epsilon / (2.0 * rho), 1e-6))  # delta is at most 1: a log above 0 is 1, not an overflow
    return min(1.0, math.exp(min(_minimize(log_delta, centre - 12.0, centre + 12.0), 0.0)) * (1.0 + _MARGIN))


def rho_for(epsilon: float, delta: float) -> float:
    """The largest rho (to a relative 1e-12, rounded down) whose :func:`zcdp_epsilon` at ``delta`` is at most
    ``epsilon``: how much zCDP budget an (epsilon, delta) target affords; a target that affords a rho > 0 below
    :data:`~dpstream._checks.MIN_EPSILON` (which no mechanism takes) is refused naming it.  Any delta in (0, 1)
    converts; the commands and the service refuse a new release's target above :data:`MAX_TARGET_DELTA`
    (:func:`check_target_delta`), while a release begun before that rule continues at its own delta.

    >>> rho = rho_for(1.0, 1e-6); bool(zcdp_epsilon(rho, 1e-6) <= 1.0 < zcdp_epsilon(rho * 1.001, 1e-6))
    True
    >>> rho_for(1e-12, 1e-300)
    Traceback (most recent call last):
    ValueError: epsilon 1e-12 at delta 1e-300 affords rho 3.817e-28 (zCDP), below 1e-12: smaller budgets drown the \
data in float64 noise; a larger epsilon or delta.
    """
    epsilon, delta = check_nonnegative(epsilon, "epsilon"), _delta(delta)
    if epsilon == 0.0 or zcdp_epsilon(epsilon, delta) <= epsilon:  # the search's top affords it (delta covers it)
        return epsilon
    low, high = 0.0, epsilon  # zcdp_epsilon(rho) >= rho
    while high - low > high * 1e-12:
        middle = (low + high) / 2.0
        if zcdp_epsilon(middle, delta) <= epsilon:
            low = middle
        else:
            high = middle
    if low < MIN_EPSILON:
        raise ValueError(f"epsilon {epsilon!r} at delta {delta!r} affords rho {low:.4g} (zCDP), below {MIN_EPSILON:g}: "
                         "smaller budgets drown the data in float64 noise; a larger epsilon or delta.")
    return low


def _up4(x: float) -> float:
    """``x`` rounded up to 4 significant digits (a stated epsilon is never below the true one).

    >>> _up4(5.25651), _up4(38.3612), _up4(0.0)
    (5.257, 38.37, 0.0)
    """
    if x <= 0.0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - 3)
    value = float(f"{math.ceil(x / step) * step:.4g}")
    return value if value >= x else float(f"{value + step:.4g}")


@dataclass(frozen=True)
class Zcdp(Budget):
    """A rho-zCDP budget: sequential parts add (composition of zCDP), parallel parts take the largest.

    >>> Zcdp(0.5).label(), Zcdp.sequential([Zcdp(0.25), Zcdp(0.125)]), Zcdp.parallel([Zcdp(0.25), Zcdp(0.5)])
    ('0.5-zCDP', Zcdp(rho=0.375), Zcdp(rho=0.5))
    """

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _rho(self.rho))

    def label(self, local: bool = False) -> str:
        """``"0.5-zCDP"``."""
        return f"{self.rho:g}-zCDP"

    @classmethod
    def sequential(cls, budgets: Sequence[Zcdp]) -> Zcdp:  # type: ignore[override]
        """The budget of parts that read the same data: rho's add."""
        return cls(math.fsum(b.rho for b in budgets))

    @classmethod
    def parallel(cls, budgets: Sequence[Zcdp]) -> Zcdp:  # type: ignore[override]
        """The budget of parts that read disjoint data: the largest rho."""
        return cls(max(b.rho for b in budgets))

    @classmethod
    def of_pure(cls, budget: EpsilonDelta) -> Zcdp:
        """A pure epsilon-DP budget as zCDP, ``epsilon^2 / 2``; an approximate (delta > 0) one is refused."""
        if budget.delta != 0.0:
            raise ValueError(f"only pure DP converts to zCDP, got {budget.label()}.")
        return cls(rho_of_pure(budget.epsilon))


@dataclass(frozen=True, kw_only=True)
class ZcdpGuarantee(PrivacyGuarantee):
    """A rho-zCDP guarantee, stated with the (epsilon, delta) it implies at ``delta`` (:func:`zcdp_epsilon`).

    Build it with :meth:`of` (a breakdown of :class:`Zcdp` parts) or :meth:`from_pure` (a pure
    guarantee as zCDP).  It composes with zCDP guarantees, and with pure ones converted at
    ``epsilon^2 / 2``, about the same relation: rho's add (sequential) or the largest is kept
    (parallel); the result is stated at this guarantee's delta.

    >>> from dpstream.privacy import EVENT_LEVEL
    >>> day = ZcdpGuarantee.of(Part(what="day", budget=Zcdp(0.5)), neighbours=EVENT_LEVEL)
    >>> day.label, round(day.epsilon, 4), day.delta
    ('0.5-zCDP, so (5.222, 1e-06)-DP', 5.2215, 1e-06)
    >>> month = day.compose_sequential(*[day] * 29)
    >>> month.rho, round(month.epsilon, 2), month.at(1e-9).label
    (15.0, 42.37, '15-zCDP, so (48.98, 1e-09)-DP')
    """

    rho: float

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "rho", _rho(self.rho))
        _delta(self.delta)
        if self.epsilon < zcdp_epsilon(self.rho, self.delta):
            raise ValueError(f"epsilon {self.epsilon:g} is below what rho {self.rho:g} implies at delta "
                             f"{self.delta:g} ({zcdp_epsilon(self.rho, self.delta):g}).")
        object.__setattr__(self, "breakdown", Part(what=self.composition, budget=Zcdp(self.rho), noise=self.noise))

    @classmethod
    def of(cls, breakdown: Part | Composition, *, neighbours: Relation, local: bool = False,  # type: ignore[override]
           delta: float = DEFAULT_DELTA) -> ZcdpGuarantee:
        """The zCDP guarantee of ``breakdown`` (Zcdp budgets) about ``neighbours``, stated at ``delta``."""
        if not isinstance(breakdown, (Part, Composition)):
            raise TypeError(f"breakdown must be a Part or a Composition, got {breakdown!r}.")
        budget = breakdown.budget
        if not isinstance(budget, Zcdp):
            raise TypeError(f"a zCDP guarantee needs Zcdp budgets, got {budget!r}.")
        guarantee = cls(rho=budget.rho, epsilon=zcdp_epsilon(budget.rho, delta), delta=delta, neighbours=neighbours,
                        composition=breakdown.render(local), local=local, noise=breakdown.noise)
        object.__setattr__(guarantee, "breakdown", breakdown)
        return guarantee

    @classmethod
    def from_pure(cls, guarantee: PrivacyGuarantee, *, delta: float = DEFAULT_DELTA) -> ZcdpGuarantee:
        """A pure epsilon-DP guarantee as ``epsilon^2 / 2``-zCDP (a zCDP one is restated at ``delta``)."""
        if isinstance(guarantee, ZcdpGuarantee):
            return guarantee.at(delta)
        budget = Zcdp.of_pure(EpsilonDelta(guarantee.epsilon, guarantee.delta))
        part = Part(what=guarantee.composition, budget=budget, noise=guarantee.noise,
                    text=f"{guarantee.label} as rho = epsilon^2/2 = {budget.rho:g}: {guarantee.composition}")
        return cls.of(part, neighbours=guarantee.neighbours, local=guarantee.local, delta=delta)

    def at(self, delta: float) -> ZcdpGuarantee:
        """The same guarantee stated at another ``delta``."""
        return ZcdpGuarantee.of(self.breakdown, neighbours=self.neighbours, local=self.local, delta=delta)

    @property
    def label(self) -> str:
        """``"0.5-zCDP, so (5.257, 1e-06)-DP"``: rho and the (epsilon, delta) it implies."""
        return f"{Zcdp(self.rho).label()}, so {EpsilonDelta(_up4(self.epsilon), self.delta).label()}"

    def _composed(self, kind: str, others: tuple[PrivacyGuarantee, ...], composition: str | None) -> ZcdpGuarantee:
        for other in others:
            if not self.same_relation(other):
                raise ValueError(f"{kind} composition needs one neighbour relation, got "
                                 f"{self._relation_text()!r} and {other._relation_text()!r}.")
        converted = [ZcdpGuarantee.from_pure(other, delta=self.delta) for other in others]
        layout = None if composition is None else composition.replace("{", "{{").replace("}", "}}")
        if not others and composition is None:
            return self.at(self.delta)
        breakdown = Composition(kind=kind, parts=(self.breakdown, *(g.breakdown for g in converted)), layout=layout)
        return ZcdpGuarantee.of(breakdown, neighbours=self.neighbours, local=self.local, delta=self.delta)


def zcdp_unit_statement(guarantee: ZcdpGuarantee, *, unit: str, window: str, windows: int) -> str:
    """What one unit gets under zCDP, in words: per window, and over ``windows`` windows by adding rho's, each
    with the (epsilon, delta) it implies at the guarantee's delta.

    >>> from dpstream.privacy import UnitLevel
    >>> day = ZcdpGuarantee.of(Part(what="d", budget=Zcdp(0.3)), neighbours=UnitLevel("meter", "UTC day", "x"))
    >>> print(zcdp_unit_statement(day, unit="meter", window="UTC day", windows=30))  # doctest: +NORMALIZE_WHITESPACE
    each meter's readings in each UTC day: ρ = 0.3 (ε = 3.921, δ = 1e-06); over 30 windows: ρ = 9 by composition
    (ε = 30.05, δ = 1e-06)
    """
    rho = math.fsum([guarantee.rho] * windows)
    return (f"each {unit}'s readings in each {window}: ρ = {guarantee.rho:g} (ε = {_up4(guarantee.epsilon):g}, "
            f"δ = {guarantee.delta:g}); over {windows:,} window{'s' * (windows != 1)}: ρ = {rho:g} by composition "
            f"(ε = {_up4(zcdp_epsilon(rho, guarantee.delta)):g}, δ = {guarantee.delta:g})")
