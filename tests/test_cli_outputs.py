"""Every command checks where it writes in one place, before any work, with one wording."""

import click
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._common import prepare_output


def _run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def test_stdout_and_a_new_file_are_accepted(tmp_path):
    assert prepare_output("-", force=False) is None
    assert prepare_output(str(tmp_path / "new.csv"), force=False) == tmp_path / "new.csv"


def test_an_existing_file_needs_force(tmp_path):
    (tmp_path / "old.csv").write_text("mine")
    with pytest.raises(click.ClickException, match="exists; pass --force"):
        prepare_output(str(tmp_path / "old.csv"), force=False)
    assert prepare_output(str(tmp_path / "old.csv"), force=True) == tmp_path / "old.csv"


def test_an_input_is_refused_even_with_force(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("1\n")
    (tmp_path / "link.csv").symlink_to(source)
    with pytest.raises(click.ClickException, match="the output is the input file"):
        prepare_output(str(tmp_path / "link.csv"), force=True, inputs=["-", None, str(source)])


def test_result_files_go_into_a_directory_made_later(tmp_path):
    paths = prepare_output(str(tmp_path / "a" / "b"), force=False, files={"summary": "s.csv", "plot": "p.png"})
    assert paths == {"summary": tmp_path / "a" / "b" / "s.csv", "plot": tmp_path / "a" / "b" / "p.png"}
    assert not (tmp_path / "a").exists()
    (tmp_path / "a").write_text("a file")
    with pytest.raises(click.ClickException, match="cannot be created: .* is a file"):
        prepare_output(str(tmp_path / "a" / "b"), force=False, files={"summary": "s.csv"})


def test_commands_refuse_to_write_over_an_input_in_the_same_words(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("1\n")
    commands = [
        ["release", source, "--epsilon", 1, "--upper-bound", 1, "-o", source, "--force"],
        ["count-of-counts", "--entities", source, "--groups", source, "--hierarchy", source, "--epsilon", 1,
         "-o", source, "--force"],
        ["postprocess", source, "--transition", source, "--users", 1, "--epsilon", 1, "-o", source, "--force"],
    ]
    for args in commands:
        result = _run(*args)
        assert result.exit_code == 1
        assert result.output.strip().splitlines()[-1] == (
            f"Error: the output is the input file {source}; choose another --output (nothing was written).")
    assert source.read_text() == "1\n"


def test_demo_checks_its_directory_before_any_work(tmp_path):
    (tmp_path / "file").write_text("mine")
    result = _run("demo", "--out", tmp_path / "file" / "plots")
    assert result.exit_code == 1 and "cannot be created" in result.output
    assert "dataset:" not in result.output  # the stream was not even loaded
