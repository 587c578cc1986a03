"""Option parsers and option help that several ``dpstream`` commands share (click callbacks raise usage errors)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import click

from dpstream._checks import check_epsilon
from dpstream.accounting import check_target_delta
from dpstream.cli._app import quote, say
from dpstream.durable import StateError, StreamState
from dpstream.durable.budget_store import BudgetStore, KeyCharged
from dpstream.durable.keys import key_fingerprint, seed_key
from dpstream.privacy import PrivacyGuarantee

#: Help of every --seed that seeds the noise of a release.
SEED_HELP = "For tests only: anyone who knows the seed can recompute the noise. Never publish a seeded release."

__all__ = ["DATABASE_KEY", "DEFAULT_DATABASE", "SEED_HELP", "budget_store_option", "charge_store", "check_new_target",
           "delta_option", "epsilon_option", "epsilons_option", "floats", "open_database"]

#: The service's database when none is given (``serve``, ``token``): a file in the working directory, created 0600.
DEFAULT_DATABASE = "sqlite:///dpstream.db"

#: ``--database-key`` of the commands that open the service's database themselves (``token``, ``budget``).
DATABASE_KEY = click.option("--database-key", envvar="DPSTREAM_DATABASE_KEY", metavar="KEY", show_envvar=True,
                            help="The database key, when the service's secrets are sealed with one.")


def open_database(database: str, database_key: str | None, *, existing: bool = False) -> Any:
    """The service's storage of ``database`` (a one-line error when it cannot be opened); ``existing``: a command
    that reads refuses a SQLite file that is not there rather than create it."""
    from dpstream.service import StorageError, open_storage
    from dpstream.service.secrets import parse_database_key

    path = unquote(database[len("sqlite:///"):]) if existing and database.startswith("sqlite:///") else ""
    if path not in ("", ":memory:") and not os.path.lexists(path):
        raise click.ClickException(f"database {path}: there is none (nothing was created; dpstream serve and dpstream "
                                   "token create create one).")
    try:
        key = None if database_key is None else parse_database_key(database_key)
        return open_storage(database, database_key=key)
    except StorageError as error:
        raise click.ClickException(str(error)) from None


def floats(text: str) -> list[float]:
    """Parse a comma-separated list of numbers given on the command line."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {quote(text)}.") from None
    if not values:
        raise click.BadParameter(f"expected at least one number, got {quote(text)}.")
    return values


def epsilon_option(ctx: click.Context | None, param: click.Parameter | None, value: float) -> float:
    """Click callback of a budget option: :func:`~dpstream._checks.check_epsilon` as a usage error."""
    try:
        return check_epsilon(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def delta_option(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback of a ``--delta``: a probability in (0, 1] (None: not given), else a usage error naming the
    option and the value (NaN included, which a click range lets through)."""
    if value is not None and not 0 < value <= 1:
        raise click.BadParameter(f"delta must lie in (0, 1], got {value!r}.", ctx=ctx, param=param)
    return value


def check_new_target(ctx: click.Context, value: float | None, state_path: str | None) -> None:
    """The ``--delta`` of an (epsilon, delta) target, whose rho a zCDP release spends:
    :func:`~dpstream.accounting.check_target_delta` as a usage error naming the option and the value, for a new
    release; a ``--state`` that exists continues at the delta it began with (its parameters are checked against the
    state's)."""
    if value is None or (state_path is not None and Path(state_path).exists()):
        return
    try:
        check_target_delta(value)
    except ValueError as error:
        param = next(p for p in ctx.command.params if p.name == "delta")
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None


def epsilons_option(ctx: click.Context, param: click.Parameter, text: str) -> list[float]:
    """Click callback of an ``--epsilons``-style option: comma-separated budgets."""
    return [epsilon_option(ctx, param, value) for value in floats(text)]


def budget_store_option(command: Any) -> Any:
    """``--budget-store FILE`` of a release command (its value ``budget_path``; :func:`charge_store` charges it)."""
    return click.option(
        "--budget-store", "budget_path", type=click.Path(dir_okay=False, exists=True), default=None,
        help="A budget store (dpstream budget FILE --new-rho R) this release is charged its stated guarantee before "
             "it publishes anything: refused when that would pass the store's total; a resumed --state run is "
             "charged once (docs/zcdp.md).")(command)


def charge_store(path: str, command: str, guarantee: PrivacyGuarantee, *, state_path: str | None, output_path: str,
                 per_key: bool = False, seed: int | None = None) -> bytes | None:
    """Charge the budget store ``path`` a release's guarantee (a :class:`ValueError` when refused), and say so.

    The charge is named after the release: ``COMMAND --state FILE`` (a resumed run is the same release and is not
    charged again), else ``COMMAND -o OUTPUT``, every run a release of its own (charged again under the same
    name).  A state made where none is, under a name already charged (the state deleted, or a first run stopped
    before it made one), is a new release -- a new key, fresh noise on the data -- and is charged again under a
    name of its own; its resumed runs find the charge of their key and are not.

    A ``--state`` charge records the fingerprint of the state's key (:func:`~dpstream.durable.keys.key_fingerprint`),
    so a copy of a charged state, resumed at another path, is refused before anything is published: it would
    publish the same noise on other data.  Returns the key of a new state (made here, from ``seed`` if given, so
    that its charge records it; the state is made with it), else None.
    """
    unique = f"({os.getpid()}, {time.time_ns()})"
    resumable = state_path is not None
    name = f"{command} --state {Path(state_path).resolve()}" if resumable else f"{command} -o {output_path}"
    store = BudgetStore.open(path)
    new, key = _state_key(state_path, seed)
    fingerprint = None if key is None else key_fingerprint(key)
    if fingerprint is not None and not new:  # this state's own charge: its key's under this path (made again or not)
        name = next((charge.release for charge in store.charges if charge.key == fingerprint and
                     (charge.release == name or charge.release.startswith(f"{name}, made again "))), name)
    again = resumable and not new and any(charge.release == name and
                                          (fingerprint is None or charge.key in (None, fingerprint))
                                          for charge in store.charges)
    if resumable and not again and any(charge.release == name for charge in store.charges):  # another key
        name = f"{name}, made again {unique}"
    try:
        charged = store.charge(name, guarantee, per_key=per_key, key=fingerprint, resumable=resumable)
    except KeyCharged as error:
        raise ValueError(f"--seed {seed} makes the key charged for {error.other} (budget store {path}): a state made "
                         "with it again would publish the same noise twice (give another --seed)." if new else
                         f"{state_path}'s key was charged for {error.other} (budget store {path}): {state_path} is a "
                         "copy of that state; resuming a copy on other data would publish the same noise twice (make "
                         "a new state instead).") from None
    amount = f"{charged.amount:g}{' (every key alike)' * per_key}"
    say(f"budget store: {amount} charged by an earlier run of this release, not again ({path})." if again else
        f"budget store: charged {amount} ({path}).")
    return key if new else None


def _state_key(state_path: str | None, seed: int | None) -> tuple[bool, bytes | None]:
    """Whether the state is new, and its key: a new state's made here (from ``seed`` if given), an existing one's
    read from it (None when it cannot be read: the run refuses it itself); no state, ``(False, None)``."""
    if state_path is None:
        return False, None
    if not Path(state_path).exists():
        return True, os.urandom(32) if seed is None else seed_key(seed)
    try:
        return False, StreamState.read(state_path).key
    except (OSError, StateError):
        return False, None
