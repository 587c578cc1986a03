"""ToPL: continual release under local differential privacy (Section 4).

No trusted curator.  Each value is perturbed by the client that holds it (the randomizer a client
runs, :class:`~dpstream.release.topl_randomizer.ToPLRandomizer`, is in
:mod:`dpstream.release.topl_randomizer`; this module holds the collector); the collector sees
only reports, which are plain data -- a :class:`Report` is a mechanism code and one grid index, a
:class:`ReportBatch` two integer arrays -- with one JSON form, the wire format of
:mod:`dpstream.release.topl_wire`, for the reports and for the parameters the collector publishes.

1. Threshold (Section 4.1).  While no theta is published, a client reports ``v / B`` with
   Square Wave at ``threshold_epsilon``, on the grid of the collector's ``buckets``.  After
   ``hold`` (m) such reports the collector estimates their distribution (EM, or EMS for plain SW,
   with the discretized mechanism's exact transition matrix) and publishes the theta that
   minimizes Eq. 8 (:func:`dpstream.thresholds.square_wave.square_wave_threshold`).
2. Perturber (Section 4.2).  Once theta is public, a client truncates its value at theta, maps
   [0, theta] to [-1, 1] and reports with the Hybrid mechanism at ``epsilon`` (on the PM grid
   ``stream_grid``).  The collector turns each report into ``theta (y~ + 1) / 2``, an unbiased
   estimate of ``min(v, theta)``, so a range query is a plain sum of released values.

Every report is drawn exactly (:mod:`dpstream.ldp.grid`): from the operating system's CSPRNG
unless a seed or a bit source is given.

Privacy
-------
Every report is epsilon-LDP (Definition 2.2) for the one value it carries, i.e. event level:
a threshold report is ``threshold_epsilon``-LDP (SW), a stream report ``epsilon``-LDP (HM, with
theta public and independent of that value), each with an exact probability ratio at most
``e^eps``.  The threshold reports and the stream reports come from different values (the first m
values versus the rest), and each value is reported exactly once, so nothing composes across
reports: every value of the stream is protected at ``max(epsilon, threshold_epsilon)``.  theta
and the released estimates are post-processing of reports.  A user who contributes several
values gets one guarantee per value (event level); protecting a user's whole series would need
sequential composition over that user's reports.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpstream._checks import (
    check_bool,
    check_choice,
    check_grid,
    check_length,
    check_magnitude,
    check_memory,
    check_positive_int,
    check_stream_values,
)
from dpstream._deprecation import moved_names
from dpstream._params import Params
from dpstream.noise.bits import BitsSeed, make_bits
from dpstream.privacy import LOCAL_REPORT, Composition, EpsilonDelta, Part, PrivacyGuarantee
from dpstream.release.contract import TOPL, TOPL_COLLECTOR, read_header, snapshot_header
from dpstream.release.topl_randomizer import Report, ReportBatch, ToPLRandomizer
from dpstream.release.topl_wire import PM_REPORT, SR_REPORT, SW_REPORT
from dpstream.thresholds.square_wave import SW_VARIANTS, square_wave_threshold

__all__ = ["PM_REPORT", "SR_REPORT", "SW_REPORT", "Report", "ReportBatch", "ToPL", "ToPLCollector", "ToPLRandomizer"]

#: The client side was renamed :class:`~dpstream.release.topl_randomizer.ToPLRandomizer` (the HTTP
#: client of the service is :class:`dpstream.client.ToPLClient`).
__getattr__ = moved_names(__name__, {"ToPLClient": "dpstream.release.topl_randomizer:ToPLRandomizer"})


class ToPLCollector(Params):
    """What the collector runs: reports in, theta and the estimated stream out.

    Parameters
    ----------
    epsilon, upper_bound, threshold_epsilon, stream_grid
        The public parameters, as for :class:`~dpstream.release.topl_randomizer.ToPLRandomizer`.
    hold : int
        m: the first m reports (Square Wave) choose theta (paper: 65,536).
    max_range : int
        r of Eq. 8 (paper: 2^20).
    buckets : int
        d, the Square Wave grid: the points of the density estimate and the candidates of theta
        (paper: 1024).
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
        stream_grid: int | None = None,
    ) -> None:
        self._params = dict(epsilon=epsilon, upper_bound=upper_bound, threshold_epsilon=threshold_epsilon, hold=hold,
                            max_range=max_range, buckets=buckets, variant=variant, stream_grid=stream_grid)
        self.hold = check_memory(check_positive_int(hold, "hold"), "hold")
        self.max_range = check_length(max_range, "max_range")
        buckets = check_positive_int(buckets, "buckets", minimum=2)
        self.variant = check_choice(variant, "variant", SW_VARIANTS)
        self._parameters = ToPLRandomizer(epsilon=epsilon, upper_bound=upper_bound, threshold_epsilon=threshold_epsilon,
                                      buckets=buckets, stream_grid=stream_grid)
        check_grid(self.upper_bound)  # theta is a multiple of B / buckets: it must not underflow to 0
        hm = self._parameters.hm
        # an estimate is theta (unit + 1) / 2 with theta <= B and |unit| <= the larger HM output bound
        bound = max(hm.pm.s, hm.sr.scale)
        check_magnitude(self.upper_bound * (bound + 1.0) / 2.0,
                        "the largest estimate upper_bound * (C + 1) / 2 (C: the Hybrid mechanism's output bound)")
        # Eq. 8 scores theta <= B by r / 3 times HM's variance (below (B C)^2) plus r^2 / 6 times the squared bias
        check_magnitude(self.upper_bound * self.upper_bound * self.max_range * (bound * bound + self.max_range),
                        "Eq. 8's largest squared error B^2 r (C^2 + r)", "lower upper_bound or max_range")
        self._held = np.empty(self.hold, dtype=np.int64)
        self._received = 0

    epsilon = property(lambda self: self._parameters.epsilon)
    threshold_epsilon = property(lambda self: self._parameters.threshold_epsilon)
    upper_bound = property(lambda self: self._parameters.upper_bound)
    buckets = property(lambda self: self._parameters.buckets)
    stream_grid = property(lambda self: self._parameters.stream_grid)

    @property
    def threshold(self) -> float | None:
        """theta, published after ``hold`` threshold reports (None before)."""
        return self._parameters.threshold

    @property
    def received(self) -> int:
        """Reports received so far."""
        return self._received

    @property
    def position(self) -> int:
        """Reports consumed so far (the streaming contract's name for :attr:`received`)."""
        return self._received

    def release(self, reports: object) -> np.ndarray:
        """The streaming contract's batch call: :meth:`receive_batch` (a :class:`ReportBatch`)."""
        return self.receive_batch(reports)

    def release_one(self, report: Report | tuple[int, int]) -> float | None:
        """The streaming contract's one-value call: :meth:`receive`."""
        return self.receive(report)

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data: the parameters, the reports received, the held-out Square Wave
        reports until theta is published, then theta.  The collector has no randomness, so
        ``ToPLCollector.from_state(state)`` continues exactly; the held reports are LDP reports,
        but keep the snapshot with the collector's other data."""
        held = self._held[: self._received].copy() if self.threshold is None else None
        return {**snapshot_header(TOPL_COLLECTOR, self._params, None), "position": self._received, "held": held,
                "threshold": self.threshold}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ToPLCollector:
        """The collector a :attr:`state` snapshot describes, continuing where it was taken."""
        params, _ = read_header(state, TOPL_COLLECTOR)
        collector = cls(**params)
        collector._received = int(state["position"])
        if state["threshold"] is not None:
            collector._set_threshold(state["threshold"])
        else:
            held = np.asarray(state["held"], dtype=np.int64)
            if held.shape != (collector._received,) or collector._received >= collector.hold:
                raise ValueError(f"a ToPL collector snapshot holds {held.size} reports at position "
                                 f"{collector._received} (hold {collector.hold}).")
            collector._held[: held.size] = held
        return collector

    def client(self) -> ToPLRandomizer:
        """The public parameters a client needs now (theta once it is published)."""
        return self._parameters

    def parameters_json(self, version: int = 2) -> str:
        """The parameters document clients need now (the wire format, ``version`` 2 or 1); it changes once, when
        theta is out."""
        return self._parameters.to_json(version)

    def receive(self, report: Report | tuple[int, int]) -> float | None:
        """Take one report; return its value's estimate, or None for a threshold report."""
        mechanism, index = report
        out = self.receive_batch(np.array([mechanism]), np.array([index]))
        return None if out.size == 0 else float(out[0])

    def receive_json(self, text: str | bytes) -> np.ndarray:
        """Take a batch in the wire format; return the estimates of its stream reports.

        Reports made with other parameters than the current ones (another theta or budget) are
        refused with a ValueError, as are malformed documents and indices off their grid.
        """
        batch = ReportBatch.from_json(text)
        if batch.parameters != self._parameters.parameters_id:
            state = "theta is not yet published" if self.threshold is None else f"theta = {self.threshold:g}"
            raise ValueError(f"ToPL reports were made with parameters {batch.parameters!r}, but the collector's are "
                             f"{self._parameters.parameters_id!r} ({state}): fetch the current parameters.")
        return self.receive_batch(batch.mechanism, batch.report)

    def receive_batch(self, mechanisms: object, reports: object = None) -> np.ndarray:
        """Take reports in arrival order (two arrays, or a :class:`ReportBatch`); return the estimates of
        the stream reports among them."""
        if reports is None and isinstance(mechanisms, ReportBatch):
            mechanisms, reports = mechanisms
        codes, indices = self._check_reports(mechanisms, reports)
        start = 0
        if self.threshold is None:
            start = min(codes.size, self.hold - self._received)
            if np.any(codes[:start] != SW_REPORT):
                index = int(np.argmax(codes[:start] != SW_REPORT))
                raise ValueError(f"report {self._received + index} must be a Square Wave threshold report "
                                 f"(mechanism {SW_REPORT}) until theta is published, got mechanism {codes[index]}.")
            try:
                held = self._parameters.sw.check_reports(indices[:start])
            except ValueError as error:  # positions are within the batch: say where the batch starts
                raise ValueError(f"{error} (this batch starts at report {self._received} of the stream)") from None
            self._held[self._received : self._received + start] = held
            self._received += start
            if self._received < self.hold:
                return np.empty(0)
            self._publish()
        return self._estimate(codes[start:], indices[start:])

    def _publish(self) -> None:
        theta = square_wave_threshold(
            self._held, epsilon=self.threshold_epsilon, stream_epsilon=self.epsilon, upper_bound=self.upper_bound,
            max_range=self.max_range, buckets=self.buckets, variant=self.variant, stream_grid=self.stream_grid,
        )
        self._set_threshold(theta)

    def _set_threshold(self, theta: float) -> None:
        current = self._parameters
        self._parameters = ToPLRandomizer(epsilon=current.epsilon, upper_bound=current.upper_bound,
                                      threshold_epsilon=current.threshold_epsilon, threshold=theta,
                                      buckets=current.buckets, stream_grid=current.stream_grid)
        self._held = np.empty(0, dtype=np.int64)

    def _estimate(self, codes: np.ndarray, indices: np.ndarray) -> np.ndarray:
        if np.any(codes == SW_REPORT):
            index = int(np.argmax(codes == SW_REPORT))
            raise ValueError(f"report {self._received + index} must be an HM report (mechanism {SR_REPORT} or "
                             f"{PM_REPORT}) once theta is published, got a Square Wave report.")
        check_grid(self.upper_bound)  # theta is a multiple of B / buckets: it must not underflow to 0
        hm = self._parameters.hm
        uses_pm = codes == PM_REPORT
        try:
            indices = hm.check_reports(uses_pm, indices)
        except ValueError as error:  # positions are within the batch: say where the batch starts
            raise ValueError(f"{error} (this batch starts at report {self._received} of the stream)") from None
        self._received += codes.size
        theta = self.threshold
        assert theta is not None
        return theta * (hm.estimate(uses_pm, indices) + 1.0) / 2.0

    @staticmethod
    def _check_reports(mechanisms: object, reports: object) -> tuple[np.ndarray, np.ndarray]:
        codes = np.atleast_1d(np.asarray(mechanisms))
        if codes.dtype.kind not in "iu":
            raise TypeError(f"report mechanisms must be integer codes, got {mechanisms!r:.80}.")
        indices = np.atleast_1d(np.asarray(reports))
        if codes.shape != indices.shape or codes.ndim != 1:
            raise ValueError(f"report mechanisms and indices must be 1-D of one length, got shapes "
                             f"{codes.shape} and {indices.shape}.")
        unknown = (codes < SW_REPORT) | (codes > PM_REPORT)
        if unknown.any():
            raise ValueError(f"report mechanism must be one of {SW_REPORT}, {SR_REPORT}, {PM_REPORT}, "
                             f"got {codes[int(np.argmax(unknown))]}.")
        return codes, indices

    def privacy(self) -> PrivacyGuarantee:
        """What each report spends (the collector adds nothing)."""
        return _guarantee(self.epsilon, self.threshold_epsilon, self.hold)


