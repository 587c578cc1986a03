"""Progress on stderr: a bar on a terminal, plain lines in a log (no carriage returns)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dpstream.cli._app import _ProgressLines, progress_bar

EVALUATE = ["evaluate", "--study", "end-to-end", "--epsilons", "0.5,1", "--rounds", "2", "--queries", "5",
            "--hold", "512", "--max-range", "1024"]


def test_a_log_file_gets_plain_lines(tmp_path):
    """stderr to a file (not a terminal): whole lines, a closing line, and no carriage return."""
    log = tmp_path / "log.txt"
    with log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "dpstream.cli", *EVALUATE, "--out", str(tmp_path / "out")],
                              stdout=subprocess.DEVNULL, stderr=stderr)
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text and "%|" not in text
    assert "end-to-end on pos: 8 of 8 runs (100%)" in text
    assert "end-to-end on pos: done, 8 of 8 runs in " in text


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_every_tenth_and_every_ten_seconds():
    clock, written = _Clock(), []
    lines = _ProgressLines(desc="work", unit="step", total=None, clock=clock, write=written.append)
    lines.update(0, 1000)
    for done in range(1, 1001):
        clock.now = done * 0.001  # one second in all: only the tenths make lines
        lines.update(done, 1000)
    counts = [line.split(": ")[1].split(" (")[0] for line in written]
    assert counts == [f"{100 * k:,} of 1,000 steps" for k in range(1, 11)]
    written.clear()
    slow = _ProgressLines(desc="slow", unit="step", total=10**6, clock=clock, write=written.append)
    for done in range(0, 30):  # far below a tenth, but 3 s apart
        clock.now += 3.0
        slow.update(done, 10**6)
    assert len(written) == 7  # 90 s of updates 3 s apart: a line at the first update 10 s or more after the last
    assert all("of 1,000,000 steps (0%)" in line for line in written)


def test_computations_one_after_the_other_add_up():
    clock, written = _Clock(), []
    lines = _ProgressLines(desc="two", unit="region", total=20, clock=clock, write=written.append)
    for _ in range(2):
        lines.update(0, 10)
        lines.update(10, 10)
    lines.close()
    assert written == ["two: 10 of 20 regions (50%), 0 s", "two: 20 of 20 regions (100%), 0 s",
                       "two: done, 20 of 20 regions in 0 s"]


@pytest.mark.parametrize("leave", [True, False])
def test_progress_bar_off_a_terminal_writes_lines(capsys, leave):
    with progress_bar(desc="mechanisms", unit="mechanism", total=2, leave=leave) as progress:
        progress(0, 2)
        progress(2, 2)
    err = capsys.readouterr().err
    assert "\r" not in err and "mechanisms: 2 of 2 mechanisms (100%)" in err
    assert ("mechanisms: done" in err) == leave


class _Tracker:
    """Spark's status tracker, as far as the stage progress reads it."""

    def __init__(self) -> None:
        self.active: list[int] = []
        self.done = {4: 3, 5: 0}

    def getActiveStageIds(self):  # noqa: N802 (Spark's name)
        return self.active

    def getStageInfo(self, stage):  # noqa: N802
        from types import SimpleNamespace

        return SimpleNamespace(name="toArrow at keyed.py:1", numTasks=8, numCompletedTasks=self.done[stage])


def test_spark_stages_report_progress_in_plain_lines(capsys):
    """A stage that runs past the quiet time gets lines (stderr is no terminal here) and a closing line when it
    ends; a short stage none."""
    from dpstream.cli._spark import StageProgress

    tracker, now = _Tracker(), [0.0]
    progress = StageProgress(tracker, clock=lambda: now[0])
    tracker.active = [4, 5]
    progress.poll()
    tracker.active = [4]  # stage 5 ended within the quiet time
    now[0] = StageProgress.QUIET + 1
    progress.poll()
    tracker.done[4] = 8
    progress.poll()
    tracker.active = []
    progress.poll()
    progress.stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("Spark stage 4 (toArrow): 3 of 8 tasks (37%), ")
    assert lines[-1].startswith("Spark stage 4 (toArrow): done, 8 of 8 tasks in ")
    assert "8 of 8 tasks (100%)" in lines[-2]
    assert not any("stage 5" in line or "\r" in line for line in lines)


def test_spark_progress_stops_quietly_when_the_tracker_fails():
    """The polling thread ends on an error of the tracker (a stopping session), never failing the command."""
    from dpstream.cli._spark import StageProgress

    class Broken:
        def getActiveStageIds(self):  # noqa: N802
            raise RuntimeError("the session is gone")

    progress = StageProgress(Broken())
    progress.POLL = 0.01
    progress.start()
    progress._thread.join(timeout=5)
    assert not progress._thread.is_alive()
    progress.stop()
    quiet = StageProgress(None)  # a session without a status tracker
    quiet.start()
    assert not quiet._thread.is_alive()
    quiet.stop()
