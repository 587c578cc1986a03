"""One input grammar for every engine: Spark's reader of ``release --engine spark``
(:func:`dpstream.spark.by_key.read_keyed`) against the local reader (:class:`dpstream.io.StreamReader`)
on the cases of ``tests/test_bad_inputs.py`` that apply to keyed input and the number grammar of
``tests/test_io_rules.py``: the same values accepted with the same keys, the same one-line error
naming the same line otherwise, and no stack trace on the command line.

The cases share one Spark session and run a few at a time (Spark runs concurrent jobs), so that
the family stays within a minute or two.
"""

from __future__ import annotations

import gzip
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.io import InputError, StreamReader
from dpstream.spark.by_key import read_keyed

#: Values the local reader accepts (tests/test_io_rules.py), and the spellings it refuses.
GOOD = ["0", "-0", "+2", "2.", ".5", "-.5", "1e3", "1E-3", "2.5e+2", " 7 ", '"8"', "'9.5'", "1.e2", "1e308"]
BAD = ["1_0", "1_000.5", "1e1_0", "0x1A", "0b11", "inf", "-inf", "+Infinity", "INF", "1.5e", "e5", "1e", ".", "-",
       "+-1", "1.2.3", "1 2", "\u0661\u0662", "\uff11", "12abc", "1d5", "0o7", "1j", "5d", "5f", "0x1p3", "1e999",
       "-2e400", "abc", "9" * 5000, "x" * 100_000]
MISSING = ["", "NA", "na", "NaN", "nan", "null", "NULL", "Null", "N/A", "None", "-nan", "NAN1", "NA NA"]
ROWS = "a,1\nb,2\n"

#: Whole files: layouts, keys and headers.
FILES = {
    "extra-field": "meter,kwh\na,1\nb,2,3\n",
    "short-row": "meter,kwh\na,1\nb\n",
    "trailing-separator": "meter,kwh\na,1\nb,2,\n",
    "blank-inside": "meter,kwh\na,1\n\nb,2\n",
    "blanks-at-the-end": "meter,kwh\na,1\nb,2\n\n  \n\n",
    "blank-only-after-header": "meter,kwh\n\n\n",
    "keys": "meter,kwh\n,1\n\"a\",2\n' b ',3\n\"\",4\n  c  ,5\nNA,6\n",
    "tabs": "meter\tkwh\na\t1\nb\t2\n",
    "crlf": "meter,kwh\r\na,1\r\nb,2\r\n",
    "bom": "\ufeffmeter,kwh\na,1\n",
    "quoted-header": "\"meter\",'kwh'\na,1\n",
    "three-columns": "time,meter,kwh\n1,a,1\n",
    "duplicate-columns": "meter,kwh,kwh\na,1,2\n",
    "no-header": "a,1\nb,2\n",
    "no-key-column": "house,kwh\na,1\n",
    "header-only": "meter,kwh\n",
    "empty": "",
    "junk": "abc\n",
    "long-line": "x" * 100_000 + "\n",
    "negative": "meter,kwh\na,-3\n",
}


def _local(path: Path) -> tuple | str:
    try:
        with StreamReader(path, key_column="meter") as reader:
            batches = list(reader.batches(7))  # small batches: chunk edges fall everywhere
    except InputError as error:
        return str(error)
    keys = [key for batch in batches for key in batch.keys]
    values = np.concatenate([batch.values for batch in batches]) if batches else np.empty(0)
    first = 1 if path.suffix == ".parquet" else 2  # Parquet rows count from 1, text lines from the header
    rows = np.concatenate([batch.lines for batch in batches]) - first if batches else np.empty(0, np.int64)
    return keys, values.tolist(), rows.tolist()


def _spark(spark, path: Path) -> tuple | str:
    try:
        table = read_keyed(spark, path, key_column="meter").toArrow().sort_by("row")
    except InputError as error:
        return str(error)
    return table["key"].to_pylist(), table["value"].to_pylist(), table["row"].to_pylist()


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    root = tmp_path_factory.mktemp("grammar")
    files = {}
    for text in GOOD + BAD + MISSING:
        files[f"value {text[:12]!r}"] = f"meter,kwh\n{ROWS}c,{text}\nd,4\n"
    files.update(FILES)
    paths = {}
    for name, text in files.items():
        paths[name] = root / f"case-{len(paths)}.csv"
        paths[name].write_text(text, encoding="utf-8", newline="")
    return paths


