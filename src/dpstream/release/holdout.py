"""The shape every threshold-then-release pipeline shares (ToPS, PAK).

The first ``hold`` values of the stream choose a threshold and are not released one by one;
every later value is truncated at the threshold and handed to a stream mechanism (ToPS's
hierarchical perturber, PAK's binary tree).  The two phases read disjoint positions of the
stream, so their budgets compose in parallel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from dpstream._checks import check_stream_values
from dpstream.release.revisions import Leaves, revise

__all__ = ["HoldOutRelease"]


class HoldOutRelease(ABC):
    """Hold out the first ``hold`` values to choose theta; release the rest truncated at theta.

    A subclass sets ``upper_bound``, ``hold`` and ``clip``, calls :meth:`_start_hold_out`, and
    implements :meth:`_choose_threshold`, which reads ``self._held`` and sets ``self._threshold``
    (theta) and ``self._stream``: the mechanism for the later values, fed through its public
    ``release(values)`` and ``release_one(value)`` with values truncated to ``[0, theta]``.
    :meth:`_hold_out_state` and :meth:`_resume_hold_out` are the shared part of a snapshot.
    """

    upper_bound: float
    hold: int
    clip: bool

    def _start_hold_out(self) -> None:
        self._held = np.empty(self.hold, dtype=np.float64)
        self._position = 0
        self._threshold: float | None = None
        self._stream: Any = None

    @abstractmethod
    def _choose_threshold(self) -> None:
        """Choose theta from ``self._held``; set ``self._threshold`` and ``self._stream``."""

    @property
    def threshold(self) -> float | None:
        """theta, once the hold-out is complete (None before)."""
        return self._threshold

    @property
    def position(self) -> int:
        """Number of values consumed so far (held or released)."""
        return self._position

    def release(self, values: object) -> np.ndarray:
        """Consume a batch of values; return the values released for it (vectorized).

        On a fresh object, the result holds positions ``hold, hold + 1, ...`` of the stream.
        Later calls continue the stream.  Values must be finite and in [0, B] (or clipped when
        ``clip=True``); an error names the first bad position and leaves the stream unchanged.
        """
        values = check_stream_values(values, self.upper_bound, clip=self.clip, offset=self._position)
        start = 0
        if self._stream is None:
            start = min(values.size, self.hold - self._position)
            self._held[self._position : self._position + start] = values[:start]
            self._position += start
            if self._position < self.hold:
                return np.empty(0)
            self._choose_threshold()
            self._held = np.empty(0)  # the hold-out is no longer needed
        rest = np.minimum(values[start:], self._threshold)
        self._position += rest.size
        return self._stream.release(rest)

    def standard_errors(self, positions: object) -> np.ndarray:
        """The exact standard errors of the noise of the values released at stream ``positions`` (the hold-out's
        included: the first released is ``hold``): the stream mechanism's, given theta, which the release states
        once chosen (ToPS's perturber: :mod:`dpstream.release.tops_errors`; PAK's binary tree).  Truncation at
        theta, the grid's rounding and a smoother's bias are not in them."""
        positions = np.asarray(positions, dtype=np.int64)
        hold = self._released_from(int(positions.min(initial=self.hold)))
        return self._stream.standard_errors(positions - hold)

    def range_standard_error(self, start: int, stop: int) -> float:
        """The exact standard error of the noise of the sum of the values released at stream positions ``[start,
        stop)`` (as :meth:`standard_errors`: the stream mechanism's, given theta)."""
        hold = self._released_from(start)
        return self._stream.range_standard_error(start - hold, stop - hold)

    def error_model(self) -> dict[str, Any] | None:
        """What :meth:`standard_errors` depends on, all public once theta is chosen, as plain data: the stream
        mechanism's, with ``first_position`` (the hold-out); None before, or where there are none."""
        model = None if self._stream is None else self._stream.error_model()
        return None if model is None else {**model, "first_position": self.hold}

    def _released_from(self, first: int) -> int:
        """The hold-out, once theta is chosen and when ``first`` (a stream position) is released; else an error."""
        if self._stream is None:
            raise ValueError("the standard errors depend on theta: they are known once the hold-out has chosen it.")
        if first < self.hold:
            raise ValueError(f"positions must be >= hold = {self.hold} (the held-out values are not released one by "
                             f"one), got {first}.")
        return self.hold

    def leaves(self) -> Leaves | None:
        """The public layout of the stream mechanism's leaves over the released values
        (:class:`~dpstream.release.revisions.Leaves`), or None: before the hold-out ends, or for a
        mechanism that measures no leaves."""
        layout = getattr(self._stream, "leaves", None)
        return None if layout is None else layout()

    def revised(self, released: object) -> np.ndarray:
        """The revised values (:mod:`dpstream.release.revisions`) of ``released``, every value this release has
        released so far in order: each closed leaf's total spread by the public shape, the open leaf's values as
        released.  Post-processing: a new array, beside the first release, which is never changed."""
        values = np.asarray(released, dtype=np.float64).ravel()
        count = self._position - self.hold if self._stream is not None else 0
        if values.size != count:
            raise ValueError(f"revised() takes every value released so far ({count}), got {values.size}.")
        if self._stream is None:
            return values.copy()
        leaves = self.leaves()
        if leaves is None:
            raise TypeError(f"{type(self._stream).__name__} measures no leaves: its release has no revised values.")
        return revise(values, leaves)

    def _hold_out_state(self) -> dict[str, Any]:
        """The position and, until theta is chosen, the held-out values (raw: SECRET)."""
        held = self._held[: self._position].copy() if self._stream is None else None
        return {"position": self._position, "held": held}

    def _resume_hold_out(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`_hold_out_state` gave (before the subclass restores its stream)."""
        position, held = int(state["position"]), state["held"]
        if held is not None:
            held = np.asarray(held, dtype=np.float64)
            if held.shape != (position,) or position >= self.hold:
                raise ValueError(f"a snapshot's hold-out holds {held.size} values at position {position} "
                                 f"(hold {self.hold}).")
            self._held[:position] = held
        else:
            self._held = np.empty(0)
        self._position = position
