"""``dpstream release``: continual release of one stream.

Its ``--method`` choices are the registry of mechanisms (:mod:`dpstream.release.registry`): each
entry says which class it builds and which of the options below it reads, mapped to which
constructor arguments; the flags of ``release`` map to constructor arguments there and nowhere else.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any, TextIO

import click
import numpy as np

from dpstream.cli import _durable as durable
from dpstream.cli._app import (
    announce,
    cli,
    report_reading,
    report_unprotected_option,
    say,
    stated_privacy,
    usage_errors,
    warn_if_seeded,
)
from dpstream.cli._columns import (
    STANDARD_ERROR,
    ColumnsWriter,
    check_columns,
    per_key_privacy,
    release_columns,
    released_line,
    report_keys,
    standard_errors_of,
    standard_errors_option,
    summary,
)
from dpstream.cli._options import SEED_HELP, budget_store_option, charge_store, check_new_target, delta_option
from dpstream.cli._outputs import check_finite, is_stream, output_file, prepare_output
from dpstream.cli._revised import check_revised, write_revised
from dpstream.cli._spark import RELEASE_ENGINES
from dpstream.cli._spark import spark_conf_option as _spark_conf
from dpstream.cli._spark_release import check_engine, release_on_spark
from dpstream.cli._spark_streaming import pop_streaming, release_streaming, streaming_options
from dpstream.io import MISSING_POLICIES, StreamReader
from dpstream.io.vectorized import csv_rows, value_lines
from dpstream.release.by_key import DEFAULT_MAX_KEYS
from dpstream.release.pak import PAK_MULTIPLIER, PAK_THRESHOLD_FRACTION
from dpstream.release.registry import REGISTRY, Mechanism, release_methods, specific_options
from dpstream.release.tops import THRESHOLD_METHODS
from dpstream.release.tops_defaults import PAPER_HOLD, PAPER_MAX_RANGE, PAPER_THRESHOLD_STEP, ReleaseWarning
from dpstream.release.wevent import horizon
from dpstream.smoothers import SMOOTHERS
from dpstream.spark.session import DEFAULT_MASTER
from dpstream.thresholds.select import SELECTIONS

__all__ = ["RELEASE_METHODS"]

#: Batch size for file input; stdin is released value by value.
_CHUNK = 65536


#: ``release``'s table of ``--method`` choices: the registry of mechanisms (deprecated name, kept one release).
RELEASE_METHODS = REGISTRY

#: The hidden, deprecated spelling of an option -> the option it stands for.
_DEPRECATED = {"noise_alias": "noise"}


class _Methods(click.Choice):
    """``--method``: the registered mechanisms, read when the command runs (a mechanism registered later too)."""

    def __init__(self) -> None:
        super().__init__([])

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        return tuple(release_methods())

    @choices.setter
    def choices(self, value: object) -> None:
        pass


@cli.command()
@click.argument("input_path", metavar="INPUT", type=click.Path(allow_dash=True))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(allow_dash=True),
              help="Where the released values go, one per line ('-' is stdout).")
@click.option("--method", type=_Methods(), default="tops", show_default=True,
              help="Release mechanism.")
@click.option("--epsilon", type=float, required=True, help="Privacy budget of the release.")
@click.option("--upper-bound", type=float, required=True, help="Public bound B: values lie in [0, B].")
@click.option("--hold", type=int, default=None,
              help="Leading values used to choose the threshold; not released  [default: 65536; tops with "
                   "--expected-length: fitted].")
@click.option("--max-range", type=int, default=None,
              help="Largest query range r; a fresh hierarchy every r values  [default: 1048576; tops with "
                   "--expected-length: fitted].")
@click.option("--expected-length", type=int, default=None,
              help="tops: how many values the stream (with --key-column, each key's stream) is expected to hold, a "
                   "public number (never read from the data): --hold, --max-range, --threshold-step and s not given "
                   "are fitted to it (see docs/keys.md, 'Short streams').")
@click.option("--fanout", type=int, default=16, show_default=True, help="Fan-out b of the hierarchy.")
@click.option("--smoother", type=click.Choice(list(SMOOTHERS)), default=None,
              help="tops: the smoother (default recent; with --period, moving_average over 7 periods).")
@click.option("--window", type=int, default=None, help="Window of the moving_average smoother.")
@click.option("--alpha", type=float, default=None, help="Weight of the exponential smoother.")
@click.option("--threshold", type=float, default=None,
              help="tops: a public threshold theta (values above it are clipped to it): no hold-out, nothing spent "
                   "on choosing it; the stream is released from its first value.")
@click.option("--w-event", "w_event", type=int, default=None,
              help="tops (with --threshold) and bt: protect every window of N consecutive values of the stream (of "
                   "each key's with --key-column) at --epsilon (w-event) instead of one value; see docs/keys.md.")
@click.option("--period-bound", type=float, default=None,
              help="tops, with --w-event and --period: bound each period's total at C (values add in order, the "
                   "one crossing C is cut, later ones count 0), so a window moves each level by 2C, not N x theta.")
@click.option("--threshold-epsilon", type=float, default=None,
              help="Budget of the threshold optimizer (default: --epsilon).")
@click.option("--threshold-method", type=click.Choice(list(THRESHOLD_METHODS)), default="model", show_default=True,
              help="tops: model (theta, s and the prior chosen for the error model) or nm-e (the paper's).")
@click.option("--query-length", type=int, default=None,
              help="tops, model: the window length to serve best (e.g. 1440 for daily sums of minutes).")
@click.option("--smoothed-levels", type=int, default=None,
              help="tops: force s, the lowest levels left to the smoother (default: chosen).")
@click.option("--period", type=int, default=None,
              help="tops: measure one leaf per period of this many values, counted from the first value (e.g. "
                   "1440: days of minutes); windows of whole periods err by their leaves' noise only.")
@click.option("--selection", type=click.Choice(list(SELECTIONS)), default=None,
              help="tops, model: how the threshold is selected privately  [default: permute-and-flip].")
@click.option("--profile-bins", type=int, default=None,
              help="tops, model, with --period: bins of a private profile of the period shaping the predictions "
                   "inside it (default 0: flat predictions).")
@click.option("--window-leaves/--no-window-leaves", default=None,
              help="tops, model, with --query-length: also score leaves of a fraction of the window (default) or "
                   "blocks of b^s values only.")
@click.option("--c", "c", type=float, default=None,
              help="tops, nm-e: the constant c of the paper's Eq. 6 choosing s  [default: 60].")
@click.option("--column", default=None, help="Column to read when INPUT has several.")
@click.option("--time-column", default=None,
              help="Column of each value's time: the output becomes CSV 'time,value' (the time text as written).")
@click.option("--key-column", default=None,
              help="Column of keys: one independent stream per key (own hold-out, threshold and budget; the "
                   "guarantee is per key), written as CSV 'key,position,value' ('key,position,time,value').")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), default=None,
              help="With --key-column: write theta, s (or the structure), the hold-out and epsilon of every key as "
                   "CSV 'key,values,released,threshold,smoothed_levels,hold,epsilon' (with at most 20 keys they are "
                   "also a table on stderr).")
@click.option("--revised", "revised_path", type=click.Path(dir_okay=False), default=None,
              help="tops: also write the revised values to this file when the release ends: each closed period's "
                   "(leaf's) measured total spread by the period's public shape (post-processing; rewritten whole by "
                   "every --state run), in the output's layout with the last column named 'revised'.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="tops: a PNG of the first release (faint) and the revised values over the last 2,000 positions "
                   "(summed over keys with --key-column).")
@click.option("--max-keys", type=int, default=DEFAULT_MAX_KEYS, show_default=True,
              help="With --key-column: stop at a key beyond this many (each key holds its own mechanism in memory).")
@click.option("--missing", type=click.Choice(list(MISSING_POLICIES)), default="error", show_default=True,
              help="Empty fields, NA, NaN, null: error; zero (positions kept); skip (shifts later positions).")
@click.option("--threshold-step", type=float, default=None,
              help="Spacing of the candidate thresholds step, 2 step, ..., B  [default: 1; tops with "
                   "--expected-length: B/1024].")
@click.option("--delta", type=float, default=None, callback=delta_option,
              help="pak: delta of the threshold (default 1/n^2 with n = hold + max-range); bt-zcdp, sqrt-zcdp, "
                   "banded-zcdp, tops-zcdp: the delta of its (epsilon, delta) target, at most 1e-3, required (it "
                   "spends the rho that affords, docs/zcdp.md).")
@click.option("--threshold-fraction", type=float, default=PAK_THRESHOLD_FRACTION, show_default=True,
              help="pak: eps1/eps, the share of the budget for the threshold (the rest for the held-out sum).")
@click.option("--multiplier", type=float, default=PAK_MULTIPLIER, show_default=True,
              help="pak: the multiplier r of PAK's Eq. 15.")
@click.option("--threshold-noise", "noise", type=click.Choice(["laplace", "gaussian"]), default="laplace",
              show_default=True,
              help="pak: noise of the smooth-sensitivity threshold (gaussian is float-only and refused here).")
@click.option("--noise", "noise_alias", type=click.Choice(["laplace", "gaussian"]), default=None, hidden=True,
              help="Deprecated spelling of --threshold-noise.")
@click.option("--granularity", type=float, default=None,
              help="tops, pak, bt: the public grid step g of the exact noise (default: the largest power of two "
                   "<= B / 2^20); values are rounded to multiples of g, thresholds rounded up.")
@click.option("--seed", type=int, default=None, help=SEED_HELP)
@click.option("--clip", is_flag=True, help="Clip values outside [0, B] instead of failing (recommended: "
              "failing stops the output at the bad value, which tells a reader where it was).")
@report_unprotected_option
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), default=None,
              help="A SECRET state file: the first run creates it, the same command run again continues the "
                   "release after an interruption without re-spending the budget (-o FILE).")
@budget_store_option
@standard_errors_option
@click.option("--engine", type=click.Choice(RELEASE_ENGINES), default="local", show_default=True,
              help="With --key-column: local (this process) or spark (PySpark, pip install 'dpstream[spark]', Java "
                   "17+; INPUT a Parquet or comma-separated CSV file): the same output for the same --seed; or "
                   "spark-streaming (INPUT a directory that files are put in, -o a directory of batch files, with "
                   "--time-column, --spark-checkpoint and --secret-file; see docs/streaming.md).")
@click.option("--spark-master", default=None,
              help=f"With --engine spark: the Spark master URL  [default: {DEFAULT_MASTER}, or spark-submit's "
                   "--master].")
@click.option("--spark-conf", multiple=True, callback=_spark_conf, metavar="KEY=VALUE",
              help="With --engine spark: a Spark configuration property (repeatable), e.g. spark.driver.memory=8g.")
@streaming_options
@click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="With --state: the least time between two commits of the state (at most one per batch read); "
                   "values are published at a commit, so on stdin also the most a value waits (plus a save).")
def release(input_path: str, output_path: str, method: str, column: str | None, time_column: str | None,
            key_column: str | None, max_keys: int, missing: str, seed: int | None, hold: int, force: bool,
            state_path: str | None, checkpoint_seconds: float, engine: str, spark_master: str | None,
            spark_conf: dict[str, str], **options: Any) -> None:
    """Release the stream in INPUT under event-level DP; ToPS (epsilon-DP) by default.

    INPUT is CSV or text with one value per line (optional header, .gz allowed, '-' is stdin).  From stdin, each
    value is released as soon as it arrives.  pak and pak-uncapped are (epsilon, delta)-DP, topl is epsilon-LDP per
    value; the guarantee, with the noise sampler and its source of randomness, is printed on stderr.  tops, pak and
    bt measure on a public grid with exact discrete Laplace noise from the OS CSPRNG (or --seed, for tests).

    The output is one value per line, no header; with --time-column it is CSV 'time,value', and
    with --key-column one stream per key as CSV 'key,position,value' (with a time column
    'key,position,time,value'), positions 0-based in each key's stream, rows in input order.

    With --state FILE (a secret file) the release can be interrupted and
    continued: the same command run again appends to OUTPUT from where the last checkpoint left
    it, never re-drawing noise for a published position (see the README, "Long-running
    releases").  From stdin, the producer continues from the consumed count the state records.
    """
    chosen, budget_path = REGISTRY[method], options.pop("budget_path")  # charged after every check, before publishing
    context = click.get_current_context()
    hold = _paper_defaults(options, _check_options(context, chosen, options, hold))
    if key_column is not None and not chosen.per_key:
        raise click.UsageError(f"--key-column applies to --method {_names(lambda entry: entry.per_key)}, not {method}.")
    check_columns(context, column=column, time_column=time_column, key_column=key_column, max_keys=max_keys)
    check_engine(context, engine=engine, input_path=input_path, key_column=key_column, time_column=time_column,
                 state_path=state_path, missing=missing)
    _tell(context, chosen, options, hold=hold, seed=seed, keyed=key_column is not None, durable=state_path is not None)
    if state_path is not None:
        _release_durable(state_path, input_path=input_path, output_path=output_path, method=method, column=column,
                         time_column=time_column, key_column=key_column, max_keys=max_keys, missing=missing,
                         seed=seed, hold=hold, force=force, options=options, checkpoint_seconds=checkpoint_seconds,
                         budget_path=budget_path)
        return
    with usage_errors():  # a parameter the mechanism refuses (or that would overflow) is a usage error
        releaser = _said(lambda: chosen.build({**options, "hold": hold}, seed=seed))
    if releaser.threshold is not None and key_column is None:  # methods without a hold-out know their bound
        announce(releaser, chosen.describe)
    warn_if_seeded(seed)
    if engine == "spark-streaming":  # INPUT and -o are directories: a query over the files put in INPUT
        return release_streaming(context, build=_quiet(lambda key: chosen.build({**options, "hold": hold}, key=key)))
    target = prepare_output(output_path, force=force, inputs=[input_path])
    warn_if_released_before(target)
    _charge(budget_path, lambda: releaser, state_path=None, output_path=output_path, keyed=key_column is not None)
    build = _quiet(lambda bits: chosen.build({**options, "hold": hold}, seed=bits))  # every key's: said once above
    if engine == "spark":
        release_on_spark(input_path, target, build=build,
                         key_column=key_column, column=column, seed=seed, upper_bound=options["upper_bound"],
                         clip=options["clip"], hold=releaser.hold, chunk=_CHUNK, master=spark_master, conf=spark_conf)
        return
    reader = StreamReader(input_path, column=column, time_column=time_column, key_column=key_column,
                          missing=missing)  # text, .gz, stdin or Parquet
    name = "stdin" if input_path == "-" else input_path
    written = "the output stops before it" if is_stream(target) else "nothing was written"
    if time_column is not None or key_column is not None:
        write_revised(_say_horizon(release_columns(
            reader, target, releaser, build=build, announce=lambda stream: announce(stream, chosen.describe),
            seed=seed, max_keys=max_keys, time=time_column is not None, keyed=key_column is not None, written=written,
            upper_bound=options["upper_bound"], clip=options["clip"], chunk=_CHUNK), options))
        return
    writer = _Writer(releaser, lambda stream: announce(stream, chosen.describe), upper_bound=options["upper_bound"],
                     clip=options["clip"], written=written)
    try:
        with output_file(target) as sink:  # a failed release leaves no file and destroys none
            if input_path == "-":
                released = writer.live(reader.values(), sink)
            else:
                released = writer.batches(_values(reader), sink)
            if releaser.position == 0:
                raise click.ClickException(f"{name} holds no values.")
            if releaser.threshold is None:
                raise click.ClickException(
                    f"{name} ended after {releaser.position:,} values, before the hold-out of {releaser.hold:,} "
                    "was complete: nothing was released (lower --hold or give a longer stream).")
    finally:
        reader.close()
    report_reading(reader, clipped=writer.clipped if options["clip"] else None, upper_bound=options["upper_bound"])
    say(released_line(released, releaser.hold))
    write_revised(_say_horizon(releaser, options))


def _charge(budget_path: str | None, probe: Callable[[], Any], *, state_path: str | None, output_path: str,
            keyed: bool, seed: int | None = None) -> bytes | None:
    """``--budget-store``: charge the store the release's stated guarantee (each key's, with keys: every key the same
    public amount), that of ``probe()`` (a mechanism built from the parameters alone), before any value or
    data-chosen threshold is published; a refusal is a usage error.  Returns the key of a new state (its charge
    records its fingerprint: :func:`~dpstream.cli._options.charge_store`), else None."""
    if budget_path is None:
        return None
    with usage_errors():
        return charge_store(budget_path, "release", stated_privacy(probe()), state_path=state_path,
                            output_path=output_path, per_key=keyed, seed=seed)


def _check_options(context: click.Context, chosen: Mechanism, options: dict[str, Any], hold: int) -> int:
    """Refuse an option of another mechanism (rather than ignore it); read a deprecated spelling as its option.

    Returns the hold-out: ``hold``, or 0 with --threshold (a public threshold refuses the options of a chosen one).
    """
    given = {name for name in (*specific_options(), *_DEPRECATED)
             if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)}
    for name in sorted(given):
        if _DEPRECATED.get(name, name) not in chosen.options.keys() | chosen.optional.keys():
            raise click.UsageError(f"{_flag(context, name)} does not apply to --method {chosen.name}.")
    options.pop("summary_path")  # an output of the command (its report), not a parameter of the mechanism
    pop_streaming(options)  # where and how the streaming engine runs, not parameters of the mechanism
    if context.meta.get("standard_errors"):  # an output too: the column of each value's standard error
        if not hasattr(chosen.cls, "standard_errors"):
            raise click.UsageError(f"--standard-errors applies to --method "
                                   f"{_names(lambda entry: hasattr(entry.cls, 'standard_errors'))} (whose noise has a "
                                   f"known standard error), not {chosen.name}.")
        if context.params["engine"] != "local":
            raise click.UsageError("--standard-errors applies with --engine local only.")
        if options.get("smoother") == "median":
            raise click.UsageError("--standard-errors does not apply to --smoother median: its predictions are not "
                                   "linear in the noise, so their noise has no exact standard error.")
    if chosen.name.endswith("-zcdp"):  # its --delta is that of an (epsilon, delta) target: at most 1e-3 when new
        check_new_target(context, options["delta"], context.params.get("state_path"))
    check_revised(context, options)  # --revised and --plot: outputs too
    for alias, name in _DEPRECATED.items():
        value = options.pop(alias)
        if alias in given:
            say(f"warning: {_flag(context, alias)} is deprecated; use {_flag(context, name)}.")
            options[name] = value
    return hold if options.get("threshold") is None else _public_threshold(context)


def _paper_defaults(options: dict[str, Any], hold: int | None) -> int | None:
    """The hold-out; without --expected-length, the paper's --hold, --max-range and --threshold-step where not given
    (what they always were); with it, None where not given: the mechanism fits them."""
    if options.get("expected_length") is not None:
        return hold
    for name, paper in (("max_range", PAPER_MAX_RANGE), ("threshold_step", PAPER_THRESHOLD_STEP)):
        options[name] = paper if options[name] is None else options[name]
    return PAPER_HOLD if hold is None else hold


def _tell(context: click.Context, chosen: Mechanism, options: dict[str, Any], *, hold: int | None, seed: int | None,
          keyed: bool, durable: bool) -> None:
    """What the parameters alone tell, before anything is read: a keyed tops release at the default hold-out
    releases nothing for keys with fewer values (said on the local engine: what to set); with --state, whose
    mechanism is built later, the mechanism's warning and what was fitted (a refused parameter is refused there)."""
    if durable:
        with suppress(ValueError, TypeError):
            _said(lambda: chosen.build({**options, "hold": hold}, seed=seed))
    if keyed and "expected_length" in chosen.optional and hold == PAPER_HOLD and context.params["engine"] == "local" \
            and context.get_parameter_source("hold") is click.core.ParameterSource.DEFAULT:
        say(f"warning: every key holds out its first {PAPER_HOLD:,} values (the default --hold) and releases nothing "
            "if it has fewer: give --expected-length N (the values of one key) to fit the hold-out, the tree, the "
            "threshold grid and s to short streams, or --hold, or a public --threshold.")


