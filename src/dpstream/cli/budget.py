"""``dpstream budget``: what a durable release has spent, from its state file's ledger; or a budget store's
spending (:mod:`dpstream.durable.budget_store`), which ``--new-rho`` / ``--new-epsilon`` create; or, with
``--database``, a budget of the service's database (:mod:`dpstream.service.budgets`)."""

from __future__ import annotations

import os

import click

from dpstream.cli._app import cli, usage_errors
from dpstream.cli._columns import TABLE_KEYS, key_table, write_summary
from dpstream.cli._options import DATABASE_KEY, open_database
from dpstream.durable import StateDamagedError, StreamState, format_ledger
from dpstream.durable.budget_store import BUDGET_FORMAT, BudgetStore, check_total, report
from dpstream.durable.release import restore
from dpstream.release.by_key import BY_KEY, ByKey
from dpstream.release.registry import REGISTRY

__all__ = ["budget"]


def _total_option(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """``--new-rho`` / ``--new-epsilon``: a store's total, refused as a usage error naming the option."""
    try:
        return None if value is None else check_total(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@cli.command()
@click.argument("state_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), default=None,
              help="For a state with keys: write theta, s (or the structure), the hold-out and epsilon of every key "
                   "as CSV 'key,values,released,threshold,smoothed_levels,hold,epsilon'.")
@click.option("--new-rho", type=float, default=None, callback=_total_option,
              help="Create FILE as a budget store of this total rho (zCDP; pure releases count epsilon^2/2), which "
                   "releases charge with --budget-store FILE.")
@click.option("--new-epsilon", type=float, default=None, callback=_total_option,
              help="Create FILE as a pure-DP budget store of this total.")
@click.option("--database", default=None, metavar="URL",
              help="Show the budget named FILE of the service's database (sqlite:///FILE or postgresql://...): what "
                   "each stream, collector and aggregate created against it was charged, spent and left.")
@DATABASE_KEY
def budget(state_file: str, summary_path: str | None, new_rho: float | None, new_epsilon: float | None,
           database: str | None, database_key: str | None) -> None:
    """Print the budget ledger of the state FILE of a release, and its totals.

    Shows the public parts only (parameters, progress, ledger), never the key or the mechanism
    state; takes no lock, so it works while the release runs.  For a release with keys, it also
    shows what the release tells about each key (values, released, theta, s, hold-out, epsilon:
    public or published numbers only), as a table for at most 20 keys and with --summary FILE as CSV.
    For a budget store FILE it shows its total, what each release charged and what is left.
    """
    if database is not None:
        if new_rho is not None or new_epsilon is not None or summary_path is not None:
            raise click.UsageError("--database shows a budget of the service's database (an admin creates one: POST "
                                   "/budgets); --new-rho, --new-epsilon and --summary do not apply.")
        click.echo(_database_budget(state_file, database, database_key))
        return
    creating = new_rho is not None or new_epsilon is not None
    if summary_path is not None and (creating or BudgetStore.is_store(state_file)):  # never silently ignored
        raise click.UsageError("--summary applies to the state of a release with --key-column, not to a budget store.")
    if new_rho is not None and new_epsilon is not None:
        raise click.UsageError(f"--new-rho and --new-epsilon do not go together: a store counts rho (zCDP) or epsilon "
                               f"(pure DP), got --new-rho {new_rho!r} and --new-epsilon {new_epsilon!r}.")
    if creating:
        with usage_errors():
            click.echo(BudgetStore.create(state_file, rho=new_rho, epsilon=new_epsilon).report())
        return
    if BudgetStore.is_store(state_file):  # what every release charged, spent and left
        click.echo(BudgetStore.open(state_file).report())
        return
    if not os.path.lexists(state_file):
        raise click.ClickException(f"there is no state file or budget store {state_file}.")
    try:
        state = StreamState.read(state_file)
    except StateDamagedError:
        with open(state_file, "rb") as handle:
            if BUDGET_FORMAT.encode() not in handle.read(100):
                raise
        BudgetStore.open(state_file)  # a damaged budget store: its own one-line error
        raise
    entry = REGISTRY.get(str(state.params.get("method")))
    ledger = format_ledger(state_file, counts=entry is None or entry.public_counts)
    snapshot = state.mechanism
    keyed = isinstance(snapshot, dict) and snapshot.get("mechanism") == BY_KEY
    if summary_path is not None and not keyed:
        raise click.UsageError("--summary applies to the state of a release with --key-column.")
    click.echo(ledger)
    if not keyed:
        return
    keys = len(snapshot["keys"])
    streams = restore(snapshot, state.key, ByKey(build=lambda key: None, max_keys=max(keys, 1)))
    reports = streams.report()
    click.echo("")
    if keys <= TABLE_KEYS:
        click.echo("\n".join(key_table(reports)))
    elif summary_path is None:
        click.echo(f"{keys:,} keys, more than {TABLE_KEYS} for a table here: --summary FILE writes each key's row.")
    if summary_path is not None:
        write_summary(summary_path, reports)
        click.echo(f"per-key summary: {keys:,} row{'s' * (keys != 1)} written to {summary_path}.")


def _database_budget(name: str, database: str, database_key: str | None) -> str:
    """The text of the service's budget ``name`` (a one-line error when there is none)."""
    from dpstream.service.budgets import NoBudget, ServiceBudgets

    storage = open_database(database, database_key, existing=True)
    try:
        facts = ServiceBudgets(storage).describe(name)
    except NoBudget as error:
        raise click.ClickException(str(error)) from None
    finally:
        storage.close()
    unit = "rho" if facts["accounting"] == "zcdp" else "epsilon"
    return report(f"budget {name!r} of {storage.describe()}", accounting=facts["accounting"],
                  total=facts["total"][unit], delta=facts["total"].get("delta", 0.0), subject=facts["subject"],
                  charges=[(c["charged"], c[unit], c["release"]) for c in facts["charges"]])