@pytest.fixture(scope="module")
def results(spark, cases):
    with ThreadPoolExecutor(4) as pool:
        spark_results = dict(zip(cases, pool.map(lambda path: _spark(spark, path), cases.values())))
    return {name: (_local(path), spark_results[name]) for name, path in cases.items()}


def test_spark_reads_every_case_as_the_local_reader(results):
    differ = {name: both for name, both in results.items() if both[0] != both[1]}
    assert not differ, differ
    assert sum(isinstance(local, str) for local, _ in results.values()) >= len(BAD) + 10  # errors were met
    for local, _ in results.values():
        assert not isinstance(local, str) or "\n" not in local


def test_the_grammar_cases_say_what_the_issue_found(results):
    """5d, 5f, 0x1p3 and an extra field were released; NA, abc, 1_0 and full-width digits crashed; an empty
    key was refused."""
    messages = {name: spark for name, (_, spark) in results.items()}
    found = [message for name, message in messages.items() if name.startswith("value ") and isinstance(message, str)]
    for text in ("'5d'", "'5f'", "'0x1p3'", "'NA'", "'abc'", "'1_0'", "'\uff11'"):
        assert any("line 4, column 'kwh', is" in message and text in message for message in found), text
    assert "line 3 has 3 fields, but the header (line 1) has 2" in messages["extra-field"]
    keys, values, rows = messages["keys"]
    assert keys == ["", "a", "b", "", "c", "NA"] and values == [1, 2, 3, 4, 5, 6] and rows == [0, 1, 2, 3, 4, 5]
    assert messages["empty"] == messages["header-only"] == ([], [], [])


def test_invalid_utf8_names_its_line(spark, tmp_path):
    """Near line 1 the driver meets a bad byte as the local reader does, with its words; further on, where the
    local reader names the byte in its decoding buffer, Spark names the byte in the line (docs/input.md)."""
    near = tmp_path / "near.csv"
    near.write_bytes(b"meter,kwh\na,1\nb,\xff2\nc,3\n")
    assert _spark(spark, near) == _local(near) == f"{near} is not UTF-8 text (invalid start byte at byte 16)."
    far = tmp_path / "far.csv"
    far.write_bytes(b"meter,kwh\n" + b"a,1\n" * 30000 + b"b,\xff2\nc,3\n")
    assert "is not UTF-8 text" in _local(far)
    assert _spark(spark, far) == f"{far} is not UTF-8 text (invalid start byte at byte 2 of line 30002)."


def test_many_partitions_number_lines_as_one_file(spark, tmp_path):
    """Lines split among partitions keep their numbers in the file; blank lines end a partition but not the
    stream (an error), or end the stream (no rows)."""
    rng = np.random.default_rng(3)
    rows = [f"k{rng.integers(0, 5)},{value:.3f}" for value in rng.uniform(0, 10, 3000)]
    good = tmp_path / "good.csv"
    good.write_text("meter,kwh\n" + "\n".join(rows) + "\n\n\n")
    bad_rows = list(rows)
    bad_rows[2500] = "k1,0x10"
    bad = tmp_path / "bad.csv"
    bad.write_text("meter,kwh\n" + "\n".join(rows[:1200]) + "\n\n" + "\n".join(bad_rows[1200:]) + "\n")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4k")
    try:
        assert spark.read.text(str(good)).rdd.getNumPartitions() > 4
        assert _spark(spark, good) == _local(good)
        assert _spark(spark, bad) == _local(bad) == (f"{bad} line 1202 is blank, but the header (line 1) has 2; "
                                                      "every line needs the same number of fields.")
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def test_parquet_is_judged_as_the_local_reader_judges_it(spark, tmp_path):
    cases = {
        "nan.parquet": pa.table({"meter": ["a", "b", None], "kwh": [1.0, float("nan"), 2.0]}),
        "inf.parquet": pa.table({"meter": ["a", "b"], "kwh": [1.0, float("inf")]}),
        "text.parquet": pa.table({"meter": ["a", "b"], "kwh": ["1", "2"]}),
        "ok.parquet": pa.table({"meter": ["a", None, "b"], "kwh": pa.array([1, 2, 3], pa.int32())}),
    }
    for name, table in cases.items():
        pq.write_table(table, tmp_path / name)
        assert _spark(spark, tmp_path / name) == _local(tmp_path / name), name
    assert _spark(spark, tmp_path / "ok.parquet") == (["a", "", "b"], [1.0, 2.0, 3.0], [0, 1, 2])


