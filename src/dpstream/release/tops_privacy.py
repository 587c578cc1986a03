"""What a :class:`~dpstream.release.tops.ToPS` release states it spends: the threshold choice and the
hierarchy, composed in parallel (:func:`tops_privacy`), in pure DP or, under zCDP, as one rho.

Under zCDP (``ToPS(rho=...)``) the threshold choice stays pure ``epsilon_theta``-DP (its private
selections draw exact discrete Laplace noise or run permute-and-flip), which is
``epsilon_theta^2 / 2``-zCDP (Bun and Steinke, Proposition 1.4); the hierarchy is ``spent_rho``-zCDP
(:mod:`dpstream.release.tops_zcdp`).  They read disjoint positions (the hold-out and the rest), so
the release is ``max(epsilon_theta^2 / 2, spent_rho)``-zCDP, one
:class:`~dpstream.accounting.ZcdpGuarantee` with the (epsilon, delta) it implies; by default
:func:`zcdp_threshold_epsilon` gives the threshold the epsilon whose square half is ``rho``, so
neither part raises the other's rho.
"""

from __future__ import annotations

import math
from typing import Any

from dpstream.accounting import DEFAULT_DELTA, Zcdp, ZcdpGuarantee, rho_of_pure
from dpstream.privacy import EVENT_LEVEL, Composition, EpsilonDelta, Part, PrivacyGuarantee
from dpstream.release.wevent import hierarchy_wevent
from dpstream.thresholds import noisy_max_epsilon

__all__ = ["PROFILE_SHARE", "tops_privacy", "zcdp_threshold_epsilon"]

#: With ``period`` and the model: the share of the threshold budget spent on the period's profile.
PROFILE_SHARE = 0.25


def zcdp_threshold_epsilon(rho: float) -> float:
    """The largest float epsilon whose ``epsilon^2 / 2`` is at most ``rho``: the threshold choice's pure budget
    in a ToPS under ``rho``-zCDP, so that it spends no more rho than the hierarchy.

    >>> zcdp_threshold_epsilon(0.5), rho_of_pure(zcdp_threshold_epsilon(0.02)) <= 0.02
    (1.0, True)
    """
    epsilon = math.sqrt(2.0 * rho)
    while rho_of_pure(epsilon) > rho:
        epsilon = math.nextafter(epsilon, 0.0)
    return epsilon


