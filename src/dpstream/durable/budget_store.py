"""A privacy filter across releases: a budget store that every release drawing on the same people charges.

The ledger of a state file (:mod:`dpstream.durable.ledger`) refuses to release the same positions twice
within one release; nothing in it stops a publisher from releasing the same people's data in ten
streams, keys or aggregates, each "at epsilon".  A :class:`BudgetStore` is a file the user names and
every such release charges: it holds a total budget and the charges made so far, and refuses a charge
that would exceed the total.

**Which filter.**  Every charge is the release's whole stated guarantee, the same public amount for
every unit the release covers (a *uniform* filter): the amount is a function of the release's public
parameters only, never of the data, so whether a release is refused is public too and refusing it
reveals nothing about any unit's participation (refusing a release because *one* unit ran out would).
It is valid under adaptive choices (each release chosen after seeing the earlier ones): for pure DP,
the basic-composition filter of Rogers, Roth, Ullman and Vadhan (NeurIPS 2016): epsilons adding up to
at most the total give total-epsilon-DP; for rho-zCDP, the zCDP filter (Whitehouse, Ramdas, Rogers and
Wu, ICML 2023): rho's adding up to at most the total give total-rho-zCDP.  An individual filter
(Feldman and Zrnic 2021), which drops an exhausted unit's rows instead, spends less for units that
appear rarely; it is not built: it needs each unit's data-dependent spending accounted in every mechanism,
where the uniform charge needs only the public amount a release states.

**Accounting.**  A zCDP store (``rho=``) takes zCDP guarantees at their rho and pure ones at
``epsilon^2 / 2``, and states what is spent and left in rho and in the (epsilon, delta) they imply; a
pure store (``epsilon=``) takes pure guarantees only.  Approximate (delta > 0) guarantees that are not
zCDP (PAK, private partition selection) are refused: their deltas would need a filter of their own.

**What a budget is about.**  The first charge fixes the store's *subject*, and a later release about
another one is refused: for unit-level releases the unit, the window and whether units are replaced
(``UnitLevel``: two aggregates of the same households' days with other bounds draw on the same
per-household-day budget, since each enforces its own bounds), else the relation itself: event level,
the budget of one value of the stream (each release of that stream, whatever its method, protects the
value at each position at its epsilon or rho); w-event (``WEvent(w=...)``), the budget of any window of
``w`` consecutive values.  A release with keys (``per_key=True``) is about the relation *in each key's
stream*: every key is charged the same public amount (the per-key guarantee, which does not depend on
the keys or their values), so a refusal reveals nothing about any key; such a store is the budget of one
key's stream.  Windows are disjoint, so a unit-level store is the budget of one unit in any one window:
each release charges its per-window guarantee once, however many windows it spans.

**The file.**  JSON, replaced atomically (:func:`~dpstream.durable.files.write_atomic`, mode 0600) under
an exclusive lock on ``FILE.lock`` that a charge waits for, so concurrent releases charge one after the
other and none is lost.  A charge names its release (the command and its output or state file); charging
the name of a resumable release again (a ``--state`` release resumed) is not charged twice, and every other
charge is one of its own, whatever its name (two runs of a command with the same output are two releases;
the command line names a state made again under a charged name anew).

**Copies of a state.**  The charge of a ``--state`` release records the fingerprint of the state's key
(:func:`~dpstream.durable.keys.key_fingerprint`, one-way: never the key), and a charge under another name
with a charged fingerprint is refused (:class:`KeyCharged`): a copy of a state, resumed at another path on
other data, would publish the same noise twice.  A charge without one (a store of an earlier version) matches
nothing.  A copy resumed without the store is not seen: nothing but the store sees two copies.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpstream.accounting import DEFAULT_DELTA, ZcdpGuarantee, rho_of_pure, zcdp_epsilon
from dpstream.durable.files import write_atomic
from dpstream.privacy import PrivacyGuarantee, Relation, UnitLevel

__all__ = ["BUDGET_FORMAT", "BudgetExhausted", "BudgetStore", "Charge", "KeyCharged", "amount_of", "check_charge",
           "check_total", "in_terms", "report", "subject_of"]

#: The ``format`` field of a budget store file.
BUDGET_FORMAT = "dpstream-budget"
_VERSION = 1
#: The version of a store holding a key fingerprint: an earlier dpstream refuses it rather than misread it.
_KEYED_VERSION = 2
#: Relative slack when comparing a sum of charges with the total (float sums of equal shares).
_SLACK = 1e-12


class BudgetExhausted(ValueError):
    """A charge would take the store past its total: the release must not run."""


class KeyCharged(ValueError):
    """A charge's key fingerprint was charged under another name (``other``): a copy of a state, not a release of
    its own; it must not run."""

    def __init__(self, message: str, other: str) -> None:
        super().__init__(message)
        self.other = other


@dataclass(frozen=True)
class Charge:
    """One release's charge: its name, the amount (rho or epsilon, as the store counts), its statement, when, and
    the fingerprint of its state's key (None: a release without a state, or a charge made before they were recorded)."""

    release: str
    amount: float
    statement: str
    time: str
    key: str | None = None


