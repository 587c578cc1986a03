"""The service's budget stores: a privacy filter across the streams, collectors and aggregates of one database.

The file store of the command line (:mod:`dpstream.durable.budget_store`) as two tables of the service's
database (schema version 5): ``budgets`` (a total rho or epsilon, the delta its (epsilon, delta) is stated
at, its subject) and ``budget_charges`` (one row per source charged).  An admin creates a budget
(``POST /budgets``); a stream, collector or aggregate created with ``"budget": "NAME"`` is charged its
stated guarantee when it is created, before it takes any value, and is refused (nothing created) when that
would pass the total.  The filter is the file store's: every unit the source covers is charged the same
public amount (the guarantee is a function of the source's public parameters), so a refusal reveals
nothing about any unit, and it is valid under adaptive choices (Rogers et al. 2016 for pure DP, Whitehouse
et al. 2023 for zCDP).  A budget is about one subject, fixed by its first charge (:func:`subject_of`): event
level for streams (one value of a stream, each stream charged on its own: a budget shared by ten streams
of the same people is spent ten times), ``LOCAL_REPORT`` for collectors (one client's report), a unit's
rows in one window for aggregates.

A charge and the source's creation are two transactions: the charge first (under :data:`BUDGETS_LOCK`, so
charges of every process serving the database queue), then the source; a source whose creation fails
(its name is taken) has its charge taken back, and a source's charge is made once (a second creation of
the same name is refused before it charges).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from dpstream.accounting import DEFAULT_DELTA, zcdp_epsilon
from dpstream.durable.budget_store import amount_of, check_charge, in_terms, subject_of
from dpstream.privacy import PrivacyGuarantee
from dpstream.service.parsing import check_name
from dpstream.service.storage import ConflictError, Storage

__all__ = ["BUDGETS_LOCK", "NoBudget", "ServiceBudgets", "budget_spec"]

#: The advisory lock (PostgreSQL) that charges of every process take in turn.
BUDGETS_LOCK = 0x64707374_00000003

_FIELDS = ("name", "rho", "epsilon", "delta")


class NoBudget(LookupError):
    """No budget of that name in the database."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"a budget's {name} must be a finite number > 0, got {value!r}.")
    return float(value)


