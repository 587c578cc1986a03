"""``dpstream release --time-column/--key-column/--missing``: CSV rows with times and keys, one stream per key.

Correctness is checked against the library: a key's rows equal its sub-stream run alone through
the same mechanism with the per-key seeding rule (``seed=key_bits(seed_secret(seed), key)``);
the time-only output's values equal a plain release of the value column.  Memory is checked on
a smart-meter stream piped through stdin to stdout: the child's peak resident set must not grow
with the number of rows.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.durable.encoding import decode, encode
from dpstream.release import PAK, BinaryTreeCounter, ToPL, ToPS
from dpstream.release.by_key import ByKey, KeyLimitError, key_bits, key_secret, seed_secret

SRC = Path(__file__).resolve().parents[1] / "src"
EPS, BOUND, HOLD, RANGE, SEED = 1.0, 5.0, 300, 512, 11
COMMON = ["--epsilon", EPS, "--upper-bound", BOUND, "--seed", SEED]
# The CLI's --hold and --max-range as library arguments, per method (bt has no hold-out).
LIBRARY = {
    "tops": lambda seed: ToPS(epsilon=EPS, upper_bound=BOUND, hold=HOLD, max_range=RANGE, seed=seed),
    "pak": lambda seed: PAK(epsilon=EPS, upper_bound=BOUND, hold=HOLD, max_range=RANGE, seed=seed),
    "bt": lambda seed: BinaryTreeCounter(epsilon=EPS, upper_bound=BOUND, max_range=RANGE, seed=seed),
    "topl": lambda seed: ToPL(epsilon=EPS, upper_bound=BOUND, hold=HOLD, max_range=RANGE, seed=seed),
}
SIZES = {"tops": ["--hold", HOLD, "--max-range", RANGE], "pak": ["--hold", HOLD, "--max-range", RANGE],
         "bt": ["--max-range", RANGE], "topl": ["--hold", HOLD, "--max-range", RANGE]}
METHODS = pytest.mark.parametrize("method", list(LIBRARY))
# A key with a comma and a quote (the input is tab-separated, so the reader keeps them).
KEYS = ["m1", "m2", 'house "7", north']


def _run(*args, stdin: str | None = None):
    return CliRunner().invoke(cli, [str(arg) for arg in args], input=stdin)


def _meter(path: Path, counts: dict[str, int], *, seed: int = 0, missing: tuple[int, ...] = ()) -> list[list[str]]:
    """A tab-separated smart-meter file: time, meter and kWh, the keys interleaved at random.
    Rows at the indices in ``missing`` hold ``NA``; returns the data rows (time, key, value text)."""
    rng = np.random.default_rng(seed)
    keys = np.repeat(np.array(list(counts), dtype=object), list(counts.values()))
    rng.shuffle(keys)
    values = np.round(rng.uniform(0, BOUND, keys.size), 3)
    rows = [[f"2026-01-01T{i // 60 % 24:02d}:{i % 60:02d}#{i}", key, repr(float(value))]
            for i, (key, value) in enumerate(zip(keys, values))]
    for i in missing:
        rows[i][2] = "NA"
    path.write_text("time\tmeter\tkWh\n" + "".join("\t".join(row) + "\n" for row in rows))
    return rows


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


# -- time column ---------------------------------------------------------------------------


@METHODS
def test_time_column_adds_the_time_of_each_released_value(tmp_path, method):
    rows = _meter(tmp_path / "m.tsv", {"m1": HOLD + 700})
    plain = tmp_path / "plain.txt"
    plain.write_text("".join(row[2] + "\n" for row in rows))
    timed = _run("release", tmp_path / "m.tsv", "--column", "kWh", "--time-column", "time", "--method", method,
                 "-o", "-", *COMMON, *SIZES[method])
    alone = _run("release", plain, "--method", method, "-o", "-", *COMMON, *SIZES[method])
    assert timed.exit_code == 0, timed.output
    out = _csv(timed.stdout)
    assert out[0] == ["time", "value"]
    values = [float(line) for line in alone.stdout.split()]
    assert [float(value) for _, value in out[1:]] == values  # the same release as without the time column
    assert [time for time, _ in out[1:]] == [row[0] for row in rows[len(rows) - len(values) :]]


def test_without_the_options_the_output_stays_one_value_per_line(tmp_path):
    _meter(tmp_path / "m.tsv", {"m1": HOLD + 50})
    result = _run("release", tmp_path / "m.tsv", "--column", "kWh", "-o", "-", *COMMON, *SIZES["tops"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 50 and all(float(line) == float(line) for line in lines)


# -- key column ----------------------------------------------------------------------------


def _expected(rows: list[list[str]], method: str, seed: int, *, missing: str = "error") -> dict[str, list]:
    """Each key's sub-stream run alone through the library: {key: [(position, time, value), ...]}."""
    expected = {}
    for key in dict.fromkeys(row[1] for row in rows):
        mine = [row for row in rows if row[1] == key]
        if missing == "skip":
            mine = [row for row in mine if row[2] != "NA"]
        values = [0.0 if row[2] == "NA" else float(row[2]) for row in mine]
        released = LIBRARY[method](key_bits(seed_secret(seed), key)).release(values)
        first = len(values) - released.size
        expected[key] = [(str(first + i), mine[first + i][0], released[i]) for i in range(released.size)]
    return expected


