"""Post-processing commands: ``postprocess`` (MAP / MLE of a noisy count stream under a public
Markov model) and ``evaluate-postprocess`` (the synthetic experiments of Cao et al., Section 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from dpstream._checks import check_positive_int
from dpstream.cli._app import cli, progress_bar, quote, say, usage_errors
from dpstream.cli._options import epsilon_option, epsilons_option, floats
from dpstream.cli._outputs import output_directory, output_file, prepare_output, write_csv
from dpstream.cli._text import say_above_bar, text_table
from dpstream.io import read_matrix, read_matrix_with_header
from dpstream.postprocess import (
    COUNT_SENSITIVITY,
    FIG3_MATRIX,
    FORMS,
    LIKELIHOODS,
    METHODS,
    PRIORS,
    LaplaceCounts,
    check_transition,
    laplace_scale,
    postprocess,
    round_counts,
    smoothed_transition,
)

#: A MAP answer whose KKT residual exceeds this is reported as not solved.
KKT_WARNING = 1e-6
#: ``--users`` is doubted when the mean ``|sum(noisy row) - n|`` exceeds this many standard
#: deviations of a row sum's noise.
USERS_WARNING_SDS = 10.0
#: Largest magnitude of a noisy count: beyond 2^53 a float no longer holds every whole number, so a
#: cell there is no count of users plus noise, and the methods' sums, squares and exponentials overflow.
MAX_NOISY_COUNT = 2.0**53


def _users_mismatch(noisy: np.ndarray, users: int, epsilon: float, sensitivity: float) -> str | None:
    """A warning when the noisy row sums sit far from ``users``: the sum of ``m`` cells of
    ``Lap(b)`` noise has standard deviation ``sqrt(m) sqrt(2) b``, ``b = sensitivity / epsilon``."""
    sd = np.sqrt(noisy.shape[1]) * np.sqrt(2.0) * laplace_scale(epsilon, sensitivity)
    gap = float(np.mean(np.abs(noisy.sum(axis=1) - users)))
    if gap <= USERS_WARNING_SDS * sd:
        return None
    return (f"warning: the noisy rows sum to {float(noisy.sum(axis=1).mean()):.6g} on average, {gap / sd:.0f} noise "
            f"standard deviations from --users {users}; check --users, --epsilon and --sensitivity.")


def _header(path: str, names: list[str] | None, columns: int) -> list[str] | None:
    """The header row the output repeats: the ``names`` of the header row of the matrix file
    ``path`` (as :func:`~dpstream.io.read_matrix_with_header` reads them), if it has one with
    a name per column.  A header read from stdin is not repeated."""
    if path == "-" or names is None:
        return None
    if len(names) == columns:
        return names
    say(f"warning: the header of {path!r} has {len(names)} names for {columns} columns; it is not copied.")
    return None


def _write_matrix(path: Path | None, matrix: np.ndarray, integer: bool, header: list[str] | None) -> None:
    """Write ``matrix`` as CSV (under ``header``, if any) to ``path``, or stdout when it is None."""
    options: dict[str, Any] = {"delimiter": ",", "fmt": "%d" if integer else "%.10g"}
    if header is not None:
        options.update(header=",".join(header), comments="")
    with output_file(path) as out:
        np.savetxt(out, matrix, **options)


@cli.command("postprocess")
@click.argument("noisy_path", metavar="NOISY.csv", type=click.Path(dir_okay=False))
@click.option("--transition", "transition_path", required=True, type=click.Path(dir_okay=False),
              help="Public transition matrix: CSV, m x m, row = from, column = to, rows sum to 1.")
@click.option("--users", type=int, required=True, help="Public number n of users (every step's total).")
@click.option("--epsilon", type=float, required=True, help="Per-step budget the counts were released with.")
@click.option("--sensitivity", type=float, default=COUNT_SENSITIVITY, show_default=True,
              help="The L1 sensitivity the counts were released with; noise Lap(sensitivity/epsilon) per cell: "
              "2 when neighbours move one user, 1 for add/remove-one-user.")
@click.option("--likelihood", type=click.Choice(LIKELIHOODS), default=LaplaceCounts.likelihood, show_default=True,
              help="The noise law the counts were released with (the mean, kalman and smooth methods use it; "
              "discrete_laplace needs integer counts).")
@click.option("--method", type=click.Choice(METHODS), default="map", show_default=True,
              help="map: with the Markov prior (Cao et al.); mle: without it (Lee et al.); mean: posterior mean "
              "per step; kalman: linear smoother over all steps; smooth: posterior mean per step with the "
              "other steps' evidence.")
@click.option("--prior", type=click.Choice(PRIORS), default="frequency", show_default=True,
              help="Initial distribution P^1: the normalised first noisy counts, or uniform.")
@click.option("--form", type=click.Choice(FORMS), default="exact", show_default=True,
              help="ln r! as log-gamma (exact) or by Stirling's formula (the paper's Eq. 10).")
@click.option("--integer", is_flag=True, help="Round to integers keeping every row sum equal to --users.")
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Where the post-processed counts go (CSV, same shape and header row as NOISY.csv; '-' is stdout).")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Also draw the noisy and the post-processed counts over time to this PNG.")
@click.option("--plot-locations", default=None, callback=lambda ctx, param, text: _columns(text),
              help="Comma-separated column numbers (from 0) the --plot shows (default: the first three).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT (and the --plot file) if it exists.")
def postprocess_command(noisy_path: str, transition_path: str, users: int, epsilon: float, sensitivity: float,
                         likelihood: str, method: str, prior: str, form: str, integer: bool, output_path: str,
                         plot_path: str | None, plot_locations: list[int] | None, force: bool) -> None:
    """Post-process noisy location counts (T rows x m columns, no index column).

    MAP assumes the counts carry Lap(sensitivity/epsilon) noise in every cell.  Uses only the
    released counts and public knowledge (the transition matrix, n, epsilon, the sensitivity),
    so the output keeps the release's privacy guarantee and spends nothing more; so does the
    --plot, which shows only released and post-processed counts.
    """
    if plot_locations is not None and plot_path is None:
        raise click.UsageError("--plot-locations needs --plot.")
    if plot_path is not None and (plot_path == "-" or Path(plot_path).suffix.lower() != ".png"):
        raise click.BadParameter(f"must be a file name ending in .png, got {quote(plot_path)}.", param_hint="'--plot'")
    if plot_path is not None and output_path != "-" and Path(plot_path).resolve() == Path(output_path).resolve():
        raise click.BadParameter("must differ from --output.", param_hint="'--plot'")
    with usage_errors():  # the parameters of the release, checked before anything is read
        laplace_scale(epsilon, sensitivity)
        check_positive_int(users, "users")
    output = prepare_output(output_path, force=force, inputs=[noisy_path, transition_path])
    plot = None if plot_path is None else prepare_output(plot_path, force=force, inputs=[noisy_path, transition_path])
    noisy, names = read_matrix_with_header(noisy_path, "noisy counts")
    _check_magnitude(noisy, noisy_path)
    transition = check_transition(read_matrix(transition_path, "transition matrix"))
    if transition.shape[0] != noisy.shape[1]:
        raise click.ClickException(
            f"the transition matrix is {transition.shape[0]} x {transition.shape[0]} but {noisy_path!r} "
            f"has {noisy.shape[1]} columns (one per location)."
        )
    estimate = postprocess(noisy, transition, users=users, epsilon=epsilon, method=method, prior=prior, form=form,
                           sensitivity=sensitivity, likelihood=likelihood)
    mismatch = _users_mismatch(noisy, users, epsilon, sensitivity)
    if mismatch:
        say(mismatch)
    counts = round_counts(estimate.counts, users) if integer else estimate.counts
    header = _header(noisy_path, names, noisy.shape[1])
    if plot is not None and plot_locations is not None and max(plot_locations) >= noisy.shape[1]:
        raise click.BadParameter(f"column numbers must be below the {noisy.shape[1]} columns of {quote(noisy_path)}, "
                                 f"got {max(plot_locations)} (nothing was written).", param_hint="'--plot-locations'")
    _write_matrix(output, counts, integer, header)
    where = "stdout" if output is None else output
    residual = {"mle": "L1 optimality gap", "map": "KKT residual", "mean": "tilt residual"}.get(method, "residual")
    say(f"{method} ({'no' if method == 'mle' else prior} prior): {noisy.shape[0]} steps x {noisy.shape[1]} locations; "
        f"{residual} {estimate.kkt_residual:.2e}, largest |row sum - n| {estimate.sum_residual:.2e}; wrote {where}")
    if plot is not None:
        from dpstream.evaluation.postprocess import plot_counts

        label = f"{method.upper()} ({prior} prior)" if method == "map" else "MLE"
        partial = plot.with_name(f".{plot.stem}.partial{plot.suffix}")  # the whole picture, or none
        try:
            plot_counts(noisy, counts, partial, locations=plot_locations, names=header,
                        cleaned_label=f"{label}{', rounded' if integer else ''}",
                        title=f"n = {users}, ε = {epsilon:g} per step")
            partial.replace(plot)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        say(f"plot: {plot}")
    if method == "map" and (estimate.unconverged or estimate.kkt_residual > KKT_WARNING):
        say(f"warning: {estimate.unconverged} of {noisy.shape[0]} steps did not converge within the iteration limit "
            f"and the KKT residual is {estimate.kkt_residual:.2e} (accepted: {KKT_WARNING:g}); {where} is not the "
            "exact MAP estimate.")


def _columns(text: str | None) -> list[int] | None:
    """``--plot-locations``: comma-separated column numbers >= 0 (checked against the columns later)."""
    if text is None:
        return None
    values = floats(text)
    bad = [value for value in values if not (value.is_integer() and value >= 0)]
    if bad:
        raise click.BadParameter(f"expected column numbers (whole numbers >= 0), got {bad[0]:g} in {quote(text)}.")
    return [int(value) for value in values]


def _steps_grid(ctx: click.Context, param: click.Parameter, text: str) -> list[int]:
    """``--steps-grid``: comma-separated whole numbers >= 1 (2.5 is an error, not 2)."""
    values = floats(text)
    bad = [value for value in values if not (value.is_integer() and value >= 1)]
    if bad:
        raise click.BadParameter(f"expected whole numbers >= 1, got {bad[0]:g} in {quote(text)}.")
    return [int(value) for value in values]


def _levels(ctx: click.Context, param: click.Parameter, text: str) -> list[float]:
    """``--levels``: comma-separated smoothing levels s of Eq. 11, each finite and >= 0."""
    values = floats(text)
    try:
        for s in values:
            smoothed_transition(FIG3_MATRIX, s)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return values


def _check_magnitude(noisy: np.ndarray, path: str) -> None:
    """Refuse a noisy count beyond :data:`MAX_NOISY_COUNT` in magnitude, naming the first (one line, no warning
    of numpy's arithmetic on it)."""
    bad = np.argwhere(np.abs(noisy) > MAX_NOISY_COUNT)
    if bad.size:
        row, column = bad[0]
        raise click.ClickException(
            f"noisy counts {quote(path)}: row {row + 1}, column {column + 1} is {float(noisy[row, column]):.6g}, "
            "beyond 2^53 (9.0e15) in magnitude: no count of users plus noise is that large, and the arithmetic of "
            "the methods would overflow on it.")


@cli.command("evaluate-postprocess")
@click.option("--study", type=click.Choice(["epsilon", "steps", "correlation", "probability", "all"]),
              default="all", show_default=True, help="Fig. 4(a), Fig. 5, Fig. 6, Section 6.1 / Fig. 3(b), or all.")
@click.option("--epsilons", default="0.02,0.05,0.1,0.2,0.4,0.6,0.8,1.0,1.2,1.4,1.6,1.8,2.0", show_default=True,
              callback=epsilons_option, help="Per-step budgets of the epsilon and probability studies.")
@click.option("--steps-grid", default="100,110,120,130,140,150,160,170,180,190,200,500", show_default=True,
              callback=_steps_grid, help="Values of T of the steps study (whole numbers).")
@click.option("--levels", default="1,0.1,0.01", show_default=True, callback=_levels,
              help="Smoothing levels s of the correlation study.")
@click.option("--correlation-epsilons", default="0.05,1.0", show_default=True, callback=epsilons_option,
              help="Budgets at which the correlation study is run.")
@click.option("--transition", "transition_path", default=None, type=click.Path(dir_okay=False),
              help="Public transition matrix the simulated users move by (CSV, m x m: m locations; "
              "default: the 3-location matrix of Fig. 3).")
@click.option("--users", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=500, show_default=True,
              help="T of the epsilon and correlation studies.")
@click.option("--epsilon", type=float, default=1.0, show_default=True, callback=epsilon_option,
              help="Budget of the steps study.")
@click.option("--rounds", type=click.IntRange(min=1), default=50, show_default=True,
              help="Rounds per point (the paper: 50).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the experiment.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Directory for results.")
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
def evaluate_postprocess(study: str, epsilons: list[float], steps_grid: list[int], levels: list[float],
                         correlation_epsilons: list[float], transition_path: str | None, users: int, steps: int,
                         epsilon: float, rounds: int, seed: int, out_dir: str, force: bool) -> None:
    """Run the synthetic experiments of Section 6 and write CSV, JSON and PNG per study to --out.

    Data: n users start uniformly at the m locations of the transition matrix (--transition, or
    the 3 of Fig. 3) and move by it smoothed with Eq. 11 (s = 0 for the epsilon study as in
    Fig. 4(a), s = 0.01 for the steps study as in Fig. 5); every round releases their counts
    with Lap(2 / epsilon) per cell.
    """
    from dpstream.evaluation.postprocess import STUDIES, plot_study, run_study, study_settings, summarize

    # Every option was checked by its type or callback while the command line was parsed, and
    # the matrix is read and checked here, so a mistake stops the command before a study runs
    # or a file is written.
    if transition_path is None:
        transition, source = FIG3_MATRIX, "Fig. 3"
    else:
        transition, source = check_transition(read_matrix(transition_path, "transition matrix")), transition_path
    locations = transition.shape[0]
    chosen = list(STUDIES) if study == "all" else [study]
    paths = {name: prepare_output(out_dir, force=force, inputs=[transition_path], files={
        "rounds": f"postprocess-{name}-rounds.csv", "summary": f"postprocess-{name}.csv",
        "json": f"postprocess-{name}.json", "plot": f"postprocess-{name}.png"}) for name in chosen}
    default_s = {"epsilon": 0.0, "steps": 0.01, "probability": 0.0}
    plan = {name: study_settings(name, epsilons=correlation_epsilons if name == "correlation" else epsilons,
                                 steps=steps_grid, levels=levels, users=users,
                                 default_steps=steps, default_epsilon=epsilon, default_s=default_s)
            for name in chosen}
    total = sum(len(settings) for settings in plan.values()) * rounds
    where = f"{locations} locations of {'Fig. 3' if transition_path is None else Path(transition_path).name}"
    titles = {"epsilon": f"MSE vs ε (n={users}, T={steps}, s=0; {where})",
              "steps": f"MSE vs T (n={users}, ε={epsilon:g}, s=0.01; {where})",
              "correlation": f"MSE vs s (n={users}, T={steps}; {where})",
              "probability": f"one user, T={steps}, s=0; {where}"}
    tables = []
    every = {(name, kind): path for name, group in paths.items() for kind, path in group.items()}
    with output_directory(every) as staged, \
            progress_bar(total=total, desc="evaluate-postprocess", unit="round") as progress:
        for name, settings in plan.items():  # the files of every study, or none
            records = run_study(settings, rounds, seed, progress=progress, transition=transition)
            rows = summarize(records)
            write_csv(staged[name, "rounds"], records)
            write_csv(staged[name, "summary"], rows)
            staged[name, "json"].write_text(json.dumps(
                {"study": name, "users": users, "rounds": rounds, "seed": seed, "transition": source,
                 "transition_matrix": transition.tolist(), "summary": rows}, indent=2))
            plot_study(rows, staged[name, "plot"], title=titles[name])
            tables.append(_table(rows))
    click.echo("\n\n".join(tables))
    say_above_bar("wrote " + ", ".join(str(path) for group in paths.values() for path in group.values()))


def _table(rows: list[dict[str, Any]]) -> str:
    """Mean MSE (impossible share for the probability study): one line per method, one column per point."""
    study = rows[0]["study"]
    metric = "impossible_share_mean" if study == "probability" else "mse_mean"
    keys = list(dict.fromkeys((row["epsilon"], row["x"]) for row in rows))
    cell = {(row["method"], row["epsilon"], row["x"]): row[metric] for row in rows}
    header = {"epsilon": "eps", "steps": "T", "correlation": "s", "probability": "eps"}[study]
    label = (lambda e, x: f"eps={e:g},s={x:g}") if study == "correlation" else (lambda e, x: f"{header}={x:g}")
    methods = list(dict.fromkeys(row["method"] for row in rows))
    return text_table(["method", *(label(e, x) for e, x in keys)],
                      [[method, *(f"{cell[(method, e, x)]:.4g}" for e, x in keys)] for method in methods],
                      title=f"{study}: {metric}")
