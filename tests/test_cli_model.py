"""``dpstream release`` with the model threshold's options."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream import ToPS
from dpstream.cli import cli as main

ARGS = ["--epsilon", "0.5", "--upper-bound", "100", "--hold", "500", "--max-range", "1024", "--seed", "3"]


@pytest.fixture
def stream_file(tmp_path):
    values = np.random.default_rng(0).integers(0, 30, size=3000).astype(float)
    path = tmp_path / "stream.csv"
    path.write_text("\n".join(str(v) for v in values) + "\n")
    return path, values


@pytest.mark.parametrize(
    ("flags", "kwargs", "said"),
    [
        ([], {}, "error model for random queries"),
        (["--threshold-method", "nm-e"], {"threshold_method": "nm-e"}, "(NM-E)"),
        (["--query-length", "60"], {"query_length": 60}, "windows of 60 values"),
        (["--query-length", "60", "--smoothed-levels", "1"], {"query_length": 60, "smoothed_levels": 1},
         "smoothed levels s = 1"),
        (["--period", "48"], {"period": 48}, "one leaf per period of 48 values (the first released value at phase 20)"),
        (["--period", "48", "--threshold-method", "nm-e", "--smoother", "recent"],
         {"period": 48, "threshold_method": "nm-e", "smoother": "recent"}, "d = 1 measured levels (NM-E)"),
    ],
)
def test_release_options_match_the_library(tmp_path, stream_file, flags, kwargs, said):
    path, values = stream_file
    out = tmp_path / "out.txt"
    result = CliRunner().invoke(main, ["release", str(path), "-o", str(out), *ARGS, *flags])
    assert result.exit_code == 0, result.output
    expected = ToPS(epsilon=0.5, upper_bound=100, hold=500, max_range=1024, seed=3, **kwargs).release(values)
    assert np.array_equal(np.loadtxt(out), expected)
    assert said in result.stderr


def test_model_options_do_not_apply_to_other_methods(tmp_path, stream_file):
    path, _ = stream_file
    result = CliRunner().invoke(main, ["release", str(path), "-o", str(tmp_path / "o.txt"), "--epsilon", "0.5",
                                       "--upper-bound", "100", "--method", "bt", "--query-length", "60"])
    assert result.exit_code != 0 and "--query-length does not apply to --method bt" in result.stderr
