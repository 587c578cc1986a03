"""How library code reports progress: one optional callback, never a progress bar.

A long computation takes ``progress: Progress | None = None``.  When given, it is called as
``progress(done, total)`` with two ints: ``done`` of ``total`` units of work (regions, rounds,
...) are finished.  The rules:

* the first call has ``done == 0`` and announces ``total``;
* ``done`` never decreases, and the last call has ``done == total``;
* a caller that runs several computations with one callback sees each start again at 0.

The units and the total are the computation's own and its docstring names them.  Library code
never imports a progress bar: the command line turns the callback into one
(``dpstream.cli._app.progress_bar``); a test can pass ``list.append`` on a tuple.

>>> calls = []
>>> report = lambda done, total: calls.append((done, total))
>>> notify(report, 0, 5); part = shifted(report, 2, 5); part(0, 3); part(3, 3)
>>> calls
[(0, 5), (2, 5), (5, 5)]
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "notify", "shifted"]

#: ``progress(done, total)``: ``done`` of ``total`` units are finished (see the module docstring).
Progress = Callable[[int, int], None]


def notify(progress: Progress | None, done: int, total: int) -> None:
    """Call ``progress(done, total)`` unless ``progress`` is None."""
    if progress is not None:
        progress(done, total)


def shifted(progress: Progress | None, offset: int, total: int) -> Progress | None:
    """The callback for a part of a computation that starts after ``offset`` of its ``total`` units.

    The part counts in the same units as the whole: its ``(done, part_total)`` is reported as
    ``(offset + done, total)``.  None stays None.
    """
    if progress is None:
        return None
    return lambda done, _part_total: progress(offset + done, total)