def subject_of(relation: Relation, *, per_key: bool = False) -> str:
    """What a budget is about: a unit-level relation's unit, window and replacement, else the relation's name;
    ``per_key``: that relation in each key's stream (a release with keys).

    >>> subject_of(UnitLevel("household", "UTC day", "values in [0, 5]"))
    'unit level: each household in each UTC day (added or removed)'
    >>> from dpstream.privacy import EVENT_LEVEL, WEvent
    >>> subject_of(EVENT_LEVEL), subject_of(WEvent(10), per_key=True)
    ('EVENT_LEVEL', 'WEvent(w=10) in each key')
    """
    if isinstance(relation, UnitLevel):
        how = "replaced" if relation.replace else "added or removed"
        subject = f"unit level: each {relation.unit} in each {relation.window} ({how})"
    else:
        subject = relation.name
    return f"{subject} in each key" if per_key else subject


def amount_of(guarantee: PrivacyGuarantee, accounting: str) -> float:
    """What ``guarantee`` costs in a store of ``accounting`` (``"zcdp"``: rho, pure as epsilon^2/2; ``"pure"``:
    epsilon), refused (ValueError) when it cannot be counted in it."""
    if not isinstance(guarantee, PrivacyGuarantee):
        raise TypeError(f"guarantee must be a PrivacyGuarantee, got {guarantee!r}.")
    if isinstance(guarantee, ZcdpGuarantee):
        if accounting == "pure":
            raise ValueError(f"a pure-DP budget store cannot count a zCDP release ({guarantee.label}).")
        return guarantee.rho
    if guarantee.delta != 0.0:
        raise ValueError(f"a budget store counts pure and zCDP releases only, not {guarantee.label} (its delta "
                         "would need a filter of its own).")
    return rho_of_pure(guarantee.epsilon) if accounting == "zcdp" else guarantee.epsilon


def check_charge(*, release: str, amount: float, subject: str, stored_subject: str | None, spent: float,
                 total: float, accounting: str, where: str) -> None:
    """Refuse a charge about another subject than the store's (ValueError) or past its total
    (:class:`BudgetExhausted`); ``where`` names the store in messages."""
    if stored_subject is not None and stored_subject != subject:
        raise ValueError(f"the budget store {where} is about {stored_subject}; release {release!r} is about "
                         f"{subject}.")
    if spent + amount > total * (1 + _SLACK):
        raise BudgetExhausted(f"release {release!r} needs {'rho' if accounting == 'zcdp' else 'epsilon'} {amount:g} "
                              f"but the budget store has {max(total - spent, 0.0):g} left of {total:g}.")


def in_terms(amount: float, accounting: str, delta: float) -> dict[str, float]:
    """An amount as a reader takes it: ``{"epsilon"}`` (pure), or ``{"rho", "epsilon", "delta"}``: the rho and the
    (epsilon, delta) it implies at the store's delta.

    >>> in_terms(2.0, "pure", 1e-6), in_terms(0.5, "zcdp", 1e-6)["epsilon"] == zcdp_epsilon(0.5, 1e-6)
    ({'epsilon': 2.0}, True)
    """
    if accounting == "pure":
        return {"epsilon": amount}
    return {"rho": amount, "epsilon": zcdp_epsilon(amount, delta), "delta": delta}


