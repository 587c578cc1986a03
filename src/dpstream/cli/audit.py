"""``dpstream audit``: the statistical privacy auditor on small default configurations."""

from __future__ import annotations

import click

from dpstream.audit import DEFAULT_ALPHA, MECHANISMS, experiments, format_table, run_audit
from dpstream.cli._app import cli, progress_bar, say

__all__ = ["audit"]


def _names(ctx: click.Context, param: click.Parameter, names: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return tuple(experiments(names))
    except ValueError as reason:
        raise click.BadParameter(str(reason)) from None


@cli.command()
@click.argument("mechanisms", metavar="[MECHANISM]...", nargs=-1, callback=_names)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the auditor's own runs (the audit is an experiment, not a release).")
@click.option("--epsilon", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="The budget every mechanism is configured with: its claim, which the bound is compared to.")
@click.option("--samples", "--runs", type=click.IntRange(min=100), default=None,
              help="Runs per input for every mechanism (default: each mechanism's own).")
@click.option("--thorough", is_flag=True,
              help="Four times each mechanism's own runs: bounds nearer the claims, four times as long.")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=DEFAULT_ALPHA,
              show_default=True, help="Family-wise error over all mechanisms (Bonferroni).")
def audit(mechanisms: tuple[str, ...], seed: int, epsilon: float, samples: int | None, thorough: bool,
          alpha: float) -> None:
    """Audit the privacy claims of every mechanism (or of the MECHANISMs named: experiments, or registered
    mechanisms such as bt, each standing for the experiments that audit it).

    For each mechanism and an adversarial pair of neighbouring inputs it runs the mechanism many
    times on both, bounds the probability of distinguishing events (Clopper-Pearson) and prints an
    empirical lower bound on epsilon next to the claim (and as a fraction of it), and checks that
    no output is impossible under the neighbour.  Below the table, each mechanism's best event in
    words: the event the bound rests on, and the input on which it happens more often.  Exit
    status 1 if any check fails.
    """
    names = list(mechanisms) or list(MECHANISMS)
    with progress_bar(total=len(names), desc="mechanisms", unit="mechanism") as progress:
        results = run_audit(names, seed=seed, samples=samples, alpha=alpha, epsilon=epsilon, thorough=thorough,
                            progress=progress)
    click.echo(format_table(results))
    failed = [result.name for result in results if not result.passed]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(results)} audits failed: {', '.join(failed)}.")
    say(f"all {len(results)} audits passed (family-wise alpha {alpha:g}).")
