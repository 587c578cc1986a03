"""``dpstream token create|list|revoke``: the service's scoped tokens, written to its database directly.

The commands open the service's database (``--database``, and ``DPSTREAM_DATABASE_KEY`` when its secrets are
sealed) as the service does, so they need no running service and no admin token: whoever may read and
write the database may issue tokens.  A running service sees a new or revoked token at its next request.
``create`` prints one JSON line (the token, shown this once, and its public facts), which scripts and tests
read with ``json.loads``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from dpstream.cli._app import cli, say
from dpstream.cli._options import DATABASE_KEY, DEFAULT_DATABASE, open_database

__all__ = ["token"]

_DATABASE = click.option("--database", default=DEFAULT_DATABASE, show_default=True, metavar="URL",
                         help="The service's database: sqlite:///FILE or postgresql://USER@HOST:PORT/DB.")
_KEY = DATABASE_KEY


def _tokens(database: str, database_key: str | None, *, existing: bool = True) -> Any:
    """The token store of the database (a one-line error when it cannot be opened; ``existing``: refused when
    there is no database, rather than created, except by ``create``)."""
    from dpstream.service.tokens import TokenStore

    return TokenStore(open_database(database, database_key, existing=existing))


@cli.group()
def token() -> None:
    """Issue, list and revoke the service's scoped tokens (in its database).

    Roles: admin (everything), producer (values and rows to the streams and aggregates named), contributor
    (ToPL reports to one collector, rate-limited: may ship inside an app), reader (what the public may not read).
    """


@token.command("create")
@click.option("--role", required=True, type=click.Choice(["admin", "producer", "contributor", "reader"]))
@click.option("--stream", "streams", multiple=True, metavar="NAME",
              help="A producer's stream (repeatable; '*' for every stream).")
@click.option("--aggregate", "aggregates", multiple=True, metavar="NAME",
              help="A producer's aggregate (repeatable; '*' for every aggregate).")
@click.option("--collector", metavar="NAME", help="A contributor's one collector.")
@click.option("--rate", type=int, default=None, metavar="N",
              help="A contributor's reports per window, counted over every process (default 1000).")
@click.option("--window", default=None, metavar="DURATION", help="The rate's window: 60s, 1m, 1h, 1d (default 1h).")
@click.option("--max-batch", type=int, default=None, metavar="N",
              help="A contributor's reports per batch (default 100, at most the rate).")
@click.option("--note", default=None, help="What the token is for (shown by list).")
@_DATABASE
@_KEY
def create(role: str, streams: tuple[str, ...], aggregates: tuple[str, ...], collector: str | None,
           rate: int | None, window: str | None, max_batch: int | None, note: str | None, database: str,
           database_key: str | None) -> None:
    """Issue a token: one JSON line on stdout, {"token": ..., "id": ..., "role": ..., ...}.

    The token is shown this once; the database keeps its SHA-256 only.
    """
    from dpstream.service.tokens import token_spec

    given = {"role": role, "streams": list(streams) or None, "aggregates": list(aggregates) or None,
             "collector": collector, "rate": rate, "window": window, "max_batch": max_batch, "note": note}
    try:
        spec = token_spec({name: value for name, value in given.items() if value is not None})
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    store = _tokens(database, database_key, existing=False)
    try:
        secret, principal = store.create(spec)
    finally:
        store.storage.close()
    click.echo(json.dumps({"token": secret, **principal.describe()}))
    say(f"token {principal.id} ({principal.scope_text()}): shown this once; the database keeps its hash only.")


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of a table.")
@_DATABASE
@_KEY
def list_tokens(as_json: bool, database: str, database_key: str | None) -> None:
    """List every token issued (revoked ones too): id, role, scope, limits, when created and revoked."""
    store = _tokens(database, database_key)
    try:
        found = [principal.describe() for principal in store.tokens()]
    finally:
        store.storage.close()
    if as_json:
        click.echo(json.dumps({"tokens": found}))
        return
    for facts in found:
        limits = f" {facts['rate']}/{facts['window']} batch<={facts['max_batch']}" if "rate" in facts else ""
        state = f"revoked {facts['revoked']}" if facts["revoked"] else "live"
        click.echo(f"{facts['id']}  {facts['role']:<11} {','.join(facts['scope']) or '-'}{limits}  "
                   f"created {facts['created']}  {state}  {facts['note']}".rstrip())


@token.command("revoke")
@click.argument("token_id", metavar="ID")
@_DATABASE
@_KEY
def revoke(token_id: str, database: str, database_key: str | None) -> None:
    """Revoke the token of this id: refused at once by every process serving the database."""
    store = _tokens(database, database_key)
    try:
        revoked = store.revoke(token_id)
    finally:
        store.storage.close()
    if revoked is None:
        raise click.ClickException(f"no token with id {token_id!r}.")
    say(f"token {token_id} revoked at {revoked.revoked}.")