def _by_key(out: list[list[str]]) -> dict[str, list]:
    got: dict[str, list] = {}
    for key, position, time, value in out:
        got.setdefault(key, []).append((position, time, float(value)))
    return got


@METHODS
def test_each_key_is_its_sub_stream_released_alone(tmp_path, method):
    rows = _meter(tmp_path / "m.tsv", {"m1": HOLD + 400, "m2": HOLD + 90, KEYS[2]: HOLD + 5, "short": 40})
    result = _run("release", tmp_path / "m.tsv", "--time-column", "time", "--key-column", "meter",
                  "--method", method, "-o", "-", *COMMON, *SIZES[method])
    assert result.exit_code == 0, result.output
    out = _csv(result.stdout)
    assert out[0] == ["key", "position", "time", "value"]
    expected = _expected(rows, method, SEED)
    got = _by_key(out[1:])
    assert set(got) == {key for key, rows in expected.items() if rows}
    for key, released in expected.items():
        assert got.get(key, []) == released, key
    # rows in input order: the times (which carry the input row number) increase
    numbers = [int(time.split("#")[1]) for _, _, time, _ in out[1:]]
    assert numbers == sorted(numbers)
    if method != "bt":
        assert "1 key ended within its hold-out and released nothing" in result.stderr


def test_a_key_with_a_comma_and_a_quote_is_quoted(tmp_path):
    _meter(tmp_path / "m.tsv", {KEYS[2]: HOLD + 3})
    result = _run("release", tmp_path / "m.tsv", "--key-column", "meter", "--column", "kWh", "-o", "-", *COMMON,
                  *SIZES["tops"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "key,position,value"
    assert lines[1].startswith('"house ""7"", north",300,')
    assert [row[:2] for row in _csv(result.stdout)[1:]] == [[KEYS[2], str(HOLD + i)] for i in range(3)]


def test_the_output_does_not_depend_on_how_keys_are_interleaved(tmp_path):
    counts = {"m1": HOLD + 200, "m2": HOLD + 100, "m3": HOLD + 60}
    outputs = []
    for shuffle in (1, 2):
        rows = _meter(tmp_path / f"m{shuffle}.tsv", counts, seed=0)
        rng = np.random.default_rng(shuffle)  # a different interleaving of the same per-key sub-streams
        order = {key: iter([row for row in rows if row[1] == key]) for key in counts}
        keys = np.repeat(list(counts), list(counts.values()))
        rng.shuffle(keys)
        (tmp_path / f"m{shuffle}.tsv").write_text(
            "time\tmeter\tkWh\n" + "".join("\t".join(next(order[key])) + "\n" for key in keys))
        result = _run("release", tmp_path / f"m{shuffle}.tsv", "--key-column", "meter", "--time-column", "time",
                      "-o", "-", *COMMON, *SIZES["tops"])
        assert result.exit_code == 0
        outputs.append(_by_key(_csv(result.stdout)[1:]))
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("method", ["tops", "bt"])
@pytest.mark.parametrize("columns", [["--time-column", "time", "--column", "kWh"],
                                     ["--time-column", "time", "--key-column", "meter"]], ids=["time", "key"])
def test_stdin_releases_what_a_file_releases(tmp_path, method, columns):
    _meter(tmp_path / "m.tsv", {"m1": HOLD + 150, "m2": HOLD + 20})
    args = [*columns, "--method", method, "-o", "-", *COMMON, *SIZES[method]]
    from_file = _run("release", tmp_path / "m.tsv", *args)
    from_stdin = _run("release", "-", *args, stdin=(tmp_path / "m.tsv").read_text())
    assert from_file.exit_code == from_stdin.exit_code == 0
    assert from_stdin.stdout == from_file.stdout


def test_the_guarantee_is_stated_per_key(tmp_path):
    _meter(tmp_path / "m.tsv", {"m1": HOLD + 3, "m2": HOLD + 3})
    result = _run("release", tmp_path / "m.tsv", "--key-column", "meter", "--column", "kWh", "-o", "-",
                  *COMMON, *SIZES["tops"])
    assert result.exit_code == 0
    assert "privacy, per key" in result.stderr and "k times this budget" in result.stderr
    assert "released 6 values of 2 keys" in result.stderr


def test_unseeded_keys_draw_from_a_secret_of_the_run(tmp_path):
    _meter(tmp_path / "m.tsv", {"m1": 30, "m2": 30})
    args = ["--key-column", "meter", "--column", "kWh", "--method", "bt", "--epsilon", 1, "--upper-bound", BOUND,
            "-o", "-", "--max-range", 64]
    first, second = _run("release", tmp_path / "m.tsv", *args), _run("release", tmp_path / "m.tsv", *args)
    assert first.exit_code == second.exit_code == 0
    assert "random 32-byte secret drawn for this run" in first.stderr
    assert first.stdout != second.stdout  # fresh noise each run (equal with probability ~0)


def test_parquet_keys_are_read_as_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(4)
    meters = rng.integers(0, 3, 3 * HOLD + 60)
    values = np.round(rng.uniform(0, BOUND, meters.size), 3)
    pq.write_table(pa.table({"t": np.arange(meters.size), "meter": meters, "kWh": values}), tmp_path / "m.parquet")
    result = _run("release", tmp_path / "m.parquet", "--time-column", "t", "--key-column", "meter", "-o", "-",
                  *COMMON, *SIZES["tops"])
    assert result.exit_code == 0, result.output
    rows = [[str(t), str(m), repr(float(v))] for t, m, v in zip(range(meters.size), meters, values)]
    assert _by_key(_csv(result.stdout)[1:]) == {key: got for key, got in _expected(rows, "tops", SEED).items() if got}


def test_clip_counts_the_clipped_values_of_every_key(tmp_path):
    rows = _meter(tmp_path / "m.tsv", {"m1": HOLD + 5, "m2": HOLD + 5})
    rows[0][2], rows[-1][2] = "-1", "99"
    (tmp_path / "m.tsv").write_text("time\tmeter\tkWh\n" + "".join("\t".join(row) + "\n" for row in rows))
    args = ["--key-column", "meter", "--column", "kWh", "-o", "-", *COMMON, *SIZES["tops"]]
    assert _run("release", tmp_path / "m.tsv", *args).exit_code == 1
    clipped = _run("release", tmp_path / "m.tsv", *args, "--clip", "--report-unprotected")
    assert clipped.exit_code == 0
    assert "not protected by the privacy guarantee (--report-unprotected): --clip clipped 2 values outside [0, 5] " \
           "into it." in clipped.stderr
    quiet = _run("release", tmp_path / "m.tsv", *args, "--clip")  # by default: what clipping does, not how often
    assert quiet.exit_code == 0 and quiet.stdout == clipped.stdout
    assert "--clip: values outside [0, 5] are clipped into it" in quiet.stderr and "2 values" not in quiet.stderr


# -- missing values --------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["zero", "skip"])
def test_missing_values_with_keys_and_times(tmp_path, missing):
    rows = _meter(tmp_path / "m.tsv", {"m1": HOLD + 100, "m2": HOLD + 80}, missing=(3, 400, 500, 501))
    result = _run("release", tmp_path / "m.tsv", "--time-column", "time", "--key-column", "meter",
                  "--missing", missing, "-o", "-", *COMMON, *SIZES["tops"], "--report-unprotected")
    assert result.exit_code == 0, result.output
    expected = _expected(rows, "tops", SEED, missing=missing)
    assert _by_key(_csv(result.stdout)[1:]) == expected
    released_times = {time for _, _, time, _ in _csv(result.stdout)[1:]}
    na_times = {rows[i][0] for i in (3, 400, 500, 501)}
    unprotected = "not protected by the privacy guarantee (--report-unprotected): "
    if missing == "skip":  # the rows are dropped: no output row carries their time, later positions move up
        assert not released_times & na_times
        assert unprotected + f"{len(rows) - 4} values read; 4 rows with a missing value skipped" in result.stderr
        assert "on the stream of the rows kept" in result.stderr  # what the guarantee then covers
    else:
        assert unprotected + f"{len(rows)} values read; 4 missing values read as 0" in result.stderr
        assert "rows kept" not in result.stderr
    quiet = _run("release", tmp_path / "m.tsv", "--time-column", "time", "--key-column", "meter",
                 "--missing", missing, "-o", "-", *COMMON, *SIZES["tops"])
    assert quiet.exit_code == 0 and quiet.stdout == result.stdout
    assert "values read" not in quiet.stderr and "first on line" not in quiet.stderr  # no count, no line


def test_a_missing_value_is_an_error_by_default(tmp_path):
    _meter(tmp_path / "m.tsv", {"m1": HOLD + 10}, missing=(5,))
    result = _run("release", tmp_path / "m.tsv", "--key-column", "meter", "--column", "kWh", "-o", "-", *COMMON)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "line 7, column 'kWh', is a missing value 'NA'" in result.stderr


# -- bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--key-column", "kWh", "--column", "kWh"], "--key-column and --column must name different columns, got 'kWh'"),
    (["--time-column", "t", "--key-column", "t"], "--key-column and --time-column must name different columns"),
    (["--time-column", "kWh", "--column", "kWh"], "--time-column and --column must name different columns"),
    (["--key-column", ""], "--key-column must name a column, got ''"),
    (["--time-column", " "], "--time-column must name a column, got ' '"),
    (["--max-keys", 5], "--max-keys applies only with --key-column"),
    (["--key-column", "meter", "--max-keys", 0], "--max-keys must be at least 1, got 0"),
])
def test_usage_errors_exit_2_in_one_line(tmp_path, args, message):
    _meter(tmp_path / "m.tsv", {"m1": 5})
    result = _run("release", tmp_path / "m.tsv", "-o", tmp_path / "out.csv", *args, *COMMON)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(("content", "args", "message"), [
    ("time\tmeter\tkWh\n1\tm\t2\n", ["--key-column", "user", "--column", "kWh"],
     "has no key column 'user'; its columns are 'time', 'meter', 'kWh'"),
    ("time\tmeter\tkWh\n1\tm\t2\n", ["--time-column", "when", "--column", "kWh"], "has no time column 'when'"),
    ("1\n2\n", ["--time-column", "time"], "has no header line, so column 'time' cannot be found"),
    ("time\tmeter\tkWh\n1\tm\t2\n", ["--key-column", "meter"], "choose one with a column name (--column)"),
    ("time\tmeter\tkWh\n1\tm\t2\n1\tm\n", ["--key-column", "meter", "--column", "kWh"], "line 3 has 2 fields"),
    ("time\tmeter\tkWh\n1\ta\t2\n2\tb\t9\n", ["--key-column", "meter", "--column", "kWh", "--method", "bt"],
     "key 'b': stream value at position 0 (0-based)"),
    ("time\tmeter\tkWh\n1\ta\t2\n2\tz\t1\n3\tc\t1\n", ["--key-column", "meter", "--column", "kWh", "--max-keys", 2],
     "key 'c' would be key number 3, more than the limit of 2 keys"),
    # the first bad row in input order is named, whichever key sorts first
    ("time\tmeter\tkWh\n1\tb\t2\n2\tb\t-1\n3\ta\t7\n", ["--key-column", "meter", "--column", "kWh"],
     "key 'b': stream value at position 1 (0-based) must be in [0, 5] (clip=True, or --clip, clips it), got -1."),
    ("time\tmeter\tkWh\n1\ta\t2\n2\tb\t1\n3\tc\t9\n", ["--key-column", "meter", "--column", "kWh", "--max-keys", 2],
     "key 'c' would be key number 3"),
])
def test_input_errors_exit_1_in_one_line(tmp_path, content, args, message):
    (tmp_path / "m.tsv").write_text(content)
    for source, stdin in ((tmp_path / "m.tsv", None), ("-", content)):
        result = _run("release", source, "-o", tmp_path / "out.csv", *args, *COMMON, stdin=stdin)
        assert result.exit_code == 1, result.output
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("Error: ") and message in last, last
        assert not (tmp_path / "out.csv").exists()


