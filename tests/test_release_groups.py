"""A keyed release from a file releases groups of batches in one call per key (``ColumnsWriter.GROUP``): what it
writes and says is that of batch by batch, the first error and the key whose guarantee is announced included."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._columns import ColumnsWriter

SIZES = {"tops": ["--hold", "20", "--max-range", "64", "--fanout", "4"], "bt": ["--max-range", "64"],
         "pak": ["--hold", "20", "--max-range", "64"]}


def _file(path, seed: int, bad: float = 0.005) -> tuple[str, list[str]]:
    """Keys that start at different times and hold-outs that end in different batches; a bad row sometimes."""
    rng = np.random.default_rng(seed)
    rows = []
    for row in range(int(rng.integers(50, 400))):
        key = f"k{rng.integers(0, 1 + row // 40) if rng.random() < 0.9 else rng.integers(0, 12)}"
        value = f"{rng.uniform(0, 5):.2f}" if rng.random() >= bad else str(rng.choice(["x", "-1", "9", "NA"]))
        rows.append(f"2026-01-01 {row // 60:02d}:{row % 60:02d},{key},{value}")
    path.write_text("time,meter,kWh\n" + "\n".join(rows) + "\n")
    return str(path), rows


def _release(path: str, method: str, output: str, extra: list[str]):
    return CliRunner().invoke(cli, ["release", path, "-o", output, "--method", method, "--key-column", "meter",
                                    "--column", "kWh", "--epsilon", "1", "--upper-bound", "5", "--seed", "3",
                                    *SIZES[method], *extra])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("method", list(SIZES))
def test_groups_release_as_batch_by_batch(tmp_path, monkeypatch, seed, method):
    path, _ = _file(tmp_path / "in.csv", seed, bad=0.005 * (seed % 2))
    monkeypatch.setattr("dpstream.cli.release._CHUNK", [7, 16, 50][seed % 3])
    extra = [["--time-column", "time"], ["--clip"], ["--max-keys", "6"], []][seed % 4]
    runs = {}
    monkeypatch.setattr(ColumnsWriter, "ROWS_PER_KEY", 10**9)  # groups of GROUP batches, whatever the keys
    for group in (1, ColumnsWriter.GROUP):
        monkeypatch.setattr(ColumnsWriter, "GROUP", group)
        for output in ("-", str(tmp_path / f"out-{group}.csv")):
            runs[group, output != "-"] = _release(path, method, output, extra)
    for to_file in (False, True):
        alone, grouped = runs[1, to_file], runs[ColumnsWriter.GROUP, to_file]
        assert (grouped.exit_code, grouped.stdout, grouped.stderr) == (alone.exit_code, alone.stdout, alone.stderr)
    one, four = tmp_path / "out-1.csv", tmp_path / f"out-{ColumnsWriter.GROUP}.csv"
    assert one.exists() == four.exists() and (not one.exists() or one.read_bytes() == four.read_bytes())


def test_a_value_that_is_not_finite_stops_at_its_batch(tmp_path, monkeypatch):
    """The rows of the batches before the one with a value that is not finite are written (to a stream), as batch
    by batch writes them."""
    from dpstream.release.by_key import ByKey

    path, _ = _file(tmp_path / "in.csv", 99, bad=0.0)
    honest = ByKey.release

    def overflowing(self, values, keys):
        got = honest(self, values, keys)
        got.values[(np.array(got.keys) == "k0") & (got.positions >= 40)] = np.inf  # whatever the batches
        return got

    monkeypatch.setattr(ByKey, "release", overflowing)
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 16)
    monkeypatch.setattr(ColumnsWriter, "ROWS_PER_KEY", 10**9)
    runs = {}
    for group in (1, 4):
        monkeypatch.setattr(ColumnsWriter, "GROUP", group)
        runs[group] = _release(path, "bt", "-", [])
    assert runs[1].exit_code == 1 and "is inf, not a finite number" in runs[1].stderr
    assert (runs[4].exit_code, runs[4].stdout, runs[4].stderr) == (runs[1].exit_code, runs[1].stdout, runs[1].stderr)


def test_the_comparisons_release_something(tmp_path, monkeypatch):
    """The random files above are released whole (or stop late) often enough for the comparison to mean something."""
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 16)
    codes = [_release(_file(tmp_path / f"in{seed}.csv", seed, bad=0.005 * (seed % 2))[0], "tops", "-", []).exit_code
             for seed in range(12)]
    assert 4 <= codes.count(0) < 12