class BudgetStore:
    """A budget shared by releases, in a file (see the module docstring).

    Create it with :meth:`create` (a total ``rho`` or ``epsilon``), open it with :meth:`open`; every
    release calls :meth:`charge` before it publishes anything.

    >>> import tempfile
    >>> from dpstream.accounting import Zcdp
    >>> from dpstream.privacy import EVENT_LEVEL, Part
    >>> path = Path(tempfile.mkdtemp()) / "budget.json"
    >>> store = BudgetStore.create(path, rho=1.0)
    >>> day = ZcdpGuarantee.of(Part(what="day", budget=Zcdp(0.4)), neighbours=EVENT_LEVEL)
    >>> store.charge("a", day).amount, store.charge("b", day).amount, round(store.left, 12)
    (0.4, 0.4, 0.2)
    >>> store.charge("c", day)
    Traceback (most recent call last):
    dpstream.durable.budget_store.BudgetExhausted: release 'c' needs rho 0.4 but the budget store has 0.2 left of 1.
    """

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path, self._data = path, data

    # -- the file ----------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, *, rho: float | None = None, epsilon: float | None = None,
               delta: float = DEFAULT_DELTA) -> BudgetStore:
        """A new store of total ``rho`` (zCDP) or ``epsilon`` (pure DP); ``delta`` is what a zCDP store states
        its (epsilon, delta) at.  An existing file is refused."""
        if (rho is None) == (epsilon is None):
            raise ValueError("a budget store needs its total: rho (zCDP) or epsilon (pure DP), one of them.")
        total = check_total(rho if rho is not None else epsilon)
        path = Path(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, f"its directory {path.parent} does not exist (nothing was written)",
                                    str(path))
        if path.exists():  # checked again under the lock; here so that a refusal leaves no lock file
            raise _exists(path)
        data = {"format": BUDGET_FORMAT, "version": _VERSION, "accounting": "zcdp" if rho is not None else "pure",
                "total": float(total), "delta": float(delta), "subject": None, "charges": []}
        with _locked(path):
            if path.exists():
                raise _exists(path)
            write_atomic(path, _encode(data))
        return cls(path, data)

    @classmethod
    def open(cls, path: str | Path) -> BudgetStore:
        """The store in ``path`` (read without a lock: a charge replaces the file whole)."""
        path = Path(path)
        return cls(path, _read(path))

    @staticmethod
    def is_store(path: str | Path) -> bool:
        """Whether ``path`` holds a budget store (its ``format`` field)."""
        try:
            _read(Path(path))
        except (OSError, ValueError):
            return False
        return True

    # -- charging ----------------------------------------------------------------------------

    def amount(self, guarantee: PrivacyGuarantee) -> float:
        """What ``guarantee`` costs in this store's accounting (refused when it cannot be counted in it)."""
        return amount_of(guarantee, self.accounting)

    def charge(self, release: str, guarantee: PrivacyGuarantee, *, per_key: bool = False,
               key: str | None = None, resumable: bool = True) -> Charge:
        """Charge ``release`` its guarantee, or refuse (:class:`BudgetExhausted`) when the total would be passed;
        a ``resumable`` release's name charged before is not charged again (its first charge is returned), where
        ``resumable=False`` charges every call (names may repeat).  ``per_key``: the guarantee is each key's (a
        release with keys), charged once for every key alike.  ``key``: the fingerprint of the release's state
        key, recorded; refused (:class:`KeyCharged`) when charged under another name.  A name charged with another
        fingerprint is not this release; one charged without is (and records it now)."""
        amount, subject = self.amount(guarantee), subject_of(guarantee.neighbours, per_key=per_key)
        with _locked(self.path):
            self._data = data = _read(self.path)
            earlier = [c for c in data["charges"] if c["release"] == release and
                       (key is None or c.get("key") in (None, key))] if resumable else []
            if earlier:
                if key is not None and earlier[0].get("key") is None:  # charged before fingerprints: record it now
                    earlier[0]["key"], data["version"] = key, _KEYED_VERSION
                    write_atomic(self.path, _encode(data))
                return Charge(**earlier[0])
            other = next((c["release"] for c in data["charges"] if key is not None and c.get("key") == key), None)
            if other is not None:
                raise KeyCharged(f"the key of release {release!r} was charged for release {other!r} in the budget "
                                 f"store {self.path}: a copy of its state would publish the same noise twice.", other)
            check_charge(release=release, amount=amount, subject=subject, stored_subject=data["subject"],
                         spent=math.fsum(c["amount"] for c in data["charges"]), total=data["total"],
                         accounting=data["accounting"], where=str(self.path))
            charge = Charge(release=release, amount=float(amount), statement=str(guarantee),
                            time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), key=key)
            data["subject"] = subject
            if key is not None:
                data["version"] = _KEYED_VERSION
            data["charges"].append({name: value for name, value in asdict(charge).items()
                                    if name != "key" or value is not None})
            write_atomic(self.path, _encode(data))
        return charge

    # -- what is spent -----------------------------------------------------------------------

    @property
    def accounting(self) -> str:
        """``"zcdp"`` or ``"pure"``."""
        return self._data["accounting"]

    @property
    def unit(self) -> str:
        """What amounts are in: ``"rho"`` or ``"epsilon"``."""
        return "rho" if self.accounting == "zcdp" else "epsilon"

    @property
    def total(self) -> float:
        return float(self._data["total"])

    @property
    def charges(self) -> list[Charge]:
        return [Charge(**c) for c in self._data["charges"]]

    @property
    def spent(self) -> float:
        return math.fsum(c["amount"] for c in self._data["charges"])

    @property
    def left(self) -> float:
        return max(self.total - self.spent, 0.0)

    def report(self) -> str:
        """What the store holds, spent and has left, in its accounting (and (epsilon, delta) for zCDP)."""
        return report(f"budget store {self.path}", accounting=self.accounting, total=self.total,
                      delta=self._data["delta"], subject=self._data["subject"],
                      charges=[(c.time, c.amount, c.release) for c in self.charges])