def test_no_key_completing_its_hold_out_is_an_error(tmp_path):
    _meter(tmp_path / "m.tsv", {"m1": 10, "m2": 20})
    result = _run("release", tmp_path / "m.tsv", "--key-column", "meter", "--column", "kWh", "-o", "-", *COMMON)
    assert result.exit_code == 1
    assert "ended after 30 values, all within each key's hold-out of 65,536: nothing was released" in result.stderr


# -- the library dispatcher ----------------------------------------------------------------


def test_by_key_batches_equal_one_row_at_a_time():
    rng = np.random.default_rng(5)
    keys = rng.choice(["a", "b", "c"], 3000).tolist()
    values = rng.uniform(0, BOUND, 3000)
    secret = seed_secret(2)
    batched, single = (ByKey(build=lambda key: LIBRARY["tops"](key_bits(secret, key))) for _ in range(2))
    parts = [batched.release(values[i : i + 700], keys[i : i + 700]) for i in range(0, 3000, 700)]
    rows = np.concatenate([part.rows + 700 * i for i, part in enumerate(parts)])
    ones = [(i, single.release_one(value, key)) for i, (value, key) in enumerate(zip(values, keys))]
    ones = [(i, got) for i, got in ones if got is not None]
    assert rows.tolist() == [i for i, _ in ones]
    assert np.concatenate([part.positions for part in parts]).tolist() == [got[0] for _, got in ones]
    assert np.concatenate([part.values for part in parts]).tolist() == [got[1] for _, got in ones]
    assert sum((part.keys for part in parts), []) == [keys[i] for i, _ in ones]


