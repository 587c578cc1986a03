"""``dpstream aggregate``: the command, its one-line errors and its durable release under kills."""

from __future__ import annotations

import re

import click
import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.cli.aggregate as aggregate_command
import dpstream.io.rows as rows
from dpstream.cli import cli
from durable_faults import killed_until_finished

BASE = ["--time-column", "time", "--unit-column", "meter", "--column", "kWh", "--bucket", "1h", "--unit-window", "1d",
        "--unit-bound", "8", "--epsilon", "1", "--upper-bound", "2", "--clip", "--seed", "4"]


def _csv(path, *, days=2, meters=6, seed=0, partitions=False):
    rng = np.random.default_rng(seed)
    lines = ["time,meter,kWh" + (",feeder" if partitions else "")]
    for hour in range(24 * days):
        stamp = f"2024-03-{1 + hour // 24:02d} {hour % 24:02d}:{int(rng.integers(60)):02d}:00"  # a space, no offset
        for meter in rng.permutation(meters):
            value = "NA" if rng.random() < 0.02 else f"{rng.gamma(2, 0.3):.3f}"
            lines.append(f"{stamp},m{meter},{value}" + (f",f{meter % 2}" if partitions else ""))
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(*args):
    return CliRunner().invoke(cli, ["aggregate", *map(str, args)])


def test_the_output_is_one_row_per_bucket_and_partition_in_time_order(tmp_path):
    data = _csv(tmp_path / "in.csv", partitions=True)
    (tmp_path / "parts").write_text("f0\nf1\n")
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, "--missing", "zero", "--partition-column", "feeder",
                  "--partitions", tmp_path / "parts", "--unit-max-partitions", "1")
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0] == "bucket,partition,value" and len(lines) == 1 + 48 * 2
    assert lines[1].startswith("2024-03-01T00:00:00Z,f0,") and lines[2].startswith("2024-03-01T00:00:00Z,f1,")
    assert lines[-1].startswith("2024-03-02T23:00:00Z,f1,")
    assert "each meter's readings in each UTC day: ε = 1; over 2 days: ε = 2 by composition" in result.output


