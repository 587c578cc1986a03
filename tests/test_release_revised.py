"""``release --revised FILE`` and ``--plot FILE.png``: revised values beside the first release, never in it."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.release.revisions import Leaves, closed_count

PERIOD = 16
OPTIONS = ["--epsilon", "1", "--upper-bound", "5", "--threshold", "4", "--period", PERIOD, "--max-range", 256]


def _run(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


def _values(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    profile = 1.0 + np.sin(np.arange(n) * 2 * np.pi / PERIOD)
    return (profile * rng.gamma(4.0, 0.25, size=n)).clip(0, 5).round(3)


def _period_sums(values: np.ndarray, count: int) -> np.ndarray:
    return np.add.reduceat(values[:count], Leaves(length=PERIOD).starts(count))


def _rows(path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


def test_the_revised_file_sums_per_period_to_the_release_and_leaves_the_output_as_it_was(tmp_path):
    values = _values(10 * PERIOD + 5)
    (tmp_path / "in.txt").write_text("\n".join(map(str, values)) + "\n")
    plain = _run("release", tmp_path / "in.txt", "-o", tmp_path / "plain.txt", *OPTIONS, "--seed", 3)
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--seed", 3,
                  "--revised", tmp_path / "rev.txt")
    assert plain.exit_code == 0 and result.exit_code == 0, result.output
    assert (tmp_path / "out.txt").read_bytes() == (tmp_path / "plain.txt").read_bytes()  # the first release alone
    first = np.loadtxt(tmp_path / "out.txt")
    revised = np.loadtxt(tmp_path / "rev.txt")
    assert revised.size == first.size == values.size
    closed = closed_count(values.size, Leaves(length=PERIOD))
    assert closed == 10 * PERIOD
    np.testing.assert_allclose(_period_sums(revised, closed), _period_sums(first, closed), rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(revised[closed:], first[closed:])  # the open period: as released
    assert np.ptp(first[:closed].reshape(10, PERIOD)[:, :-1], axis=1).max() == 0  # flat predictions, then the jump
    assert "revised values: 165 written to" in result.output


def test_keyed_revised_values_keep_the_outputs_rows_and_layout(tmp_path):
    n = 12 * PERIOD
    values = _values(2 * n, seed=2)
    keys = np.where(np.arange(2 * n) % 2 == 0, "a 1", "b")
    times = [f"t{i}" for i in range(2 * n)]
    lines = ["meter,time,kWh\n", *(f"{k},{t},{v}\n" for k, t, v in zip(keys, times, values))]
    (tmp_path / "in.csv").write_text("".join(lines))
    result = _run("release", tmp_path / "in.csv", "-o", tmp_path / "out.csv", *OPTIONS, "--seed", 4,
                  "--key-column", "meter", "--time-column", "time", "--column", "kWh",
                  "--revised", tmp_path / "rev.csv", "--plot", tmp_path / "rev.png")
    assert result.exit_code == 0, result.output
    out, rev = _rows(tmp_path / "out.csv"), _rows(tmp_path / "rev.csv")
    assert out[0] == ["key", "position", "time", "value"] and rev[0] == ["key", "position", "time", "revised"]
    assert [row[:3] for row in rev][1:] == [row[:3] for row in out][1:]
    assert (tmp_path / "rev.csv").read_text().splitlines()[1].startswith("a 1,0,t0,")
    for key in ("a 1", "b"):
        first = np.array([float(row[3]) for row in out[1:] if row[0] == key])
        revised = np.array([float(row[3]) for row in rev[1:] if row[0] == key])
        np.testing.assert_allclose(_period_sums(revised, n), _period_sums(first, n), rtol=1e-12, atol=1e-9)
        assert not np.allclose(revised, first)
    assert (tmp_path / "rev.png").read_bytes()[:4] == b"\x89PNG"


def test_a_state_release_rewrites_the_revised_file_whole(tmp_path):
    values = _values(20 * PERIOD, seed=5)

    def run(count: int):
        (tmp_path / "in.txt").write_text("\n".join(map(str, values[:count])) + "\n")
        return _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--seed", 6,
                    "--state", tmp_path / "state", "--revised", tmp_path / "rev.txt")

    assert run(7 * PERIOD + 3).exit_code == 0
    early = np.loadtxt(tmp_path / "rev.txt")
    result = run(20 * PERIOD)  # continues; the revised file is replaced without --force
    assert result.exit_code == 0, result.output
    first, revised = np.loadtxt(tmp_path / "out.txt"), np.loadtxt(tmp_path / "rev.txt")
    assert revised.size == first.size == values.size
    np.testing.assert_allclose(_period_sums(revised, values.size), _period_sums(first, values.size), rtol=1e-12,
                               atol=1e-9)
    np.testing.assert_array_equal(revised[: 7 * PERIOD], early[: 7 * PERIOD])  # closed periods never change
    assert not np.array_equal(revised[7 * PERIOD : early.size], early[7 * PERIOD :])  # the open one did


@pytest.mark.parametrize("args, message", [
    (["-o", "-", "--revised", "{d}/rev.txt"], "reads the release back from -o"),
    (["-o", "{d}/out.txt", "--method", "bt", "--revised", "{d}/rev.txt"], "applies to --method tops"),
    (["-o", "{d}/out.txt", "--plot", "{d}/rev.pdf"], "ending in .png"),
    (["-o", "{d}/out.txt", "--revised", "{d}/out.txt"], "--revised and -o must name different files"),
])
def test_refused_before_any_work(tmp_path, args, message):
    (tmp_path / "in.txt").write_text("1\n2\n")
    options = ["--epsilon", "1", "--upper-bound", "5"]
    result = _run("release", tmp_path / "in.txt", *[arg.format(d=tmp_path) for arg in args], *options)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "rev.txt").exists()


def test_an_existing_revised_file_needs_force(tmp_path):
    (tmp_path / "in.txt").write_text("1\n2\n")
    (tmp_path / "rev.txt").write_text("old\n")
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--revised",
                  tmp_path / "rev.txt")
    assert result.exit_code == 1 and "pass --force" in result.output
    assert (tmp_path / "rev.txt").read_text() == "old\n" and not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("flag", ["--revised", "--plot"])
def test_a_missing_directory_of_revised_or_plot_is_named_by_its_flag(tmp_path, flag):
    """The error said "the directory ... of --output does not exist" for the --revised or --plot file."""
    (tmp_path / "in.txt").write_text("\n".join(map(str, _values(64))) + "\n")
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, flag,
                  tmp_path / "none" / "x.png")
    assert result.exit_code == 1 and f"the directory {tmp_path / 'none'} of {flag} does not exist" in result.output
    assert not (tmp_path / "out.txt").exists()


def test_revised_values_of_a_release_with_nothing_released_yet_are_an_empty_file(tmp_path):
    """A --state release whose hold-out is not complete has an empty output: read back as no values, not an error."""
    (tmp_path / "in.txt").write_text("\n".join(map(str, _values(40))) + "\n")
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--epsilon", "1", "--upper-bound", "5",
                  "--hold", "64", "--state", tmp_path / "s", "--seed", "1", "--revised", tmp_path / "rev.txt")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.txt").read_text() == "" and (tmp_path / "rev.txt").read_text() == ""


def test_an_output_edited_so_it_does_not_read_back_is_refused_for_revision(tmp_path, monkeypatch):
    import dpstream.cli._revised as revised_module

    (tmp_path / "in.txt").write_text("\n".join(map(str, _values(160))) + "\n")
    real = revised_module._read_release

    def edited(output, **kwargs):
        output.write_text(output.read_text() + "not a number\n")
        return real(output, **kwargs)

    monkeypatch.setattr(revised_module, "_read_release", edited)
    result = _run("release", tmp_path / "in.txt", "-o", tmp_path / "out.txt", *OPTIONS, "--revised",
                  tmp_path / "rev.txt")
    assert result.exit_code == 1 and "does not read back as the release wrote it" in result.output, result.output
    assert not (tmp_path / "rev.txt").exists()
