"""Option parsers and option help that several ``dpstream`` commands share (click callbacks raise usage errors)."""

from __future__ import annotations

import click

from dpstream._checks import check_epsilon
from dpstream.cli._app import quote

#: Help of every --seed that seeds the noise of a release.
SEED_HELP = "For tests only: anyone who knows the seed can recompute the noise. Never publish a seeded release."

__all__ = ["DEFAULT_DATABASE", "SEED_HELP", "epsilon_option", "epsilons_option", "floats"]

#: The service's database when none is given (``serve``, ``token``): a file in the working directory, created 0600.
DEFAULT_DATABASE = "sqlite:///dpstream.db"


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


def epsilons_option(ctx: click.Context, param: click.Parameter, text: str) -> list[float]:
    """Click callback of an ``--epsilons``-style option: comma-separated budgets."""
    return [epsilon_option(ctx, param, value) for value in floats(text)]
