"""The post-processing studies of Cao et al. (DBSec 2023, Section 6) and their metrics.

The synthetic experiments: MSE against epsilon (Fig. 4(a)), against the number of steps T
(Fig. 5) and against the correlation level s (Fig. 6), and the probability metric of Section
6.1 (Fig. 3(b)): the probability that the released counts of one step follow from those of the
step before under the public model.

Every round draws fresh users (uniform start, moving by the Fig. 3 matrix -- or any public
matrix given as ``transition`` -- smoothed with Eq. 11), one Laplace release of their counts,
and post-processes that same release with every method.  :func:`summarize` gives the mean,
standard deviation and 10th/90th percentiles over rounds; :func:`plot_study` draws the mean
with the 10-90% band.  :func:`plot_counts` draws a post-processed release against the noisy one
over time (``dpstream postprocess --plot``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpstream._progress import Progress, notify
from dpstream.evaluation.plots import Panel, Series, counted, save_figure
from dpstream.postprocess.estimators import map_estimate, mle_estimate, round_counts
from dpstream.postprocess.markov import FIG3_MATRIX, check_transition, simulate_counts, smoothed_transition
from dpstream.postprocess.mechanism import LaplaceCounts

__all__ = [
    "IMPOSSIBLE",
    "METHOD_NAMES",
    "STUDIES",
    "Setting",
    "mse",
    "plot_counts",
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
    """:func:`transition_probability` of every step ``t >= 2`` of an integer ``T x m`` series.

    A series of one user (every row a single 1) takes the matrix entries of its moves at once,
    which is what :func:`transition_probability` gives for one user.

    >>> step_probabilities([[0, 1, 0], [1, 0, 0], [0, 0, 1]], [[0, 0, 1], [.5, 0, .5], [0, 1, 0]]).tolist()
    [0.5, 1.0]
    """
    series = np.asarray(counts)
    matrix = check_transition(transition)
    if (series.ndim == 2 and series.shape[1] == matrix.shape[0] and np.issubdtype(series.dtype, np.integer)
            and np.all(series >= 0) and np.all(series.sum(axis=1) == 1)):
        where = series.argmax(axis=1)
        return matrix[where[:-1], where[1:]]
    return np.array([transition_probability(series[t - 1], series[t], matrix) for t in range(1, len(series))])


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


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One point of a study: what varies (``x``) and the full parameters of its rounds.

    >>> Setting(study="epsilon", x=0.5, epsilon=0.5, steps=100, users=200, s=0.0).x
    0.5
    """

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
        return [Setting(study=study, x=e, epsilon=e, steps=default_steps, users=users, s=default_s["epsilon"])
                for e in epsilons]
    if study == "steps":
        return [Setting(study=study, x=t, epsilon=default_epsilon, steps=int(t), users=users, s=default_s["steps"])
                for t in steps]
    if study == "correlation":
        return [Setting(study=study, x=s, epsilon=e, steps=default_steps, users=users, s=s)
                for e in epsilons for s in levels]
    if study == "probability":  # Section 6.1: one user
        return [Setting(study=study, x=e, epsilon=e, steps=default_steps, users=1, s=default_s["probability"])
                for e in epsilons]
    raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {study!r}.")


def run_round(setting: Setting, seed: np.random.SeedSequence, *, transition: object = FIG3_MATRIX
              ) -> list[dict[str, Any]]:
    """One round of ``setting``: a record per method with its MSE (and, for the probability
    study, the share of rounded steps whose transition is less likely than 1e-10).

    The users move by ``transition`` (public, ``m x m``: ``m`` locations) smoothed with Eq. 11
    at the setting's ``s``.
    """
    data_seed, noise_seed = seed.spawn(2)
    transition = smoothed_transition(transition, setting.s)
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


