"""Smoothers (Appendix D): predict the values inside a block from earlier blocks' estimates."""

from dpstream.smoothers.predictors import (
    SMOOTHERS,
    ExponentialSmoother,
    MeanSmoother,
    MedianSmoother,
    MovingAverageSmoother,
    RecentSmoother,
    Smoother,
    make_smoother,
)

__all__ = [
    "SMOOTHERS",
    "ExponentialSmoother",
    "MeanSmoother",
    "MedianSmoother",
    "MovingAverageSmoother",
    "RecentSmoother",
    "Smoother",
    "make_smoother",
]
