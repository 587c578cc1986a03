"""Every ``dpstream`` command in a shell block of the README and docs/ runs as written.

Each command line of a fenced block (backslash continuations joined, a ``$`` prompt and a
trailing ``# comment`` dropped) runs in its block's own scratch directory, in the order of the
block, so that its later lines see what its earlier lines wrote (``release --state`` twice,
then ``budget``).  The directory starts with small files under the names the examples use
(``data.csv``, ``meters.csv``, ``E.csv``, ...).  What is substituted, so that all of them run in about a minute:

* sizes and rounds: ``--rounds``/``--runs`` 1, ``--hold`` 512 (PAK's optimizer: 50,000), ``--max-range`` 1024
  (not added to a ``release`` with ``--expected-length``: they are fitted to it), 20 generated ``--meters``,
  ``--queries`` 5, ``--n-groups`` 2,000 with 3 states and 6 counties, ``--max-size`` 2,000, the
  post-processing studies on 20 users over 20 steps, the audit on 100 samples per input, lists
  of budgets and strategies cut to their first two;
  the evaluation commands and ``release`` get these even when the example leaves the option at
  its default (the scratch files hold thousands of values, not the default hold-out's 65,536);
* ``producer | dpstream ...`` reads a few values on stdin;
* ``--force`` is added (but with ``--state``): examples that are alternatives write the same output.

Commands quoted in the prose (```dpstream ...```) run too, and so do the studies run as
``python -m dpstream.evaluation.accuracy`` (one round; lists of budgets and window lengths cut
to two) and ``python -m dpstream.evaluation.trees`` (trees of 4,096 values, 5 queries).

Not run, each for its reason: the synopses (lines with ``[optional]`` parts, ``a|b`` choices or
upper-case placeholders such as ``INPUT``, ``DIR`` or ``N``: they show a grammar, not a command; a
command's bare name quoted in the prose is not collected either),
``--engine spark`` and ``spark-streaming`` (Java and a Spark session: the Spark tests run those paths) and ``serve``
(a server: the service tests start and stop it).  Python blocks are not shell commands.
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.postprocess import FIG3_MATRIX, LaplaceCounts, simulate_counts

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: option -> the value it takes here (sizes and rounds).
SMALLER = {"--rounds": "1", "--runs": "1", "--hold": "512", "--max-range": "1024", "--queries": "5",
           "--n-groups": "2000", "--states": "3", "--counties": "6", "--max-size": "2000", "--users": "20",
           "--steps": "20", "--steps-grid": "10,20", "--levels": "0.1", "--correlation-epsilons": "1",
           "--samples": "100", "--n": "4096", "--meters": "20"}
#: Options whose comma-separated lists are cut to their first two items.
LISTS = ("--epsilons", "--strategies", "--curves", "--fanouts")
#: What each evaluation command gets even when the example does not say it.
ADDED = {
    "evaluate": ("--rounds", "--hold", "--max-range", "--queries"),
    "pak-improvement": ("--rounds", "--hold"),
    "evaluate-postprocess": ("--rounds", "--users", "--steps", "--steps-grid", "--levels", "--correlation-epsilons"),
    "evaluate-count-of-counts": ("--runs", "--max-size"),
    "generate-housing": ("--n-groups", "--states", "--counties"),
    "audit": ("--samples",),
    "release": ("--hold", "--max-range"),
    "dpstream.evaluation.accuracy": ("--rounds",),
    "dpstream.evaluation.trees": ("--n", "--queries"),
}
#: The options of every command, to know which take --force.
FORCE = {name: {option for param in command.params for option in param.opts} for name, command in cli.commands.items()}
#: Sizes a command needs larger than :data:`SMALLER` (PAK's optimizer needs a hold-out of tens of thousands).
KEPT = {"pak-improvement": {"--hold": "50000"}}
#: The housing options of evaluate-count-of-counts, added when it generates housing data.
HOUSING = ("--n-groups", "--states", "--counties")


def _blocks(text: str):
    """(first line number, language, text) of every fenced block of a Markdown text."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].startswith("```"):
            language, start = lines[index][3:].strip(), index + 1
            index = start
            while index < len(lines) and not lines[index].startswith("```"):
                index += 1
            yield start + 1, language, "\n".join(lines[start:index])
        index += 1


