"""Threshold optimizers: choose the truncation threshold theta from the first values of a stream."""

from dpstream.thresholds.noisy_max import (
    NM_E_CONSTANT,
    nm_e_counts,
    nm_e_scores,
    noisy_max_epsilon,
    noisy_max_threshold,
    threshold_candidates,
)
from dpstream.thresholds.percentile import true_percentile

__all__ = [
    "NM_E_CONSTANT",
    "nm_e_counts",
    "nm_e_scores",
    "noisy_max_epsilon",
    "noisy_max_threshold",
    "threshold_candidates",
    "true_percentile",
]