def _guarantee(epsilon: float, threshold_epsilon: float, hold: int) -> PrivacyGuarantee:
    threshold, stream = EpsilonDelta(threshold_epsilon), EpsilonDelta(epsilon)
    reports = (Part(what=f"one Square Wave report from each of the first {hold} values", budget=threshold,
                    text=f"the first {hold} values each send one Square Wave report ({threshold.label(local=True)})"),
               Part(what="one Hybrid-mechanism report from every later value", budget=stream,
                    text=f"every later value one Hybrid-mechanism report ({stream.label(local=True)})"))
    return PrivacyGuarantee.of(Composition(kind="parallel", parts=reports, layout=(
        "LDP: {}, {}, each on a finite grid with exact probabilities; disjoint values, one report each, so nothing "
        "composes; theta and the released stream are post-processing")), neighbours=LOCAL_REPORT, local=True)


class ToPL(Params):
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
        r of Eq. 8, d (the Square Wave grid), and the threshold optimizer (``SW-W`` or ``SW``).
    threshold_epsilon : float, optional
        Budget of the Square Wave reports.
    stream_grid : int, optional
        The PM grid of HM (default from ``epsilon``).
    clip : bool
        Clip values outside [0, B] instead of raising an error.
    seed : int, Generator, bit source or None
        The simulated clients' bits: None reads the OS CSPRNG; an int replays a seeded PCG64
        (tests; not private against whoever knows the seed).  The collector has no randomness.

    Privacy
    -------
    ``max(epsilon, threshold_epsilon)``-LDP at event level (Definition 2.2): every value is sent
    once, as one epsilon-LDP report, by its own client; see :mod:`dpstream.release.topl`.

    Examples
    --------
    >>> stream = (np.arange(3000) % 37).astype(float)
    >>> topl = ToPL(epsilon=1.0, upper_bound=100, hold=2000, max_range=4096, seed=7)
    >>> released = topl.release(stream)
    >>> released.shape, 5 <= topl.threshold <= 60
    ((1000,), True)
    >>> replay = ToPL(epsilon=1.0, upper_bound=100, hold=2000, max_range=4096, seed=7)
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
        stream_grid: int | None = None,
        clip: bool = False,
        seed: BitsSeed = None,
    ) -> None:
        self.collector = ToPLCollector(epsilon=epsilon, upper_bound=upper_bound, threshold_epsilon=threshold_epsilon,
                                       hold=hold, max_range=max_range, buckets=buckets, variant=variant,
                                       stream_grid=stream_grid)
        self.clip = check_bool(clip, "clip")
        self.bits = make_bits(seed)

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data: the collector's and the simulated clients' bits (their
        generator's state, or nothing for the OS CSPRNG).  ``ToPL.from_state(state)`` continues
        exactly (with a seed; the OS CSPRNG reads fresh bits)."""
        from dpstream.noise.source import bits_state

        return {**snapshot_header(TOPL, {"clip": self.clip}, None), "collector": self.collector.state,
                "bits": bits_state(self.bits)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ToPL:
        """The simulation a :attr:`state` snapshot describes, continuing where it was taken."""
        from dpstream.noise.source import bits_from_state

        params, _ = read_header(state, TOPL)
        topl = cls(**state["collector"]["params"], clip=params["clip"], seed=bits_from_state(state["bits"]))
        topl.collector = ToPLCollector.from_state(state["collector"])
        return topl

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
            self.collector.receive_batch(self.collector.client().report_batch(values[:start], self.bits))
            if self.threshold is None:
                return np.empty(0)
        return self.collector.receive_batch(self.collector.client().report_batch(values[start:], self.bits))

    def release_one(self, value: float) -> float | None:
        """Consume one value; return its released estimate, or None while it is held out."""
        released = self.release([value])
        return float(released[0]) if released.size else None