def test_by_key_long_keys_and_limits():
    built = []
    streams = ByKey(build=lambda key: built.append(key) or LIBRARY["bt"](key_bits(seed_secret(0), key)), max_keys=2)
    long = "k" * 500  # grouped as objects, not as a 500-character-wide array
    out = streams.release([1.0, 2.0, 3.0], [long, "b", long])
    assert out.keys == [long, "b", long] and out.positions.tolist() == [0, 0, 1]
    with pytest.raises(KeyLimitError, match="key 'c' would be key number 3, more than the limit of 2"):
        streams.release_one(1.0, "c")
    with pytest.raises(KeyLimitError, match="key 'y' would be key number 3"):  # the first new key in input order
        streams.release([1.0, 1.0, 1.0, 1.0], ["b", "y", long, "x"])
    assert streams.streams["b"].position == 1  # refused before any row was consumed
    with pytest.raises(TypeError, match="keys must be strings, got 3"):
        streams.release([1.0], [3])
    with pytest.raises(ValueError, match="two sequences of one length"):
        streams.release([1.0], ["a", "b"])
    assert sorted(built) == ["b", long]


KEYED = {  # the mechanisms of a durable keyed release: key= mode, one key per key
    "tops": lambda key: ToPS(epsilon=1.0, upper_bound=BOUND, hold=300, max_range=1024, key=key),
    "bt": lambda key: BinaryTreeCounter(epsilon=1.0, upper_bound=BOUND, max_range=1024, key=key),
    "pak": lambda key: PAK(epsilon=1.0, upper_bound=BOUND, hold=300, max_range=1024, key=key),
}
RESTORE = {"tops": ToPS, "bt": BinaryTreeCounter, "pak": PAK}


