"""``dpstream release`` on exact noise: the grid option, the privacy line, and refused float-only choices."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli


@pytest.fixture
def stream_file(tmp_path):
    path = tmp_path / "in.txt"
    values = np.minimum(np.random.default_rng(0).geometric(0.1, 3000), 300)
    path.write_text("\n".join(str(v) for v in values) + "\n")
    return path


def release(path, out, *options):
    return CliRunner().invoke(cli, ["release", str(path), "-o", str(out), "--epsilon", "1", "--upper-bound", "300",
                                    "--max-range", "1024", *options])


@pytest.mark.parametrize("method, extra", [("tops", ["--hold", "1000"]), ("pak", ["--hold", "1000"]), ("bt", [])])
def test_the_privacy_line_names_exact_noise_and_the_grid(stream_file, tmp_path, method, extra):
    result = release(stream_file, tmp_path / "out.txt", "--method", method, *extra, "--granularity", "0.125")
    assert result.exit_code == 0, result.output
    line = next(text for text in result.stderr.splitlines() if text.startswith("privacy:"))
    assert "noise: " in line and "exact discrete Laplace in grid units, OS CSPRNG bits" in line
    assert "0.125" in line
    if method == "bt":  # the binary tree releases whole grid steps
        released = np.array([float(x) for x in (tmp_path / "out.txt").read_text().split()])
        assert np.array_equal(released / 0.125, np.rint(released / 0.125))


def test_seeded_releases_replay_and_say_so(stream_file, tmp_path):
    first = release(stream_file, tmp_path / "a.txt", "--method", "tops", "--hold", "1000", "--seed", "3")
    second = release(stream_file, tmp_path / "b.txt", "--method", "tops", "--hold", "1000", "--seed", "3")
    assert first.exit_code == second.exit_code == 0
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    assert "seeded PCG64 bits (seed 3: replayable, NOT secret)" in first.stderr


@pytest.mark.parametrize(
    "options, message",
    [
        (["--method", "bt", "--granularity", "0"], "granularity must be a finite number > 0, got 0.0"),
        (["--method", "bt", "--granularity", "500"], "granularity must be at most the bound 300"),
        (["--method", "bt", "--granularity", "nan"], "granularity must be a finite number > 0, got nan"),
        (["--method", "pak", "--hold", "1000", "--noise", "gaussian"], "threshold_noise='gaussian' is float-only"),
        (["--method", "topl", "--granularity", "0.5"], "--granularity does not apply to --method topl"),
    ],
)
def test_bad_grid_and_float_only_choices_are_one_line_errors(stream_file, tmp_path, options, message):
    result = release(stream_file, tmp_path / "out.txt", *options)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.txt").exists()


def test_a_secure_source_that_cannot_be_opened_is_one_line(stream_file, tmp_path, monkeypatch):
    def broken(n):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr("dpstream.noise.bits.os.urandom", broken)
    result = release(stream_file, tmp_path / "out.txt", "--method", "bt")
    assert result.exit_code == 1
    assert "no secure source of randomness" in result.output and "os.urandom" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out.txt").exists()
