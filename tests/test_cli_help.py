"""Every command's ``--help`` reads as plain text: no Sphinx or reStructuredText markup leaks into it."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from dpstream.cli import cli

#: Roles (:func:`x`), inline literals (``x``), references (`x`_), directives (.. x::) and escaped backslashes.
MARKUP = re.compile(r":[a-z]+:`|``|`[^`\n]+`_|^\s*\.\. [a-z]+::|\\\\", re.M)


def _commands(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(cli))


def test_the_markup_pattern_finds_markup():
    found = [text for text in (":func:`f`", "``x``", "`link`_", ".. note::", "plain `f` text") if MARKUP.search(text)]
    assert found == [":func:`f`", "``x``", "`link`_", ".. note::"]


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda path: " ".join(path) or "dpstream")
def test_help_has_no_markup(path):
    result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert MARKUP.findall(result.output) == []


def test_every_command_is_checked():
    assert len(COMMANDS) > 10 and ("generate-housing",) in [path for path, _ in COMMANDS]
