"""ToPL: continual release under local differential privacy (Section 4).

No trusted curator.  Each value is perturbed by the client that holds it; the collector sees
only reports, which are plain data -- a :class:`Report` is a mechanism code and one float, a
batch is two arrays -- and can be sent over a network as they are.

1. Threshold (Section 4.1).  While no theta is published, a client reports ``v / B`` with
   Square Wave at ``threshold_epsilon``.  After ``hold`` (m) such reports the collector
   estimates their distribution (EM, or EMS for plain SW) and publishes the theta that
   minimizes Eq. 8 (:func:`dpstream.thresholds.square_wave.square_wave_threshold`).
2. Perturber (Section 4.2).  Once theta is public, a client truncates its value at theta, maps
   [0, theta] to [-1, 1] and reports with the Hybrid mechanism at ``epsilon``.  The collector
   turns each report into ``theta (y~ + 1) / 2``, an unbiased estimate of ``min(v, theta)``, so a
   range query is a plain sum of released values.  There is no smoother.

Privacy
-------
Every report is epsilon-LDP (Definition 2.2) for the one value it carries, i.e. event level:
a threshold report is ``threshold_epsilon``-LDP (SW), a stream report ``epsilon``-LDP (HM, with
theta public and independent of that value).  The threshold reports and the stream reports
come from different values (the first m values versus the rest), and each value is reported
exactly once, so nothing composes across reports: every value of the stream is protected at
``max(epsilon, threshold_epsilon)``.  theta and the released estimates are post-processing of
reports.  A user who contributes several values gets one guarantee per value (event level);
protecting a user's whole series would need sequential composition over that user's reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_choice,
    check_epsilon,
    check_magnitude,
    check_positive_int,
    check_stream_values,
    check_unit_values,
)
from dpstream.ldp import HybridMechanism, SquareWave
from dpstream.privacy import LOCAL_REPORT, PrivacyGuarantee
from dpstream.rng import Seed, make_rng
from dpstream.thresholds.square_wave import SW_VARIANTS, square_wave_threshold

__all__ = ["SW_REPORT", "SR_REPORT", "PM_REPORT", "Report", "ToPL", "ToPLClient", "ToPLCollector"]

#: Mechanism codes of a report.
SW_REPORT, SR_REPORT, PM_REPORT = 0, 1, 2


class Report(NamedTuple):
    """One client's report: the mechanism code (SW_REPORT, SR_REPORT or PM_REPORT) and its output."""

    mechanism: int
    value: float