@pytest.mark.parametrize("method", list(KEYED))
def test_by_key_continues_from_its_snapshot_bit_for_bit(method):
    rng = np.random.default_rng(6)
    keys = rng.choice(["a", "b", "c", "d"], 4000).tolist()
    values = rng.uniform(0, BOUND, 4000)
    secret = seed_secret(3)

    def build(key):
        return KEYED[method](key_secret(secret, key))

    whole = ByKey(build=build).release(values, keys)
    streams = ByKey(build=build)
    first = streams.release(values[:1700], keys[:1700])
    snapshot = decode(encode(streams.state))  # what the state file keeps, back
    assert snapshot["keys"] == list(streams.streams) and snapshot["positions"].sum() == streams.position == 1700
    again = ByKey.from_state(snapshot, build=build, restore=lambda key, state: RESTORE[method].from_state(state))
    rest = again.release(values[1700:], keys[1700:])
    assert np.concatenate([first.values, rest.values]).tobytes() == whole.values.tobytes()
    assert np.concatenate([first.positions, rest.positions]).tolist() == whole.positions.tolist()
    assert again.position == 4000 and again.released_count() == whole.values.size


def test_by_key_from_state_refuses_what_it_cannot_continue():
    streams = ByKey(build=lambda key: KEYED["bt"](key_secret(seed_secret(0), key)))
    streams.release([1.0, 2.0, 3.0], ["a", "b", "c"])
    restore = lambda key, state: BinaryTreeCounter.from_state(state)  # noqa: E731
    with pytest.raises(KeyLimitError, match="holds 3 keys, more than the limit of 2"):
        ByKey.from_state(streams.state, build=streams.build, restore=restore, max_keys=2)
    with pytest.raises(ValueError, match="must be the dict ByKey.state gave"):
        ByKey.from_state(streams.streams["a"].state, build=streams.build, restore=restore)
    shifted = dict(streams.state, positions=np.array([1, 1, 2]))
    with pytest.raises(ValueError, match="key 'c': its mechanism is at position 1, the snapshot records 2"):
        ByKey.from_state(shifted, build=streams.build, restore=restore)
    with pytest.raises(ValueError, match="layout version 9"):
        ByKey.from_state(dict(streams.state, version=9), build=streams.build, restore=restore)


