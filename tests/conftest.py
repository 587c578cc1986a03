"""Shared fixtures: independent reference smoothers and least-squares helpers.

Tests that need exact tree arithmetic pass ``noise=ZeroNoise()`` (``dpstream.noise``) to the
mechanism instead of patching its noise.

The reference smoothers re-compute Appendix D's predictions directly from their definitions
(as restated in ``dpstream.smoothers.predictors``' module docstring), with plain Python loops
and ``np.mean`` / ``np.median`` over explicit histories -- no running totals, no heaps -- so
they share no arithmetic with the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

# Property tests draw their examples from a fixed seed (the suite's "fixed seeds" rule) and keep
# no example database; each test still sets its own small max_examples and deadline=None.
settings.register_profile("dpstream", derandomize=True, database=None, print_blob=True)
settings.load_profile("dpstream")

#: Test modules that run ToPS on deliberately tiny public parameters (streams of a few values, small hold-outs and
#: bounds, extreme parameters refused at run time): ToPS rightly warns that such released values are mostly noise
#: (ReleaseWarning), thousands of times over, and the warnings hide others.  There they are expected, so ignored;
#: everywhere else they show, and tests/test_tops_defaults.py checks the warning itself (pytest.warns).
EXPECTED_RELEASE_WARNINGS = frozenset({
    "test_checks.py", "test_cli_outputs.py", "test_commit_before_publish.py", "test_commit_property.py",
    "test_commit_property_paths.py", "test_contract.py", "test_docs_commands.py", "test_key_summary.py",
    "test_memory_per_key.py", "test_params.py", "test_privacy.py", "test_release_columns.py", "test_revisions.py",
    "test_service_api.py", "test_service_archive.py", "test_service_commit_property.py", "test_service_fuzz.py",
    "test_service_operator.py", "test_stored_formats.py", "test_tops.py", "test_tops_model.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Ignore ReleaseWarning in the modules of :data:`EXPECTED_RELEASE_WARNINGS` only."""
    for item in items:
        if item.path.name in EXPECTED_RELEASE_WARNINGS:
            item.add_marker(pytest.mark.filterwarnings("ignore::dpstream.release.tops_defaults.ReleaseWarning"))


def reference_predictions(name: str, prior: float, observations, **params) -> np.ndarray:
    """Prediction after each observation a_1..a_K, straight from Appendix D's definitions.

    ``prior`` is a_0.  After observing a_1..a_k:

    * recent:          a_k
    * mean:            mean(a_0, ..., a_k)
    * median:          median(a_1, ..., a_k)
    * moving_average:  mean of the last min(w, k + 1) of a_0, ..., a_k
    * exponential:     e_0 = a_0, e_k = alpha a_k + (1 - alpha) e_{k-1}
    """
    history = [float(prior)]
    out = []
    e = float(prior)
    for value in np.asarray(observations, dtype=np.float64).tolist():
        history.append(value)
        k = len(history) - 1
        if name == "recent":
            out.append(value)
        elif name == "mean":
            out.append(float(np.mean(history)))
        elif name == "median":
            out.append(float(np.median(history[1:])))
        elif name == "moving_average":
            w = params.get("window", 8)
            out.append(float(np.mean(history[-min(w, k + 1) :])))
        elif name == "exponential":
            alpha = params.get("alpha", 0.6)
            e = alpha * value + (1.0 - alpha) * e
            out.append(e)
        else:  # pragma: no cover - test misuse
            raise AssertionError(name)
    return np.array(out, dtype=np.float64)


def design_matrix(sizes: list[int], fanout: int) -> np.ndarray:
    """Rows = nodes (level 0 first), columns = leaves; a node observes the sum of its leaves."""
    n = sizes[0]
    rows = []
    for k, size in enumerate(sizes):
        width = fanout**k
        for j in range(size):
            row = np.zeros(n)
            row[j * width : (j + 1) * width] = 1.0
            rows.append(row)
    return np.array(rows)


def ols_levels(noisy_levels, fanout: int) -> list[np.ndarray]:
    """Ordinary least squares by brute force (``np.linalg.lstsq`` on the design matrix): the
    unknowns are the (padded) leaves, every node observes its leaves' sum with equal variance.
    Returns the fitted value of every node, level by level."""
    sizes = [np.asarray(level).size for level in noisy_levels]
    design = design_matrix(sizes, fanout)
    leaves, *_ = np.linalg.lstsq(design, np.concatenate(noisy_levels), rcond=None)
    fitted = design @ leaves
    return np.split(fitted, np.cumsum(sizes)[:-1])


def ols_leaf_covariance(sizes: list[int], fanout: int) -> np.ndarray:
    """Covariance of the OLS leaf estimates per unit node variance: (X^T X)^{-1}."""
    design = design_matrix(sizes, fanout)
    return np.linalg.inv(design.T @ design)


@pytest.fixture
def least_squares():
    """The brute-force least-squares helpers, as a namespace."""

    class LeastSquares:
        design = staticmethod(design_matrix)
        levels = staticmethod(ols_levels)
        leaf_covariance = staticmethod(ols_leaf_covariance)

    return LeastSquares


@pytest.fixture
def reference_smoother():
    """The independent re-computation of Appendix D (see :func:`reference_predictions`)."""
    return reference_predictions


#: Every smoother with a non-default parameter where it has one, as (name, params).
SMOOTHER_CASES = (
    ("recent", {}),
    ("mean", {}),
    ("median", {}),
    ("moving_average", {"window": 3}),
    ("exponential", {"alpha": 0.3}),
)


@pytest.fixture(params=SMOOTHER_CASES, ids=[name for name, _ in SMOOTHER_CASES])
def smoother_case(request):
    """Each of the five smoothers, as (name, params); constant data, safe under hypothesis."""
    return request.param


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test: two cores, two attempts per task (the retry
    test makes a task fail once), few shuffle partitions, no UI."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from dpstream.spark import make_session

    session = make_session(
        "local[2,2]",
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of the tests' own (see tests/service_helpers.py), stopped at the end of the session."""
    from service_helpers import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """The URL of a fresh, empty database: a SQLite file, then a database on the tests' PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/service.db"
    return request.getfixturevalue("postgres_server").new_database()