def _said(build: Callable[[], Any]) -> Any:
    """``build()``, a :class:`~dpstream.release.tops_defaults.ReleaseWarning` it issues said as a warning line, and
    what was fitted to --expected-length said."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ReleaseWarning)
        built = build()
    for warning in caught:
        if issubclass(warning.category, ReleaseWarning):
            say(f"warning: {warning.message}.")
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    _say_fitted(built)
    return built


def _quiet(build: Callable[..., Any]) -> Callable[..., Any]:
    """``build`` without its :class:`~dpstream.release.tops_defaults.ReleaseWarning`: every key's mechanism (and a
    restored one) has the parameters whose warning was said once already."""
    def built(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ReleaseWarning)
            return build(*args, **kwargs)
    return built


def _say_fitted(releaser: Any) -> None:
    """With --expected-length, say what was fitted to it (public: a function of public parameters)."""
    fitted = getattr(getattr(releaser, "fitted", None), "expected_length", None)
    if fitted is not None:
        levels = releaser.fitted.max_smoothed_levels
        say(f"fitted to --expected-length {fitted:,} (given values kept): hold-out {releaser.hold:,}, max-range "
            f"{releaser.max_range:,}, threshold step {releaser.threshold_step:g}"
            + ("" if releaser.period is not None else f", smoothed levels s <= {levels}") + ".")


def _public_threshold(context: click.Context) -> int:
    """With --threshold: refuse the options of a threshold chosen from a hold-out; the hold-out is 0."""
    for name in ("hold", "threshold_epsilon", "threshold_method"):
        if context.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT):
            raise click.UsageError(f"{_flag(context, name)} does not apply with --threshold (a public threshold is "
                                   "not chosen from a hold-out).")
    return 0


def _names(applies: Callable[[Mechanism], bool]) -> str:
    """The registered methods an option applies to, for a message."""
    return ", ".join(name for name, entry in release_methods().items() if applies(entry))


def _flag(context: click.Context, name: str) -> str:
    """The command-line spelling of the option stored as ``name``."""
    return next(param.opts[0] for param in context.command.params if param.name == name)


def warn_if_released_before(target: Any) -> None:
    """Without --state, replacing an existing output releases the stream afresh: say that it spends the budget again."""
    if target is not None and not is_stream(target) and target.exists():
        say(f"warning: {target} exists: releasing its stream again spends the privacy budget again (publishing both "
            "releases costs twice the epsilon); use --state FILE to continue a release instead.")


def _release_durable(state_path: str, *, input_path: str, output_path: str, method: str, column: str | None,
                     time_column: str | None, key_column: str | None, max_keys: int, missing: str, seed: int | None,
                     hold: int, force: bool, options: dict[str, Any], checkpoint_seconds: float,
                     budget_path: str | None) -> None:
    """``release --state FILE`` (see :mod:`dpstream.cli._durable`): create or continue the stream, checkpointing."""
    chosen = REGISTRY[method]
    if not chosen.durable:
        raise click.UsageError(f"--state applies to --method {_names(lambda entry: entry.durable)}, not {method}.")
    new_key = _charge(budget_path, lambda: _quiet(chosen.build)({**options, "hold": hold}, seed=0),
                      state_path=state_path, output_path=output_path, keyed=key_column is not None,
                      seed=seed)  # before the state is made: a refusal leaves none
    specific = specific_options()
    applies = {name: value for name, value in options.items()
               if name not in specific or name in chosen.options or (name in chosen.optional and value is not None)}
    params = {"method": method, **applies, "hold": hold if "hold" in chosen.options else None, "seed": seed,
              "column": column, "missing": missing}
    # the columns change the output's format; they are recorded when given (states without them stay valid)
    params.update({name: value for name, value in (("time_column", time_column), ("key_column", key_column))
                   if value is not None})
    if click.get_current_context().meta.get("standard_errors"):  # a column of the output, recorded when given
        params["standard_errors"] = True
    keyed, columns = key_column is not None, time_column is not None or key_column is not None
    reader = StreamReader(input_path, column=column, time_column=time_column, key_column=key_column,
                          missing=missing)  # a missing input: no state is made
    try:
        run = durable.start(state_path, method=method, params=params, seed=seed, input_path=input_path,
                            output_path=output_path, force=force, checkpoint_seconds=checkpoint_seconds,
                            build=_quiet(lambda key: chosen.build({**options, "hold": hold}, key=key)),
                            max_keys=max_keys if keyed else None, key=new_key)
    except BaseException:
        reader.close()
        raise
    try:
        releaser = run.releaser
        if not keyed and releaser.threshold is not None:  # committed by an earlier run: said again
            announce(releaser, chosen.describe)

        def later(stream: Any) -> None:  # a threshold chosen in this run is said once the state covers it
            run.later(lambda: announce(stream, chosen.describe))
        warn_if_seeded(seed)
        written = "the output keeps what was released before it"
        if columns:
            def tell(stream: Any) -> None:
                lines = per_key_privacy(stream, seed=seed, durable=True)
                run.later(lambda: [say(line) for line in lines])

            writer: Any = ColumnsWriter(releaser, time=time_column is not None, upper_bound=options["upper_bound"],
                                        announce=tell if keyed else later, clip=options["clip"], written=written)
            writer.announced = not keyed and releaser.threshold is not None
            writer.header = run.state.progress.output_bytes == 0  # a resumed output has its header already
        else:
            writer = _Writer(releaser, later, upper_bound=options["upper_bound"], clip=options["clip"],
                             written=written)
            writer.header = run.state.progress.output_bytes == 0
        writer.after = run.checkpoint
        try:
            with durable.guarded(run), run.output() as sink:
                if columns and input_path == "-":
                    writer.live(run.feed_live(reader.records()), sink)
                elif columns:
                    writer.batches(run.feed_batches(reader.batches(_CHUNK)), sink)
                elif input_path == "-":
                    writer.live(run.feed_live(reader.values()), sink)
                else:
                    writer.batches(run.feed_chunks(_values(reader)), sink)
                message = run.finish(sink)
        finally:
            reader.close()
        report_reading(reader, clipped=writer.clipped if options["clip"] else None, upper_bound=options["upper_bound"])
        if keyed:
            report_keys(releaser, line=summary(releaser, hold=_shown_hold(chosen, options, hold)))
        say(message)
        write_revised(_say_horizon(releaser, options))
    finally:
        run.close()


def _say_horizon(releaser: Any, options: dict[str, Any]) -> Any:
    """With --w-event: say what the guarantee gives per window and over the longest stream released (each key's: the
    count of values per key is public under the per-key guarantee).  Returns ``releaser``."""
    window = options.get("w_event")
    streams = getattr(releaser, "streams", None)
    if window is None or (streams is not None and not streams):
        return releaser
    longest = releaser.position if streams is None else max(stream.position for stream in streams.values())
    epsilon = (releaser if streams is None else next(iter(streams.values()))).privacy().epsilon
    say(f"w-event{' per key' if streams is not None else ''}: "
        f"{horizon(longest, window, epsilon)}{' (the longest key)' if streams is not None else ''}.")
    return releaser


def _shown_hold(chosen: Mechanism, options: dict[str, Any], hold: int | None) -> int:
    """Every key's hold-out, for the closing line of a keyed release: fitted to --expected-length when not given."""
    if "hold" not in chosen.options:
        return 0
    return _quiet(chosen.build)({**options, "hold": hold}, seed=0).hold if hold is None else hold


