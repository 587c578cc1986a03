"""``dpstream budget``: what a durable release has spent, from its state file's ledger."""

from __future__ import annotations

import click

from dpstream.cli._app import cli
from dpstream.durable import format_ledger

__all__ = ["budget"]


@cli.command()
@click.argument("state_file", metavar="FILE", type=click.Path(dir_okay=False))
def budget(state_file: str) -> None:
    """Print the budget ledger of the state FILE of a release, and its totals.

    Shows the public parts only (parameters, progress, ledger), never the key or the mechanism
    state; takes no lock, so it works while the release runs.
    """
    click.echo(format_ledger(state_file))
