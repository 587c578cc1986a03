"""ToPL's client side: the randomizer a client runs, and the reports it sends (Section 4).

A client needs only its own value and the public parameters the collector publishes (the wire
format of :mod:`dpstream.release.topl_wire`): :class:`ToPLRandomizer` holds those parameters,
checks them, and turns values into reports -- a :class:`Report` is a mechanism code and one
grid index, a :class:`ReportBatch` two integer arrays.  While no theta is published a report is
Square Wave at ``threshold_epsilon``; afterwards it is the Hybrid mechanism at ``epsilon`` on
the value truncated at theta and mapped to [-1, 1].  The collector side is
:class:`~dpstream.release.topl.ToPLCollector`; the service's HTTP client,
:class:`dpstream.client.ToPLClient`, runs this randomizer before it posts.

Every report is drawn exactly (:mod:`dpstream.ldp.grid`): from the operating system's CSPRNG
unless a seed or a bit source is given.

Privacy
-------
Every report is epsilon-LDP (Definition 2.2) for the one value it carries: ``threshold_epsilon``
for an SW report, ``epsilon`` for an HM report, with exact probabilities (see
:mod:`dpstream.release.topl`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from dpstream._checks import (
    check_bool,
    check_bound,
    check_client_values,
    check_epsilon,
    check_positive_int,
    plain_number,
)
from dpstream._params import Params
from dpstream.ldp import HybridMechanism, SquareWave
from dpstream.ldp.grid import DENOMINATOR_BITS, WindowRandomizer, as_bits, draw_words
from dpstream.ldp.mean import MAX_PM_GRID
from dpstream.ldp.square_wave import MAX_SW_GRID
from dpstream.noise.bits import BitsSeed
from dpstream.release.topl_wire import (
    PM_REPORT,
    SR_REPORT,
    SW_REPORT,
    dump_parameters,
    dump_reports,
    load_parameters,
    load_reports,
)

__all__ = ["Report", "ReportBatch", "ToPLRandomizer"]


class Report(NamedTuple):
    """One client's report: the mechanism code (SW_REPORT, SR_REPORT or PM_REPORT) and its grid index."""

    mechanism: int
    index: int


@dataclass(frozen=True, eq=False)
class ReportBatch:
    """Reports of many clients: mechanism codes (int8) and grid indices (int64), and the id of the
    parameters they were made with.  It unpacks as ``(mechanism, report)``.

    >>> batch = ReportBatch(np.array([0, 0], dtype=np.int8), np.array([5, 9]), "0123456789abcdef")
    >>> codes, indices = batch
    >>> print(batch.to_json())
    {"format":"dpstream.topl.reports/1","mechanism":[0,0],"parameters":"0123456789abcdef","report":[5,9]}
    >>> ReportBatch.from_json(batch.to_json()).report.tolist()
    [5, 9]
    """

    mechanism: np.ndarray
    report: np.ndarray
    parameters: str = field(default="")

    def __iter__(self):
        yield self.mechanism
        yield self.report

    def __len__(self) -> int:
        return int(self.mechanism.size)

    def to_json(self) -> str:
        """The batch in the wire format (one line of JSON)."""
        return dump_reports(self.mechanism, self.report, self.parameters)

    @classmethod
    def from_json(cls, text: str | bytes) -> ReportBatch:
        """A batch from the wire format (checked: format, fields, integer codes and indices)."""
        codes, reports, made_with = load_reports(text)
        return cls(codes, reports, made_with)


def _core_fields(core: WindowRandomizer) -> dict[str, int]:
    return {"grid": core.grid, "window": core.window, "p": core.p, "q": core.q, "extra": core.extra}


