"""Starting Spark: the checks that PySpark and Java are there, and the session of the command line."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_MASTER", "SparkUnavailable", "make_session", "require_spark"]

#: Default of ``--spark-master``: local mode on every core.
DEFAULT_MASTER = "local[*]"
#: How to install what the engine needs, in one line each.
INSTALL_PYSPARK = "the Spark engine needs PySpark: pip install 'dpstream[spark]'."
INSTALL_JAVA = (
    "the Spark engine needs Java 17 or later: install a JDK (e.g. apt-get install openjdk-17-jre-headless) "
    "or set JAVA_HOME."
)


class SparkUnavailable(RuntimeError):
    """PySpark or Java is missing; the message says how to install it."""


def require_spark() -> None:
    """Raise :class:`SparkUnavailable` unless PySpark imports and a ``java`` executable is found."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkUnavailable(INSTALL_PYSPARK) from None
    home = os.environ.get("JAVA_HOME")
    if not (home and (Path(home) / "bin" / "java").is_file()) and shutil.which("java") is None:
        raise SparkUnavailable(INSTALL_JAVA)


def make_session(master: str | None = DEFAULT_MASTER, conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on ``master`` with the configuration ``conf`` (``--spark-conf KEY=VALUE``).

    ``master`` None keeps the master ``spark-submit`` chose (when this program runs under it),
    else :data:`DEFAULT_MASTER`.  The Python workers run this interpreter (``PYSPARK_PYTHON``,
    unless already set), so they import the same dpstream, numpy and cryptography as the driver.
    """
    require_spark()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("dpstream")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM and set the master
    if master is not None or not under_submit:
        builder = builder.master(master or DEFAULT_MASTER)
    settings = {"spark.ui.showConsoleProgress": "false", **dict(conf or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")  # stderr carries dpstream's own diagnostics
    return session
