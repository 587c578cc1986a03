"""The synthetic experiments of Section 6 of Cao et al.: MSE against epsilon (Fig. 4(a)), against
the number of steps T (Fig. 5) and against the correlation level s (Fig. 6), and the
probability metric of Section 6.1 (Fig. 3(b)).

Every round draws fresh users (uniform start, moving by the smoothed Fig. 3 matrix), one
Laplace release of their counts, and post-processes that same release with every method.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpstream._progress import Progress, notify
from dpstream.postprocess.estimators import map_estimate, mle_estimate, round_counts
from dpstream.postprocess.markov import FIG3_MATRIX, simulate_counts, smoothed_transition
from dpstream.postprocess.mechanism import LaplaceCounts
from dpstream.postprocess.metrics import IMPOSSIBLE, mse, step_probabilities

__all__ = ["METHOD_NAMES", "STUDIES", "Setting", "run_round", "run_study", "study_settings", "summarize", "plot_study"]

#: Method label -> (method, prior, form); ``None`` is the unprocessed Laplace release.
METHOD_NAMES: dict[str, tuple[str, str | None, str | None] | None] = {
    "Laplace (raw)": None,
    "MLE": ("mle", None, None),
    "MAP frequency (exact)": ("map", "frequency", "exact"),
    "MAP uniform (exact)": ("map", "uniform", "exact"),
    "MAP frequency (Stirling)": ("map", "frequency", "stirling"),
    "MAP uniform (Stirling)": ("map", "uniform", "stirling"),
}

STUDIES = ("epsilon", "steps", "correlation", "probability")


@dataclass(frozen=True)
class Setting:
    """One point of a study: what varies (``x``) and the full parameters of its rounds."""

    study: str
    x: float
    epsilon: float
    steps: int
    users: int
    s: float


def study_settings(study: str, *, epsilons: Sequence[float], steps: Sequence[int], levels: Sequence[float],
                   users: int, default_steps: int, default_epsilon: float, default_s: dict[str, float]) -> list[Setting]:
    """The points of ``study``; ``default_s`` gives each study's smoothing level (paper: 0 / 0.01)."""
    if study == "epsilon":
        return [Setting(study, e, e, default_steps, users, default_s["epsilon"]) for e in epsilons]
    if study == "steps":
        return [Setting(study, t, default_epsilon, int(t), users, default_s["steps"]) for t in steps]
    if study == "correlation":
        return [Setting(study, s, e, default_steps, users, s) for e in epsilons for s in levels]
    if study == "probability":  # Section 6.1: one user, three locations
        return [Setting(study, e, e, default_steps, 1, default_s["probability"]) for e in epsilons]
    raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {study!r}.")


def run_round(setting: Setting, seed: np.random.SeedSequence) -> list[dict[str, Any]]:
    """One round of ``setting``: a record per method with its MSE (and, for the probability
    study, the share of rounded steps whose transition is less likely than 1e-10)."""
    data_seed, noise_seed = seed.spawn(2)
    transition = smoothed_transition(FIG3_MATRIX, setting.s)
    truth = simulate_counts(transition, users=setting.users, steps=setting.steps,
                            seed=np.random.default_rng(data_seed))
    noisy = LaplaceCounts(epsilon=setting.epsilon, seed=np.random.default_rng(noise_seed)).release(truth)
    records = []
    for name, spec in METHOD_NAMES.items():
        if spec is None and setting.study == "probability":
            continue  # raw noisy counts are not count vectors: no transition probability
        start = time.perf_counter()
        kkt = 0.0
        if spec is None:
            counts = noisy
        elif spec[0] == "mle":
            estimate = mle_estimate(noisy, users=setting.users)
            counts, kkt = estimate.counts, estimate.kkt_residual
        else:
            estimate = map_estimate(noisy, transition, users=setting.users, epsilon=setting.epsilon,
                                    prior=spec[1], form=spec[2])
            counts, kkt = estimate.counts, estimate.kkt_residual
        record = {"study": setting.study, "x": setting.x, "epsilon": setting.epsilon, "steps": setting.steps,
                  "users": setting.users, "s": setting.s, "method": name, "mse": mse(counts, truth),
                  "kkt_residual": kkt, "seconds": time.perf_counter() - start}
        if setting.study == "probability":
            probabilities = step_probabilities(round_counts(counts, setting.users), transition)
            record["impossible_share"] = float(np.mean(probabilities < IMPOSSIBLE))
        records.append(record)
    return records


def run_study(settings: Iterable[Setting], rounds: int, seed: int,
              progress: Progress | None = None) -> list[dict[str, Any]]:
    """All rounds of all settings; round ``k`` of setting ``i`` is seeded by ``(seed, i, k)``.

    ``progress`` is called with the rounds done out of all rounds of all settings (the protocol
    of :mod:`dpstream._progress`).
    """
    settings = list(settings)
    total = len(settings) * rounds
    notify(progress, 0, total)
    records = []
    for index, setting in enumerate(settings):
        for k in range(rounds):
            for record in run_round(setting, np.random.SeedSequence([seed, index, k])):
                record["round"] = k
                records.append(record)
            notify(progress, index * rounds + k + 1, total)
    return records


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation of the MSE (and impossible share) per study point and method."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        key = (record["study"], record["x"], record["epsilon"], record["steps"], record["users"], record["s"],
               record["method"])
        groups.setdefault(key, []).append(record)
    rows = []
    for (study, x, epsilon, steps, users, s, method), group in groups.items():
        values = np.array([g["mse"] for g in group])
        row = {"study": study, "x": x, "epsilon": epsilon, "steps": steps, "users": users, "s": s,
               "method": method, "rounds": len(group), "mse_mean": float(values.mean()),
               "mse_std": float(values.std(ddof=1)) if len(group) > 1 else 0.0,
               "kkt_residual_max": float(max(g["kkt_residual"] for g in group)),
               "seconds_mean": float(np.mean([g["seconds"] for g in group]))}
        if "impossible_share" in group[0]:
            row["impossible_share_mean"] = float(np.mean([g["impossible_share"] for g in group]))
        rows.append(row)
    return rows


def plot_study(rows: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """MSE (log scale, band of one standard deviation) against the study's variable, one line
    per method; the correlation study gets one panel per epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = rows[0]["study"]
    metric = "impossible_share" if study == "probability" else "mse"
    panels = sorted({row["epsilon"] for row in rows}) if study == "correlation" else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.4), squeeze=False)
    label = {"epsilon": "epsilon (per step)", "steps": "total release time T", "correlation": "smoothing level s",
             "probability": "epsilon (per step)"}[study]
    for ax, panel in zip(axes[0], panels):
        mine = [row for row in rows if panel is None or row["epsilon"] == panel]
        for method in dict.fromkeys(row["method"] for row in mine):
            line = sorted((row for row in mine if row["method"] == method), key=lambda row: row["x"])
            x = np.array([row["x"] for row in line])
            mean = np.array([row[f"{metric}_mean"] for row in line])
            style = dict(linestyle="--", color="grey") if method == "Laplace (raw)" else dict(marker="o", markersize=3)
            (handle,) = ax.plot(x, mean, label=method, **style)
            if metric == "mse":
                std = np.array([row["mse_std"] for row in line])
                ax.fill_between(x, np.maximum(mean - std, mean * 1e-3), mean + std, alpha=0.12,
                                color=handle.get_color())
        if metric == "mse":
            ax.set_yscale("log")
        if study in ("epsilon", "correlation", "probability"):
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("share of steps with probability < 1e-10" if metric != "mse" else "MSE")
        ax.set_title(title if panel is None else f"{title}, epsilon = {panel:g}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