def report(title: str, *, accounting: str, total: float, delta: float, subject: str | None,
           charges: list[tuple[str, float, str]]) -> str:
    """The text of a budget: ``title``, its total and subject, spent and left, and each charge
    ``(time, amount, release)`` -- amounts in epsilon (pure), or in rho with the (epsilon, delta) they imply."""
    unit = "rho" if accounting == "zcdp" else "epsilon"

    def said(amount: float) -> str:
        if accounting == "pure":
            return f"epsilon {amount:g}"
        return f"rho {amount:g} (epsilon {zcdp_epsilon(amount, delta):.4g} at delta {delta:g})"

    spent = math.fsum(amount for _, amount, _ in charges)
    lines = [f"{title}: {'zCDP' if accounting == 'zcdp' else 'pure DP'}, total {said(total)}; about "
             f"{subject or 'nothing yet'}",
             f"spent {said(spent)} by {len(charges)} release{'s' * (len(charges) != 1)}; left "
             f"{said(max(total - spent, 0.0))}"]
    lines += [f"  {when}  {unit} {amount:g}  {release}" for when, amount, release in charges]
    return "\n".join(lines)


def _encode(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1, allow_nan=False) + "\n").encode("utf-8")


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"there is no budget store {path}.") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path} is not a budget store (not JSON).") from None
    if not isinstance(data, dict) or data.get("format") != BUDGET_FORMAT or \
            data.get("version") not in (_VERSION, _KEYED_VERSION):
        raise ValueError(f"{path} is not a budget store of this version.")
    return data


def _exists(path: Path) -> ValueError:
    what = "the budget store" if BudgetStore.is_store(path) else "the file"
    return ValueError(f"{what} {path} exists already: a budget store is created in a new file; name another one.")


def check_total(total: Any) -> float:
    """A store's total (rho or epsilon): a finite number > 0, else refused naming it.

    >>> check_total(float("nan"))
    Traceback (most recent call last):
    ValueError: a budget store's total must be a finite number > 0, got nan.
    """
    if isinstance(total, bool) or not (isinstance(total, (int, float)) and math.isfinite(total) and total > 0):
        raise ValueError(f"a budget store's total must be a finite number > 0, got {total!r}.")
    return total


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path.lock``, waited for (charges of concurrent releases queue up); an error names
    ``path``, the store the user gave."""
    try:
        descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise type(error)(error.errno, f"{error.strerror} (its lock file {path.name}.lock)", str(path)) from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