def tops_privacy(tops: Any, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
    """What a :class:`~dpstream.release.tops.ToPS` release spends: the threshold choice and the hierarchy, in parallel.

    The budgets are those recomputed from the rounded-up noise scales.  The hierarchy's
    depends on theta (in grid units), so before the hold-out ends it is stated as
    ``epsilon`` (or ``rho``), an upper bound on what it will be.  Under zCDP the guarantee is stated with
    the (epsilon, delta) it implies at ``delta``.
    """
    if tops.rho is not None:
        return _zcdp_privacy(tops, delta)
    if tops.w_event is not None:
        return hierarchy_wevent(tops._stream, window=tops.w_event, period=tops.period, bound=tops.period_bound)
    stream = EpsilonDelta(tops.epsilon if tops._stream is None else tops._stream.spent_epsilon)
    noise = tops._source.describe()
    grid = "" if tops.granularity is None else f" on the grid g = {tops.granularity:g}"
    if tops.public_threshold is not None:
        levels = f"{'d' if tops.period is not None else 'h - s'} = {tops._stream.measured_levels}"
        hierarchy = Part(what="hierarchy", budget=stream, noise=noise, text=(
            f"hierarchy {stream.label()} on every value from the first{grid} (eps / ({levels}) on each measured "
            f"level); theta = {tops.threshold:g} is public (given, not chosen from the data: it spends nothing), "
            f"values above it are clipped to it"))
        only = Composition(kind="parallel", parts=(hierarchy,), layout="{}; no hold-out")
        return PrivacyGuarantee.of(only, neighbours=EVENT_LEVEL)
    if tops.threshold_method == "model":
        spent = EpsilonDelta(tops.threshold_epsilon if tops.model_choice is None
                             else tops.model_choice.epsilon_spent + tops._profile_spent)
        levels = "h - s" if tops.smoothed_levels is None else f"h - s = {tops.levels - tops.smoothed_levels}"
        if tops.period is not None:
            levels = "d" if tops._stream is None else f"d = {tops._stream.measured_levels}"
        elif tops.leaf is not None:
            levels = f"d = {tops._stream.measured_levels} over leaves of {tops.leaf} values"
        profile = "" if not tops._profiled else f", profile of the period ({PROFILE_SHARE:g} of the budget)"
        threshold = Part(what="model threshold", budget=spent, noise=noise, text=(
            f"model threshold {spent.label()} on the first {tops.hold} values (theta, s and the prior{profile})"))
        per_level = f"eps / ({levels}) on each measured level"
    else:
        measured = tops._stream.measured_levels if tops._stream is not None else tops.levels - tops.smoothed_levels
        nm_e = EpsilonDelta(noisy_max_epsilon(tops.threshold_epsilon, monotone=True) if tops._source.exact
                            else tops.threshold_epsilon)
        threshold = Part(what="NM-E threshold", budget=nm_e, noise=noise,
                         text=f"NM-E threshold {nm_e.label()} on the first {tops.hold} values")
        per_level = f"eps/{measured} on each of h - s = {measured} measured levels"
    hierarchy = Part(what="hierarchy", budget=stream, noise=noise,
                     text=f"hierarchy {stream.label()} on the rest{grid} ({per_level})")
    return PrivacyGuarantee.of(Composition(kind="parallel", parts=(threshold, hierarchy),
                                           layout="{}; {}; parallel composition"), neighbours=EVENT_LEVEL)


def _zcdp_privacy(tops: Any, delta: float) -> ZcdpGuarantee:
    """:func:`tops_privacy` under zCDP: the threshold's pure epsilon as ``epsilon^2 / 2`` and the hierarchy's rho,
    in parallel (the largest)."""
    stream = Zcdp(tops.rho if tops._stream is None else tops._stream.spent_rho)
    grid = f" on the grid g = {tops.granularity:g}"
    noise = tops._source.describe("discrete Gaussian")
    levels = f"{'d' if tops.period is not None or tops.leaf is not None else 'h - s'}"
    if tops._stream is not None:
        levels += f" = {tops._stream.measured_levels}"
    per_level = (f"discrete Gaussian of sigma^2 = theta^2 ({levels}) / (2 rho) on each measured level: L2 sensitivity "
                 f"theta sqrt({levels})")
    if tops.public_threshold is not None:
        hierarchy = Part(what="hierarchy", budget=stream, noise=noise, text=(
            f"hierarchy {stream.label()} on every value from the first{grid} ({per_level}); theta = "
            f"{tops.threshold:g} is public (given, not chosen from the data: it spends nothing), values above it are "
            "clipped to it"))
        only = Composition(kind="parallel", parts=(hierarchy,), layout="{}; no hold-out")
        return ZcdpGuarantee.of(only, neighbours=EVENT_LEVEL, delta=delta)
    spent = EpsilonDelta(tops.threshold_epsilon if tops.model_choice is None
                         else tops.model_choice.epsilon_spent + tops._profile_spent)
    choice = Zcdp.of_pure(spent)
    profile = "" if not tops._profiled else f", profile of the period ({PROFILE_SHARE:g} of the budget)"
    threshold = Part(what="model threshold", budget=choice, noise=tops._source.describe(), text=(
        f"model threshold {spent.label()}, so {choice.label()} (eps^2 / 2), on the first {tops.hold} values "
        f"(theta, s and the prior{profile})"))
    hierarchy = Part(what="hierarchy", budget=stream, noise=noise,
                     text=f"hierarchy {stream.label()} on the rest{grid} ({per_level})")
    return ZcdpGuarantee.of(Composition(kind="parallel", parts=(threshold, hierarchy),
                                        layout="{}; {}; parallel composition"), neighbours=EVENT_LEVEL, delta=delta)
