"""Durable releases: a secret state file that lets a long-running release stop and continue.

A release that runs for months is interrupted sooner or later.  Run again from scratch it would
draw new noise for values already published, and publishing both runs spends the budget twice.
:class:`StreamState` keeps what a release needs to continue instead:

* ``params`` -- the command's public parameters, so that a state made for one release is
  refused by another (:meth:`StreamState.check_params` names the first difference);
* ``key`` -- 32 random bytes (``os.urandom``) from which a keyed mechanism derives the noise of
  every tree node from the node's identity (:class:`dpstream.noise.KeyedBits`), so that
  continuing recomputes the same noise, even from an older copy of the state;
* ``mechanism`` -- the mechanism's own state (held-out values, the current tree's noise, ...),
  an opaque dict that the mechanism writes and reads;
* ``progress`` -- input values consumed, positions released and the output's committed byte
  length: a resume checks the output against it (never cutting it), skips the consumed input
  and appends;
* ``commitment`` -- written before anything is published: an HMAC of the input consumed, where
  it was read from, and the text of the last lines committed (:mod:`~dpstream.durable.commitment`);
* the budget ledger -- what each stream has spent on which input positions, and when; a second
  release of the same positions under the same state is refused (:class:`BudgetError`).

Choices, and why:

* Explicit, versioned JSON (:mod:`~dpstream.durable.format`, :mod:`~dpstream.durable.encoding`),
  not pickle: loading a pickle runs code, and its layout follows the classes of the day.
  Numpy arrays are base64 of their little-endian bytes, so floats (-0.0, subnormals, inf, NaN)
  and int64 come back bit for bit; Python integers beyond 2^53 are decimal strings.
* A SHA-256 of the body in the header: a torn file, or one edited by accident, is refused with a
  clear error, never half-used.  It protects against accidents, not forgery: whoever can write
  the file can recompute it, and whoever holds the state holds its key anyway.
* Atomic replacement (:mod:`~dpstream.durable.files`: a temporary file of a unique name in the
  same directory, fsync, rename, fsync of the directory), mode 0600 from the first byte: a crash
  at any moment leaves the old state or the new one.
* An ``flock`` on ``FILE.lock``: two processes never drive one stream, and a killed process
  (even by SIGKILL) leaves no stale lock, because the kernel drops it with the process.  The
  lock is per name, so a state file with a second hard link is refused.
* Readers (``dpstream budget``) take no lock: a save replaces the file whole, so they always see
  a complete state.

:class:`~dpstream.durable.release.DurableRelease` runs a release on a state: it starts or
continues it, and commits before it publishes: nothing derived from the input leaves the
process before the state that covers it is durable.

What is secret: the whole file.  The key lets anyone recompute and subtract the noise of every
released value; the mechanism state holds raw input values (a hold-out) and noise.  Keep the
file, and every copy of it, as safe as the raw data.  Only ``params``, ``progress`` and the
ledger are public; they are all that ``dpstream budget`` prints.
"""

from dpstream.durable.format import FORMAT, VERSION, StateDamagedError, StateError, StateInUseError
from dpstream.durable.ledger import BudgetError, LedgerEntry
from dpstream.durable.release import DurableRelease, ParameterError, ResumeError
from dpstream.durable.state import Progress, StateMismatchError, StreamState, format_ledger

__all__ = [
    "FORMAT", "VERSION", "BudgetError", "DurableRelease", "LedgerEntry", "ParameterError", "Progress",
    "ResumeError", "StateDamagedError", "StateError", "StateInUseError", "StateMismatchError", "StreamState",
    "format_ledger",
]
