"""Location counts from raw trajectories (Cao et al., DBSec 2023, Section 4): :class:`LocationCounts`.

Rows ``(time, user, location)`` -- one ping of a user -- become, per time step (``step`` seconds,
aligned in UTC from the epoch) and per public location, how many users are there, released with
exact discrete Laplace noise the moment the step closes (a row of a later step arrives, or
:meth:`LocationCounts.flush`).  One location per user per step: a second row of a user in a
step is refused (:class:`ValueError` naming the row), never silently dropped; rows come in time
order (a row of an earlier step than the one before it is refused).

Neighbours, sensitivity.

* ``bounded`` (the paper's): ``n`` users, ``n`` public (``users``); neighbouring databases
  differ in one user's location at one step.  That moves one unit of count from one location
  to another: L1 sensitivity ``Delta = 2`` per step.  Every step must hold exactly ``n`` rows
  (each user has a location at every step); a step with another number is refused, so the
  released rows sum to ``n`` plus noise, which the post-processing's prior assumes.
* ``unbounded``: neighbouring databases differ in one user's rows, added or removed; with one
  location per user per step a step's count vector changes by 1 in one cell: ``Delta = 1``.
  ``n`` is not public here: steps with no rows are released (zero counts plus noise), and the
  post-processing estimates ``n`` from the released counts (:func:`released_users`).

Noise and budget.  Every cell of a step gets exact discrete Laplace noise (``P[X = x]``
proportional to ``exp(-|x| / b)`` on the integers, drawn from random bits) of scale
``b = w Delta / epsilon`` rounded **up** to a multiple of ``2^-20`` in exact rationals
(:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace_scale`), ``w = w_event``: a step
spends ``Delta / b <= epsilon / w``.  Any ``w`` consecutive steps of one user (what ``w``-event
neighbours change, Kellaris et al., VLDB 2014) therefore cost at most ``epsilon`` by sequential
composition, and a user's whole trajectory of ``T`` steps ``T epsilon / w`` (``w = 1``:
``T epsilon``, each step ``epsilon``).  The relation is :data:`~dpstream.privacy.USER_STEP`
(bounded, ``w = 1``: the same as :class:`~dpstream.postprocess.LaplaceCounts`) or
:class:`UserSteps`.

The likelihood of the post-processing.  The estimators of :mod:`dpstream.postprocess` take the
release's noise as ``(epsilon, sensitivity, likelihood)`` and compute its scale with the same
function: :meth:`LocationCounts.noise_model` gives ``sensitivity = w Delta``, so their scale is
this release's ``b`` exactly, and ``likelihood="discrete_laplace"``, the law drawn.

What is not protected: the span of the release (the steps from the first row's to the last
row's), as a stream's length, and the public locations.  Noise with ``key=`` is drawn from
``KeyedBits(key, ("locations", step))`` (step: its index since the epoch), so a restored release
recomputes rather than re-draws it (``release-locations --state``); with ``seed=`` (tests) every
step draws its ``m`` values in order, so batches of any size give the same release.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from dpstream._checks import check_choice, check_epsilon, check_positive_int
from dpstream._params import Params
from dpstream.noise.bits import BitsSeed
from dpstream.noise.discrete_laplace_law import discrete_laplace_scale
from dpstream.noise.sampler import NoiseSampler
from dpstream.noise.source import NoiseSource, make_source
from dpstream.privacy import USER_STEP, EpsilonDelta, Part, PrivacyGuarantee, Relation
from dpstream.release.bounding import codes
from dpstream.release.contract import read_header, snapshot_header

__all__ = ["LOCATIONS", "NEIGHBOURS", "LocationCounts", "ReleasedCounts", "UserSteps", "location_relation",
           "released_users", "trajectory_statement"]

#: The ``mechanism`` field of its snapshots (and its registered name).
LOCATIONS = "locations"
#: The neighbour relations offered -> the L1 sensitivity of one step's count vector.
NEIGHBOURS = {"bounded": 2, "unbounded": 1}
#: Steps released per piece of :meth:`LocationCounts.release_parts` (a long gap is released a piece at a time).
_PIECE = 4096
#: The most locations: one step's counts are held in memory and written as one row.
MAX_LOCATIONS = 1 << 16
_NS = 1_000_000_000


@dataclass(frozen=True)
class UserSteps(Relation):
    """One user's locations at up to ``steps`` consecutive time steps: moved (``bounded``, ``n`` public) or
    added or removed (unbounded); one location per user per step."""

    steps: int
    bounded: bool

    @property
    def description(self) -> str:
        where = "at one time step" if self.steps == 1 else f"at up to {self.steps} consecutive time steps"
        if self.bounded:
            return f"bounded databases of n users (n public) differing in one user's locations {where}"
        return (f"databases differing in one user's rows {where}, added or removed (one location per user per "
                "step; the number of users not public)")


def location_relation(bounded: bool, steps: int) -> Relation:
    """The relation of a release: :data:`~dpstream.privacy.USER_STEP` for bounded neighbours and one step (that of
    :class:`~dpstream.postprocess.LaplaceCounts`), else :class:`UserSteps`.

    >>> location_relation(True, 1) is USER_STEP, location_relation(False, 24)
    (True, UserSteps(steps=24, bounded=False))
    """
    return USER_STEP if bounded and steps == 1 else UserSteps(steps, bounded)


@dataclass(frozen=True)
class ReleasedCounts:
    """Released steps: the start of each (int64 nanoseconds since the epoch) and its noisy counts (int64, one
    column per location, in the public order)."""

    steps: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return int(self.steps.size)


def _join(parts: list[ReleasedCounts], width: int) -> ReleasedCounts:
    if not parts:
        return ReleasedCounts(np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.int64))
    return ReleasedCounts(np.concatenate([p.steps for p in parts]), np.concatenate([p.counts for p in parts]))


class LocationCounts(Params):
    """Noisy counts of users per time step and location, from rows ``(time, user, location)``.

    Parameters
    ----------
    epsilon : float
        Budget of ``w_event`` consecutive steps (of one step without it).
    locations : sequence of str
        The public locations, in the order of the released columns.
    step : int
        Seconds per time step (UTC-aligned from the epoch).
    neighbours : str
        ``"bounded"`` (default; ``users`` public, a user moves: sensitivity 2) or ``"unbounded"``
        (a user's rows added or removed: sensitivity 1).
    users : int, optional
        The public number ``n`` of users: needed with bounded neighbours, refused without.
    w_event : int
        Protect any ``w_event`` consecutive steps of a user at ``epsilon`` (default 1: each step).
    seed, noise, key
        As :class:`~dpstream.release.tops.ToPS`; exact noise only (a seed, a key, the OS CSPRNG
        or ``ZeroNoise`` for tests).

    Examples
    --------
    >>> from dpstream.noise.sampler import ZeroNoise
    >>> lc = LocationCounts(epsilon=1.0, locations=["home", "work"], step=3600, users=2, noise=ZeroNoise())
    >>> t = np.array([0, 60, 3600, 3660]) * 10**9
    >>> lc.release(t, ["a", "b", "a", "b"], ["home", "work", "work", "work"]).counts.tolist()
    [[1, 1]]
    >>> lc.flush().counts.tolist(), lc.noise_model()
    ([[0, 2]], {'epsilon': 1.0, 'sensitivity': 2, 'likelihood': 'discrete_laplace'})
    """

    granularity = 1
    hold = 0

    def __init__(self, *, epsilon: float, locations: Sequence[str], step: int, neighbours: str = "bounded",
                 users: int | None = None, w_event: int = 1, seed: BitsSeed = None,
                 noise: NoiseSampler | NoiseSource | None = None, key: bytes | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.locations = [str(name) for name in locations]
        if not self.locations or len(set(self.locations)) != len(self.locations):
            raise ValueError("locations must be distinct names, at least one.")
        if len(self.locations) > MAX_LOCATIONS:
            raise ValueError(f"at most {MAX_LOCATIONS:,} locations, got {len(self.locations):,}.")
        self._index = {name: i for i, name in enumerate(self.locations)}
        self.step = check_positive_int(step, "step")
        self.neighbours = check_choice(neighbours, "neighbours", tuple(NEIGHBOURS))
        self.bounded = self.neighbours == "bounded"
        if self.bounded and users is None:
            raise ValueError("bounded neighbours need the public number of users (users, --users).")
        if not self.bounded and users is not None:
            raise ValueError("the number of users is not public under unbounded neighbours (a neighbour adds or "
                             "removes a user): leave users (--users) out.")
        self.users = None if users is None else check_positive_int(users, "users")
        self.w_event = check_positive_int(w_event, "w_event")
        self.sensitivity = NEIGHBOURS[self.neighbours]
        self.noise_scale: Fraction = discrete_laplace_scale(self.w_event * self.sensitivity, self.epsilon)
        self.scale = float(self.noise_scale)
        self._source = make_source(seed=seed, noise=noise, key=key, identity=(LOCATIONS,))
        if not self._source.exact:
            raise ValueError("location counts run on exact noise only (seed, key or ZeroNoise), not FloatNoise.")
        self.position = 0  # rows consumed
        self.released = 0  # steps released
        self._open: int | None = None  # the open step (index since the epoch)
        self._flushed = False  # the open step was released by flush (the end of an input)
        self._counts = np.zeros(len(self.locations), dtype=np.int64)
        self._users = np.zeros(0, dtype=str)  # the users of the open step

    # -- the contract ------------------------------------------------------------------------

    @property
    def threshold(self) -> float:
        """The public L1 sensitivity (what the durable machinery reads as "released from the first row")."""
        return float(self.sensitivity)

    def relation(self) -> Relation:
        """The neighbour relation (:func:`location_relation`)."""
        return location_relation(self.bounded, self.w_event)

    def noise_model(self) -> dict[str, Any]:
        """The keywords of :func:`dpstream.postprocess.postprocess` (and every estimator) that describe this
        release's noise: its scale is ``laplace_scale(epsilon, sensitivity)``, this release's exactly."""
        return {"epsilon": self.epsilon, "sensitivity": self.w_event * self.sensitivity,
                "likelihood": "discrete_laplace"}

    def privacy(self) -> PrivacyGuarantee:
        """``epsilon`` for any ``w_event`` consecutive steps of one user (see the module docstring)."""
        moved = "a user moves" if self.bounded else "a user's row added or removed"
        steps = "one time step" if self.w_event == 1 else f"any {self.w_event} consecutive time steps"
        each = "" if self.w_event == 1 else (f"; each step spends {self.sensitivity}/scale <= epsilon/{self.w_event}, "
                                             f"{self.w_event} steps compose to epsilon")
        counts = Part(what=f"noisy counts of {steps}", budget=EpsilonDelta(self.epsilon), noise=self._source.describe(),
                      text=f"discrete Laplace of scale {self.scale!r} per cell and step (count-vector L1 sensitivity "
                           f"{self.sensitivity}: {moved}){each}")
        return PrivacyGuarantee.of(counts, neighbours=self.relation())

    # -- releasing ---------------------------------------------------------------------------

    def release(self, times: Any, users: Any, locations: Any) -> ReleasedCounts:
        """Consume a batch of rows in time order; return the steps it closes (vectorized over the rows).

        ``times`` are int64 nanoseconds since the epoch (or datetime64), ``users`` and
        ``locations`` labels (str; numpy or pyarrow arrays).  A step closes when a row of a later
        step arrives; :meth:`flush` closes the last one.
        """
        return _join(list(self.release_parts(times, users, locations)), len(self.locations))

    def release_parts(self, times: Any, users: Any, locations: Any) -> Iterator[ReleasedCounts]:
        """:meth:`release` in pieces of at most 4,096 steps (a long gap between two rows is released a piece at a
        time); consume it to the end.  The rows are checked whole before any step is released."""
        times = np.asarray(times)
        if np.issubdtype(times.dtype, np.datetime64):
            times = times.astype("datetime64[ns]")
        steps = times.astype(np.int64) // (self.step * _NS)
        count = steps.size
        if len(users) != count or len(locations) != count:
            raise ValueError(f"times, users and locations must have one entry per row, got {count}, {len(users)} and "
                             f"{len(locations)}.")
        if not count:
            return
        cells = self._cells(locations)
        names = _labels(users)
        self._check_order(steps)
        self._check_duplicates(steps, names)
        starts = np.concatenate(([0], np.flatnonzero(np.diff(steps)) + 1))
        distinct = steps[starts]
        rows = np.diff(np.append(starts, count))
        self._check_rows(distinct, rows)
        width = len(self.locations)
        run = np.repeat(np.arange(distinct.size), rows)
        counts = np.bincount(run * width + cells, minlength=distinct.size * width).reshape(distinct.size, width)
        continued = self._open == int(distinct[0]) and not self._flushed  # the batch continues the open step
        pieces: list[tuple[int, np.ndarray]] = []
        for index, step in enumerate(distinct.tolist()):
            yield from self._advance_to(step, pieces)
            self._counts += counts[index]
        last = names[starts[-1]:]
        self._users = np.concatenate((self._users, last)) if continued and distinct.size == 1 else last
        self.position += count
        if pieces:
            yield self._piece(pieces)

    def steps_closed(self, times: Any) -> np.ndarray:
        """How many steps :meth:`release_parts` would close before each row of a batch in time order (a gap between
        two rows closes every step in between), from the times alone, before any work: public, as the times are.

        >>> counts = LocationCounts(epsilon=1.0, locations=["a", "b"], step=60, neighbours="unbounded")
        >>> counts.steps_closed(np.array([0, 30, 120, 6000]) * _NS).tolist()
        [0, 0, 2, 98]
        """
        steps = np.asarray(times).astype("datetime64[ns]").astype(np.int64) // (self.step * _NS)
        if not steps.size:
            return steps
        prior = int(steps[0]) if self._open is None else self._open + self._flushed  # the first step not released
        return np.diff(np.maximum.accumulate(np.concatenate(([prior], steps))))  # nondecreasing: never negative

    def flush(self) -> ReleasedCounts:
        """Close and release the open step (the end of the input)."""
        if self._open is None or self._flushed:
            return _join([], len(self.locations))
        pieces: list[tuple[int, np.ndarray]] = []
        self._check_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), closing=True)
        self._close(self._open, pieces)
        self._flushed = True
        return self._piece(pieces)

    def _cells(self, locations: Any) -> np.ndarray:
        known, inverse = codes(locations)
        index = np.array([self._index.get(str(name), -1) for name in known], dtype=np.int64)
        cells = index[inverse]
        if (cells < 0).any():
            row = int(np.flatnonzero(cells < 0)[0])
            raise ValueError(f"row {self.position + row + 1}: the location {_text(known[inverse[row]])} is not one "
                             f"of the {len(self.locations):,} public locations.")
        return cells

    def _step_text(self, step: int) -> str:
        """The start of ``step`` in ISO 8601 UTC (as :func:`dpstream.io.times.format_times` writes it)."""
        return str(np.datetime_as_string(np.datetime64(step * self.step * _NS, "ns"), unit="s")) + "Z"

    def _check_order(self, steps: np.ndarray) -> None:
        """Refuse a row of an earlier step than the row before it (or of the step :meth:`flush` released)."""
        before = np.concatenate(([steps[0] if self._open is None else self._open], steps[:-1]))
        back = steps < before
        if self._flushed:
            back[0] |= steps[0] == self._open
        if back.any():
            row = int(np.flatnonzero(back)[0])
            where = ("is the step released at the end of the last input" if row == 0 and self._flushed else
                     f"is before step {self._step_text(int(before[row]))} of the row before it")
            step = self._step_text(int(steps[row]))
            raise ValueError(f"row {self.position + row + 1}: its step {step} {where}: rows must come in time order.")

    def _check_duplicates(self, steps: np.ndarray, names: np.ndarray) -> None:
        """Refuse a second row of a user in a step (this batch's, and the open step's rows of earlier batches)."""
        order = np.lexsort((names, steps))
        same = (steps[order][1:] == steps[order][:-1]) & (names[order][1:] == names[order][:-1])
        bad = order[1:][same]
        if self._open is not None and not self._flushed and self._users.size:
            held = np.flatnonzero(steps == self._open)
            bad = np.concatenate((bad, held[np.isin(names[held], self._users)]))
        if bad.size:
            row = int(bad.min())
            raise ValueError(f"row {self.position + row + 1}: the user {_text(names[row])} has a second row in step "
                             f"{self._step_text(int(steps[row]))}: one location per user per step.")

    def _check_rows(self, distinct: np.ndarray, rows: np.ndarray, *, closing: bool = False) -> None:
        """Bounded neighbours: every step that closes (those before the batch's last, all of them at the end)
        holds exactly ``users`` rows; a step skipped between two rows holds none."""
        if not self.bounded:
            return
        if self._open is not None and not self._flushed:  # the open step, with the rows it holds
            if distinct.size and int(distinct[0]) == self._open:
                rows = np.concatenate(([rows[0] + self._users.size], rows[1:]))
            else:
                distinct = np.concatenate(([self._open], distinct))
                rows = np.concatenate(([self._users.size], rows))
        if not distinct.size:
            return
        start = self._open + 1 if self._open is not None and self._flushed else int(distinct[0])
        skipped = np.flatnonzero(distinct != start + np.arange(distinct.size))
        wrong = np.flatnonzero(rows[:distinct.size - (not closing)] != self.users)
        if skipped.size and (not wrong.size or skipped[0] <= wrong[0]):
            step, found = start + int(skipped[0]), 0
        elif wrong.size:
            step, found = int(distinct[wrong[0]]), int(rows[wrong[0]])
        else:
            return
        raise ValueError(f"step {self._step_text(step)} has {found:,} row{'s' * (found != 1)}, but under bounded "
                         f"neighbours each of the {self.users:,} users (--users) has one location at every step.")

    def _advance_to(self, step: int, pieces: list[tuple[int, np.ndarray]]) -> Iterator[ReleasedCounts]:
        """Release every step before ``step`` not yet released, and open ``step``."""
        if self._open is None:
            self._open = step
            return
        first = self._open + 1 if self._flushed else self._open
        for at in range(first, step):
            self._close(at, pieces)
            if len(pieces) >= _PIECE:
                yield self._piece(pieces)
        if step != self._open:
            self._open, self._flushed = step, False
            self._counts = np.zeros(len(self.locations), dtype=np.int64)

    def _close(self, step: int, pieces: list[tuple[int, np.ndarray]]) -> None:
        counts = self._counts if step == self._open else np.zeros(len(self.locations), dtype=np.int64)
        noise = self._source.sampler(step).laplace_units(self.noise_scale, len(self.locations))
        pieces.append((step, counts + noise))

    def _piece(self, pieces: list[tuple[int, np.ndarray]]) -> ReleasedCounts:
        steps = np.array([step for step, _ in pieces], dtype=np.int64) * (self.step * _NS)
        counts = np.array([counts for _, counts in pieces], dtype=np.int64).reshape(len(pieces), len(self.locations))
        pieces.clear()
        self.released += steps.size
        return ReleasedCounts(steps, counts)

    # -- snapshots ---------------------------------------------------------------------------

    @property
    def state(self) -> dict[str, Any]:
        """A snapshot as plain data (see :mod:`dpstream.release.contract`); SECRET (the open step's rows)."""
        return {**snapshot_header(LOCATIONS, self.get_params(), self._source),
                "position": self.position, "released": self.released, "open": self._open, "flushed": self._flushed,
                "counts": self._counts.copy(), "users": self._users.tolist()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LocationCounts:
        """The release a :attr:`state` snapshot describes, continuing where it was taken."""
        params, source = read_header(state, LOCATIONS)
        params.pop("seed", None), params.pop("key", None), params.pop("noise", None)
        counts = cls(**params, noise=source)
        counts.position, counts.released = int(state["position"]), int(state["released"])
        counts._open = None if state["open"] is None else int(state["open"])
        counts._flushed = bool(state["flushed"])
        counts._counts = np.asarray(state["counts"], dtype=np.int64).copy()
        counts._users = np.array(state["users"], dtype=str)
        return counts


def _labels(users: Any) -> np.ndarray:
    """User labels as a numpy array of str (pyarrow arrays converted once per batch)."""
    if isinstance(users, (pa.Array, pa.ChunkedArray)):
        users = users.to_numpy(zero_copy_only=False)
    return np.asarray(users).astype(str)


def _text(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def released_users(counts: np.ndarray) -> int:
    """The number of users an unbounded release's post-processing assumes: the mean released row sum, rounded
    (post-processing of the release: it costs nothing), at least 1.

    >>> released_users(np.array([[3, 4], [5, 2]]))
    7
    """
    rows = np.asarray(counts, dtype=np.float64).sum(axis=1)
    return max(1, int(np.rint(rows.mean()))) if rows.size else 1


def trajectory_statement(release: LocationCounts, steps: int) -> str:
    """What one user gets, in words: per step (or window of steps) and over a trajectory of ``steps`` steps.

    >>> from dpstream.noise.sampler import ZeroNoise
    >>> lc = LocationCounts(epsilon=1.0, locations=["a"], step=3600, users=5, w_event=24, noise=ZeroNoise())
    >>> print(trajectory_statement(lc, 200))  # doctest: +NORMALIZE_WHITESPACE
    each user's locations at any 24 consecutive steps: ε = 1; the whole trajectory of 200 steps: ε = 8.33333 by
    composition (200 steps at ε/24 each)
    """
    total = steps * float(release.sensitivity / release.noise_scale)
    if release.w_event == 1:
        return (f"each user's location at each step: ε = {release.epsilon:g}; the whole trajectory of {steps:,} "
                f"step{'s' * (steps != 1)}: ε = {total:g} by composition")
    return (f"each user's locations at any {release.w_event} consecutive steps: ε = {release.epsilon:g}; the whole "
            f"trajectory of {steps:,} step{'s' * (steps != 1)}: ε = {total:g} by composition ({steps:,} steps at "
            f"ε/{release.w_event} each)")
