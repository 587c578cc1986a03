"""What the commands that run on Spark share: ``--engine``'s choices, ``--spark-conf``, the session."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click

from dpstream._progress import Progress
from dpstream.cli._app import progress_bar, quote
from dpstream.spark.session import SparkUnavailable

#: What ``--engine`` accepts: this process (reading Parquet Entities in batches) or Spark.
ENGINES = ("local", "spark")
#: What ``release --engine`` accepts: also a Structured Streaming query over a directory of files.
RELEASE_ENGINES = (*ENGINES, "spark-streaming")
#: How a master URL Spark accepts starts (``local[4]``, ``spark://host:7077``, ``yarn``, ``k8s://...``).
_MASTERS = ("local", "spark://", "yarn", "k8s://")

__all__ = ["ENGINES", "RELEASE_ENGINES", "StageProgress", "last_error", "spark_conf_option", "spark_session"]


def spark_conf_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """Click callback of ``--spark-conf KEY=VALUE`` (repeatable): a dict.

    >>> spark_conf_option(None, None, ("spark.driver.memory = 8g",))
    {'spark.driver.memory': '8g'}
    """
    conf = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, e.g. spark.driver.memory=8g, got {text!r}.")
        conf[key.strip()] = value.strip()
    return conf


@contextmanager
def spark_session(master: str | None, conf: dict[str, str], *, source: str | None = None) -> Iterator[Any]:
    """The Spark session of a command (``master`` None: spark-submit's, else local[*]), stopped at
    the end unless an embedding program started it; a missing PySpark or Java is one line saying
    how to install it, and an error raised by Spark (a Java exception, a failed task) one line
    with its message: no Python or Java stack trace reaches the user.  ``source``, the input,
    is named when Spark fails to decompress it."""
    from dpstream.spark import make_session, require_spark

    try:
        require_spark()
    except SparkUnavailable as error:
        raise click.ClickException(str(error)) from None
    from py4j.protocol import Py4JError
    from pyspark import SparkContext
    from pyspark.errors import PySparkException, PythonException

    owned = SparkContext._active_spark_context is None  # an embedding program's session stays up
    if master is not None and not master.startswith(_MASTERS):  # Spark's launcher would print a Java stack
        raise click.BadParameter(f"expected a Spark master URL starting with {', '.join(_MASTERS)}, got "
                                 f"{quote(master)}.", param_hint="'--spark-master'")
    try:
        spark = make_session(master, conf)
    except (PySparkException, Py4JError) as error:
        raise click.ClickException(f"Spark did not start: {_spark_error(error, None)}") from None
    if owned:  # a failed task is one line of ours, not Spark's log of its stack trace
        spark.sparkContext.setLogLevel("OFF")
    progress = StageProgress(_tracker(spark))
    progress.start()
    try:
        yield spark
    except PythonException as error:  # a Python error on an executor: its message, without the traceback
        raise click.ClickException(last_error(str(error))) from None
    except (PySparkException, Py4JError) as error:
        raise click.ClickException(_spark_error(error, source)) from None
    finally:
        progress.stop()
        if owned:
            spark.stop()


def _tracker(spark: Any) -> Any:
    """The session's status tracker, or None (a session without one, such as Spark Connect's: no progress)."""
    try:
        return spark.sparkContext.statusTracker()
    except Exception:
        return None


class StageProgress:
    """Spark's stages on stderr while a command runs on Spark: every stage that runs longer than
    :attr:`QUIET` seconds gets the progress of the other commands (:func:`~dpstream.cli._app.progress_bar`:
    a bar of its tasks on a terminal; otherwise a plain line each tenth of its tasks or every 10 s, and
    a closing line), read from Spark's status tracker by a thread every :attr:`POLL` seconds.  ``tracker`` is
    ``SparkContext.statusTracker()`` (None: no progress); ``clock`` and ``bar`` (a
    :func:`~dpstream.cli._app.progress_bar`) for tests.
    """

    #: Seconds between two looks at the tracker.
    POLL = 0.5
    #: A stage shows once it has run this many seconds: Spark runs many short stages, and a command's stderr on
    #: Spark is otherwise the local engine's, line for line.
    QUIET = 10.0

    def __init__(self, tracker: Any, *, clock: Callable[[], float] = time.monotonic,
                 bar: Callable[..., Any] = progress_bar) -> None:
        self._tracker, self._clock, self._bar = tracker, clock, bar
        self._seen: dict[int, float] = {}
        self._shown: dict[int, tuple[ExitStack, Progress, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dpstream-spark-progress", daemon=True)

    def start(self) -> None:
        if self._tracker is not None:
            self._thread.start()

    def stop(self) -> None:
        """Stop looking and close the stages shown (their closing lines)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for stage in list(self._shown):
            self._close(stage)

    def _run(self) -> None:
        while not self._stop.wait(self.POLL):
            try:
                self.poll()
            except Exception:  # the session is stopping: no more progress, and never a failed command for it
                return

    def poll(self) -> None:
        """One look at the tracker: show, update and close the stages."""
        active = sorted(self._tracker.getActiveStageIds())
        now = self._clock()
        for stage in active:
            info = self._tracker.getStageInfo(stage)
            if info is None or now - self._seen.setdefault(stage, now) < self.QUIET and stage not in self._shown:
                continue
            if stage not in self._shown:
                stack = ExitStack()
                name = info.name.split(" at ", 1)[0][:40]  # "toArrow at /path/file.py:12": the action
                update = stack.enter_context(self._bar(desc=f"Spark stage {stage} ({name})", unit="task",
                                                       total=info.numTasks))
                self._shown[stage] = (stack, update, info.numTasks)
            self._shown[stage][1](info.numCompletedTasks, info.numTasks)
        for stage in [stage for stage in self._shown if stage not in active]:
            self._close(stage)

    def _close(self, stage: int) -> None:
        stack, update, total = self._shown.pop(stage)
        update(total, total)  # the stage ended: all its tasks ran
        stack.close()


def last_error(text: str) -> str:
    """The message of the Python error a Spark task raised: the last ``...Error: message`` line of its traceback.

    >>> last_error("Traceback (most recent call last):\\n  ...\\nValueError: key 'a': stream value -1.0 ...\\n")
    "key 'a': stream value -1.0 ..."
    """
    lines = [line for line in text.splitlines() if "Error: " in line]
    if not lines:
        return text.strip().splitlines()[-1] if text.strip() else "a Spark task failed."
    return lines[-1].split("Error: ", 1)[1].strip()


def _spark_error(error: Exception, source: str | None) -> str:
    """One line for an error of Spark: the innermost Java exception's class and message (or the first line of
    the error's own message), and for a compressed input that cannot be decompressed, the local reader's words."""
    java = getattr(error, "java_exception", None)
    if java is not None:
        while java.getCause() is not None:
            java = java.getCause()
        kind, message = java.getClass().getSimpleName(), str(java.getMessage() or "").strip()
    else:
        kind, message = type(error).__name__, str(error).strip()
    message = message.splitlines()[0] if message else kind
    if source is not None and source.endswith(".gz") and kind in ("EOFException", "ZipException", "IOException"):
        return f"{source} is not a valid gzip file ({message})."
    return f"Spark failed: {kind}: {message}"