def budget_spec(document: dict[str, Any]) -> tuple[str, str, float, float]:
    """``(name, accounting, total, delta)`` of a ``POST /budgets`` document: a name and ``rho`` (zCDP) or
    ``epsilon`` (pure DP), and for zCDP the ``delta`` its (epsilon, delta) is stated at (default 1e-6).

    >>> budget_spec({"name": "households", "rho": 0.5})
    ('households', 'zcdp', 0.5, 1e-06)
    >>> budget_spec({"name": "x", "rho": 1, "epsilon": 1})
    Traceback (most recent call last):
    ValueError: a budget needs its total: rho (zCDP) or epsilon (pure DP), one of them.
    """
    unknown = sorted(set(document) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; a budget has {', '.join(_FIELDS)}.")
    name = check_name(document.get("name"))
    if ("rho" in document) == ("epsilon" in document):
        raise ValueError("a budget needs its total: rho (zCDP) or epsilon (pure DP), one of them.")
    accounting = "zcdp" if "rho" in document else "pure"
    total = _positive(document["rho" if accounting == "zcdp" else "epsilon"], "total")
    delta = document.get("delta", DEFAULT_DELTA)
    if accounting == "pure" and "delta" in document:
        raise ValueError("delta applies to a rho budget (the delta its (epsilon, delta) is stated at).")
    if _positive(delta, "delta") >= 1:
        raise ValueError(f"a budget's delta must be below 1, got {delta!r}.")
    if accounting == "zcdp" and not math.isfinite(zcdp_epsilon(total, delta)):  # JSON has no infinity to show it
        raise ValueError(f"a budget's rho {total!r} implies an epsilon beyond a float at delta {delta!r}: a smaller "
                         "rho.")
    return name, accounting, total, float(delta)


class ServiceBudgets:
    """The ``budgets`` and ``budget_charges`` tables of a :class:`~dpstream.service.storage.Storage`."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def create(self, name: str, accounting: str, total: float, delta: float) -> dict[str, Any]:
        """Add a budget (ConflictError when the name is taken) and answer :meth:`describe`'s facts."""
        storage = self.storage
        with storage._lock, storage._transaction() as cursor:
            storage._serialize(cursor, BUDGETS_LOCK)
            cursor.execute(storage._sql("SELECT 1 FROM budgets WHERE name = ?"), (name,))
            if cursor.fetchall():
                raise ConflictError(f"a budget named {name!r} exists already.")
            cursor.execute(storage._sql("INSERT INTO budgets (name, accounting, total, delta, subject, created) "
                                        "VALUES (?, ?, ?, ?, NULL, ?)"), (name, accounting, total, delta, _now()))
        return self.describe(name)

    def charge(self, name: str, release: str, guarantee: PrivacyGuarantee) -> float:
        """Charge the budget ``name`` the guarantee of ``release`` (a source, ``"kind name"``) and answer the
        amount: NoBudget, ValueError (another subject, an accounting it cannot count), BudgetExhausted (past the
        total) or ConflictError (``release`` charged already) refuse it, and then nothing is charged."""
        storage = self.storage
        with storage._lock, storage._transaction() as cursor:
            storage._serialize(cursor, BUDGETS_LOCK)
            cursor.execute(storage._sql("SELECT accounting, total, subject FROM budgets WHERE name = ?"), (name,))
            rows = cursor.fetchall()
            if not rows:
                raise NoBudget(f"there is no budget named {name!r} (an admin creates it: POST /budgets).")
            accounting, total, stored = rows[0]
            amount, subject = amount_of(guarantee, accounting), subject_of(guarantee.neighbours)
            cursor.execute(storage._sql("SELECT release, amount FROM budget_charges WHERE budget = ?"), (name,))
            charges = cursor.fetchall()
            if any(row[0] == release for row in charges):
                raise ConflictError(f"{release} is charged to budget {name!r} already.")
            check_charge(release=release, amount=amount, subject=subject, stored_subject=stored, accounting=accounting,
                         spent=math.fsum(row[1] for row in charges), total=float(total), where=repr(name))
            cursor.execute(storage._sql("INSERT INTO budget_charges (budget, release, amount, statement, charged) "
                                        "VALUES (?, ?, ?, ?, ?)"), (name, release, amount, str(guarantee), _now()))
            cursor.execute(storage._sql("UPDATE budgets SET subject = ? WHERE name = ?"), (subject, name))
        return amount

    def refund(self, name: str, release: str) -> None:
        """Take back the charge of ``release``, whose source was not created (so nothing of it was published)."""
        storage = self.storage
        with storage._lock, storage._transaction() as cursor:
            storage._serialize(cursor, BUDGETS_LOCK)
            cursor.execute(storage._sql("DELETE FROM budget_charges WHERE budget = ? AND release = ?"), (name, release))
            cursor.execute(storage._sql(
                "UPDATE budgets SET subject = NULL WHERE name = ? AND NOT EXISTS "
                "(SELECT 1 FROM budget_charges WHERE budget = ?)"), (name, name))

    def names(self) -> list[str]:
        """Every budget's name, in order."""
        return [row[0] for row in self.storage._query("SELECT name FROM budgets ORDER BY name")]

    def describe(self, name: str) -> dict[str, Any]:
        """A budget's public facts: its total, what it is about, each charge, spent and left -- in epsilon (pure)
        or in rho and the (epsilon, delta) it implies (zCDP); NoBudget when there is none."""
        storage = self.storage
        with storage._lock, storage._reading() as cursor:
            cursor.execute(storage._sql("SELECT accounting, total, delta, subject, created FROM budgets WHERE "
                                        "name = ?"), (name,))
            rows = cursor.fetchall()
            cursor.execute(storage._sql("SELECT release, amount, statement, charged FROM budget_charges WHERE "
                                        "budget = ? ORDER BY charged, release"), (name,))
            charges = cursor.fetchall()
        if not rows:
            raise NoBudget(f"there is no budget named {name!r}.")
        accounting, total, delta, subject, created = rows[0]
        spent = math.fsum(row[1] for row in charges)
        return {"name": name, "accounting": accounting, "subject": subject, "created": created,
                "total": in_terms(float(total), accounting, delta), "spent": in_terms(spent, accounting, delta),
                "left": in_terms(max(float(total) - spent, 0.0), accounting, delta),
                "charges": [{"release": release, **in_terms(float(amount), accounting, delta), "statement": statement,
                             "charged": charged} for release, amount, statement, charged in charges]}
