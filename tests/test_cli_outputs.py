"""Every command checks where it writes in one place, before any work, with one wording."""

import dataclasses

import click
import pytest
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.cli._outputs import prepare_output


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


# -- Outputs that never lie: one test per finding; subprocesses where descriptors or signals matter ----

import errno  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from dpstream import ToPS  # noqa: E402
from dpstream.cli._outputs import output_file  # noqa: E402

#: A release every test below can run on a short stream.
OPTIONS = ["--epsilon", "1", "--upper-bound", "100", "--hold", "50", "--max-range", "64", "--seed", "1"]
#: Temporary outputs: ``.NAME.dpstream-PID-RANDOM.tmp``.
TEMP = re.compile(r"^\..*\.dpstream-\d+-[0-9a-f]{8}\.tmp$")
#: Seconds any subprocess may take.
TIMEOUT = 60


def _stream(path, size=300, seed=0):
    values = np.random.default_rng(seed).integers(0, 31, size=size).astype(float)
    path.write_text("\n".join(str(v) for v in values) + "\n")
    return values


def _expected(values, seed=1):
    return ToPS(epsilon=1, upper_bound=100, hold=50, max_range=64, seed=seed).release(values)


def _command(*args):
    return [sys.executable, "-m", "dpstream.cli", *[str(arg) for arg in args]]


def _hidden(directory):
    return sorted(path.name for path in directory.iterdir() if path.name.startswith("."))


def _wait_for(predicate, what, seconds=TIMEOUT):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _temps(directory):
    return [path for path in directory.iterdir() if TEMP.match(path.name)]