@dataclass(frozen=True, kw_only=True)
class ToPLRandomizer(Params):
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
    buckets : int
        d, the Square Wave grid (the collector's histogram; paper: 1024).
    stream_grid : int, optional
        n, the PM grid of HM (default :func:`~dpstream.ldp.default_pm_grid` of ``epsilon``).
    clip : bool
        Clip values outside [0, B] into it instead of raising (the client's own policy: not a
        public parameter).

    Privacy
    -------
    Each report is epsilon-LDP (Definition 2.2): ``threshold_epsilon`` for an SW report,
    ``epsilon`` for an HM report, with exact probabilities.

    >>> client = ToPLRandomizer(epsilon=1.0, upper_bound=100.0, threshold=20.0)
    >>> report = client.report(35.0, 0)
    >>> report.mechanism in (SR_REPORT, PM_REPORT), isinstance(report.index, int)
    (True, True)
    >>> ToPLRandomizer.from_json(client.to_json()) == client
    True
    """

    epsilon: float
    upper_bound: float
    threshold_epsilon: float | None = None
    threshold: float | None = None
    buckets: int = 1024
    stream_grid: int | None = None
    clip: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "upper_bound", check_bound(self.upper_bound))
        threshold_epsilon = self.epsilon if self.threshold_epsilon is None else self.threshold_epsilon
        object.__setattr__(self, "threshold_epsilon", check_epsilon(threshold_epsilon, "threshold_epsilon"))
        if self.threshold is not None:
            theta = check_bound(self.threshold, "threshold")
            if theta > self.upper_bound:
                raise ValueError(f"threshold must be <= upper_bound {plain_number(self.upper_bound)}, "
                                 f"got {plain_number(theta)}.")
            object.__setattr__(self, "threshold", theta)
        check_bool(self.clip, "clip")
        for name, value, low, high in (("buckets", self.buckets, 2, MAX_SW_GRID),
                                       ("stream_grid", self.stream_grid, 1, MAX_PM_GRID)):
            if value is not None and not low <= check_positive_int(value, name, minimum=low) <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value}.")
        # the mechanisms check the budgets (at most 30), the grids' upper limits and their combination
        object.__setattr__(self, "stream_grid", self.hm.grid)
        object.__setattr__(self, "buckets", self.sw.grid)

    @cached_property
    def sw(self) -> SquareWave:
        """The threshold reports' randomizer."""
        return SquareWave(epsilon=self.threshold_epsilon, grid=self.buckets)  # type: ignore[arg-type]

    @cached_property
    def hm(self) -> HybridMechanism:
        """The stream reports' randomizer."""
        return HybridMechanism(epsilon=self.epsilon, grid=self.stream_grid)

    # -- the wire format -------------------------------------------------------------------

    def parameters(self) -> dict[str, Any]:
        """The public parameters as the wire format has them (without ``format`` and ``id``)."""
        return {
            "epsilon": self.epsilon,
            "threshold_epsilon": self.threshold_epsilon,
            "upper_bound": self.upper_bound,
            "threshold": self.threshold,
            "buckets": self.buckets,
            "stream_grid": self.stream_grid,
            "mechanisms": {
                "square_wave": _core_fields(self.sw.core),
                "stochastic_rounding": _core_fields(self.hm.sr.core),
                "piecewise": _core_fields(self.hm.pm.core),
                "hybrid_alpha": self.hm.alpha_units,
                "denominator_bits": DENOMINATOR_BITS,
            },
        }

    @cached_property
    def parameters_id(self) -> str:
        """The id reports carry (see :mod:`dpstream.release.topl_wire`)."""
        return load_parameters(self.to_json())["id"]

    def to_json(self, version: int = 2) -> str:
        """The parameters document of the wire format (what the collector publishes): ``version`` 2 (the masses
        as strings, safe for parsers that read numbers as doubles) or 1 (for readers older than version 2)."""
        return dump_parameters(self.parameters(), version)

    @classmethod
    def from_json(cls, text: str | bytes, *, clip: bool = False) -> ToPLRandomizer:
        """A client from a parameters document of either version, after checking it (format, fields, values, and
        that the mechanisms' integers are those this version derives from the parameters).

        >>> ToPLRandomizer.from_json('{"format": "dpstream.topl.parameters/1", "epsilon": 1}')
        Traceback (most recent call last):
        ValueError: ToPL parameters miss the field(s) threshold_epsilon, upper_bound, threshold, buckets, \
stream_grid, mechanisms, id.
        """
        document = load_parameters(text)
        try:
            client = cls(epsilon=document["epsilon"], upper_bound=document["upper_bound"],
                         threshold_epsilon=document["threshold_epsilon"], threshold=document["threshold"],
                         buckets=document["buckets"], stream_grid=document["stream_grid"], clip=clip)
        except (TypeError, ValueError) as error:
            raise ValueError(f"ToPL parameters: {error}") from None
        expected = client.parameters()["mechanisms"]
        if document["mechanisms"] != expected:
            differing = _first_difference(document["mechanisms"], expected)
            raise ValueError(
                f"ToPL parameters: mechanisms.{differing[0]} is {differing[1]}, but the parameters give "
                f"{differing[2]} here (the document was made by another version of the mechanisms).")
        return client

    # -- reports ---------------------------------------------------------------------------

    def report_batch(self, values: object, bits: BitsSeed = None) -> ReportBatch:
        """Reports of many clients at once (vectorized): a :class:`ReportBatch`.

        ``bits``: a bit source, or a seed for one (None: the OS CSPRNG; an int: replayable, not private).
        A batch draws from it exactly as a loop of :meth:`report` calls does.
        """
        values = check_client_values(values, self.upper_bound, clip=self.clip)
        source = as_bits(bits)
        if self.threshold is None:
            reports = self.sw.perturb_draws(values / self.upper_bound, draw_words(source, values.size, self.sw.draws))
            return ReportBatch(np.full(values.size, SW_REPORT, dtype=np.int8), reports, self.parameters_id)
        unit = np.clip(2.0 * np.minimum(values, self.threshold) / self.threshold - 1.0, -1.0, 1.0)
        uses_pm, reports = self.hm.perturb_draws(unit, draw_words(source, values.size, self.hm.draws))
        return ReportBatch(np.where(uses_pm, PM_REPORT, SR_REPORT).astype(np.int8), reports, self.parameters_id)

    def report(self, value: float, bits: BitsSeed = None) -> Report:
        """This client's report of its ``value``."""
        codes, reports = self.report_batch([value], bits)
        return Report(int(codes[0]), int(reports[0]))


def _first_difference(found: Any, expected: Any, path: str = "") -> tuple[str, str, str]:
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            if found.get(key) != expected.get(key):
                return _first_difference(found.get(key), expected.get(key), f"{path}.{key}" if path else key)
    return path, repr(found), repr(expected)
