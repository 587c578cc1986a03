"""What the commands that run on Spark share: ``--engine``'s choices, ``--spark-conf``, the session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from dpstream.spark.session import SparkUnavailable

#: What ``--engine`` accepts: this process (reading Parquet Entities in batches) or Spark.
ENGINES = ("local", "spark")

__all__ = ["ENGINES", "spark_conf_option", "spark_session"]


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
def spark_session(master: str | None, conf: dict[str, str]) -> Iterator[Any]:
    """The Spark session of a command (``master`` None: spark-submit's, else local[*]), stopped at
    the end unless an embedding program started it; a missing PySpark or Java is one line saying
    how to install it."""
    from dpstream.spark import make_session, require_spark

    try:
        require_spark()
    except SparkUnavailable as error:
        raise click.ClickException(str(error)) from None
    from pyspark import SparkContext

    owned = SparkContext._active_spark_context is None  # an embedding program's session stays up
    spark = make_session(master, conf)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()