@pytest.mark.parametrize(("extra", "code", "message"), [
    (["--bucket", "7m"], 2, "whole number of buckets"),
    (["--bucket", "30min"], 2, "is not an integer and s, m, h or d"),
    (["--missing", "error"], 1, "the value is missing"),
    (["--partition-column", "feeder"], 2, "--partition-column and --partitions go together"),
])
def test_bad_options_and_inputs_are_one_line_errors(tmp_path, extra, code, message):
    data = _csv(tmp_path / "in.csv")
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, *extra)
    assert result.exit_code == code and message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(("extra", "message"), [
    ([], "row 2: its time 2040-01-01T00:00:00Z comes 18262d after the newest bucket before it: the 26,297,280 "
         "buckets up to it would all be released (26,297,280 values, more than the 4,194,304 a gap releases without "
         "--max-gap); --max-gap 18262d releases them."),
    (["--max-gap", "30d"], "row 2: its time 2040-01-01T00:00:00Z comes 18262d after the newest bucket before it, "
                           "more than --max-gap 30d: every bucket in between would be released"),
    (["--allowed-lateness", "1h"], "row 2: its time 2040-01-01T00:00:00Z comes 18262d after the newest bucket"),
    (["--max-gap", "30d", "--state", "s.json"], "comes 18262d after the newest bucket before it, more than"),
])
def test_a_long_gap_is_refused_before_any_work_naming_it_and_max_gap(tmp_path, monkeypatch, extra, message):
    """Every bucket between two rows is released (time is public): 50 years of minutes would take minutes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gap.csv").write_text("time,meter,kWh\n1990-01-01T00:00:00Z,a,1\n2040-01-01T00:00:00Z,a,1\n")
    options = [arg if arg != "1h" else "1m" for arg in BASE]
    result = _run(tmp_path / "gap.csv", "-o", tmp_path / "out.csv", *options, *extra)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


def test_late_rows_unknown_partitions_and_missing_units_are_refused(tmp_path):
    rows = "time,meter,kWh,feeder\n2024-03-01T01:00:00Z,a,1,f0\n2024-03-01T00:00:00+00:00,a,1,f0\n"
    (tmp_path / "late.csv").write_text(rows)
    (tmp_path / "parts").write_text("f0\n")
    late = _run(tmp_path / "late.csv", "-o", tmp_path / "o1", *BASE)
    assert late.exit_code == 1 and "row 2: its bucket was released already" in late.output
    dropped = _run(tmp_path / "late.csv", "-o", tmp_path / "o1", *BASE, "--late", "drop")
    assert dropped.exit_code == 0
    (tmp_path / "bad.csv").write_text(rows.replace(",f0\n2024", ",f9\n2024"))
    unknown = _run(tmp_path / "bad.csv", "-o", tmp_path / "o2", *BASE, "--partition-column", "feeder",
                   "--partitions", tmp_path / "parts")
    assert unknown.exit_code == 1 and "row 1: the partition 'f9' is not one of the public partitions" in unknown.output
    (tmp_path / "nounit.csv").write_text("time,meter,kWh\n2024-03-01T01:00:00Z,,1\n")
    missing = _run(tmp_path / "nounit.csv", "-o", tmp_path / "o3", *BASE)
    assert missing.exit_code == 1 and "row 1: the unit ('meter') is missing" in missing.output


def test_kill_and_resume_with_state_writes_what_an_uninterrupted_run_writes(tmp_path, monkeypatch):
    data = _csv(tmp_path / "in.csv", days=3)
    options = [*BASE, "--missing", "skip", "--checkpoint-seconds", "0"]
    monkeypatch.setattr(rows, "_BLOCK", 1500)  # CSV batches of about 40 rows: many commits to kill
    monkeypatch.setattr(aggregate_command, "_BATCH", 40)
    whole = _run(data, "-o", tmp_path / "whole.csv", "--state", tmp_path / "whole.state", *options)
    assert whole.exit_code == 0, whole.output
    expected = (tmp_path / "whole.csv").read_bytes()
    result, kills = killed_until_finished(
        monkeypatch, lambda: _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "out.state", *options),
        seed=11, tries=40)
    assert result.exit_code == 0 and kills >= 3, result.output
    assert (tmp_path / "out.csv").read_bytes() == expected
    again = _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "out.state", *options)
    assert again.exit_code == 0 and "nothing new" in again.output
    assert (tmp_path / "out.csv").read_bytes() == expected


def test_sort_orders_a_file_written_meter_by_meter(tmp_path):
    data = _csv(tmp_path / "in.csv", days=2)
    lines = data.read_text().splitlines()
    by_meter = sorted(lines[1:], key=lambda line: line.split(",")[1])  # meter by meter, time order inside
    (tmp_path / "meters.csv").write_text("\n".join([lines[0], *by_meter]) + "\n")
    ordered = sorted(lines[1:], key=lambda line: line.split(",")[0])  # what --sort makes of it (stable)
    (tmp_path / "ordered.csv").write_text("\n".join([lines[0], *sorted(by_meter, key=lambda x: x.split(",")[0])])
                                          + "\n")
    assert len(ordered) == len(by_meter)
    refused = _run(tmp_path / "meters.csv", "-o", tmp_path / "a.csv", *BASE, "--missing", "zero")
    assert refused.exit_code == 1 and "its bucket was released already" in refused.output
    sorted_run = _run(tmp_path / "meters.csv", "-o", tmp_path / "b.csv", *BASE, "--missing", "zero", "--sort")
    plain = _run(tmp_path / "ordered.csv", "-o", tmp_path / "c.csv", *BASE, "--missing", "zero")
    assert sorted_run.exit_code == 0 and plain.exit_code == 0
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "c.csv").read_bytes()


def test_start_releases_from_a_public_time_and_refuses_rows_before_it(tmp_path):
    data = _csv(tmp_path / "in.csv", days=2)
    later = _run(data, "-o", tmp_path / "a.csv", *BASE, "--missing", "zero", "--start", "2024-02-28T06:00:00Z")
    assert later.exit_code == 0, later.output
    lines = (tmp_path / "a.csv").read_text().splitlines()
    assert lines[1].startswith("2024-02-28T00:00:00Z,,") and len(lines) == 1 + 24 * 4  # empty days 28 and 29 too
    early = _run(data, "-o", tmp_path / "b.csv", *BASE, "--missing", "zero", "--start", "2024-03-02")
    assert early.exit_code == 1 and "row 1: its bucket was released already or lies before the start" in early.output
    bad = _run(data, "-o", tmp_path / "c.csv", *BASE, "--start", "soon")
    assert bad.exit_code == 2 and "--start must be a time" in bad.output


def test_a_state_run_says_buckets_released_never_the_rows_it_consumed(tmp_path):
    """Under unit-level privacy the number of rows is data (a household's readings): the durable release's closing
    line said "N input values consumed, N released" (both the row count); it now says the public buckets."""
    data = _csv(tmp_path / "in.csv", days=2)
    first = _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero")
    assert first.exit_code == 0, first.output
    assert "released 48 buckets in this run (new release;" in first.output
    again = _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero")
    assert again.exit_code == 0 and "nothing new" in again.output
    rows = str(len(data.read_text().splitlines()) - 1)
    for output in (first.output, again.output):
        assert "consumed," not in output and rows not in output.replace(",", "")


def test_budget_and_a_stopped_run_never_print_the_rows_an_aggregate_consumed(tmp_path, monkeypatch):
    """``dpstream budget`` of an aggregate's state and the line of a stopped run leave out the numbers of rows (data
    under the unit-level relation) that they print for a stream (whose positions are public)."""
    data = _csv(tmp_path / "in.csv", days=2)
    rows = f"{len(data.read_text().splitlines()) - 1:,}"
    assert _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero").exit_code == 0
    shown = CliRunner().invoke(cli, ["budget", str(tmp_path / "s")])
    assert shown.exit_code == 0, shown.output
    assert "unit level" in shown.output and "not shown" in shown.output
    assert f"{rows} input values" not in shown.output and f"[0, {rows})" not in shown.output
    assert "positions [first, last)" not in shown.output and f"  {rows}  " not in shown.output

    import dpstream.cli._durable as durable

    said: list[str] = []
    monkeypatch.setattr(durable, "say", said.append)

    class Run:  # what stopped() reads of a durable run
        output_path = "out.csv"
        saved = type("Saved", (), {"released": 48, "consumed": 1234})()

    for counts in (True, False):
        with pytest.raises(click.exceptions.Exit):
            durable.stopped(Run(), KeyboardInterrupt(), counts=counts)
    assert "1,234 input values consumed" in said[0] and "1,234" not in said[1] and "48" not in said[1]


def test_a_resume_refused_says_what_is_wrong_without_counting_the_rows(tmp_path):
    """A state resumed on a shorter or a changed input is refused; for a stream the refusal counts the values and
    names the positions (public), for an aggregate neither (the rows a unit-level release consumed are data)."""
    data = _csv(tmp_path / "in.csv", days=2)
    lines = data.read_text().splitlines()
    rows = len(lines) - 1
    assert _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero").exit_code == 0
    (tmp_path / "short.csv").write_text("\n".join(lines[:-40]) + "\n")
    short = _run(tmp_path / "short.csv", "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing",
                 "zero")
    assert short.exit_code == 1 and "the input ends before the rows the state" in short.output, short.output
    changed = lines[:10] + [lines[10].rsplit(",", 1)[0] + ",1.999"] + lines[11:]
    (tmp_path / "changed.csv").write_text("\n".join(changed) + "\n")
    edited = _run(tmp_path / "changed.csv", "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE,
                  "--missing", "zero")
    assert edited.exit_code == 1 and "the input differs from the one the state consumed (read from" in edited.output
    for output in (short.output, edited.output):
        [error] = [line for line in output.splitlines() if line.startswith("Error: ")]  # one line
        numbers = set(re.findall(r"\d[\d,]*", error.replace(str(tmp_path), "")))
        assert not numbers & {str(rows), f"{rows:,}", str(rows - 40), f"{rows - 40:,}"}, error
        assert "positions" not in error

    values = tmp_path / "values.txt"  # a stream: its length is public, and said
    values.write_text("\n".join(["1"] * 300) + "\n")
    assert CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "v.txt"), "--state",
                                    str(tmp_path / "v"), "--epsilon", "1", "--upper-bound", "2", "--method", "bt",
                                    "--seed", "1"]).exit_code == 0
    values.write_text("\n".join(["1"] * 200) + "\n")
    stream = CliRunner().invoke(cli, ["release", str(values), "-o", str(tmp_path / "v.txt"), "--state",
                                      str(tmp_path / "v"), "--epsilon", "1", "--upper-bound", "2", "--method", "bt",
                                      "--seed", "1"])
    assert stream.exit_code == 1 and "the input holds 200 values, but the state" in stream.output, stream.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--seed", "-1"], "seed must be an integer >= 0, got -1"),
    (["--state", "s.json", "--checkpoint-seconds", "nan"], "--checkpoint-seconds': must be a number of seconds >= 0"),
    (["--unit-max-partitions", "2"], "--unit-max-partitions applies with --partition-column and --partitions only"),
    (["--bucket", "99999999999999999999d"], "at most 36500d (100 years), got '99999999999999999999d'"),
    (["--bucket", "1s", "--unit-window", "1000d"], "is more than the 4,194,304 leaves held in memory"),
    (["--unit-max-partitions", "99999999999999999999999", "--partition-column", "feeder", "--partitions", "P"], None),
])
def test_bad_values_of_options_are_usage_errors_before_any_reading(tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "P").write_text("f0\nf1\n")
    data = _csv(tmp_path / "in.csv", partitions=True)
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, "--missing", "zero", *extra)
    if message is None:  # a partition bound above the partitions: no bound, not numpy's "maximum dimension"
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("flag", ["-o", "--state"])
def test_the_partitions_file_is_never_written_over(tmp_path, flag):
    data = _csv(tmp_path / "in.csv", partitions=True)
    (tmp_path / "parts").write_text("f0\nf1\n")
    paths = {"-o": tmp_path / "out.csv", "--state": tmp_path / "s"}
    paths[flag] = tmp_path / "parts"
    result = _run(data, "-o", paths["-o"], "--state", paths["--state"], *BASE, "--missing", "zero", "--force",
                  "--partition-column", "feeder", "--partitions", tmp_path / "parts")
    assert result.exit_code == 2 and f"{flag} and --partitions must name different files" in result.output
    assert (tmp_path / "parts").read_text() == "f0\nf1\n"


@pytest.mark.parametrize(("header", "row", "message"), [
    ("time,meter,kWh,kWh", "2024-03-01T00:00:00Z,m1,1,2", "has 2 columns named 'kWh': which one is meant is ambiguous"),
    ("time,kWh", "2024-03-01T00:00:00Z,1", "has no column 'meter'; its columns are 'time', 'kWh'."),
    ("time,meter,kWh", "2024-03-01T00:00:00Z,m1,abc", "the value column 'kWh' holds 'abc', not a number."),
    ("time,meter,kWh", "9999-12-31T00:00:00Z,m1,1", "row 1: the time '9999-12-31T00:00:00Z' is outside the years"),
])
def test_bad_files_are_one_line_errors_naming_the_problem(tmp_path, header, row, message):
    (tmp_path / "in.csv").write_text(f"{header}\n{row}\n")
    result = _run(tmp_path / "in.csv", "-o", tmp_path / "out.csv", *BASE)
    assert result.exit_code == 1 and message in result.output, result.output
    assert not (tmp_path / "out.csv").exists()


def test_a_truncated_gzip_input_is_an_error_not_an_abort(tmp_path):
    import gzip

    whole = gzip.compress(_csv(tmp_path / "in.csv").read_bytes())
    (tmp_path / "cut.csv.gz").write_bytes(whole[: len(whole) // 2])
    result = _run(tmp_path / "cut.csv.gz", "-o", tmp_path / "out.csv", *BASE, "--missing", "zero")
    assert result.exit_code == 1 and "cut.csv.gz is not a readable gzip file" in result.output, result.output


def test_a_partitions_file_that_is_not_utf8_is_a_usage_error(tmp_path):
    data = _csv(tmp_path / "in.csv", partitions=True)
    (tmp_path / "parts").write_bytes(b"f0\n\xff\xfe\n")
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, "--partition-column", "feeder", "--partitions",
                  tmp_path / "parts")
    assert result.exit_code == 2 and "is not UTF-8 text (byte 4)" in result.output, result.output


def test_an_error_after_sort_says_its_row_is_numbered_in_time_order(tmp_path):
    (tmp_path / "in.csv").write_text("time,meter,kWh\n2024-03-01T05:00:00Z,a,1\n2024-03-01T01:00:00Z,b,9\n")
    options = [opt for opt in BASE if opt != "--clip"]
    result = _run(tmp_path / "in.csv", "-o", tmp_path / "out.csv", *options, "--sort")
    assert result.exit_code == 1 and "row 1: the value 9.0 is not in [0, 2]" in result.output
    assert "--sort: rows are numbered in time order, not as in the file" in result.output


@pytest.mark.parametrize(("window", "said"), [("2d", "over 2 windows: ε = 2 by composition"),
                                              ("3h", "over 16 windows: ε = 16 by composition"),
                                              ("1h", "over 48 hours: ε = 48 by composition")])
def test_the_composition_counts_windows_when_a_window_is_not_a_day_or_an_hour(tmp_path, window, said):
    """With --unit-window 3h it said "over 16 hourss: ε = 16", which reads as 16 hours (they were 48)."""
    data = _csv(tmp_path / "in.csv", days=2)
    options = [*BASE[:BASE.index("--unit-window") + 1], window, *BASE[BASE.index("--unit-window") + 2:]]
    result = _run(data, "-o", tmp_path / "out.csv", *options, "--missing", "zero")
    assert result.exit_code == 0 and said in result.output, result.output


def test_a_resumed_run_keeps_no_batch_that_earlier_runs_consumed(tmp_path, monkeypatch):
    """The rows skipped on resume (consumed by earlier runs) are read and let go: memory stays constant in the
    input, however much of it earlier runs consumed."""
    data = _csv(tmp_path / "in.csv", days=2)
    monkeypatch.setattr(rows, "_BLOCK", 512)  # batches of a few rows: earlier runs consumed many of them
    first = _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero")
    assert first.exit_code == 0, first.output
    with data.open("a") as handle:  # a third day: the run skips two days of batches, then releases the third
        handle.write("".join(f"2024-03-03 {hour:02d}:10:00,m{meter},0.5\n" for hour in range(24) for meter in range(6)))
    held = []
    batches = aggregate_command._batches
    monkeypatch.setattr(aggregate_command, "_batches", lambda rows, kept: held.append(kept) or batches(rows, kept))
    again = _run(data, "-o", tmp_path / "out.csv", "--state", tmp_path / "s", *BASE, "--missing", "zero")
    assert again.exit_code == 0, again.output
    assert "released 24 buckets in this run (resumed;" in again.output
    assert held == [[]]


def test_the_means_standard_error_is_said_to_be_its_sums_only(tmp_path):
    # the mean's line read "standard error of every released bucket's noise ... (exact: the noise is linear)",
    # but a mean is a noisy sum over a noisy count: the number is its sum's noise only
    data = _csv(tmp_path / "in.csv")
    result = _run(data, "-o", tmp_path / "out.csv", *BASE, "--missing", "zero", "--statistic", "mean",
                  "--unit-max-rows", "24", "--standard-error")
    assert result.exit_code == 0, result.output
    assert "standard error of the noise of every released bucket's sum: " in result.output
    assert "the noise is linear" not in result.output


def test_standard_errors_is_spelled_as_releases_and_the_former_spelling_still_works(tmp_path):
    # aggregate spelled it --standard-error, release --standard-errors
    data = _csv(tmp_path / "in.csv")
    said = [_run(data, "-o", tmp_path / f"{flag}.csv", *BASE, "--missing", "zero", flag)
            for flag in ("--standard-errors", "--standard-error")]
    assert all(result.exit_code == 0 for result in said), [result.output for result in said]
    lines = [[line for line in result.output.splitlines() if line.startswith("standard error")] for result in said]
    assert len(lines[0]) == 1 and lines[0] == lines[1]
    assert (tmp_path / "--standard-errors.csv").read_bytes() == (tmp_path / "--standard-error.csv").read_bytes()
    shown = CliRunner().invoke(cli, ["aggregate", "--help"]).output
    assert "--standard-errors" in shown and "--standard-error " not in shown