def test_keys_differing_in_a_trailing_nul_are_two_keys():
    streams = ByKey(build=lambda key: LIBRARY["bt"](key_bits(seed_secret(0), key)))
    out = streams.release([1.0, 2.0], ["a", "a\x00"])
    assert out.keys == ["a", "a\x00"] and out.positions.tolist() == [0, 0]


# -- memory: a smart-meter stream through stdin to stdout -------------------------------------


def _smart_meter_csv(path: Path, rows: int, meters: int = 20) -> None:
    """``rows`` readings of ``meters`` meters, one a minute each, 0.1% of them NA, written in blocks."""
    rng = np.random.default_rng(rows)
    start = np.datetime64("2026-01-01T00:00")
    with open(path, "w") as handle:
        handle.write("time,meter,kWh\n")
        for first in range(0, rows, 100_000):
            index = np.arange(first, min(rows, first + 100_000))
            times = (start + (index // meters) * np.timedelta64(1, "m")).astype(str)
            meter = np.char.add("meter-", (index % meters).astype(str))
            kwh = np.round(rng.gamma(2.0, 0.4, index.size).clip(0, BOUND), 3).astype(str).astype(object)
            kwh[rng.random(index.size) < 0.001] = "NA"
            handle.write("".join(f"{t},{m},{v}\n" for t, m, v in zip(times.tolist(), meter.tolist(), kwh.tolist())))


#: The child records its own peak resident set (VmHWM: this process image only, unlike the
#: rusage of a forked child, which also counts the parent's pages before exec) when it exits.
_CHILD = """import atexit, sys
peak = sys.argv.pop(1)
atexit.register(lambda: open(peak, "w").write(open("/proc/self/status").read()))
from dpstream.cli import main
main()
"""


def _peak_rss_kib(source: Path, out: Path) -> int:
    """Peak resident set size of one ``release`` child reading ``source`` on stdin, writing stdout to ``out``."""
    status = out.with_suffix(".status")
    command = [sys.executable, "-c", _CHILD, str(status), "release", "-", "-o", "-",
               "--time-column", "time", "--key-column", "meter", "--missing", "skip", "--epsilon", "1",
               "--upper-bound", str(BOUND), "--hold", "1000", "--max-range", "4096", "--seed", "1"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with open(source) as stdin, open(out, "w") as stdout:
        subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, env=env, check=True)
    line = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1])  # kB


def test_peak_memory_does_not_grow_with_rows(tmp_path):
    small, large = 50_000, 500_000
    peaks = {}
    for rows in (small, large):
        _smart_meter_csv(tmp_path / f"{rows}.csv", rows)
        peaks[rows] = _peak_rss_kib(tmp_path / f"{rows}.csv", tmp_path / f"{rows}.out")
        with open(tmp_path / f"{rows}.out") as handle:
            assert next(handle) == "key,position,time,value\n"
            written = sum(1 for _ in handle)
        assert rows - 20 * 1000 - rows // 200 < written < rows - 20 * 1000  # all but the hold-outs and the NAs
    # Kept per row, the 450,000 extra rows would take more than 450,000 x (8-byte value + 50-byte time
    # and key strings) ~ 25 MiB; 8 MiB of slack is allocator noise.
    assert peaks[large] - peaks[small] < 8 * 1024, peaks
