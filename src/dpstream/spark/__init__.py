"""An optional engine on PySpark (``pip install 'dpstream[spark]'``), for data that lives on a cluster.

:func:`release_count_of_counts` computes the count-of-counts release of
:mod:`dpstream.count_of_counts` with Spark's group-bys and runs the noise and the top-down
consistency in parallel over parent regions; for the same key its output equals the local
engine's, bit for bit.  :func:`make_session` starts a session (``--spark-master``,
``--spark-conf``); :func:`require_spark` explains in one line what is missing when PySpark or
Java is not installed.  :func:`release_by_key` releases many keyed streams (one independent
mechanism per key, as ``release --key-column``) in parallel, equal to the local keyed release.

PySpark is imported only when a session starts or a release runs, so importing this package
never needs it.
"""

from dpstream.spark.by_key import release_by_key
from dpstream.spark.count_of_counts import release_count_of_counts
from dpstream.spark.session import DEFAULT_MASTER, SparkUnavailable, make_session, require_spark

__all__ = [
    "DEFAULT_MASTER",
    "SparkUnavailable",
    "make_session",
    "release_by_key",
    "release_count_of_counts",
    "require_spark",
]
