"""Continual release of population aggregates under unit-level privacy: :class:`UnitAggregate`.

Rows ``(time, unit, value[, partition])`` -- a meter's half-hourly readings, say -- become, per
bucket of time (``bucket`` seconds, aligned in UTC from the epoch) and per public partition, the
population's sum, count or mean, released the moment the bucket closes.  The guarantee protects
a **unit** (a household), not a reading: all rows of one unit within one aligned window
(``window`` seconds, a whole number of buckets: a UTC day) are the neighbour relation
(:class:`~dpstream.privacy.UnitLevel`), under contribution bounds that the release enforces
itself (:mod:`dpstream.release.bounding`): values clipped to ``[0, B]``, at most ``max_rows`` rows
and ``max_partitions`` partitions per unit and window, and an L1 bound ``C`` (``unit_bound``) on
the sum of a unit's values in a window.

The hierarchy.  Each window of ``W = window / bucket`` buckets is one chunk of the periodic
hierarchy with **one leaf per bucket** (:mod:`dpstream.release.periodic`'s layout, at period 1):
``d`` measured levels of fan-out ``b`` (default ``b = W`` and ``d = 2``: the buckets and the whole
window), noise drawn when the window's first bucket opens and made consistent at once (Hay et
al., exactly, :func:`~dpstream.hierarchy.tree.consistent_leaves`), so each bucket is released
when it closes as its true (bounded) sum plus its consistent noise, and never changes.  The leaf
per bucket serves the bucket values; the window node serves what a utility reads most, the
window's total (a day), whose error is then about that of one node rather than of ``W`` leaves
summed.  A chunk of one window keeps every sum of a chunk below ``units x C`` (exact in int64 for
up to 2^32 units at the default grid of ``C / 2^20``).

Sensitivity (derived from the bounds).  Take two inputs that differ in the rows of one unit ``u``
in one window ``w``.  Bounding reads only ``u``'s own rows of ``w``, so every other unit's kept
amounts are unchanged, and ``u``'s kept amounts ``a_j >= 0`` (over the buckets ``j`` of ``w`` and
the partitions) sum to at most ``C``.  A level of the hierarchy partitions the buckets of a window
into nodes (per partition), so the L1 change of that level's measurements is
``sum_nodes |sum_{j in node} a_j| = sum_j a_j <= C`` (add/remove).  Replacing ``u``'s rows by other
rows within the bounds changes each amount by ``a'_j - a_j``: at most ``2C`` per level.  Levels
compose sequentially: ``d`` levels at scale ``d C / eps`` (``2 d C / eps`` for replacement) give
``eps``-DP for the whole release -- every partition's hierarchy included, since the L1 sum above
runs over all partitions -- and other windows are disjoint (parallel composition).  The count
is the same with amount 1 per kept row and ``C`` the number of rows; the mean spends half the
budget on the sum and half on the count (a public ``max_rows`` bounds the count) and divides,
as post-processing.  The thresholds (``B``, ``C``, ``max_rows``, ``max_partitions``) are public:
nothing is chosen from the data, so nothing else is spent.  A unit's rows over ``k`` windows are
``k`` neighbouring steps: ``k eps`` by composition (:func:`unit_statement`).

What is not protected.  The span of the release: buckets are released from the start of the
window of the first row (or ``start``) to the bucket of the last row; the first and last times
of the input are public, as a stream's length is.  With ``late="drop"`` a row for a bucket
already released is dropped and counted in :attr:`UnitAggregate.late` (not printed);
``late="error"`` refuses it.  **The order rows arrive in** decides which bucket is open, and so
which rows are late: one unit's row that runs ahead (a meter whose clock is fast, placed first)
closes the buckets before it, and with ``late="drop"`` every other unit's later rows for them are
dropped -- a change far beyond ``C`` (a day of 100 units at ``C = 5``: 500 released, 1 with the
one row added).  So with ``late="drop"`` the guarantee holds for inputs whose arrival order is
public (the relation says so); rows in time order (``aggregate --sort``) are never late, and with
``late="error"`` such an input is refused rather than released.

Noise: exact discrete Laplace on the public grid (:class:`~dpstream.hierarchy.arithmetic.GridArithmetic`), or
with ``rho`` exact discrete Gaussian under rho-zCDP: a level's L2 change is at most its L1 change C (sqrt(2) C
replaced: two non-negative vectors of L1 norm C), d levels sqrt(d) C (``docs/zcdp.md``).  With ``key=`` the
noise of window ``w`` in partition ``p`` is drawn from ``KeyedBits(key, ("aggregate", statistic part, p, w))``:
a restored release recomputes it, so kill-and-resume never re-draws noise for a released bucket (``aggregate
--state``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream._checks import check_bool, check_bound, check_positive_int
from dpstream._params import Params
from dpstream.accounting import ZcdpGuarantee, check_budget
from dpstream.hierarchy import num_levels
from dpstream.hierarchy.arithmetic import arithmetic
from dpstream.noise.bits import BitsSeed
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import Composition, Part, PrivacyGuarantee, UnitLevel
from dpstream.release.aggregate_revisions import revise_released
from dpstream.release.bounding import ContributionBounder, ContributionBounds, codes
from dpstream.release.contract import read_header, snapshot_header
from dpstream.release.partition_selection import PartitionSelector, check_selection

__all__ = ["AGGREGATE", "LATE_POLICIES", "MAX_LEAVES", "STATISTICS", "Released", "UnitAggregate", "unit_statement"]

#: The ``mechanism`` field of its snapshots (and its registered name).
AGGREGATE = "aggregate"
#: What is released per bucket and partition.
STATISTICS = ("sum", "count", "mean")
#: What a row for a bucket already released does: stop the release, or be dropped (counted, not printed).
LATE_POLICIES = ("error", "drop")
#: The most leaves (buckets per window x partitions) a window may have: its totals and noise are held in memory.
MAX_LEAVES = 1 << 22
_NS = 1_000_000_000


@dataclass(frozen=True)
class Released:
    """Released buckets: the start of each (int64 nanoseconds since the epoch), its partition's number (an index
    into :attr:`UnitAggregate.partition_names`) and value: buckets in time order, partitions in their public order
    (the selected private partitions of a window at its close, in the order of their names).
    """

    buckets: np.ndarray
    partitions: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.size)


def _join(parts: list[Released]) -> Released:
    if not parts:
        return Released(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))
    return Released(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("buckets", "partitions", "values")))


class _Measure:
    """One measured statistic (the sum, or the count) of every partition: its grid, noise and open window."""

    def __init__(self, *, name: str, bound: float, budget: tuple, levels: int, fanout: int, width: int,
                 partitions: int, granularity: float | None, source: NoiseSource, factor: int = 1) -> None:
        self.name, self.levels, self.fanout, self.width, self.partitions = name, levels, fanout, width, partitions
        # the bound C on the grid (what bounding enforces); the noise for factor * C on each of the levels
        # (replacement: 2C), as levels * factor measurements of sensitivity C; budget: (epsilon, rho), one set
        self.arithmetic = arithmetic(source.exact, bound=bound, epsilon=budget[0], rho=budget[1],
                                     levels=levels * factor, granularity=granularity)
        self.source = source
        self.totals = np.zeros((partitions, width), dtype=np.int64)
        self.noise: list[tuple[np.ndarray, Any]] | None = None

    @property
    def limit(self) -> int:
        """C in grid units (the count: C rows)."""
        return self.arithmetic.noise.units  # type: ignore[union-attr]

    def draw(self, window: int) -> None:
        """The consistent leaf noise of ``window`` in every partition (drawn once, when the window opens)."""
        ar, noise = self.arithmetic, []
        for partition in range(self.partitions):
            levels = ar.draw(self.source.sampler(self.name, partition, window), self.width, self.fanout, self.levels)
            noise.append(ar.consistent(levels, self.fanout, self.width))
        self.noise = noise

    def estimates(self, leaves: np.ndarray) -> np.ndarray:
        """Released values of the buckets ``leaves`` of the open window, shape (len(leaves), partitions)."""
        assert self.noise is not None
        ar = self.arithmetic
        return np.stack([ar.estimates(self.totals[p, leaves], noise, fraction, leaves)
                         for p, (noise, fraction) in enumerate(self.noise)], axis=1) if self.noise else np.zeros(
            (leaves.size, 0))


class UnitAggregate(Params):
    """Release per-bucket population aggregates under unit-level DP (see the module docstring).

    Parameters
    ----------
    epsilon : float
        The budget per unit per window (or ``rho``: zCDP with discrete Gaussian noise, public partitions only).
    bucket, window : int
        Seconds; the window a whole number of buckets (aligned in UTC from the epoch).
    unit_bound : float
        C: the L1 bound of one unit's contribution to one window (the sum of its clipped values;
        for ``statistic="count"`` its rows).
    statistic : str
        ``"sum"`` (default), ``"count"`` or ``"mean"`` (needs ``max_rows``).
    upper_bound : float, optional
        B: each value must lie in [0, B] (``clip=True``: clipped to it).  Default ``unit_bound``.
    clip : bool
        Clip values outside [0, B] instead of refusing them.
    max_rows, max_partitions : int, optional
        Per unit and window; None: not bounded (the L1 bound alone).
    partitions : sequence of str, optional
        The public partitions; None: one, named ``""`` (none with private selection).
    partition_selection : str
        ``"public"`` (default: a row of another partition is an error) or ``"private"``: other partitions
        are selected per window (:mod:`dpstream.release.partition_selection`; needs ``max_partitions``).
    selection_epsilon, selection_delta : float
        Of ``epsilon``, the share the private selection spends (default half), and its delta.
    levels, fanout : int, optional
        d measured levels of fan-out b over the buckets of a window (default ``b = W``, ``d = 2``).
    replace : bool
        The neighbour relation: a unit's rows replaced (noise for 2C) rather than added or removed.
    late : str
        ``"error"`` (default) or ``"drop"``: a row for a bucket already released.
    unit : str
        What a unit is, in the guarantee's words (``"household"``).
    start : int, optional
        Nanoseconds: the first bucket released (a window boundary at or before it); default the
        window of the first row.
    granularity, seed, noise, key
        As :class:`~dpstream.release.tops.ToPS`.

    Examples
    --------
    >>> from dpstream.noise.sampler import ZeroNoise
    >>> agg = UnitAggregate(epsilon=1.0, bucket=1800, window=3600, unit_bound=10.0, upper_bound=20, noise=ZeroNoise())
    >>> t = np.array([0, 60, 1800, 3600]) * 10**9
    >>> out = agg.release(t, np.array(["a", "b", "a", "a"]), np.array([4.0, 12.0, 9.0, 1.0]))
    >>> out.values.tolist(), agg.flush().values.tolist()  # a's second row is scaled to 6, b's row to 10
    ([14.0, 6.0], [1.0])
    """

    def __init__(self, *, epsilon: float | None = None, bucket: int, window: int, unit_bound: float,
                 statistic: str = "sum", upper_bound: float | None = None, clip: bool = False,
                 max_rows: int | None = None,
                 max_partitions: int | None = None, partitions: Any = None, levels: int | None = None,
                 fanout: int | None = None, replace: bool = False, late: str = "error", unit: str = "unit",
                 start: int | None = None, partition_selection: str = "public", selection_epsilon: float | None = None,
                 selection_delta: float = 1e-6, granularity: float | None = None, seed: BitsSeed = None,
                 noise: NoiseSampler | NoiseSource | None = None, key: bytes | None = None,
                 rho: float | None = None) -> None:
        self.epsilon, self.rho = check_budget(epsilon, rho)
        if self.rho is not None and partition_selection != "public":
            raise ValueError("zCDP (rho) applies with public partitions only (the selection is stated in pure DP).")
        self.bucket, self.window = check_positive_int(bucket, "bucket"), check_positive_int(window, "window")
        if self.window % self.bucket:
            raise ValueError(f"the window ({self.window} s) must be a whole number of buckets ({self.bucket} s).")
        self.width = self.window // self.bucket
        self.unit_bound = check_bound(unit_bound, "unit_bound")
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}.")
        if statistic == "count" and self.unit_bound != math.floor(self.unit_bound):
            raise ValueError(f"with statistic count, unit_bound is a number of rows: a whole number, got "
                             f"{self.unit_bound:g}.")
        self.statistic = statistic
        self.upper_bound = self.unit_bound if upper_bound is None else check_bound(upper_bound, "upper_bound")
        self.clip = check_bool(clip, "clip")
        self.max_rows = None if max_rows is None else check_positive_int(max_rows, "max_rows")
        self.max_partitions = None if max_partitions is None else check_positive_int(max_partitions,
                                                                                     "max_partitions")
        if statistic == "mean" and self.max_rows is None:
            raise ValueError("the mean needs max_rows (--unit-max-rows): the bound of a unit's count.")
        self.partition_selection, self.selection_epsilon, self.selection_delta = (partition_selection,
                                                                                  selection_epsilon, selection_delta)
        self._selection_epsilon = check_selection(partition_selection, selection_epsilon, selection_delta,
                                                  epsilon=self.epsilon, max_partitions=max_partitions, replace=replace)
        private = self.partition_selection == "private"
        self.partitions = ([] if private else [""]) if partitions is None else [str(name) for name in partitions]
        if not (self.partitions or private) or len(set(self.partitions)) != len(self.partitions):
            raise ValueError("partitions must be distinct names, at least one.")
        self._index = {name: i for i, name in enumerate(self.partitions)}
        if self.width * len(self.partitions) > MAX_LEAVES:
            raise ValueError(f"a window of {self.width:,} buckets x {len(self.partitions):,} partitions is more than "
                             f"the {MAX_LEAVES:,} leaves held in memory: use longer buckets or a shorter window.")
        self.fanout = self.width if fanout is None else check_positive_int(fanout, "fanout", minimum=2)
        most = num_levels(self.width, self.fanout) + 1 if self.width > 1 else 1
        self.levels = min(2, most) if levels is None else check_positive_int(levels, "levels")
        if self.levels > most:
            raise ValueError(f"levels must be at most {most} for {self.width} buckets per window and fan-out "
                             f"{self.fanout}, got {levels}.")
        self.replace, self.unit = check_bool(replace, "replace"), str(unit)
        if late not in LATE_POLICIES:
            raise ValueError(f"late must be one of {', '.join(LATE_POLICIES)}, got {late!r}.")
        self.late_policy = late
        self.start = None if start is None else int(start)
        self._source = make_source(seed=seed, noise=noise, key=key, identity=(AGGREGATE,))
        if not self._source.exact:
            raise ValueError("the aggregate runs on exact noise only (seed, key or ZeroNoise), not FloatNoise.")
        self._measures = self._build_measures(granularity)
        # K partitions or more of P: no bound (nothing is dropped), and no K columns per unit held
        touched = self.max_partitions if private or (self.max_partitions or math.inf) < len(self.partitions) else None
        self._selector = PartitionSelector(offset=len(self.partitions), width=self.width, measures=len(
            self._measures), max_partitions=self.max_partitions or 1, epsilon=self._selection_epsilon,
            delta=self.selection_delta, limit=MAX_LEAVES) if private else None
        if self._selector is not None:  # delta covers both directions with e^eps of the whole release
            self._selector.set_threshold(self._selector.spent_epsilon + sum(m.arithmetic.spent_epsilon
                                                                            for m in self._measures))
        self._bounders = [ContributionBounder(ContributionBounds(m.limit, self.max_rows, touched))
                          for m in self._measures]
        self.position = 0  # rows consumed
        self.released = 0  # buckets released
        self.late = 0  # rows dropped as late (not printed: data-dependent)
        self._open: int | None = None  # the open bucket (index since the epoch)
        self._window: int | None = None  # the open window
        self._flushed = False  # the open bucket was closed by flush (the end of an input)

    def _build_measures(self, granularity: float | None) -> list[_Measure]:
        factor = 2 if self.replace else 1
        names = {"sum": ["sum"], "count": ["count"], "mean": ["sum", "count"]}[self.statistic]
        share = (self.epsilon - self._selection_epsilon if self.rho is None else self.rho) / len(names)
        out = []
        for name in names:
            bound = self.unit_bound if name == "sum" or self.statistic == "count" else float(self.max_rows or 0)
            grid = 1.0 if name == "count" else granularity
            what = "max_rows" if self.statistic == "mean" and name == "count" else "unit_bound"
            try:
                measure = _Measure(name=name, bound=bound, budget=(share, None) if self.rho is None else (None, share),
                                   levels=self.levels, fanout=self.fanout, width=self.width, factor=factor,
                                   partitions=len(self.partitions), granularity=grid, source=self._source)
            except ValueError as error:
                raise ValueError(f"{what} {bound:g} with {'epsilon' if self.rho is None else 'rho'} "
                                 f"{self.epsilon or self.rho:g}: {error}") from None
            measure.arithmetic.check_enforced(bound, what)
            out.append(measure)
        return out

    # -- the contract ------------------------------------------------------------------------

    hold = 0

    @property
    def threshold(self) -> float:
        """The public L1 bound C (what the durable machinery reads as "released from the first row")."""
        return self.unit_bound

    @property
    def granularity(self) -> float:
        """The public grid of the first measure (the sum's; the count's is 1): released sums lie on it."""
        return self._measures[0].arithmetic.granularity  # type: ignore[return-value]

    @property
    def noise_scale(self) -> float:
        """The noise scale of the first measure's nodes, in the values' units."""
        return self._measures[0].arithmetic.scale_value

    def standard_error(self, measure: str = "sum") -> float:
        """Every bucket's exact noise standard error, bounding aside (a mean's ratio has none: its ``measure``'s)."""
        chosen = self._measures[("sum", "count").index(measure) if self.statistic == "mean" else 0]
        return chosen.arithmetic.leaf_standard_error(self.fanout, self.levels)

    def relation(self) -> UnitLevel:
        """The neighbour relation, with the bounds in words."""
        bounds = [f"values {'clipped' if self.clip else 'checked'} to [0, {self.upper_bound:g}]",
                  f"at most {self.unit_bound:g} in total" if self.statistic != "count" else
                  f"at most {self.unit_bound:g} rows"]
        if self.max_rows is not None:
            bounds.append(f"at most {self.max_rows} rows")
        if self.max_partitions is not None:
            bounds.append(f"at most {self.max_partitions} partitions")
        if self.late_policy == "drop":  # which rows are late depends on every unit's rows (the module docstring)
            bounds.append("the order rows arrive in public (late rows are dropped)")
        window = {86400: "UTC day", 3600: "UTC hour"}.get(self.window, f"UTC-aligned window of {_span(self.window)}")
        return UnitLevel(self.unit, window,
                         f"per {self.unit} and window: " + ", ".join(bounds), replace=self.replace)

    def privacy(self) -> PrivacyGuarantee:
        """``epsilon``-DP about one unit's rows in one window (see the module docstring's derivation)."""
        parts = []
        for m in self._measures:
            ar = m.arithmetic
            parts.append(Part(what=m.name, budget=ar.budget, noise=self._source.describe(ar.law_name),
                              text=f"{m.name}: {ar.law} on each of {self.levels} levels over {self.width} buckets "
                                   f"per window ({ar.per_level(self.replace)} from the bounds)"))
        if self._selector is not None:
            parts.append(self._selector.part(self._source.describe()))
        body = Composition(kind="sequential", parts=tuple(parts), layout="; ".join("{}" for _ in parts)
                           + "; windows and partitions share the bound (disjoint windows: parallel)")
        return (PrivacyGuarantee if self.rho is None else ZcdpGuarantee).of(body, neighbours=self.relation())

    # -- releasing ---------------------------------------------------------------------------

    def release(self, times: Any, units: Any, values: Any, partitions: Any = None, *,
                skip: np.ndarray | None = None) -> Released:
        """Consume a batch of rows in arrival order; return the buckets it closes (vectorized).

        ``times`` are int64 nanoseconds since the epoch, ``units`` any comparable labels (str),
        ``values`` floats, ``partitions`` the partitions' names (None without partitions);
        ``skip`` marks rows consumed but left out (a missing value dropped).  A bucket closes
        when a row of a later bucket arrives; :meth:`flush` closes the last one.
        """
        return _join(list(self.release_parts(times, units, values, partitions, skip=skip)))

    def release_parts(self, times: Any, units: Any, values: Any, partitions: Any = None, *,
                      skip: np.ndarray | None = None) -> Iterator[Released]:
        """:meth:`release` in pieces of at most one window each, so that a long gap between two rows (every
        bucket in between is released) needs no more memory than a window; consume it to the end."""
        times = np.asarray(times)
        if np.issubdtype(times.dtype, np.datetime64):  # datetime64[s] as int64 would be seconds, not nanoseconds
            times = times.astype("datetime64[ns]")
        times = times.astype(np.int64)
        count = times.size
        values = np.asarray(values, dtype=np.float64)
        units = units if isinstance(units, (pa.Array, pa.ChunkedArray)) else np.asarray(units)
        if values.size != count or len(units) != count:
            raise ValueError(f"times, units and values must have one entry per row, got {count}, {len(units)} and "
                             f"{values.size}.")
        parts = self._partition_indices(partitions, count)
        amounts = self._check_values(values)
        buckets = times // (self.bucket * _NS)
        keep = self._not_late(buckets) if skip is None else self._not_late(buckets, ~np.asarray(skip, dtype=bool))
        if count and keep.any():
            self._flushed = False
            if not keep.all():
                units = units.filter(pa.array(keep)) if isinstance(units, (pa.Array, pa.ChunkedArray)) else units[keep]
                buckets, parts, amounts = buckets[keep], parts[keep], [a[keep] for a in amounts]
            windows = buckets // self.width
            cuts = np.flatnonzero(np.diff(windows)) + 1
            for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [buckets.size]))):
                yield from self._advance_to(int(buckets[lo]))
                self._add(buckets[lo:hi], units[lo:hi], parts[lo:hi], [a[lo:hi] for a in amounts])
                yield from self._advance_to(int(buckets[hi - 1]))
        self.position += count

    def flush(self) -> Released:
        """Close and release the open bucket (the end of the input)."""
        if self._open is None or self._flushed:
            return _join([])
        self._flushed = True
        return _join(list(self._close_through(self._open)))

    def _partition_indices(self, partitions: Any, count: int) -> np.ndarray:
        if partitions is None:
            if len(self.partitions) != 1 or self._selector is not None:
                raise ValueError("this release has partitions: every row needs one.")
            return np.zeros(count, dtype=np.int64)
        known, inverse = codes(partitions)
        index = np.array([self._index.get(str(name), -1) for name in known], dtype=np.int64)
        if self._selector is not None and (index < 0).any():  # not public: a private partition
            index[index < 0] = self._selector.indices([str(name) for name in np.asarray(known, object)[index < 0]])
        if (index < 0).any():
            bad = int(np.flatnonzero(index < 0)[0])
            row = self.position + int(np.flatnonzero(inverse == bad)[0])
            raise ValueError(f"row {row + 1}: the partition {str(known[bad])[:80]!r} is not one of the public "
                             "partitions.")
        return index[inverse]

    def _check_values(self, values: np.ndarray) -> list[np.ndarray]:
        """The amounts of each measure (grid units): clipped (or checked) values for the sum, 1 for the count."""
        if self.statistic == "count":  # a row counts whatever its value
            return [np.ones(values.size, dtype=np.int64)]
        finite = np.isfinite(values)
        inside = finite & (values >= 0) & (values <= self.upper_bound)
        if not inside.all():
            row = int(np.flatnonzero(~(finite if self.clip else inside))[0]) if not (
                self.clip and finite.all()) else -1
            if row >= 0:
                raise ValueError(f"row {self.position + row + 1}: the value {float(values[row])!r} is not "
                                 f"{'a finite number' if self.clip else f'in [0, {self.upper_bound:g}]'}"
                                 f"{'' if self.clip else ' (clip=True clips it)'}.")
            values = np.clip(values, 0.0, self.upper_bound)
        return [np.ones(values.size, dtype=np.int64) if m.name == "count"
                else m.arithmetic.units(np.minimum(values, m.arithmetic.bound)) for m in self._measures]

    def _not_late(self, buckets: np.ndarray, used: np.ndarray | None = None) -> np.ndarray:
        """Rows at or after the open bucket (arrival order); a late row refused or dropped as stated."""
        floor = -(2**62) if self._open is None else self._open
        if self.start is not None:
            floor = max(floor, self.start // (self.bucket * _NS))
        seen = buckets if used is None else np.where(used, buckets, floor)  # a skipped row's time is not read
        newest = np.maximum.accumulate(np.maximum(seen, floor)) if buckets.size else buckets
        late = buckets < newest if used is None else (buckets < newest) & used
        if late.any() and self.late_policy == "error":
            row = int(np.flatnonzero(late)[0])
            raise ValueError(f"row {self.position + row + 1}: its bucket was released already or lies before the "
                             f"start ({_time_text(int(buckets[row]), self.bucket)}, before the open bucket "
                             f"{_time_text(int(newest[row]), self.bucket)}; rows come in time order, in any order "
                             "inside the open bucket); dropping late rows (late='drop', aggregate --late drop) drops "
                             "it.")
        self.late += int(late.sum())
        return ~late if used is None else ~late & used

    def _advance_to(self, bucket: int) -> Iterator[Released]:
        """Close every bucket before ``bucket`` (opening its window, and the first window, as needed)."""
        if self._open is None:
            first = bucket if self.start is None else self.start // (self.bucket * _NS)
            self._open = first - first % self.width
            self._open_window(self._open // self.width)
        if bucket > self._open:
            yield from self._close_through(bucket - 1)
        self._open = max(bucket, self._open)
        if self._open // self.width != self._window:
            self._open_window(self._open // self.width)

    def _close_through(self, last: int) -> Iterator[Released]:
        """Release the buckets from the open one to ``last`` (windows opened as they begin), a window at a time."""
        first = self._open
        assert first is not None
        while first <= last:
            window = first // self.width
            if window != self._window:
                self._open_window(window)
            end = min(last, (window + 1) * self.width - 1)
            leaves = np.arange(first - window * self.width, end - window * self.width + 1)
            values = self._estimates([m.estimates(leaves) for m in self._measures])
            starts = (window * self.width + leaves) * self.bucket * _NS
            self.released += leaves.size
            first = self._open = end + 1
            yield Released(np.repeat(starts, len(self.partitions)), np.tile(np.arange(len(self.partitions)),
                                                                            leaves.size), values.ravel())
            selected = self._selector and end == (window + 1) * self.width - 1 and self._selector.release(
                self._measures, self._bounders[0], window, self._source)
            if selected:  # the window closed: its private partitions selected, their held buckets released at once
                yield Released(np.repeat((window * self.width + np.arange(self.width)) * self.bucket * _NS,
                                         selected[0].size), np.tile(selected[0], self.width),
                               self._estimates(selected[1]).ravel())

    @property
    def partition_names(self) -> list[str]:
        """The name of each partition number :class:`Released` gives (public): the public partitions, then the
        selected private ones in the order first selected."""
        return self.partitions + (self._selector.published if self._selector else [])

    @property
    def released_values(self) -> int:
        """How many values were released, every partition's (the buckets of selected private partitions too)."""
        return self.released * len(self.partitions) + (self._selector.released if self._selector else 0)

    @property
    def selection_threshold(self) -> int | None:
        """tau: the noisy distinct-unit count a private partition needs to be released (None: public only)."""
        return None if self._selector is None else self._selector.tau

    def _estimates(self, found: list[np.ndarray]) -> np.ndarray:
        return found[0] if self.statistic != "mean" else found[0] / np.maximum(found[1], 1.0)  # post-processing

    def _open_window(self, window: int) -> None:
        self._window = window
        for m, bounder in zip(self._measures, self._bounders):
            m.totals[:] = 0
            m.draw(window)
            bounder.clear()
        if self._selector is not None:
            self._selector.clear()

    def _add(self, buckets: np.ndarray, units: np.ndarray, parts: np.ndarray, amounts: list[np.ndarray]) -> None:
        leaves = buckets - self._window * self.width  # type: ignore[operator]
        for i, (m, bounder, amount) in enumerate(zip(self._measures, self._bounders, amounts)):
            added = bounder.bound(units, amount, parts)  # sums below 2^52: exact in float64
            held = m.totals.size + (self._selector.totals[i].size if self._selector is not None else 0)
            flat = np.bincount(parts * self.width + leaves, weights=added, minlength=held).astype(np.int64)
            m.totals += flat[:m.totals.size].reshape(m.totals.shape)
            if self._selector is not None:  # private partitions' sums held until the window closes
                self._selector.totals[i] += flat[m.totals.size:].reshape(-1, self.width)

    def revised(self, released: Released, *, history: int = 28, cycle: int = 1) -> np.ndarray:
        """The revised values of ``released`` (every bucket released so far, in order): each closed window's
        released total spread by the profile of the previous ``history`` windows (``cycle``: of the same place
        in a cycle of windows), post-processing (:mod:`dpstream.release.aggregate_revisions`).  Not the mean:
        its released values are ratios, whose window sum is no total."""
        if self.statistic == "mean":
            raise ValueError("revised values apply to the sum and the count, not the mean (a ratio has no window "
                             "total to spread).")
        return revise_released(released.buckets, released.partitions, released.values, bucket=self.bucket,
                               width=self.width, count=len(self.partitions), history=history, cycle=cycle)

    # -- snapshots ---------------------------------------------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data (see :mod:`dpstream.release.contract`); SECRET."""
        keep = not self._source.keyed
        return {**snapshot_header(AGGREGATE, self.get_params(), self._source),
                "position": self.position, "released": self.released, "late": self.late, "open": self._open,
                "flushed": self._flushed, "window": self._window,
                "measures": [{"totals": m.totals.copy(),
                              "noise": [list(pair) for pair in m.noise] if keep and m.noise is not None else None}
                             for m in self._measures],
                "bounders": [bounder.snapshot() for bounder in self._bounders],
                "selector": None if self._selector is None else self._selector.snapshot()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> UnitAggregate:
        """The release a :attr:`state` snapshot describes, continuing where it was taken."""
        params, source = read_header(state, AGGREGATE)
        agg = cls(**params, noise=source)
        agg.position, agg.released, agg.late = int(state["position"]), int(state["released"]), int(state["late"])
        agg._open, agg._flushed = (None if state["open"] is None else int(state["open"])), bool(state["flushed"])
        agg._window = None if state["window"] is None else int(state["window"])
        for m, data in zip(agg._measures, state["measures"]):
            m.totals[:] = np.asarray(data["totals"]).reshape(m.totals.shape)
            if data["noise"] is not None:
                m.noise = [(np.asarray(a), None if b is None else np.asarray(b)) for a, b in data["noise"]]
            elif agg._window is not None:
                m.draw(agg._window)  # keyed: recomputed from the key
        for bounder, data in zip(agg._bounders, state["bounders"]):
            bounder.restore(data)
        if agg._selector is not None:
            agg._selector.restore(state["selector"])
        return agg


def _time_text(bucket: int, seconds: int) -> str:
    """The start of ``bucket`` (of ``seconds``) in ISO 8601 UTC, for a message."""
    return f"{np.datetime64(bucket * seconds, 's')}Z"


def _span(seconds: int) -> str:
    for name, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {name}{'s' * (seconds != size)}"
    return f"{seconds} seconds"


def unit_statement(guarantee: PrivacyGuarantee, *, unit: str, window: str, windows: int) -> str:
    """What one unit gets, in words: per window, and over ``windows`` windows by composition.

    >>> g = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=UnitLevel("household", "UTC day", "x"),
    ...                      composition="")
    >>> unit_statement(g, unit="household", window="UTC day", windows=30)
    "each household's readings in each UTC day: ε = 1; over 30 days: ε = 30 by composition"
    >>> unit_statement(g, unit="household", window="UTC-aligned window of 2 days", windows=3)
    "each household's readings in each UTC-aligned window of 2 days: ε = 1; over 3 windows: ε = 3 by composition"
    """
    total, delta = math.fsum([guarantee.epsilon] * windows), guarantee.delta  # delta: private partition selection
    single = window.split()[-1] if window.startswith("UTC ") and len(window.split()) == 2 else "window"
    plural = single + ("s" if windows != 1 else "")  # "UTC-aligned window of 2 days": 3 windows, not "3 dayss"
    return (f"each {unit}'s readings in each {window}: ε = {guarantee.epsilon:g}{f', δ = {delta:g}' * bool(delta)}; "
            f"over {windows:,} {plural}: ε = {total:g}{f', δ = {delta * windows:g}' * bool(delta)} by composition")