def _commands() -> list[tuple[str, str]]:
    """(where, command line) of every dpstream command in a shell block, in document order."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for inline in re.finditer(r"(?<!`)`(dpstream [^`\s]+ [^`]+)`(?!`)", text):  # quoted in the prose, with
            line = text[: inline.start()].count("\n") + 1  # arguments (a bare command name is no example)
            found.append((f"{document.name}:{line}", inline.group(1)))
        for number, language, block in _blocks(text):
            if language not in ("", "sh", "bash", "console", "shell"):
                continue
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = re.sub(r"^\$ ", "", line.strip())
                if re.match(r"^(\S+ \| )?(dpstream |python -m dpstream\.)", line):
                    found.append((f"{document.name}:{number}", line))
    return found


COMMANDS = _commands()


def _smaller(command: str, option: str) -> str:
    return KEPT.get(command, {}).get(option, SMALLER[option])


def _skip_reason(words: list[str]) -> str | None:
    line = " ".join(words)
    if words[0] == "python":
        return None
    if "spark" in words or "spark-streaming" in words:
        return "needs Spark"
    if "[" in line or "..." in words or re.search(r"\S\|\S", line) or re.search(r"(^| )(?!NA )[A-Z]+( |$)", line):
        return "a synopsis"
    if words[1] == "serve":
        return "starts a server"
    return None


def _runnable(line: str) -> tuple[list[str], str | None]:
    """The arguments after ``dpstream``, with the substitutions, and the stdin of a pipeline."""
    stdin = None
    if " | dpstream " in line:
        line = line.split(" | ", 1)[1]
        stdin = "".join(f"{value % 40}\n" for value in range(1, 1000))
    words = shlex.split(line, comments=True)
    if words[0] == "python":  # python -m dpstream.evaluation.X: its main(argv)
        words = words[2:]
    command = words[1] if words[0] == "dpstream" else words[0]
    args, index = [], 2 if words[0] == "dpstream" else 1
    while index < len(words):
        word = words[index]
        if word in SMALLER and index + 1 < len(words):
            args += [word, _smaller(command, word)]
            index += 2
        elif word in LISTS and index + 1 < len(words):
            args += [word, ",".join(words[index + 1].split(",")[:2])]
            index += 2
        else:
            args.append(word)
            index += 1
    added = list(ADDED.get(command, ()))
    if command == "evaluate-count-of-counts" and "taxi" not in args:
        added += HOUSING
    if command == "release" and ("bt" in args or "sqrt-zcdp" in args or "banded-zcdp" in args
                                 or "--threshold" in args):
        added.remove("--hold")  # the binary tree, the factorization and a public threshold hold nothing out
    if command == "release" and "--expected-length" in args:
        added = []  # the hold-out and the tree are fitted to the expected length, as written
    for option in added:
        if option not in args:
            args += [option, _smaller(command, option)]
    if "--force" in FORCE.get(command, ()) and "--force" not in args and "--state" not in args:
        args.append("--force")  # examples that are alternatives write the same output
    return [command, *args], stdin


def _run_module(module: str, args: list[str], capsys) -> None:
    """A study module's ``main(argv)``, which ends normally (argparse exits on an error)."""
    importlib.import_module(module).main(args)
    assert "Traceback" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The scratch directory with the files the examples name."""
    folder = tmp_path_factory.mktemp("docs")
    (folder / "docs" / "results").mkdir(parents=True)  # the examples that regenerate the results run in a checkout
    rng = np.random.default_rng(0)
    values = "value\n" + "".join(f"{v:g}\n" for v in rng.integers(0, 60, 3000))
    for name in ("data.csv", "stream.csv"):
        (folder / name).write_text(values)
    (folder / "meter.csv").write_text("".join(f"{v:.3f}\n" for v in rng.uniform(0, 12, 2000)))
    rows = ["meter,time,kWh"]
    for meter in ("M1", "M2"):  # ten days of quarter-hours
        rows += [f"{meter},2024-01-{1 + t // 96:02d}T{t % 96 // 4:02d}:{15 * (t % 4):02d},"
                 + ("NA" if t == 7 else f"{v:.3f}") for t, v in enumerate(rng.uniform(0, 4, 960))]
    (folder / "meters.csv").write_text("\n".join(rows) + "\n")
    truth = simulate_counts(FIG3_MATRIX, users=50, steps=40, seed=1)
    np.savetxt(folder / "noisy.csv", LaplaceCounts(epsilon=0.5, seed=2).release(truth), delimiter=",", fmt="%.17g")
    np.savetxt(folder / "T.csv", FIG3_MATRIX, delimiter=",", header="loc1,loc2,loc3", comments="")
    made = CliRunner().invoke(cli, ["generate-housing", "--n-groups", "300", "--states", "2", "--counties", "4",
                                    "--format", "csv", "--out", str(folder / "tables")])
    assert made.exit_code == 0, made.output
    for short, name in (("E", "entities"), ("G", "groups"), ("H", "hierarchy")):
        (folder / f"{short}.csv").write_bytes((folder / "tables" / f"{name}.csv").read_bytes())
    return folder


def _reason(line: str) -> str | None:
    return _skip_reason(shlex.split(line.split(" | ", 1)[-1], comments=True))


#: The commands run here; the others are synopses, Spark runs and ``serve`` (their own tests run those).
RUNNABLE = [(where, line) for where, line in COMMANDS if _reason(line) is None]


def test_the_documents_have_commands_and_only_synopses_spark_and_serve_are_not_run_here():
    assert len(COMMANDS) > 30 and len(RUNNABLE) > 30
    reasons = {_reason(line) for _, line in COMMANDS} - {None}
    assert reasons <= {"needs Spark", "a synopsis", "starts a server"}


@pytest.mark.parametrize("where, line", RUNNABLE, ids=[where for where, _ in RUNNABLE])
def test_the_command_runs_as_written(scratch, monkeypatch, capsys, where, line):
    args, stdin = _runnable(line)
    block = scratch.parent / f"{scratch.name}-{where.replace(':', '-')}"
    if not block.exists():
        shutil.copytree(scratch, block)
    monkeypatch.chdir(block)
    if args[0].startswith("dpstream."):
        _run_module(args[0], args[1:], capsys)
        return
    result = CliRunner().invoke(cli, args, input=stdin)
    assert result.exit_code == 0, f"{where}: dpstream {' '.join(args)}\n{result.output}"
    assert "Error" not in result.stderr
