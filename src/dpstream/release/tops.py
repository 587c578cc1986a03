"""ToPS: Threshold optimizer, Perturber, Smoother (Section 3, Algorithm 1).

The first ``hold`` values choose the threshold theta and are not released (the paper's
setting).  By default theta, the smoothed levels s and the smoother's prior are chosen together,
privately, for the error model of this pipeline and the windows named by ``query_length``
(``threshold_method="model"``, :mod:`dpstream.thresholds.model`: a departure from the paper,
which chooses theta by NM-E, s by Eq. 7 and starts at theta / 2; ``threshold_method="nm-e"``
runs the paper's choice).  Every later value is truncated at theta, perturbed by the online consistent hierarchy and
smoothed, and released the moment it arrives.  Data flows one way:
:mod:`dpstream.thresholds` -> :mod:`dpstream.release.perturber` -> :mod:`dpstream.smoothers`.

By default every noisy measurement is exact: NM-E adds discrete Laplace noise to integer counts,
and the hierarchy measures integer sums on a public grid (see
:mod:`dpstream.release.perturber`).  One noise source serves both: ``seed`` (None: the OS
CSPRNG), ``key`` (NM-E draws from the identity ``("tops", "nm-e")`` and chunk ``c`` of the
hierarchy from ``("tops", c)``) or an explicit ``noise`` sampler (``FloatNoise(rng)`` for the
studies' float path, NOT for publication).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_choice,
    check_epsilon,
    check_grid,
    check_length,
    check_magnitude,
    check_memory,
    check_nonnegative_int,
    check_positive_int,
    check_stream_values,
)
from dpstream._params import Params
from dpstream.accounting import DEFAULT_DELTA, check_budget
from dpstream.noise.bits import BitsSeed, SeededBits, make_bits
from dpstream.noise.grid import GridLaplace
from dpstream.noise.grid_gaussian import GridGaussian
from dpstream.noise.sampler import FloatNoise, NoiseSampler, ZeroNoise
from dpstream.noise.source import make_source
from dpstream.privacy import PrivacyGuarantee
from dpstream.release.contract import TOPS, read_header, snapshot_header
from dpstream.release.holdout import HoldOutRelease
from dpstream.release.periodic import PeriodicPerturber, periodic_levels
from dpstream.release.perturber import HierarchicalPerturber, HierarchyShape, check_chunk_sums
from dpstream.release.tops_defaults import check_threshold_choice, fit_params, model_structures, warn_if_useless
from dpstream.release.tops_privacy import PROFILE_SHARE, tops_privacy, zcdp_threshold_epsilon
from dpstream.release.wevent import PeriodBounded, check_wevent, event_epsilon
from dpstream.smoothers import SMOOTHERS, Smoother, make_smoother
from dpstream.thresholds import NM_E_CONSTANT, noisy_max_threshold
from dpstream.thresholds.error_model import QueryLengths
from dpstream.thresholds.model import ModelChoice, model_threshold, window_leaves
from dpstream.thresholds.noisy_max import threshold_candidates
from dpstream.thresholds.profile import noisy_profile, profile_epsilon
from dpstream.thresholds.select import SELECTIONS

__all__ = ["PERIOD_SMOOTHING", "PROFILE_SHARE", "THRESHOLD_METHODS", "ToPS"]

#: How ToPS chooses theta: the paper's NM-E, or the error model of this pipeline.
THRESHOLD_METHODS = ("nm-e", "model")

#: With ``period``: the default smoother averages the levels of this many past periods.
PERIOD_SMOOTHING = 7


class ToPS(HoldOutRelease, Params):
    """Continual release of a real-valued stream under epsilon-DP (ToPS).

    Parameters
    ----------
    epsilon : float
        Budget of the perturber; also of the threshold optimizer unless ``threshold_epsilon``
        is given.
    rho : float, optional
        Instead of ``epsilon``: a zCDP budget (:mod:`dpstream.release.tops_zcdp`): discrete Gaussian noise
        on every measured level, and the threshold at ``sqrt(2 rho)`` unless ``threshold_epsilon`` is given.
    upper_bound : float
        B: every value must lie in [0, B] (public).
    hold : int, optional
        m: number of leading values used to choose theta and not released (default the paper's 65,536, or
        fitted to ``expected_length``); with ``threshold``, 0 (the default stands for 0 there).
    max_range : int, optional
        r: the hierarchy covers chunks of r values; queries up to r are served (default the paper's 2^20, or
        fitted to ``expected_length``).
    fanout : int
        b (paper: 16).
    smoother : str or Smoother, optional
        recent, mean, median, moving_average or exponential.  Default recent (Algorithm 1); with
        ``period``, moving_average over :data:`PERIOD_SMOOTHING` periods (a window that cuts a
        period is predicted from the mean level of the last week of days rather than the last day;
        a departure from the paper, chosen on the smart-meter stream).
    window, alpha : optional
        Parameters of the moving_average and exponential smoothers.
    threshold_epsilon : float, optional
        Budget of the threshold choice (NM-E or the model), when it should differ from ``epsilon``.
    smoothed_levels : int, optional
        Force s (0 disables smoothing) instead of the model's choice or Eq. 7.  With the model
        and no forced s, :attr:`smoothed_levels` is None until the hold-out ends.
    c : float
        The constant of Eq. 6 (paper: 60).
    threshold_step : float, optional
        Spacing of the candidates ``step, 2 step, ..., B`` (default the paper's 1, or ``B / 1024`` with
        ``expected_length``).
    clip : bool
        Clip values outside [0, B] instead of raising an error.
    threshold_method : str
        ``model`` (default): theta, s and the prior chosen privately for the error model of
        this pipeline (:func:`~dpstream.thresholds.model.model_threshold`); ``smoothed_levels``,
        if given, is kept and only theta and the prior are chosen.  ``nm-e``: the paper's NM-E,
        s by Eq. 7 and the prior ``theta / 2`` (Algorithm 1).
    query_length : int, optional
        With ``model``: the window length the release should serve best (e.g. 1440 for daily
        sums of minute readings); default the paper's random queries over ``max_range``.
        Without ``period`` (and with ``window_leaves``), the model also scores hierarchies whose
        leaves are ``L / k`` values (:func:`~dpstream.thresholds.model.window_leaves`: k in 1, 2, 4,
        8), counted from the stream's first value, for windows of ``L`` that start anywhere, and
        chooses the structure with theta (a departure from the paper).  When such leaves win, the
        release is a :class:`~dpstream.release.periodic.PeriodicPerturber` (:attr:`leaf`), and the
        default smoother is the moving average of :data:`PERIOD_SMOOTHING` leaves, as with ``period``.
    window_leaves : bool
        With ``model`` and ``query_length`` (no ``period``, no ``smoothed_levels``): score the
        leaves of a fraction of the window (default True); False scores blocks of ``b^s`` only.
    period : int, optional
        P: measure one leaf per period of the stream instead of blocks of ``b^s`` values
        (:class:`~dpstream.release.periodic.PeriodicPerturber`; e.g. 1440 for minute readings
        with daily windows).  Periods are counted from the stream's first value (held-out
        values included), so aligned windows of ``P`` values are sums of whole leaves; the
        measured levels are chosen for windows of ``query_length`` (default ``P``) by
        :func:`~dpstream.release.periodic.periodic_levels`.  A departure from the paper.
        With ``model``, theta and the levels are chosen for these windows.
    profile_bins : int
        With ``period`` and ``model``: a positive number of bins (e.g. 24: hours of a day of
        minutes) spends :data:`PROFILE_SHARE` of the threshold budget on a private profile of the
        period from the hold-out (:func:`~dpstream.thresholds.profile.noisy_profile`) that shapes
        the predictions inside a period.  Default 0: flat predictions, the whole threshold budget
        to the model (on the smart-meter stream the profile changed no error by more than 2%:
        a window that cuts two periods misplaces mass in both, and the two errors cancel).
    selection : str
        With ``model``: ``permute-and-flip`` (default), ``report-noisy-max`` or
        ``exponential`` (:mod:`dpstream.thresholds.select`).
    granularity : float, optional
        g, the public grid of the hierarchy's measurements (exact path); default the largest
        power of two at most ``B / 2^20``.  Values are rounded to the nearest multiple of g
        (ties to even) after truncation; theta is rounded up to the grid.
    seed : None, int, numpy Generator or bit source
        Bits of the exact samplers for all noise: None (default) is the OS CSPRNG; an int
        replays a PCG64 (tests; anyone who knows it can remove the noise).
    noise : NoiseSampler, optional
        Instead of ``seed``: ``ZeroNoise()`` (tests) or ``FloatNoise(rng)``, the float algorithm
        of the studies (no grid, numpy's float Laplace: NOT for publication).
    key : bytes, optional
        Instead of ``seed``: a secret key; NM-E and each chunk draw from their own keyed stream,
        so the same key and stream give the same release (a restart recomputes its noise).
    threshold : float, optional
        A public theta (:attr:`public_threshold`): no hold-out, nothing spent on it, values above it clipped to it;
        the stream is released from its first value as ``HierarchicalPerturber(threshold=theta)`` (same noise for the
        same seed or key); the options of a chosen threshold (``hold``, ``threshold_epsilon``, ...) are refused.
    expected_length : int, optional
        N, the number of values the stream is expected to hold: a public number, never read from the data.  The
        defaults of ``hold``, ``max_range``, ``threshold_step`` and the smoothed levels are fitted to it
        (:func:`~dpstream.release.tops_defaults.fit_defaults`); without it they are the paper's.  Public
        parameters that make the values mostly chance, the prior or noise issue a
        :class:`~dpstream.release.tops_defaults.ReleaseWarning` (with or without it).
    w_event : int, optional
        w: protect every ``w`` consecutive values at ``epsilon`` (:class:`~dpstream.privacy.WEvent`) instead of one
        value; needs a public ``threshold`` (:mod:`dpstream.release.wevent` derives the noise: each level's L1
        sensitivity is ``w theta``, or with ``period_bound`` the sum of the bounded periods a window touches).
    period_bound : float, optional
        With ``w_event`` and ``period``: C, each period's total bounded at C (values add in order; the one that
        crosses C is cut, later ones count 0), so that a window moves each level by ``2C`` rather than ``w theta``.

    Privacy
    -------
    ``max(epsilon', threshold_epsilon')``-DP at event level (Definition 2.1), where the primes
    are the budgets recomputed from the rounded-up noise scales (at most those asked): two
    streams are neighbours when they differ in the value at one position.  NM-E (or the model's
    four steps together) is ``threshold_epsilon'``-DP on the hold-out, the perturber is ``epsilon'``-DP on the rest
    given the public theta; the two read disjoint positions, so they compose in parallel.  A
    fresh hierarchy per ``max_range`` values composes in parallel too, so the guarantee holds
    for infinite streams.  With ``rho``: ``max(threshold_epsilon'^2 / 2, rho')``-zCDP, stated with the
    (epsilon, delta) it implies (the derivation in :mod:`dpstream.release.tops_zcdp`).  With a public
    ``threshold`` nothing is held out or spent on theta: the
    release is ``epsilon'``-DP, the hierarchy's alone.  Truncation, rounding to the grid, consistency and
    smoothing add no cost.  With leaves of a fraction of the window (:attr:`leaf`), the hierarchy is a
    :class:`~dpstream.release.periodic.PeriodicPerturber` over those leaves with the same
    guarantee (one value changes one node per measured level); which leaves is a public function
    of the privately selected theta, so the threshold's budget is unchanged.  The guarantee holds
    for the numbers produced: every noisy measurement is an exact integer drawn by exact samplers.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> stream = rng.integers(0, 20, size=5000).astype(float)
    >>> tops = ToPS(epsilon=1.0, upper_bound=100, hold=1000, max_range=4096, seed=42)
    >>> released = tops.release(stream)
    >>> released.shape, tops.threshold is not None, tops.smoothed_levels in range(tops.levels)
    ((4000,), True, True)
    >>> replay = ToPS(epsilon=1.0, upper_bound=100, hold=1000, max_range=4096, seed=42)
    >>> streamed = [replay.release_one(v) for v in stream]
    >>> bool(np.array_equal(released, [v for v in streamed if v is not None]))
    True
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        upper_bound: float,
        hold: int | None = None,
        max_range: int | None = None,
        fanout: int = 16,
        smoother: str | Smoother | None = None,
        window: int | None = None,
        alpha: float | None = None,
        threshold_epsilon: float | None = None,
        smoothed_levels: int | None = None,
        c: float = NM_E_CONSTANT,
        threshold_step: float | None = None,
        clip: bool = False,
        threshold_method: str = "model",
        query_length: int | None = None,
        period: int | None = None,
        profile_bins: int = 0,
        window_leaves: bool = True,
        selection: str = "permute-and-flip",
        granularity: float | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
        key: bytes | None = None,
        threshold: float | None = None,
        expected_length: int | None = None,
        w_event: int | None = None,
        period_bound: float | None = None,
        rho: float | None = None,
    ) -> None:
        self._params = dict(
            epsilon=epsilon, upper_bound=upper_bound, hold=hold, max_range=max_range, fanout=fanout,
            smoother=smoother, window=window, alpha=alpha, threshold_epsilon=threshold_epsilon,
            smoothed_levels=smoothed_levels, c=c, threshold_step=threshold_step, clip=clip,
            threshold_method=threshold_method, query_length=query_length, period=period, profile_bins=profile_bins,
            window_leaves=window_leaves, selection=selection, granularity=granularity, threshold=threshold,
            expected_length=expected_length, **({} if rho is None else {"rho": rho}))
        #: The hold-out, tree, grid and largest s in use: fitted to ``expected_length`` (N), or the paper's.
        fitted = self.fitted = fit_params(self._params)
        self.public_threshold = None if threshold is None else check_bound(threshold, "threshold")  #: or None
        self.epsilon, self.rho = (check_epsilon(epsilon), None) if rho is None else check_budget(epsilon, rho)
        self.upper_bound = check_bound(upper_bound)
        self.hold = check_memory(check_positive_int(fitted.hold, "hold", minimum=int(threshold is None)), "hold")
        self.threshold_epsilon = self._threshold_budget(threshold_epsilon)
        self.c = check_bound(c, "c")
        self.threshold_step = check_bound(fitted.threshold_step, "threshold_step")
        check_magnitude(self.upper_bound / self.threshold_step, "upper_bound / threshold_step", "raise threshold_step")
        threshold_candidates(self.upper_bound, self.threshold_step)  # validates the grid now
        self.clip = check_bool(clip, "clip")
        self.threshold_method = check_choice(threshold_method, "threshold_method", THRESHOLD_METHODS)
        self.query_length = None if query_length is None else check_length(query_length, "query_length")
        self.selection = check_choice(selection, "selection", tuple(SELECTIONS))
        self.period = None if period is None else check_memory(check_positive_int(period, "period"), "period")
        self.profile_bins = check_nonnegative_int(profile_bins, "profile_bins")
        self.window_leaves = check_bool(window_leaves, "window_leaves")
        self._set_wevent(w_event, period_bound)
        #: With ``query_length`` and no period: the leaf length the model chose (None: blocks of ``b^s``).
        self.leaf: int | None = None
        self._profile: np.ndarray | None = None
        #: With ``period`` or leaves of a window (:attr:`leaf`): d, the measured levels of the periodic hierarchy
        #: (None until the hold-out ends).
        self.period_levels: int | None = None
        if self.period is not None and smoothed_levels is not None:
            raise ValueError(f"smoothed_levels applies to blocks of b^s values, not to period={self.period}; "
                             f"got smoothed_levels={smoothed_levels}.")
        if self.threshold_method == "nm-e" and (query_length is not None or selection != "permute-and-flip"):
            raise ValueError("query_length and selection apply to threshold_method='model' only, got threshold_method="
                             "'nm-e' with them.")
        self.model_choice: ModelChoice | None = None
        self._chosen: dict | None = None  # what the hold-out chose: theta, s, the prior (public)
        self._forced_levels, self._profile_spent = smoothed_levels, 0.0
        self._set_smoothers(smoother, None if window is None else check_length(window, "window"), alpha)
        self._source = make_source(seed=seed, noise=noise, key=key, identity=("tops",))
        self._max_smoothed = fitted.max_smoothed_levels
        self._set_hierarchy(fitted.max_range, fanout, smoothed_levels, granularity)
        self._start_hold_out()
        self._begin(self._perturber_args["smoothed_levels"])
        warn_if_useless(self)

    def _threshold_budget(self, threshold_epsilon: float | None) -> float:
        """The threshold choice's pure epsilon: as given, else ``epsilon``, or under zCDP the epsilon whose
        ``epsilon^2 / 2`` is ``rho`` (:func:`~dpstream.release.tops_privacy.zcdp_threshold_epsilon`)."""
        if threshold_epsilon is not None:
            return check_epsilon(threshold_epsilon, "threshold_epsilon")
        return self.epsilon if self.rho is None else zcdp_threshold_epsilon(self.rho)

    def _set_wevent(self, w_event: int | None, period_bound: float | None) -> None:
        """``w_event`` and ``period_bound`` (recorded in the snapshot when given), and the budget per value."""
        self._params.update((k, v) for k, v in (("w_event", w_event), ("period_bound", period_bound)) if v is not None)
        #: With ``w_event``: the window (every ``w`` consecutive values protected) and each period's bound C, or None.
        self.w_event, self.period_bound = check_wevent(w_event, period_bound, threshold=self.public_threshold,
                                                       period=self.period)
        if self.w_event is not None and self.rho is not None:
            raise ValueError("w_event applies to the pure-DP ToPS (epsilon), not under zCDP (rho).")
        #: The hierarchy's budget per value at event level: ``epsilon``, or with ``w_event`` ``epsilon theta / S``.
        self.stream_epsilon = self.epsilon if self.w_event is None else event_epsilon(
            self.epsilon, self.w_event, theta=self.public_threshold, period=self.period, bound=self.period_bound)
        #: The hierarchy's budget as its constructor takes it: ``epsilon`` (per value), or ``rho`` under zCDP.
        self._budget = {"epsilon": self.stream_epsilon} if self.rho is None else {"rho": self.rho}

    def _begin(self, smoothed_levels: int | None) -> None:
        """A public threshold starts the stream now (released from its first value); else refuse now what cannot be."""
        if self.public_threshold is None:
            check_threshold_choice(
                threshold_method=self.threshold_method, epsilon=self.epsilon, rho=self.rho,
                threshold_epsilon=self.threshold_epsilon,
                budget_given=self._params["threshold_epsilon"] is not None, upper_bound=self.upper_bound,
                levels=self.levels, threshold_step=self.threshold_step, hold=self.hold, max_range=self.max_range,
                fanout=self.fanout, c=self.c, share=1.0 - PROFILE_SHARE if self._profiled else 1.0)
        elif not self.public_threshold <= self.upper_bound:
            raise ValueError(f"threshold {self.public_threshold!r} is above upper_bound {self.upper_bound!r}.")
        else:
            self._start_stream(threshold=self.public_threshold, smoothed_levels=smoothed_levels, prior=None,
                               model_choice=None)

    def _set_smoothers(self, smoother: str | Smoother | None, window: int | None, alpha: float | None) -> None:
        """The smoother of blocks and periods, and the one of leaves of a fraction of the window."""
        if smoother is None and self.period is not None:
            smoother, window = "moving_average", PERIOD_SMOOTHING if window is None else window
        params = {k: v for k, v in (("window", window), ("alpha", alpha)) if v is not None}
        self._smoother = make_smoother("recent" if smoother is None else smoother, **params)
        # leaves of a fraction of the window are smoothed as periods are
        self._leaf_smoother = (make_smoother("moving_average", window=PERIOD_SMOOTHING) if smoother is None
                               else self._smoother)

    def _set_hierarchy(self, max_range: int, fanout: int, smoothed_levels: int | None,
                       granularity: float | None) -> None:
        """Check r, b and s now rather than after the hold-out (s does not depend on theta, Eq. 7),
        and choose the grid for the largest theta, B, and the most levels the hold-out may choose."""
        shape = HierarchyShape.of(self.stream_epsilon, max_range, fanout, smoothed_levels, rho=self.rho)
        chosen_later = self.threshold_method == "model" and smoothed_levels is None and self.public_threshold is None
        if smoothed_levels is None and not chosen_later and self._max_smoothed is not None \
                and self._max_smoothed < shape.smoothed_levels:
            smoothed_levels = self._max_smoothed  # Eq. 7's s, but no block longer than the stream can fill
            shape = HierarchyShape.of(self.stream_epsilon, max_range, fanout, smoothed_levels, rho=self.rho)
        self.max_range, self.fanout = shape.max_range, shape.fanout
        self.levels, self.smoothed_levels = shape.levels, shape.smoothed_levels
        self._perturber_args = dict(**self._budget, max_range=self.max_range, fanout=self.fanout,
                                    smoothed_levels=smoothed_levels, smoother=self._smoother)
        self.granularity: float | None = None
        if self.rho is not None and not self._source.exact:  # refused now, not when the hold-out ends
            raise ValueError("zCDP (rho) runs on exact discrete Gaussian noise only, not FloatNoise.")
        if self.public_threshold is not None:  # the grid is the perturber's, chosen for theta (it checks it)
            return
        measured = shape.levels if chosen_later or self.period else shape.measured_levels
        # theta <= B: refuse now the parameters whose noise would overflow float64 after the hold-out
        if self.rho is None:
            check_magnitude(self.upper_bound * measured / self.epsilon,
                            "the largest noise scale upper_bound * (h - s) / epsilon")
        check_magnitude(self.upper_bound * self.max_range, "upper_bound * max_range (the largest sum of a hierarchy)")
        if self._source.exact:
            check_grid(self.upper_bound, granularity)
            # the largest theta is B: refuse now a grid too fine for the budget, not after the hold-out
            noise = (GridLaplace.choose(self.upper_bound, self.epsilon, granularity, levels=measured)
                     if self.rho is None else GridGaussian.choose(self.upper_bound, self.rho, granularity,
                                                                  levels=measured))
            check_chunk_sums(self.max_range, noise.units)
            self.granularity = noise.granularity
        elif granularity is not None:
            raise ValueError("granularity applies to exact noise only; the float path (FloatNoise) has no grid.")
        if chosen_later:
            self.smoothed_levels = None  # chosen with theta when the hold-out ends

    # -- what the release has chosen, and its state ---------------------------------------

    @property
    def state(self) -> dict:
        """A snapshot of the release as plain data (SECRET: the held-out values, the key or the
        noise; see :mod:`dpstream.release.contract`).

        ``ToPS.from_state(state)`` continues exactly where it was taken: the hold-out so far (or
        what it chose: theta, s, the prior and the model's choice), the current chunk's running
        sums and smoother, and the noise source.
        """
        params = dict(self._params)
        if params["smoother"] is not None:  # None stays None: the default depends on what the hold-out chooses
            params.update(_smoother_params(self._smoother))
        return {
            **snapshot_header(TOPS, params, self._source),
            **self._hold_out_state(),
            "chosen": self._chosen,
            "perturber": None if self._stream is None else self._stream.stream_state(),
        }

    @classmethod
    def from_state(cls, state: dict) -> ToPS:
        """The release a :attr:`state` snapshot describes, continuing where it was taken."""
        params, source = read_header(state, TOPS)
        tops = cls(**params, noise=source)
        tops._resume_hold_out(state)
        if state["chosen"] is not None:
            tops._start_stream(**state["chosen"])
            tops._stream.resume_stream(state["perturber"])
        return tops

    def privacy(self, delta: float = DEFAULT_DELTA) -> PrivacyGuarantee:
        """What the whole release spends: the threshold choice and the hierarchy, in parallel.

        The budgets are those recomputed from the rounded-up noise scales.  The hierarchy's
        depends on theta (in grid units), so before the hold-out ends it is stated as
        ``epsilon``, an upper bound on what it will be.
        """
        return tops_privacy(self, delta)

    # -- releasing ---------------------------------------------------------------------

    def _choose_threshold(self) -> None:
        if self.threshold_method == "model":
            self._choose_by_model()
            return
        theta = noisy_max_threshold(
            self._held,
            epsilon=self.threshold_epsilon,
            stream_epsilon=self.epsilon,
            upper_bound=self.upper_bound,
            max_range=self.max_range,
            fanout=self.fanout,
            noise=self._source.sampler("nm-e"),
            c=self.c,
            step=self.threshold_step,
        )
        self._start_stream(threshold=theta, smoothed_levels=self.smoothed_levels, prior=None, model_choice=None)

    @property
    def _profiled(self) -> bool:
        """Whether the hold-out also buys the period's profile."""
        return self.period is not None and self.threshold_method == "model" and self.profile_bins > 0

    def _perturber(self, theta: float, prior: float | None, *, smoothed_levels: int | None = None,
                   levels: int | None = None, leaf: int | None = None) -> HierarchicalPerturber:
        """The stream mechanism for the released values: blocks of ``b^s`` values, periods
        (``levels`` measured, default :func:`~dpstream.release.periodic.periodic_levels`), or
        leaves of ``leaf`` values under ``levels`` levels.  With a public threshold the grid is the
        one asked (None: the perturber's for theta), so a restored snapshot chooses it again."""
        grid = self._params["granularity"] if self.public_threshold is not None else self.granularity
        if leaf is not None:
            self.period_levels = levels
            return PeriodicPerturber(threshold=theta, **self._budget, period=leaf, phase=self.hold % leaf,
                                     max_range=self.max_range, fanout=self.fanout, levels=levels,
                                     smoother=self._leaf_smoother, granularity=self.granularity,
                                     noise=self._source, prior=prior)
        if self.period is None:
            args = self._perturber_args if smoothed_levels is None else dict(self._perturber_args,
                                                                             smoothed_levels=smoothed_levels)
            return HierarchicalPerturber(threshold=theta, **args, granularity=grid, noise=self._source,
                                         prior=prior)
        if levels is None:
            queries = QueryLengths.fixed(self.query_length or self.period)
            levels = periodic_levels(period=self.period, max_range=self.max_range, fanout=self.fanout,
                                     queries=queries)
        self.period_levels = levels
        return PeriodicPerturber(threshold=theta, **self._budget, period=self.period,
                                 phase=self.hold % self.period, max_range=self.max_range, fanout=self.fanout,
                                 levels=levels, shape=self._profile, smoother=self._smoother,
                                 granularity=grid,
                                 noise=self._source, prior=prior)

    def _choose_by_model(self) -> None:
        length = self.query_length or self.period
        queries = None if length is None else QueryLengths.fixed(length)
        levels = None if self._forced_levels is None else (self.smoothed_levels,)
        model_epsilon = self.threshold_epsilon * (1.0 - PROFILE_SHARE) if self._profiled else self.threshold_epsilon
        fit = self.query_length is not None and not self.period and levels is None  # a structure for the windows
        leaves = window_leaves(self.query_length, max_range=self.max_range, fanout=self.fanout) if fit else ()
        levels, leaves = model_structures(self.max_range, self.fanout, leaves * self.window_leaves, levels, fit)
        if self._forced_levels is None and self._max_smoothed is not None:  # no block longer than the stream fills
            cap = min(self._max_smoothed, self.levels - 1)
            levels = tuple(s for s in (levels or range(self.levels)) if s <= cap) or levels
        choice = model_threshold(
            self._held,
            epsilon=model_epsilon,
            stream_epsilon=self.epsilon,
            stream_rho=self.rho,
            upper_bound=self.upper_bound,
            max_range=self.max_range,
            fanout=self.fanout,
            queries=queries,
            levels=levels,
            selection=self.selection,
            step=self.threshold_step,
            seed=_bits_of(self._source.sampler("model")),
            period=self.period,
            leaves=leaves,
        )
        profile, profile_spent = None, 0.0
        if self._profiled:
            profile_budget = self.threshold_epsilon * PROFILE_SHARE
            profile = noisy_profile(self._held, choice.threshold, period=self.period, bins=self.profile_bins,
                                    epsilon=profile_budget, seed=_bits_of(self._source.sampler("profile")))
            profile_spent = profile_epsilon(choice.threshold, profile_budget)
        self._start_stream(threshold=choice.threshold, smoothed_levels=choice.smoothed_levels, prior=choice.prior,
                           model_choice=dataclasses.asdict(choice), levels=choice.measured_levels, profile=profile,
                           profile_spent=profile_spent, leaf=choice.leaf)

    def _start_stream(self, *, threshold: float, smoothed_levels: int | None, prior: float | None,
                      model_choice: dict | None, levels: int | None = None, profile: np.ndarray | None = None,
                      profile_spent: float = 0.0, leaf: int | None = None) -> None:
        """Start the perturber on what the hold-out chose (also when a snapshot is restored):
        theta, s (or, with a period or leaves of a fraction of the window, the measured levels d,
        the leaf and the private profile) and the prior.  theta is at least one step of the grid (a grid
        chosen for B can be coarser than the smallest candidate): it is rounded up to the grid."""
        self._chosen = {"threshold": threshold, "smoothed_levels": smoothed_levels, "prior": prior,
                        "model_choice": model_choice, "levels": levels, "profile": profile,
                        "profile_spent": profile_spent}
        if leaf is not None:  # only then, so that snapshots without leaves stay as they were
            self._chosen["leaf"] = leaf
        self.leaf = leaf
        if model_choice is not None:
            self.model_choice = ModelChoice(**model_choice)
        self._profile, self._profile_spent = profile, profile_spent
        if self.granularity is not None:
            threshold = max(threshold, self.granularity)
        self._stream = self._perturber(threshold, prior, smoothed_levels=smoothed_levels, levels=levels, leaf=leaf)
        if self.period_bound is not None:
            self._stream = PeriodBounded(self._stream, self.period_bound)
        self._threshold = self._stream.threshold
        self.smoothed_levels = self._stream.smoothed_levels
        self.granularity = self._stream.granularity if self.public_threshold is not None else self.granularity

    def release_one(self, value: float) -> float | None:
        """Consume one value; return its released value, or None while it is held out."""
        if type(value) is not float:
            value = self._coerce(value)
        if not 0.0 <= value <= self.upper_bound:
            value = self._out_of_range(value)
        perturber = self._stream
        if perturber is None:
            self._held[self._position] = value
            self._position += 1
            if self._position == self.hold:
                self._choose_threshold()
            return None
        self._position += 1
        theta = perturber.threshold
        return perturber.release_one(value if value < theta else theta)

    def _coerce(self, value: object) -> float:
        if isinstance(value, (str, bytes, bool)) or value is None:
            raise TypeError(f"stream value at position {self._position} must be a number, got {value!r}.")
        try:
            return float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"stream value at position {self._position} must be a number, got {value!r}."
            ) from error

    def _out_of_range(self, value: float) -> float:
        if math.isfinite(value) and self.clip:
            return min(max(value, 0.0), self.upper_bound)
        check_stream_values([value], self.upper_bound, clip=self.clip, offset=self._position)
        raise AssertionError("unreachable")  # pragma: no cover


def _bits_of(sampler: NoiseSampler):
    """Random bits for the model's exact samplers from one part of a noise source: the bits of an
    exact sampler, the generator of the studies' ``FloatNoise``, and for ``ZeroNoise`` (tests of
    the arithmetic) a fixed seed, so the choice is replayable."""
    if isinstance(sampler, FloatNoise):
        return make_bits(sampler.rng)
    if isinstance(sampler, ZeroNoise):
        return SeededBits(seed=0)
    return sampler.bits


def _smoother_params(smoother: Smoother) -> dict:
    """The smoother as constructor arguments (name, window, alpha), for a snapshot."""
    name = getattr(smoother, "name", None)
    if name not in SMOOTHERS or type(smoother) is not SMOOTHERS[name]:
        raise TypeError(f"a ToPS with the custom smoother {smoother!r} cannot be snapshot; give the smoother by name.")
    fields = {field.name: getattr(smoother, field.name) for field in dataclasses.fields(smoother)}
    return {"smoother": name, "window": fields.get("window"), "alpha": fields.get("alpha")}
