"""The true p-th percentile as a threshold: a NON-PRIVATE oracle, for experiments only."""

from __future__ import annotations

import numpy as np

from dpstream._checks import check_percentile

__all__ = ["true_percentile"]


def true_percentile(values: np.ndarray, p: float) -> float:
    """The exact p-th percentile of ``values`` (linear interpolation).

    Not differentially private: it reads the data without noise.  The evaluation harness uses
    it as an oracle threshold (Section 5.3 fixes theta to the true 95th percentile) and labels
    every result that depends on it as non-private.

    >>> true_percentile(np.arange(101.0), 95)
    95.0
    """
    p = check_percentile(p, "p")
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("values must be non-empty to take a percentile, got 0 values.")
    return float(np.percentile(values, p))
