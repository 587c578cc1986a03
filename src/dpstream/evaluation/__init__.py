"""Evaluation harness: random range queries, error metrics, the paper's experiments and plots."""

from dpstream.evaluation.metrics import METRICS, RangeQueries, error_metrics, prefix_range_sums, random_queries
from dpstream.evaluation.experiments import (
    STUDIES,
    ExperimentConfig,
    extend_stream,
    run_study,
    summarize,
)

__all__ = [
    "METRICS",
    "STUDIES",
    "ExperimentConfig",
    "RangeQueries",
    "error_metrics",
    "extend_stream",
    "prefix_range_sums",
    "random_queries",
    "run_study",
    "summarize",
]
