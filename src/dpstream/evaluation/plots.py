"""Plots of experiment results (log-scale MSE against epsilon, Figures 4-5) and of a released
stream against the truth (moving averages over time, Figure 2)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_metric", "plot_moving_average", "interval_means"]


def plot_metric(rows: Sequence[dict[str, Any]], path: Path, *, metric: str = "mse", title: str = "") -> Path:
    """One line per method: mean ``metric`` (with a band of one standard deviation) against epsilon."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    methods = list(dict.fromkeys(row["method"] for row in rows))
    for method in methods:
        mine = sorted((row for row in rows if row["method"] == method), key=lambda row: row["epsilon"])
        eps = np.array([row["epsilon"] for row in mine])
        mean = np.array([row[f"{metric}_mean"] for row in mine])
        std = np.array([row[f"{metric}_std"] for row in mine])
        style = dict(linestyle="--", color="grey") if method == "Base" else dict(marker="o")
        (line,) = ax.plot(eps, mean, label=method, **style)
        ax.fill_between(eps, np.maximum(mean - std, mean * 1e-3), mean + std, alpha=0.15, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel(metric.upper())
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def interval_means(values: np.ndarray, intervals: int) -> np.ndarray:
    """Mean of each of ``intervals`` consecutive, nearly equal parts of ``values``.

    >>> interval_means(np.arange(6.0), 3).tolist()
    [0.5, 2.5, 4.5]
    """
    edges = np.linspace(0, values.size, intervals + 1).astype(np.int64)
    sums = np.add.reduceat(values, edges[:-1])
    return sums / np.diff(edges)


def plot_moving_average(
    truth: np.ndarray, released: np.ndarray, path: Path, *, intervals: int = 120, title: str = ""
) -> Path:
    """True and released stream as the mean of each of ``intervals`` time intervals (Figure 2)."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(intervals)
    ax.plot(x, interval_means(truth, intervals), label="true", color="black", linewidth=1.5)
    ax.plot(x, interval_means(released, intervals), label="released", color="tab:red", linewidth=1, alpha=0.85)
    ax.set_xlabel(f"time (each point: the mean of ~{truth.size // intervals:,} values)")
    ax.set_ylabel("moving average")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