def _release(path: Path, engine: str, output: Path, *extra: str):
    return CliRunner().invoke(cli, ["release", str(path), "--key-column", "meter", "--epsilon", "1", "--upper-bound",
                                    "10", "--hold", "2", "--max-range", "16", "--seed", "1", *extra, "--engine",
                                    engine, "-o", str(output)])


def test_the_command_line_says_what_the_local_engine_says(spark, cases, tmp_path):
    """Exit code, stderr and output of both engines, on inputs refused and accepted; no traceback."""
    truncated = tmp_path / "truncated.csv.gz"
    text = "meter,kwh\n" + "".join(f"m{i % 7},{(i * 37) % 10}.{i % 997}\n" for i in range(30000))
    packed = gzip.compress(text.encode())
    truncated.write_bytes(packed[: len(packed) // 2])
    names = ["keys", "extra-field", "blank-inside", "no-header", "empty", "negative", "value '1_0'"]
    for path in [cases[name] for name in names] + [tmp_path / "missing.csv", truncated]:
        runs = {engine: _release(path, engine, tmp_path / f"{engine}.csv", "--force") for engine in ("local", "spark")}
        local, spark_run = runs["local"], runs["spark"]
        assert spark_run.exit_code == local.exit_code, (path, spark_run.output)
        assert "Traceback" not in spark_run.output and spark_run.exc_info[0] is SystemExit
        if path == truncated:  # the local reader's gzip module and Spark's say it differently
            assert spark_run.stderr.splitlines()[-1].startswith(f"Error: {truncated} is not a valid gzip file (")
            assert len([line for line in spark_run.stderr.splitlines() if line.startswith("Error")]) == 1
            continue
        assert spark_run.stderr == local.stderr, path
        if local.exit_code == 0:
            assert (tmp_path / "spark.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()


def test_a_value_outside_the_bound_in_an_earlier_batch_comes_before_a_bad_line(spark, tmp_path, monkeypatch):
    """The local engine reads a batch whole before releasing it: a bad line stops it first within its batch,
    a value outside [0, B] of an earlier batch first otherwise; Spark says the same."""
    monkeypatch.setattr("dpstream.cli.release._CHUNK", 300)
    rng = np.random.default_rng(6)
    rows = [f"k{rng.integers(0, 3)},{value:.2f}" for value in rng.uniform(0, 10, 1000)]
    rows[100] = "k1,-4"
    for bad_row, expected in ((700, "key 'k1': stream value"), (150, "line 152, column 'kwh', is not a number")):
        lines = list(rows)
        lines[bad_row] = "k2,4x"
        path = tmp_path / f"rows-{bad_row}.csv"
        path.write_text("meter,kwh\n" + "\n".join(lines) + "\n")
        runs = {engine: _release(path, engine, tmp_path / f"{engine}-{bad_row}.csv") for engine in ("local", "spark")}
        assert runs["spark"].exit_code == runs["local"].exit_code == 1
        assert runs["spark"].stderr == runs["local"].stderr and expected in runs["spark"].stderr


def test_read_table_is_deprecated(spark, cases):
    from dpstream.spark.by_key import read_table

    with pytest.warns(DeprecationWarning, match="use dpstream.spark.by_key.read_keyed"):
        assert read_table(spark, str(cases["keys"])).columns == ["meter", "kwh"]


def test_a_master_spark_cannot_start_is_a_usage_error_without_a_java_stack(cases, tmp_path):
    """Spark's launcher printed its Java stack and Python a traceback for --spark-master nope."""
    result = _release(cases["keys"], "spark", tmp_path / "o.csv", "--spark-master", "nope")
    assert result.exit_code == 2 and "Traceback" not in result.output and not (tmp_path / "o.csv").exists()
    assert result.stderr.splitlines()[-1] == ("Error: Invalid value for '--spark-master': expected a Spark master URL "
                                              "starting with local, spark://, yarn, k8s://, got 'nope'.")