def run_study(settings: Iterable[Setting], rounds: int, seed: int, progress: Progress | None = None, *,
              transition: object = FIG3_MATRIX) -> list[dict[str, Any]]:
    """All rounds of all settings; round ``k`` of setting ``i`` is seeded by ``(seed, i, k)``.

    ``transition`` is the public matrix the users move by (default: Fig. 3's, 3 locations).
    ``progress`` is called with the rounds done out of all rounds of all settings (the protocol
    of :mod:`dpstream._progress`).
    """
    transition = check_transition(transition)
    settings = list(settings)
    total = len(settings) * rounds
    notify(progress, 0, total)
    records = []
    for index, setting in enumerate(settings):
        for k in range(rounds):
            for record in run_round(setting, np.random.SeedSequence([seed, index, k]), transition=transition):
                record["round"] = k
                records.append(record)
            notify(progress, index * rounds + k + 1, total)
    return records


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, standard deviation and 10th/90th percentiles over rounds of the MSE (and the mean
    impossible share) per study point and method."""
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
               "mse_q10": float(np.quantile(values, 0.1)), "mse_q90": float(np.quantile(values, 0.9)),
               "kkt_residual_max": float(max(g["kkt_residual"] for g in group)),
               "seconds_mean": float(np.mean([g["seconds"] for g in group]))}
        if "impossible_share" in group[0]:
            row["impossible_share_mean"] = float(np.mean([g["impossible_share"] for g in group]))
        rows.append(row)
    return rows


def plot_study(rows: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """MSE (log scale, shaded between the 10th and 90th percentiles over rounds) against the
    study's variable, one line per method; the correlation study gets one panel per epsilon,
    with the legend beside the last."""
    study = rows[0]["study"]
    metric = "impossible_share" if study == "probability" else "mse"
    label = {"epsilon": "ε of each step's release", "steps": "total release time T (steps)",
             "correlation": "smoothing level s of Eq. 11 (smaller: stronger correlation)",
             "probability": "ε of each step's release"}[study]
    ylabel = ("MSE per cell (users at a location at a step)" if metric == "mse"
              else "share of steps with transition probability < 1e-10")
    rounds = max(row["rounds"] for row in rows)
    groups = sorted({row["epsilon"] for row in rows}) if study == "correlation" else [None]
    panels = []
    for index, epsilon in enumerate(groups):
        mine = [row for row in rows if epsilon is None or row["epsilon"] == epsilon]
        lines = {method: sorted((row for row in mine if row["method"] == method), key=lambda row: row["x"])
                 for method in dict.fromkeys(row["method"] for row in mine)}
        series = []
        for method, line in lines.items():
            if method.endswith(STIRLING) and _agree(lines, method, metric):
                continue  # drawn as one line with the exact form's
            band = ([row["mse_q10"] for row in line], [row["mse_q90"] for row in line]) if metric == "mse" else None
            series.append(Series(label=_label(lines, method, metric), x=[row["x"] for row in line],
                                 y=[row[f"{metric}_mean"] for row in line], band=band,
                                 reference=method == "Laplace (raw)", markersize=3, **_style(method)))
        last = index == len(groups) - 1
        panels.append(Panel(series=series, xlabel=label, ylabel=ylabel,
                            title=title if epsilon is None else f"{title}, ε = {epsilon:g}",
                            xlog=study in ("epsilon", "correlation", "probability"), ylog=metric == "mse",
                            legend="outside" if last else "none",
                            legend_title=(f"line: mean of {counted(rounds, 'round')}\nshaded: 10th-90th percentile"
                                          if metric == "mse" else f"mean of {counted(rounds, 'round')}")))
    return save_figure(path, panels, panel_size=(6.4, 4.6) if len(panels) > 1 else (9.6, 4.6))


#: Two forms of one MAP whose means over rounds differ by less than this share at every point are one line.
SAME_LINE = 0.01

EXACT, STIRLING = " (exact)", " (Stirling)"

#: Each MAP prior's colour; the exact form is drawn solid, the Stirling form dotted with hollow markers.
_PRIOR_COLORS = {"MAP frequency": "tab:red", "MAP uniform": "tab:purple"}


def _exact_twin(method: str) -> str:
    return method.removesuffix(STIRLING) + EXACT


def _agree(lines: dict[str, list[dict[str, Any]]], stirling: str, metric: str) -> bool:
    """Whether the Stirling form ``stirling`` and its exact twin agree to :data:`SAME_LINE` at every point."""
    return _gap(lines, stirling, metric) < SAME_LINE


def _gap(lines: dict[str, list[dict[str, Any]]], stirling: str, metric: str) -> float:
    """The largest relative difference of the means of a Stirling form and its exact twin (inf: no twin)."""
    exact = lines.get(_exact_twin(stirling))
    if exact is None or [row["x"] for row in exact] != [row["x"] for row in lines[stirling]]:
        return np.inf
    a = np.array([row[f"{metric}_mean"] for row in exact])
    b = np.array([row[f"{metric}_mean"] for row in lines[stirling]])
    scale = np.maximum(np.abs(a), np.abs(b))
    return float(np.max(np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0), 0.0)))


def _label(lines: dict[str, list[dict[str, Any]]], method: str, metric: str) -> str:
    """A method's legend entry; an exact MAP that its Stirling form matches says so, with the gap.

    >>> row = lambda y: {"x": 1.0, "mse_mean": y}
    >>> lines = {"MAP uniform (exact)": [row(10.0)], "MAP uniform (Stirling)": [row(10.001)]}
    >>> _label(lines, "MAP uniform (exact)", "mse")
    'MAP uniform (exact and Stirling: within 0.01%)'
    """
    stirling = method.removesuffix(EXACT) + STIRLING
    if not method.endswith(EXACT) or stirling not in lines or not _agree(lines, stirling, metric):
        return method
    gap = _gap(lines, stirling, metric)
    return f"{method.removesuffix(EXACT)} (exact and Stirling: within {max(100 * gap, 0.01):.2g}%)"


def _style(method: str) -> dict[str, Any]:
    """One colour per MAP prior; the Stirling form dotted, with hollow markers."""
    for prior, color in _PRIOR_COLORS.items():
        if method.startswith(prior):
            return {"color": color, **({"linestyle": ":", "hollow": True} if method.endswith(STIRLING) else {})}
    return {"color": "tab:blue"} if method == "MLE" else {}


def plot_counts(noisy: object, cleaned: object, path: Path, *, locations: Sequence[int] | None = None,
                names: Sequence[str] | None = None, cleaned_label: str = "post-processed", title: str = "") -> Path:
    """The noisy and the post-processed counts of a few locations over time, one panel per
    location, stacked (``dpstream postprocess --plot``).

    ``noisy`` and ``cleaned`` are ``T x m``; ``locations`` are column numbers (default: the
    first three), ``names`` the columns' names (default: ``location <number>``).
    """
    noisy, cleaned = np.asarray(noisy, dtype=np.float64), np.asarray(cleaned, dtype=np.float64)
    if noisy.ndim != 2 or noisy.shape != cleaned.shape:
        raise ValueError(f"noisy and cleaned counts must be two T x m arrays of one shape, got {noisy.shape} "
                         f"and {cleaned.shape}.")
    m = noisy.shape[1]
    chosen = list(range(min(m, 3))) if locations is None else [int(j) for j in locations]
    if not chosen or any(not 0 <= j < m for j in chosen):
        raise ValueError(f"locations must be column numbers from 0 to {m - 1}, got {chosen}.")
    steps = np.arange(1, noisy.shape[0] + 1)
    panels = []
    for j in chosen:
        name = f"location {j}" if names is None else f"{names[j]} (column {j})"
        panels.append(Panel(
            series=[Series(label="noisy (as released)", x=steps, y=noisy[:, j], marker=None, linewidth=0.8,
                           color="tab:grey"),
                    Series(label=cleaned_label, x=steps, y=cleaned[:, j], marker=None, linewidth=1.4,
                           color="tab:blue")],
            xlabel="time step", ylabel="users at the location", title=f"{title}: {name}" if title else name,
            legend="outside"))
    return save_figure(path, panels, panel_size=(10.0, 2.8), stacked=True)