@dataclass(frozen=True, kw_only=True)
class ToPLClient:
    """What a client runs: it needs only its own value and the public parameters.

    Parameters
    ----------
    epsilon : float
        Budget of a stream report (HM).
    upper_bound : float
        B: values lie in [0, B].
    threshold_epsilon : float, optional
        Budget of a threshold report (SW); defaults to ``epsilon``.
    threshold : float, optional
        theta as published by the collector; None while the threshold is being chosen.

    Privacy
    -------
    Each report is epsilon-LDP (Definition 2.2): ``threshold_epsilon`` for an SW report,
    ``epsilon`` for an HM report.

    >>> client = ToPLClient(epsilon=1.0, upper_bound=100.0, threshold=20.0)
    >>> report = client.report(35.0, np.random.default_rng(0))
    >>> report.mechanism in (SR_REPORT, PM_REPORT), isinstance(report.value, float)
    (True, True)
    """

    epsilon: float
    upper_bound: float
    threshold_epsilon: float | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "upper_bound", check_bound(self.upper_bound))
        if self.threshold_epsilon is not None:
            object.__setattr__(self, "threshold_epsilon", check_epsilon(self.threshold_epsilon, "threshold_epsilon"))
        if self.threshold is not None:
            theta = check_bound(self.threshold, "threshold")
            if theta > self.upper_bound:
                raise ValueError(f"threshold must be <= upper_bound {self.upper_bound:g}, got {theta!r}.")
            object.__setattr__(self, "threshold", theta)

    def report_batch(self, values: object, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Reports of many clients at once: ``(mechanism codes, outputs)``, two arrays."""
        values = check_unit_values(values, 0.0, self.upper_bound)
        if self.threshold is None:
            sw = SquareWave(epsilon=self.threshold_epsilon or self.epsilon)
            return np.full(values.size, SW_REPORT, dtype=np.int8), sw.perturb(values / self.upper_bound, rng)
        unit = 2.0 * np.minimum(values, self.threshold) / self.threshold - 1.0
        uses_pm, y = HybridMechanism(epsilon=self.epsilon).perturb(np.clip(unit, -1.0, 1.0), rng)
        return np.where(uses_pm, PM_REPORT, SR_REPORT).astype(np.int8), y

    def report(self, value: float, rng: np.random.Generator) -> Report:
        """This client's report of its ``value``."""
        codes, outputs = self.report_batch([value], rng)
        return Report(int(codes[0]), float(outputs[0]))


class ToPLCollector:
    """What the collector runs: reports in, theta and the estimated stream out.

    Parameters
    ----------
    epsilon, upper_bound, threshold_epsilon
        The public parameters, as for :class:`ToPLClient`.
    hold : int
        m: the first m reports (Square Wave) choose theta (paper: 65,536).
    max_range : int
        r of Eq. 8 (paper: 2^20).
    buckets : int
        d, the candidates of the density estimate and of theta (paper: 1024).
    variant : str
        ``SW-W`` (the paper's threshold optimizer) or ``SW``.

    The collector never sees a raw value: it stores the m SW reports until theta is chosen, and
    afterwards turns each HM report into its estimate.  It has no randomness of its own.

    Privacy
    -------
    Post-processing of epsilon-LDP reports (see the module docstring); nothing it publishes
    costs budget beyond the reports themselves.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        upper_bound: float,
        threshold_epsilon: float | None = None,
        hold: int = 65536,
        max_range: int = 2**20,
        buckets: int = 1024,
        variant: str = "SW-W",
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.upper_bound = check_bound(upper_bound)
        self.threshold_epsilon = (
            self.epsilon if threshold_epsilon is None else check_epsilon(threshold_epsilon, "threshold_epsilon")
        )
        self.hold = check_positive_int(hold, "hold")
        self.max_range = check_positive_int(max_range, "max_range")
        self.buckets = check_positive_int(buckets, "buckets", minimum=2)
        self.variant = check_choice(variant, "variant", SW_VARIANTS)
        self._sw = SquareWave(epsilon=self.threshold_epsilon)
        self._hm = HybridMechanism(epsilon=self.epsilon)
        # an estimate is theta (unit + 1) / 2 with theta <= B and |unit| <= the larger HM output bound
        check_magnitude(self.upper_bound * (max(self._hm.pm.s, self._hm.sr.scale) + 1.0) / 2.0,
                        "the largest estimate upper_bound * (C + 1) / 2 (C: the Hybrid mechanism's output bound)")
        self._held = np.empty(self.hold, dtype=np.float64)
        self._received = 0
        self._threshold: float | None = None

    @property
    def threshold(self) -> float | None:
        """theta, published after ``hold`` threshold reports (None before)."""
        return self._threshold

    @property
    def received(self) -> int:
        """Reports received so far."""
        return self._received

    def client(self) -> ToPLClient:
        """The public parameters a client needs now (theta once it is published)."""
        return ToPLClient(epsilon=self.epsilon, upper_bound=self.upper_bound,
                          threshold_epsilon=self.threshold_epsilon, threshold=self._threshold)

    def receive(self, report: Report | tuple[int, float]) -> float | None:
        """Take one report; return its value's estimate, or None for a threshold report."""
        mechanism, value = report
        out = self.receive_batch(np.array([mechanism]), np.array([value], dtype=np.float64))
        return None if out.size == 0 else float(out[0])

    def receive_batch(self, mechanisms: object, values: object) -> np.ndarray:
        """Take reports in arrival order; return the estimates of the stream reports among them."""
        codes, outputs = self._check_reports(mechanisms, values)
        start = 0
        if self._threshold is None:
            start = min(codes.size, self.hold - self._received)
            if np.any(codes[:start] != SW_REPORT):
                index = int(np.argmax(codes[:start] != SW_REPORT))
                raise ValueError(f"report {self._received + index} must be a Square Wave threshold report "
                                 f"(mechanism {SW_REPORT}) until theta is published, got mechanism {codes[index]}.")
            low, high = -self._sw.b, 1.0 + self._sw.b
            check_unit_values(outputs[:start], low - 1e-12, high + 1e-12, name="Square Wave reports")
            self._held[self._received : self._received + start] = outputs[:start]
            self._received += start
            if self._received < self.hold:
                return np.empty(0)
            self._publish()
        return self._estimate(codes[start:], outputs[start:])

    def _publish(self) -> None:
        self._threshold = square_wave_threshold(
            self._held, epsilon=self.threshold_epsilon, stream_epsilon=self.epsilon,
            upper_bound=self.upper_bound, max_range=self.max_range, buckets=self.buckets, variant=self.variant,
        )
        self._held = np.empty(0)

    def _estimate(self, codes: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        bad = (codes == SW_REPORT) | ((codes == SR_REPORT) & (np.abs(outputs) != 1.0)) | (
            (codes == PM_REPORT) & ~(np.abs(outputs) <= self._hm.pm.s))
        if bad.any():
            index = int(np.argmax(bad))
            raise ValueError(f"report {self._received + index} must be an HM report (mechanism {SR_REPORT} "
                             f"with value ±1, or {PM_REPORT} with |value| <= {self._hm.pm.s:g}) once theta is "
                             f"published, got ({codes[index]}, {outputs[index]!r}).")
        self._received += codes.size
        assert self._threshold is not None
        unit = self._hm.estimate(codes == PM_REPORT, outputs)
        return self._threshold * (unit + 1.0) / 2.0

    @staticmethod
    def _check_reports(mechanisms: object, values: object) -> tuple[np.ndarray, np.ndarray]:
        codes = np.atleast_1d(np.asarray(mechanisms))
        if codes.dtype.kind not in "iu":
            raise TypeError(f"report mechanisms must be integer codes, got {mechanisms!r:.80}.")
        outputs = np.atleast_1d(np.asarray(values, dtype=np.float64))
        if codes.shape != outputs.shape or codes.ndim != 1:
            raise ValueError(f"report mechanisms and values must be 1-D of one length, got shapes "
                             f"{codes.shape} and {outputs.shape}.")
        unknown = ~np.isin(codes, (SW_REPORT, SR_REPORT, PM_REPORT))
        if unknown.any():
            raise ValueError(f"report mechanism must be one of {SW_REPORT}, {SR_REPORT}, {PM_REPORT}, "
                             f"got {codes[int(np.argmax(unknown))]}.")
        return codes, outputs

    def privacy(self) -> PrivacyGuarantee:
        """What each report spends (the collector adds nothing)."""
        return _guarantee(self.epsilon, self.threshold_epsilon, self.hold)


def _guarantee(epsilon: float, threshold_epsilon: float, hold: int) -> PrivacyGuarantee:
    threshold = PrivacyGuarantee(epsilon=threshold_epsilon, delta=0.0, neighbours=LOCAL_REPORT,
                                 composition=f"one Square Wave report from each of the first {hold} values", local=True)
    stream = PrivacyGuarantee(epsilon=epsilon, delta=0.0, neighbours=LOCAL_REPORT,
                              composition="one Hybrid-mechanism report from every later value", local=True)
    return threshold.compose_parallel(stream, composition=(
        f"LDP: the first {hold} values each send one Square Wave report ({threshold_epsilon:g}-LDP), every "
        f"later value one Hybrid-mechanism report ({epsilon:g}-LDP); disjoint values, one report each, so "
        "nothing composes; theta and the released stream are post-processing"
    ))


class ToPL:
    """Simulate ToPL's clients and run its collector over a stream (the interface of ``ToPS``).

    Parameters
    ----------
    epsilon : float
        Budget of each stream report (HM); also of the threshold reports unless
        ``threshold_epsilon`` is given.
    upper_bound : float
        B: every value must lie in [0, B] (public).
    hold : int
        m: leading values that send threshold reports and are not released (paper: 65,536).
    max_range, buckets, variant
        r of Eq. 8, d, and the threshold optimizer (``SW-W`` or ``SW``).
    threshold_epsilon : float, optional
        Budget of the Square Wave reports.
    clip : bool
        Clip values outside [0, B] instead of raising an error.
    seed : int, Generator or None
        Drives the simulated clients' randomness (the collector has none).

    Privacy
    -------
    ``max(epsilon, threshold_epsilon)``-LDP at event level (Definition 2.2): every value is sent
    once, as one epsilon-LDP report, by its own client; see :mod:`dpstream.release.topl`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> stream = np.minimum(rng.geometric(0.2, 6000), 100).astype(float)
    >>> topl = ToPL(epsilon=1.0, upper_bound=100, hold=4000, max_range=4096, seed=7)
    >>> released = topl.release(stream)
    >>> released.shape, 5 <= topl.threshold <= 60
    ((2000,), True)
    >>> replay = ToPL(epsilon=1.0, upper_bound=100, hold=4000, max_range=4096, seed=7)
    >>> streamed = [replay.release_one(v) for v in stream]
    >>> bool(np.array_equal(released, [v for v in streamed if v is not None]))
    True
    """

    def __init__(
        self,
        *,
        epsilon: float,
        upper_bound: float,
        hold: int = 65536,
        max_range: int = 2**20,
        buckets: int = 1024,
        variant: str = "SW-W",
        threshold_epsilon: float | None = None,
        clip: bool = False,
        seed: Seed = None,
    ) -> None:
        self.collector = ToPLCollector(epsilon=epsilon, upper_bound=upper_bound, threshold_epsilon=threshold_epsilon,
                                       hold=hold, max_range=max_range, buckets=buckets, variant=variant)
        self.clip = check_bool(clip, "clip")
        self._rng = make_rng(seed)
        self._client = self.collector.client()

    epsilon = property(lambda self: self.collector.epsilon)
    threshold_epsilon = property(lambda self: self.collector.threshold_epsilon)
    upper_bound = property(lambda self: self.collector.upper_bound)
    hold = property(lambda self: self.collector.hold)
    max_range = property(lambda self: self.collector.max_range)

    @property
    def threshold(self) -> float | None:
        """theta, once the collector has published it (None before)."""
        return self.collector.threshold

    @property
    def position(self) -> int:
        """Number of values consumed so far (held or released)."""
        return self.collector.received

    def privacy(self) -> PrivacyGuarantee:
        """What the whole release spends."""
        return self.collector.privacy()

    def release(self, values: object) -> np.ndarray:
        """Consume a batch of values; return the released estimates for it (vectorized)."""
        values = check_stream_values(values, self.upper_bound, clip=self.clip, offset=self.position)
        start = 0
        if self.threshold is None:
            start = min(values.size, self.hold - self.position)
            self.collector.receive_batch(*self._client.report_batch(values[:start], self._rng))
            if self.threshold is None:
                return np.empty(0)
            self._client = self.collector.client()
        return self.collector.receive_batch(*self._client.report_batch(values[start:], self._rng))

    def release_one(self, value: float) -> float | None:
        """Consume one value; return its released estimate, or None while it is held out."""
        released = self.release([value])
        return float(released[0]) if released.size else None
