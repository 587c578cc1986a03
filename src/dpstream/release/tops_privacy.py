"""What a :class:`~dpstream.release.tops.ToPS` release states it spends: the threshold choice and the
hierarchy, composed in parallel (:func:`tops_privacy`)."""

from __future__ import annotations

from typing import Any

from dpstream.privacy import EVENT_LEVEL, Composition, EpsilonDelta, Part, PrivacyGuarantee
from dpstream.release.wevent import hierarchy_wevent
from dpstream.thresholds import noisy_max_epsilon

__all__ = ["PROFILE_SHARE", "tops_privacy"]

#: With ``period`` and the model: the share of the threshold budget spent on the period's profile.
PROFILE_SHARE = 0.25


def tops_privacy(tops: Any) -> PrivacyGuarantee:
    """What a :class:`~dpstream.release.tops.ToPS` release spends: the threshold choice and the hierarchy, in parallel.

    The budgets are those recomputed from the rounded-up noise scales.  The hierarchy's
    depends on theta (in grid units), so before the hold-out ends it is stated as
    ``epsilon``, an upper bound on what it will be.
    """
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
