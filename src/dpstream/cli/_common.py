"""What every ``dpstream`` command shares: the group, one-line errors, safe output files.

Flags map to library classes in the command modules and nowhere else.  Every error is one
line on stderr and a non-zero exit code.  Every command checks where it writes with
:func:`prepare_output` before any work (an input is never overwritten, an existing file only
with ``--force``) and writes a single output file through :func:`output_file`.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO, TypeVar, overload

import click

from dpstream._checks import check_epsilon
from dpstream._progress import Progress
from dpstream.io import InputError

#: Help of every --seed that seeds the noise of a release.
SEED_HELP = "For tests only: anyone who knows the seed can recompute the noise. Never publish a seeded release."

__all__ = [
    "SEED_HELP", "cli", "epsilon_option", "epsilons_option", "floats", "main", "output_file", "prepare_output",
    "progress_bar", "say", "warn_if_seeded", "write_csv",
]

_Kind = TypeVar("_Kind")


class _Group(click.Group):
    """Turn the library's errors into one-line messages instead of tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ValueError, TypeError, InputError, OSError) as error:
            raise click.ClickException(str(error)) from None
        except ArithmeticError as error:
            raise click.ClickException(
                f"the computation overflowed ({error}); the parameters (such as --epsilon) are outside "
                "what floating-point arithmetic can handle."
            ) from None
        except MemoryError:
            raise click.ClickException(
                "not enough memory for these parameters (they set the size of what is kept in memory)."
            ) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpstream")
def cli() -> None:
    """Publish statistics of data streams under differential privacy."""


def main() -> None:
    """Entry point: every error, usage errors included, is one line on stderr."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as error:  # plain `dpstream`: the help, not an error
        click.echo(error.ctx.get_help() if error.ctx else error.format_message(), err=True)
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        say("Error: aborted.")
        sys.exit(1)
    except click.ClickException as error:
        say(f"Error: {error.format_message()}")
        sys.exit(error.exit_code)


def say(message: str) -> None:
    """Progress and diagnostics go to stderr; stdout carries results only."""
    click.echo(message, err=True)


def warn_if_seeded(seed: int | None) -> None:
    """Warn on stderr that a release whose noise was seeded (``--seed``) is for testing only."""
    if seed is not None:
        say("warning: --seed makes the noise recomputable by anyone who knows it; this release is for testing only.")


@overload
def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (), files: None = None) -> Path | None:
    ...


@overload
def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (),
                   files: Mapping[_Kind, str]) -> dict[_Kind, Path]:
    ...


def prepare_output(output: str, *, force: bool, inputs: Iterable[str | None] = (),
                   files: Mapping[Any, str] | None = None) -> Path | dict[Any, Path] | None:
    """Check where a command writes, before any work, and return where that is.

    Parameters
    ----------
    output : str
        Without ``files``, the value of ``-o/--output``: a file, or ``-`` for stdout.  With
        ``files``, the value of ``--out``: a directory, which the command creates when it
        writes if it does not exist yet.
    force : bool
        ``--force``: an existing output may be replaced.
    inputs : iterable of str or None
        What the command reads; ``-`` (stdin), None and names that are no file (such as a
        built-in dataset's) are passed over.
    files : mapping, optional
        What the command writes into ``--out``: kind -> file name.

    Returns
    -------
    pathlib.Path, dict or None
        The output file (None for stdout); with ``files``, kind -> path inside ``--out``.

    Raises
    ------
    click.ClickException
        If an output file is one of ``inputs`` (even with ``force``), exists without
        ``force``, or its directory does not exist (for ``--out``: cannot be created).

    Examples
    --------
    >>> prepare_output("-", force=False) is None
    True
    >>> prepare_output("no-such-dir/released.txt", force=False)
    Traceback (most recent call last):
    click.exceptions.ClickException: the directory no-such-dir of --output does not exist (nothing was written).
    >>> prepare_output("no-such-dir", force=False, files={"summary": "study.csv"})["summary"].as_posix()
    'no-such-dir/study.csv'
    """
    if files is None and output == "-":
        return None
    option = "--output" if files is None else "--out"
    targets = [Path(output)] if files is None else [Path(output) / name for name in files.values()]
    sources = [Path(source) for source in inputs if source not in (None, "-")]
    for target in targets:
        for source in sources:
            if target.exists() and source.exists() and target.samefile(source):
                raise click.ClickException(
                    f"the output is the input file {source}; choose another {option} (nothing was written)."
                )
    existing = [target for target in targets if target.exists()]
    if existing and not force:
        raise click.ClickException(f"{existing[0]} exists; pass --force to overwrite it (nothing was written).")
    if files is None:
        if not targets[0].parent.is_dir():
            raise click.ClickException(
                f"the directory {targets[0].parent} of --output does not exist (nothing was written)."
            )
        return targets[0]
    directory = Path(output)
    nearest = next((path for path in (directory, *directory.parents) if path.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise click.ClickException(
            f"the directory {directory} of --out cannot be created: {nearest} is a file (nothing was written)."
        )
    return dict(zip(files, targets, strict=True))


def floats(text: str) -> list[float]:
    """Parse a comma-separated list of numbers given on the command line."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {text!r}.") from None
    if not values:
        raise click.BadParameter(f"expected at least one number, got {text!r}.")
    return values


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write dict rows with a header taken from the first row."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def epsilon_option(ctx: click.Context | None, param: click.Parameter | None, value: float) -> float:
    """Click callback of a budget option: :func:`~dpstream._checks.check_epsilon` as a usage error."""
    try:
        return check_epsilon(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def epsilons_option(ctx: click.Context, param: click.Parameter, text: str) -> list[float]:
    """Click callback of an ``--epsilons``-style option: comma-separated budgets."""
    return [epsilon_option(ctx, param, value) for value in floats(text)]


@contextmanager
def output_file(target: Path | None) -> Iterator[TextIO]:
    """A text handle for a command's output: stdout when ``target`` is None, else a file.

    The file is written beside ``target`` and renamed onto it only when the block succeeds, so a
    failed command neither leaves a partial file nor destroys an existing one.
    """
    if target is None:
        yield sys.stdout
        return
    partial = target.with_name(f".{target.name}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            yield handle
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextmanager
def progress_bar(*, desc: str, unit: str, total: int | None = None, leave: bool = True) -> Iterator[Progress]:
    """A tqdm bar on stderr, fed by the library's progress callback (:mod:`dpstream._progress`).

    Computations reported one after the other add up on the one bar (each starts again at
    ``done = 0``).  Without ``total``, the bar takes the total the first computation announces.
    ``leave=False`` clears the bar when it closes.
    """
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=leave) as bar:
        base = 0

        def update(done: int, of: int) -> None:
            nonlocal base
            if done == 0:
                base = bar.n
                if bar.total is None:
                    bar.total = of
                    bar.refresh()
            bar.update(base + done - bar.n)

        yield update