def test_a_temporary_output_is_unique_and_named_for_its_process(tmp_path):
    target = tmp_path / "out.txt"
    with output_file(target) as first:
        names = [path.name for path in _temps(tmp_path)]
        assert len(names) == 1 and f".out.txt.dpstream-{os.getpid()}-" in names[0]
        first.write("first\n" * 1000)
        with pytest.raises(click.ClickException, match="being written by another dpstream process"):
            with output_file(target) as second:  # a second writer of the same output while the first runs
                second.write("second\n" * 10)
    # the first is written whole; nothing is left behind
    assert target.read_text() == "first\n" * 1000 and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_two_releases_to_one_output_never_mix(tmp_path):
    """Two live releases to one --output: the second refuses while the first runs, which is written whole."""
    source = tmp_path / "in.txt"
    values = _stream(source, size=2000)
    out = tmp_path / "out.txt"
    lines = source.read_bytes().splitlines(keepends=True)
    runs = {}

    def start(seed):
        runs[seed] = subprocess.Popen(_command("release", "-", "-o", out, *OPTIONS[:-1], seed, "--force"),
                                      stdin=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)

    try:
        start(1)
        runs[1].stdin.write(b"".join(lines[:1000]))  # the first is midway when the second runs whole
        runs[1].stdin.flush()
        _wait_for(lambda: any(path.name.startswith(".out.txt") and path.stat().st_size > 0
                              for path in tmp_path.iterdir()), "the first release's temporary output")
        start(2)
        _, err = runs[2].communicate(b"".join(lines), timeout=TIMEOUT)
        assert runs[2].returncode == 1 and b"being written by another dpstream process" in err, err
        _, err = runs[1].communicate(b"".join(lines[1000:]), timeout=TIMEOUT)
        assert runs[1].returncode == 0, err
    finally:
        for run in runs.values():
            run.kill()
    assert np.array_equal(np.loadtxt(out), _expected(values, seed=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_a_stopped_release_removes_its_temporary_file_and_keeps_the_old_output(tmp_path, signum):
    out = tmp_path / "out.txt"
    out.write_text("previous release\n")
    run = subprocess.Popen(_command("release", "-", "-o", out, *OPTIONS, "--force"), stdin=subprocess.PIPE,
                           stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        run.stdin.write(b"5\n" * 5000)  # 4,950 values released, then the producer pauses
        run.stdin.flush()
        _wait_for(lambda: any(path.stat().st_size > 4000 for path in _temps(tmp_path)), "the temporary output")
        run.send_signal(signum)
        _, err = run.communicate(timeout=TIMEOUT)
    finally:
        run.kill()
    assert run.returncode == 128 + signum
    stderr = err.decode()
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("Error: ")
    assert signal.Signals(signum).name in stderr or "interrupted" in stderr
    assert out.read_text() == "previous release\n" and _hidden(tmp_path) == []


def test_sigterm_during_a_large_file_release(tmp_path):
    source, out = tmp_path / "large.txt", tmp_path / "out.txt"
    source.write_bytes(b"7\n" * 4_000_000)
    out.write_text("previous release\n")
    run = subprocess.Popen(_command("release", source, "-o", out, "--epsilon", "1", "--upper-bound", "10", "--force"),
                           stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        _wait_for(lambda: any(path.stat().st_size > 0 for path in _temps(tmp_path)) or run.poll() is not None,
                  "the first chunk")
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=TIMEOUT)
    finally:
        run.kill()
    assert run.returncode == 128 + signal.SIGTERM, err.decode()  # it was stopped midway, not finished
    assert "Traceback" not in err.decode() and "stopped by SIGTERM" in err.decode()
    assert out.read_text() == "previous release\n" and _hidden(tmp_path) == []


def test_the_next_run_removes_what_a_killed_release_left_and_nothing_else(tmp_path):
    out = tmp_path / "out.txt"
    mine = {".out.txt.partial": "my own notes\n", "out.txt.partial": "mine too\n",
            f".out.txt.dpstream-{os.getpid()}-0123abcd.tmp": "a live process's\n",
            ".other.txt.dpstream-999999999-0123abcd.tmp": "another output's\n",
            ".out.txt.dpstream-x-0123abcd.tmp": "not the pattern\n"}
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
    run = subprocess.Popen(_command("release", "-", "-o", out, *OPTIONS), stdin=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        run.stdin.write(b"5\n" * 500)
        run.stdin.flush()
        _wait_for(lambda: any(path.stat().st_size > 0 for path in _temps(tmp_path)
                              if f"-{run.pid}-" in path.name), "the temporary output")
        run.kill()  # SIGKILL cannot be caught: its temporary file stays
        run.wait(timeout=TIMEOUT)
    finally:
        run.kill()
    left = [path for path in _temps(tmp_path) if f"-{run.pid}-" in path.name]
    assert len(left) == 1
    source = tmp_path / "in.txt"
    _stream(source)
    result = _run("release", source, "-o", out, *OPTIONS)
    assert result.exit_code == 0, result.output
    assert not left[0].exists()
    assert {name: (tmp_path / name).read_text() for name in mine} == mine


def test_stale_temporaries_of_dead_processes_only(tmp_path):
    from dpstream.durable.files import remove_stale_temporaries

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its number now belongs to no process
    stale = tmp_path / f".out.txt.dpstream-{dead.pid}-0123abcd.tmp"
    stale.write_text("left by a killed release")
    stale_dir = tmp_path / f".res.dpstream-{dead.pid}-0123abcd.tmp"
    (stale_dir / "inner").mkdir(parents=True)
    live = tmp_path / f".out.txt.dpstream-{os.getppid()}-0123abcd.tmp"
    live.write_text("a running process's")
    link = tmp_path / f".out.txt.dpstream-{dead.pid}-4567abcd.tmp"
    link.symlink_to(tmp_path / "elsewhere")
    assert remove_stale_temporaries(tmp_path / "out.txt") == [stale]
    assert remove_stale_temporaries(tmp_path / "res") == [stale_dir]
    assert live.exists() and link.is_symlink() and not stale.exists() and not stale_dir.exists()


def _read_into(path, into):
    into.append(path.read_text())


def test_a_fifo_is_written_into_without_force_and_stays_a_fifo(tmp_path):
    source, fifo = tmp_path / "in.txt", tmp_path / "pipe"
    values = _stream(source)
    os.mkfifo(fifo)
    for force in ([], ["--force"]):
        received: list[str] = []
        reader = threading.Thread(target=_read_into, args=(fifo, received), daemon=True)
        reader.start()
        result = _run("release", source, "-o", fifo, *OPTIONS, *force)
        reader.join(TIMEOUT)
        assert result.exit_code == 0, result.output
        assert np.array_equal(np.array(received[0].split(), dtype=float), _expected(values))
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and _hidden(tmp_path) == []


def test_dev_null_needs_no_force(tmp_path):
    source = tmp_path / "in.txt"
    _stream(source)
    result = _run("release", source, "-o", os.devnull, *OPTIONS)
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_dev_stdout_is_a_stream(tmp_path):
    source = tmp_path / "in.txt"
    values = _stream(source)
    done = subprocess.run(_command("release", source, "-o", "/dev/stdout", *OPTIONS), capture_output=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.array(done.stdout.split(), dtype=float), _expected(values))


def test_a_device_or_directory_is_never_replaced(tmp_path):
    source = tmp_path / "in.txt"
    _stream(source)
    device = tmp_path / "disk"
    try:
        os.mknod(device, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    except (PermissionError, OSError):
        pytest.skip("cannot create a block device here")
    result = _run("release", source, "-o", device, *OPTIONS, "--force")
    assert result.exit_code == 1 and "is a block device, which is never replaced" in result.stderr
    assert stat.S_ISBLK(os.lstat(device).st_mode) and _hidden(tmp_path) == []


def test_a_link_to_a_file_is_kept_and_its_file_replaced_with_its_permissions(tmp_path):
    source, real, link = tmp_path / "in.txt", tmp_path / "real.txt", tmp_path / "link.txt"
    values = _stream(source)
    real.write_text("old\n")
    real.chmod(0o600)
    link.symlink_to(real)
    result = _run("release", source, "-o", link, *OPTIONS, "--force")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and np.array_equal(np.loadtxt(real), _expected(values))
    assert stat.S_IMODE(real.stat().st_mode) == 0o600 and _hidden(tmp_path) == []


def test_stdin_as_the_output_file_is_refused(tmp_path):
    source = tmp_path / "in.txt"
    _stream(source)
    before = source.read_bytes()
    with open(source, "rb") as stdin:
        done = subprocess.run(_command("release", "-", "-o", source, *OPTIONS, "--force"), stdin=stdin,
                              capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 1 and b"is the input (stdin)" in done.stderr
    with open(source, "rb") as stdin, open(source, "ab") as stdout:  # `< in.txt >> in.txt`
        done = subprocess.run(_command("release", "-", "-o", "-", *OPTIONS), stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=TIMEOUT)
    assert done.returncode == 1 and b"stdout is the input file" in done.stderr
    assert source.read_bytes() == before


def test_a_directory_name_is_refused_as_output(tmp_path):
    source = tmp_path / "in.txt"
    _stream(source)
    result = _run("release", source, "-o", f"{tmp_path / 'newdir'}/", *OPTIONS)
    assert result.exit_code == 2 and "ends with '/'" in result.stderr
    assert not (tmp_path / "newdir").exists()
    (tmp_path / "adir").mkdir()
    result = _run("release", source, "-o", tmp_path / "adir", *OPTIONS, "--force")
    assert result.exit_code == 2 and "directory" in result.stderr


def _closed(descriptor):
    return lambda: os.close(descriptor)


def test_a_closed_stdout_or_stdin_is_one_line(tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    values = _stream(source)
    done = subprocess.run(_command("release", source, "-o", "-", *OPTIONS), preexec_fn=_closed(1),
                          stderr=subprocess.PIPE, timeout=TIMEOUT)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert done.stderr.decode().strip().splitlines()[-1] == (
        "Error: stdout is closed; give a file with -o (nothing was written).")
    # a file output works with stdout closed, and nothing lands in it through descriptor 1
    done = subprocess.run(_command("release", source, "-o", out, *OPTIONS), preexec_fn=_closed(1),
                          stderr=subprocess.PIPE, timeout=TIMEOUT)
    assert done.returncode == 0 and np.array_equal(np.loadtxt(out), _expected(values))
    done = subprocess.run(_command("release", "-", "-o", "-", *OPTIONS), preexec_fn=_closed(0),
                          capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 1 and b"Traceback" not in done.stderr and b"Error: stdin is closed" in done.stderr


def test_a_broken_pipe_ends_quietly_with_code_1(tmp_path):
    source = tmp_path / "large.txt"
    source.write_bytes(b"7\n" * 1_000_000)
    run = subprocess.Popen(_command("release", source, "-o", "-", "--epsilon", "1", "--upper-bound", "10"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert float(run.stdout.readline())  # like `| head -1`
        run.stdout.close()
        err = run.stderr.read().decode()
        run.wait(timeout=TIMEOUT)
    finally:
        run.kill()
    assert run.returncode == 1
    assert "Traceback" not in err and "Error" not in err and "Broken pipe" not in err and "Exception" not in err


@pytest.mark.parametrize("args", [
    ["--method", "pak", "--upper-bound", "1e307", "--epsilon", "1", "--hold", "50"],
    ["--method", "bt", "--epsilon", "1e-12", "--upper-bound", "1e300"],
    ["--method", "topl", "--epsilon", "1e-12", "--upper-bound", "1e300", "--hold", "50"],
    ["--epsilon", "1e-12", "--upper-bound", "1e300", "--threshold-step", "1e295", "--hold", "50"],
], ids=["pak", "bt", "topl", "tops"])
def test_parameters_that_overflow_are_refused_up_front(tmp_path, args):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    _stream(source)
    result = _run("release", source, "-o", out, *args)
    assert result.exit_code == 2 and "must be at most 1e+300" in result.stderr
    assert not out.exists() and _hidden(tmp_path) == []


def test_the_mechanisms_refuse_parameters_that_overflow():
    from dpstream.release import PAK, BinaryTreeCounter, HierarchicalPerturber, ToPL

    for build in (lambda: BinaryTreeCounter(epsilon=1e-12, upper_bound=1e300),
                  lambda: PAK(epsilon=1.0, upper_bound=1e307),
                  lambda: ToPS(epsilon=1e-12, upper_bound=1e300, threshold_step=1e295),
                  lambda: ToPL(epsilon=1e-12, upper_bound=1e300),
                  lambda: HierarchicalPerturber(threshold=1e300, epsilon=1e-12)):
        with pytest.raises(ValueError, match="must be at most 1e"):
            build()


def test_a_value_that_is_not_finite_is_never_written(tmp_path, monkeypatch):
    """The last line of defence: an overflow the up-front checks missed stops the release."""
    from dpstream.release import BinaryTreeCounter

    def overflowing(options):
        counter = BinaryTreeCounter(epsilon=1.0, upper_bound=100.0, max_range=64, seed=1)
        honest = counter.release
        counter.release = lambda values: np.where(np.arange(len(values)) == 3, np.inf, honest(values))
        return counter

    from dpstream.release import registry

    patched = dataclasses.replace(registry.REGISTRY["bt"], cls=lambda **options: overflowing(options))
    monkeypatch.setitem(registry._ENTRIES, "bt", patched)
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    _stream(source)
    for target in (out, "-"):
        result = _run("release", source, "-o", target, "--method", "bt", "--epsilon", "1", "--upper-bound", "100")
        assert result.exit_code == 1 and "position 3 is inf, not a finite number" in result.stderr, result.output
        assert "inf" not in result.stdout and "nan" not in result.stdout
    assert not out.exists() and _hidden(tmp_path) == []


@pytest.mark.parametrize("from_stdin", [False, True], ids=["file", "stdin"])
def test_clip_says_how_many_values_it_clipped_only_when_asked_and_as_unprotected(tmp_path, from_stdin):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(["5"] * 60 + ["-3", "250", "7", "1e9"]) + "\n")
    args = ["release", "-" if from_stdin else source, "-o", "-", *OPTIONS, "--clip"]
    result = CliRunner().invoke(cli, [str(arg) for arg in args], input=source.read_text() if from_stdin else None)
    assert result.exit_code == 0, result.output
    # by default the same words whatever the data: no count of the clipped values
    assert "--clip: values outside [0, 100] are clipped into it (how many is not reported" in result.stderr
    assert "3 values" not in result.stderr
    asked = CliRunner().invoke(cli, [str(arg) for arg in [*args, "--report-unprotected"]],
                               input=source.read_text() if from_stdin else None)
    assert asked.exit_code == 0 and asked.stdout == result.stdout
    assert ("not protected by the privacy guarantee (--report-unprotected): --clip clipped 3 values outside "
            "[0, 100] into it.") in asked.stderr


def _boom(*args, **kwargs):
    """A plot that fills the disk: a truncated file, then ENOSPC."""
    path = next(arg for arg in (*args, *kwargs.values()) if hasattr(arg, "write_bytes"))
    path.write_bytes(b"\x89PNG truncated")
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


EVALUATIONS = {
    "evaluate": (["evaluate", "--study", "hierarchy", "--methods", "H16c", "--epsilons", "1", "--rounds", "1",
                  "--queries", "5", "--hold", "1000", "--max-range", "4096"], "dpstream.evaluation.streams.plot_metric",
                 ["hierarchy-pos.csv", "hierarchy-pos-rounds.csv", "hierarchy-pos.json", "hierarchy-pos-mse.png"]),
    "pak-improvement": (["pak-improvement", "--dataset", "{stream}", "--upper-bound", "30", "--hold", "5000",
                         "--rounds", "2"], "dpstream.evaluation.pak_analysis.plot_last_step_errors",
                        ["pak-improvement-stream.csv", "pak-improvement-stream.json",
                         "pak-improvement-stream-errors.csv", "pak-improvement-stream.png"]),
    "evaluate-postprocess": (["evaluate-postprocess", "--study", "epsilon", "--epsilons", "1", "--rounds", "1",
                              "--steps", "20", "--users", "20"], "dpstream.evaluation.postprocess.plot_study",
                             ["postprocess-epsilon.csv", "postprocess-epsilon-rounds.csv", "postprocess-epsilon.json",
                              "postprocess-epsilon.png"]),
    "evaluate-count-of-counts": (["evaluate-count-of-counts", "--n-groups", "300", "--states", "2", "--counties",
                                  "3", "--max-size", "50", "--strategies", "hc", "--runs", "1"],
                                 "dpstream.cli.count_of_counts.plot_level_errors",
                                 ["count-of-counts-housing.csv", "count-of-counts-housing-runs.csv",
                                  "count-of-counts-housing.json", "count-of-counts-housing-levels.png"]),
    "demo": (["demo"], "dpstream.evaluation.streams.plot_moving_average", ["pos-moving-average.png"]),
}


@pytest.mark.parametrize("name", list(EVALUATIONS))
def test_evaluation_files_appear_all_together_or_not_at_all(tmp_path, monkeypatch, name):
    args, plot, files = EVALUATIONS[name]
    stream = tmp_path / "data" / "stream.txt"
    stream.parent.mkdir()
    _stream(stream, size=20_000)
    args = [arg.replace("{stream}", str(stream)) for arg in args]
    out = tmp_path / "res"
    result = _run(*args, "--out", out)  # a new --out: made whole at the end
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == sorted(files)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "res"]
    old = {path.name: b"an earlier result" for path in out.iterdir()}
    for path in out.iterdir():
        path.write_bytes(b"an earlier result")
    monkeypatch.setattr(plot, _boom)
    for target, force in ((out, ["--force"]), (tmp_path / "new", [])):
        result = _run(*args, "--out", target, *force)
        assert result.exit_code == 1 and "no space left on device" in result.stderr, result.output
        assert "Traceback" not in result.stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == old  # no mix of new and old
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "res"]  # no truncated file, no temporary dir


def test_output_directory_moves_the_files_only_when_all_are_written(tmp_path):
    from dpstream.cli._app import Stopped
    from dpstream.cli._outputs import output_directory

    paths = {"a": tmp_path / "out" / "a.csv", "b": tmp_path / "out" / "b.csv"}
    for failure in (RuntimeError("the second file failed"), Stopped(signal.SIGTERM)):
        with pytest.raises(type(failure)), output_directory(paths) as staged:
            staged["a"].write_text("complete")
            raise failure
        assert list(tmp_path.iterdir()) == []
    with output_directory(paths) as staged:
        for path in staged.values():
            path.write_text("new")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.csv", "b.csv"]


def test_error_messages_quote_at_most_80_characters():
    from dpstream.cli._app import one_line, quote

    assert len(quote("x" * 10_000)) < 120 and "x" * 81 not in quote("x" * 10_000)
    line = one_line("bad field '" + "y" * 5000 + "'\non line 2\x0b\x1c")
    assert "\n" not in line and len(line.splitlines()) == 1 and "y" * 81 not in line


@pytest.mark.parametrize(("args", "code"), [
    (["release", "in.txt"], 2),
    (["release", "in.txt", "-o", "-", "--epsilon", "-1", "--upper-bound", "1"], 2),
    (["release", "in.txt", "-o", "-", "--epsilon", "1", "--upper-bound", "1"], 1),  # values above B
], ids=["missing-option", "bad-value", "bad-data"])
def test_exit_codes_of_the_installed_command(tmp_path, args, code):
    _stream(tmp_path / "in.txt")
    done = subprocess.run(_command(*args), capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT)
    assert done.returncode == code and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ")