def _values(reader: StreamReader) -> Iterator[np.ndarray]:
    """A file's values in chunks of at most :data:`_CHUNK` (read at array speed where its lines are plain)."""
    return (batch.values for batch in reader.batches(_CHUNK))


class _Writer:
    """Feeds the releaser and writes what it releases: each value checked finite first, clipped values counted."""

    def __init__(self, releaser: Any, announce: Callable[[Any], None], *, upper_bound: float, clip: bool,
                 written: str) -> None:
        self.releaser, self.announce = releaser, announce
        self.upper_bound, self.clip, self.written = upper_bound, clip, written
        #: Values outside [0, B] that --clip clipped (NaN and infinities are never clipped: they are errors).
        self.clipped = 0
        #: Called with the sink after each value (stdin) or batch (files) is written: --state's checkpoint.
        self.after: Callable[[TextIO], None] | None = None
        #: With --standard-errors: the standard errors at positions; the output is CSV 'value,standard_error'.
        self.errors = standard_errors_of(releaser)
        #: Whether to write that CSV's header (False when appending to an output that has it: --state).
        self.header = True

    def _start(self, sink: TextIO) -> None:
        if self.errors is not None and self.header:
            sink.write(f"value,{STANDARD_ERROR}\n")
            self.header = False

    def live(self, values: Iterator[float], sink: TextIO) -> int:
        """Release value by value, each written and flushed as soon as it is released."""
        releaser, released = self.releaser, 0
        self._start(sink)
        for value in values:
            if self.clip and (value < 0.0 or value > self.upper_bound) and math.isfinite(value):
                self.clipped += 1
            out = releaser.release_one(value)
            if out is None:
                if releaser.threshold is not None:
                    self.announce(releaser)
            else:
                check_finite(out, position=releaser.position - 1, written=self.written)
                errors = "" if self.errors is None else f",{float(self.errors(np.array([releaser.position - 1]))[0])!r}"
                sink.write(f"{out!r}{errors}\n")
                sink.flush()
                released += 1
            if self.after is not None:
                self.after(sink)
        return released

    def batches(self, chunks: Iterator[np.ndarray], sink: TextIO) -> int:
        """Release chunk by chunk (file input)."""
        releaser, released = self.releaser, 0
        self._start(sink)
        for chunk in chunks:
            had_threshold = releaser.threshold is not None
            if self.clip:
                self.clipped += int(np.count_nonzero((chunk < 0.0) | (chunk > self.upper_bound)))
            out = releaser.release(chunk)
            if not had_threshold and releaser.threshold is not None:
                self.announce(releaser)
            if out.size:
                check_finite(out, position=releaser.position - out.size, written=self.written)
                sink.write(value_lines(out) if self.errors is None else
                           csv_rows([out, self.errors(np.arange(releaser.position - out.size, releaser.position))]))
                released += out.size
            if self.after is not None:
                self.after(sink)
        return released
