"""The post-processing studies of Cao et al. (DBSec 2023, Section 6) and their metrics.

The synthetic experiments: MSE against epsilon (Fig. 4(a)), against the number of steps T
(Fig. 5) and against the correlation level s (Fig. 6), and the probability metric of Section
6.1 (Fig. 3(b)): the probability that the released counts of one step follow from those of the
step before under the public model.

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
from dpstream.evaluation.plots import Panel, Series, save_figure
from dpstream.postprocess.estimators import map_estimate, mle_estimate, round_counts
from dpstream.postprocess.markov import FIG3_MATRIX, check_transition, simulate_counts, smoothed_transition
from dpstream.postprocess.mechanism import LaplaceCounts

__all__ = [
    "IMPOSSIBLE",
    "METHOD_NAMES",
    "STUDIES",
    "Setting",
    "mse",
    "plot_study",
    "run_round",
    "run_study",
    "step_probabilities",
    "study_settings",
    "summarize",
    "transition_probability",
]

# -- metrics (Section 6.1) ------------------------------------------------------------------

#: Section 6.1's cut-off: a transition less likely than this counts as an impossible event.
IMPOSSIBLE = 1e-10

#: Largest table (product of ``count + 1`` over locations) :func:`transition_probability` builds.
_MAX_CELLS = 2_000_000


def mse(estimate: object, truth: object) -> float:
    """Mean squared error over all cells of two ``T x m`` arrays.

    >>> mse([[1.0, 3.0]], [[0.0, 3.0]])
    0.5
    """
    a, b = np.asarray(estimate, dtype=np.float64), np.asarray(truth, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"estimate and truth must have the same shape, got {a.shape} and {b.shape}.")
    return float(np.mean((a - b) ** 2))


def transition_probability(previous: object, current: object, transition: object) -> float:
    """``Pr(R^t = current | R^{t-1} = previous)`` for integer count vectors of independent users.

    Each of the ``previous[i]`` users at location ``i`` moves to ``j`` with probability
    ``T[i, j]``; the result is the coefficient of ``x^current`` in
    ``prod_i (sum_j T[i, j] x_j)^previous[i]``, computed exactly by dynamic programming over a
    table truncated at ``current`` (so only for small user numbers).  With one user it is
    ``T[i, j]``, the quantity Fig. 3(b) plots.

    >>> transition_probability([0, 1, 0], [1, 0, 0], [[0, 0, 1], [.5, 0, .5], [0, 1, 0]])
    0.5
    """
    matrix = check_transition(transition)
    a = np.asarray(previous)
    b = np.asarray(current)
    m = matrix.shape[0]
    for name, vec in (("previous", a), ("current", b)):
        if vec.shape != (m,) or not np.issubdtype(vec.dtype, np.integer) or np.any(vec < 0):
            raise ValueError(f"{name} must be {m} non-negative integer counts, got {vec.tolist()!r}.")
    if a.sum() != b.sum():
        return 0.0
    shape = tuple(int(k) + 1 for k in b)
    if int(np.prod(shape)) > _MAX_CELLS:
        raise ValueError(f"too many users for the exact transition probability (table of {np.prod(shape)} cells).")
    table = np.zeros(shape)
    table[(0,) * m] = 1.0
    for source in np.repeat(np.arange(m), a):  # one user at a time: multiply by sum_j T[source, j] x_j
        moved = np.zeros(shape)
        for j in np.flatnonzero(matrix[source]):
            target = [slice(None)] * m
            origin = [slice(None)] * m
            target[j], origin[j] = slice(1, None), slice(None, -1)
            moved[tuple(target)] += matrix[source, j] * table[tuple(origin)]
        table = moved
    return float(table[tuple(b)])


def step_probabilities(counts: object, transition: object) -> np.ndarray:
    """:func:`transition_probability` of every step ``t >= 2`` of an integer ``T x m`` series."""
    series = np.asarray(counts)
    return np.array([transition_probability(series[t - 1], series[t], transition) for t in range(1, len(series))])


# -- the studies ---------------------------------------------------------------------------


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
                   users: int, default_steps: int, default_epsilon: float,
                   default_s: dict[str, float]) -> list[Setting]:
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
    study = rows[0]["study"]
    metric = "impossible_share" if study == "probability" else "mse"
    label = {"epsilon": "epsilon (per step)", "steps": "total release time T", "correlation": "smoothing level s",
             "probability": "epsilon (per step)"}[study]
    panels = []
    for epsilon in sorted({row["epsilon"] for row in rows}) if study == "correlation" else [None]:
        mine = [row for row in rows if epsilon is None or row["epsilon"] == epsilon]
        series = []
        for method in dict.fromkeys(row["method"] for row in mine):
            line = sorted((row for row in mine if row["method"] == method), key=lambda row: row["x"])
            spread = [row["mse_std"] for row in line] if metric == "mse" else None
            series.append(Series(label=method, x=[row["x"] for row in line], y=[row[f"{metric}_mean"] for row in line],
                                 spread=spread, reference=method == "Laplace (raw)", markersize=3))
        panels.append(Panel(series=series, xlabel=label,
                            ylabel="MSE" if metric == "mse" else "share of steps with probability < 1e-10",
                            title=title if epsilon is None else f"{title}, epsilon = {epsilon:g}",
                            xlog=study in ("epsilon", "correlation", "probability"), ylog=metric == "mse"))
    return save_figure(path, panels)
