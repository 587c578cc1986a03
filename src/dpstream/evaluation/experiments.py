"""The experiments of Section 5: end-to-end release and the hierarchy/smoother study.

Each study is a table of methods.  A method takes a prepared :class:`Scenario` (the held-out
first m values, the next r values to release and their ground truth), a budget and a
generator, and returns a function that answers range queries.  Every round draws fresh noise
and fresh queries; all methods of a round answer the same queries.

* ``end-to-end`` (Figure 3's ToPS line): ToPS with the same epsilon for NM-E and the
  hierarchy (so the whole release is epsilon-DP); ground truth is the raw stream.
* ``hierarchy`` (Figures 4-5): theta is the true p-th percentile (default 95) of the first m
  values -- a NON-PRIVATE oracle that isolates the perturber and smoother -- and the ground
  truth is the stream truncated at theta.

``Base`` always answers 0; every method must beat it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from dpstream._checks import check_epsilon
from dpstream.evaluation.metrics import METRICS, RangeQueries, error_metrics, prefix_range_sums, random_queries
from dpstream.hierarchy import PlainHierarchy
from dpstream.release import HierarchicalPerturber, ToPL, ToPS
from dpstream.rng import Seed, make_rng
from dpstream.thresholds import true_percentile

__all__ = ["STUDIES", "ExperimentConfig", "Scenario", "extend_stream", "run_study", "summarize"]

Answer = Callable[[RangeQueries], np.ndarray]
MethodFn = Callable[["Scenario", float, "ExperimentConfig", np.random.Generator], tuple[Answer, dict[str, Any]]]


@dataclass(frozen=True)
class ExperimentConfig:
    """The paper's settings as defaults: m = 65,536, r = 2^20, 200 queries."""

    hold: int = 65536
    max_range: int = 2**20
    rounds: int = 10
    queries: int = 200
    percentile: float = 95.0
    stream_epsilon: float = 1.0  # the ``topl`` study's budget of the stream reports (Figure 8: 1)


@dataclass(frozen=True)
class Scenario:
    """One dataset prepared for a study."""

    held: np.ndarray
    stream: np.ndarray
    truth: np.ndarray
    upper_bound: float
    threshold: float | None
    threshold_source: str


def extend_stream(values: np.ndarray, length: int) -> tuple[np.ndarray, str]:
    """Extend ``values`` to ``length`` by appending it reversed, then forward, and so on.

    This is how the paper's code lengthens a short dataset.  Returns the stream and a sentence
    saying what was done.

    >>> extend_stream(np.array([1.0, 2.0, 3.0]), 7)[0].tolist()
    [1.0, 2.0, 3.0, 3.0, 2.0, 1.0, 1.0]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size >= length:
        return values[:length], f"using the first {length:,} of {values.size:,} values"
    copies = -(-length // values.size)
    pieces = [values if k % 2 == 0 else values[::-1] for k in range(copies)]
    note = (
        f"the data has {values.size:,} values, fewer than the {length:,} needed; extended by appending "
        f"it reversed, then forward, alternately ({copies} copies, cut to {length:,})"
    )
    return np.concatenate(pieces)[:length], note


# -- methods -----------------------------------------------------------------------------


def _released(values: np.ndarray) -> Answer:
    return lambda queries: prefix_range_sums(values, queries)


def _base(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    return (lambda queries: np.zeros(queries.starts.size)), {}


def _tops(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    tops = ToPS(epsilon=epsilon, upper_bound=scenario.upper_bound, hold=config.hold, max_range=config.max_range,
                seed=rng)
    tops.release(scenario.held)
    released = tops.release(scenario.stream)
    return _released(released), {"threshold": tops.threshold, "smoothed_levels": tops.smoothed_levels}


def _plain(fanout: int) -> MethodFn:
    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        tree = PlainHierarchy(
            scenario.truth,
            threshold=scenario.threshold,
            epsilon=epsilon,
            max_range=config.max_range,
            fanout=fanout,
            rng=rng,
        )
        return (lambda queries: tree.range_sums(queries.starts, queries.stops)), {"smoothed_levels": 0}

    return method


def _consistent(smoother: str | None) -> MethodFn:
    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        perturber = HierarchicalPerturber(
            threshold=scenario.threshold,
            epsilon=epsilon,
            max_range=config.max_range,
            fanout=16,
            smoothed_levels=0 if smoother is None else None,
            smoother=smoother or "recent",
            seed=rng,
        )
        released = perturber.release(scenario.truth)
        return _released(released), {"smoothed_levels": perturber.smoothed_levels}

    return method


#: Studies: name -> (methods, whether theta is a fixed non-private percentile).
STUDIES: dict[str, tuple[dict[str, MethodFn], bool]] = {
    "end-to-end": ({"ToPS": _tops, "Base": _base}, False),
    "hierarchy": (
        {
            "H2": _plain(2),
            "H16": _plain(16),
            "H16c": _consistent(None),
            "H16c+recent": _consistent("recent"),
            "H16c+mean": _consistent("mean"),
            "H16c+median": _consistent("median"),
            "H16c+moving_average": _consistent("moving_average"),
            "H16c+exponential": _consistent("exponential"),
            "Base": _base,
        },
        True,
    ),
}


# -- ToPL (Section 5.5, Figure 8) ---------------------------------------------------------
# The ``topl`` study varies the budget of the threshold reports (the study's epsilon) with the
# stream reports' budget fixed at ``config.stream_epsilon``; SW-W and SW choose theta from
# Square Wave reports of the first m values, Base answers 0.  Ground truth is the raw stream.


def _topl(variant: str) -> MethodFn:
    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        check_epsilon(config.stream_epsilon, "stream_epsilon")
        topl = ToPL(epsilon=config.stream_epsilon, upper_bound=scenario.upper_bound, threshold_epsilon=epsilon,
                    hold=config.hold, max_range=config.max_range, variant=variant, seed=rng)
        topl.release(scenario.held)
        released = topl.release(scenario.stream)
        return _released(released), {"threshold": topl.threshold}

    return method


STUDIES["topl"] = ({"SW-W": _topl("SW-W"), "SW": _topl("SW"), "Base": _base}, False)

#: How the private studies choose theta (for the results' ``threshold_source`` column).
_PRIVATE_THRESHOLDS = {"topl": "Square Wave + Eq. 8 (LDP)"}


def prepare(values: np.ndarray, upper_bound: float, study: str, config: ExperimentConfig) -> Scenario:
    """Split a stream of exactly hold + max_range values into a study's scenario."""
    if study in SCENARIO_BUILDERS:
        return SCENARIO_BUILDERS[study](values, upper_bound, config)
    held, stream = values[: config.hold], values[config.hold : config.hold + config.max_range]
    if not STUDIES[study][1]:
        return Scenario(held, stream, stream, upper_bound, None, _PRIVATE_THRESHOLDS.get(study, "NM-E (private)"))
    theta = true_percentile(held, config.percentile)
    source = f"true p{config.percentile:g} of the first {config.hold:,} values (NON-PRIVATE oracle)"
    return Scenario(held, stream, np.minimum(stream, theta), upper_bound, theta, source)


def run_study(
    study: str,
    values: np.ndarray,
    upper_bound: float,
    *,
    epsilons: Sequence[float],
    methods: Sequence[str] | None = None,
    config: ExperimentConfig = ExperimentConfig(),
    seed: Seed = 0,
    dataset: str = "data",
    progress: bool = True,
    log: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Run a study; return one record per (round, epsilon, method) with every metric.

    ``values`` is extended (see :func:`extend_stream`) or cut to ``hold + max_range`` values.
    """
    if study not in STUDIES:
        raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {study!r}.")
    table = STUDIES[study][0]
    names = list(table) if methods is None else list(methods)
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"study {study!r} has no method {unknown[0]!r}; it has {', '.join(table)}.")
    values, note = extend_stream(values, config.hold + config.max_range)
    log(f"{dataset}: {note}")
    scenario = prepare(values, upper_bound, study, config)
    log(f"{dataset}: threshold {scenario.threshold_source}" + (
        f" = {scenario.threshold:g}" if scenario.threshold is not None else ""))
    rng = make_rng(seed)
    records: list[dict[str, Any]] = []
    total = config.rounds * len(epsilons) * len(names)
    with tqdm(total=total, desc=f"{study} on {dataset}", disable=not progress, unit="run") as bar:
        for round_index in range(config.rounds):
            queries = random_queries(rng, scenario.truth.size, config.queries)
            truth = prefix_range_sums(scenario.truth, queries)
            for epsilon in epsilons:
                for name in names:
                    answer, info = table[name](scenario, float(epsilon), config, rng)
                    record = {
                        "study": study,
                        "dataset": dataset,
                        "method": name,
                        "epsilon": float(epsilon),
                        "round": round_index,
                        "threshold_source": scenario.threshold_source,
                        "threshold": info.get("threshold", scenario.threshold),
                        "smoothed_levels": info.get("smoothed_levels"),
                    }
                    record.update(error_metrics(answer(queries), truth, queries))
                    records.append(record)
                    bar.update()
    return records


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over rounds of every metric, per (method, epsilon)."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["method"], record["epsilon"]), []).append(record)
    rows = []
    for (method, epsilon), group in groups.items():
        row: dict[str, Any] = {
            "study": group[0]["study"],
            "dataset": group[0]["dataset"],
            "method": method,
            "epsilon": epsilon,
            "rounds": len(group),
            "threshold_source": group[0]["threshold_source"],
        }
        thresholds = [r["threshold"] for r in group if r["threshold"] is not None]
        row["threshold_mean"] = float(np.mean(thresholds)) if thresholds else None
        row["smoothed_levels"] = group[0]["smoothed_levels"]
        for metric in METRICS:
            column = np.array([r[metric] for r in group])
            row[f"{metric}_mean"] = float(column.mean())
            row[f"{metric}_std"] = float(column.std(ddof=1)) if column.size > 1 else 0.0
        rows.append(row)
    return rows


# -- the baselines of Figures 3, 6 and 7 (PAK, the binary tree, S-P, true percentiles) -------

from dpstream.release.binary_tree import BinaryTreeCounter  # noqa: E402
from dpstream.release.pak import PAK, cap_threshold  # noqa: E402
from dpstream.thresholds import noisy_max_threshold  # noqa: E402
from dpstream.thresholds.smooth_sensitivity import pak_threshold, smooth_quantile_threshold  # noqa: E402

#: Studies whose scenario is not the default split: name -> builder of the scenario.
SCENARIO_BUILDERS: dict[str, Callable[[np.ndarray, float, ExperimentConfig], Scenario]] = {}

#: Budget of the hierarchy in Figure 7 and of NM-E in Figure 6 (the paper fixes both at 0.05).
FIXED_EPSILON = 0.05

#: The true percentiles of Figure 6 (NON-PRIVATE oracle thresholds).
ORACLE_PERCENTILES = (85.0, 90.0, 95.0, 99.5, 99.9)


def _delta(config: ExperimentConfig) -> float:
    """delta = 1 / n^2 with n = m + r values (ToPS Appendix B)."""
    return 1.0 / (config.hold + config.max_range) ** 2


def _held_out_scenario(values: np.ndarray, upper_bound: float, config: ExperimentConfig) -> Scenario:
    """Section 5.4's setting: the hierarchy runs on the same first m values that choose theta;
    the ground truth is those values, untruncated."""
    held = values[: config.hold]
    source = "per method (true percentiles are NON-PRIVATE oracles; NM-E, S-PAK and S-P are private)"
    return Scenario(held, held, held, upper_bound, None, source)


def _query_range(scenario: Scenario, config: ExperimentConfig) -> int:
    """The largest range a query can span: r, or fewer when the released stream is shorter.

    In Figures 6 and 7 the hierarchy runs on the m held-out values, so no query spans more than
    m values; with r = 2^20 > m = 4,096, Eq. 7 would pick blocks of 16^3 = 4,096 values and the
    whole stream would be a single smoothed block.  Both the hierarchy and NM-E's score (whose
    r is "the maximal range of any query") therefore use min(r, stream length).
    """
    return max(2, min(config.max_range, scenario.stream.size))


def _hierarchy_release(values: np.ndarray, theta: float, epsilon: float, config: ExperimentConfig,
                       rng: np.random.Generator, smoother: bool) -> Answer:
    max_range = max(2, min(config.max_range, values.size))
    perturber = HierarchicalPerturber(threshold=theta, epsilon=epsilon, max_range=max_range, fanout=16,
                                      smoothed_levels=None if smoother else 0, smoother="recent", seed=rng)
    return _released(perturber.release(np.minimum(values, theta)))


def _smooth_threshold(kind: str, scenario: Scenario, epsilon: float, config: ExperimentConfig,
                      rng: np.random.Generator, capped: bool) -> float:
    """S-PAK (PAK's defaults, ToPS Appendix B) or S-P (p = 99.5) on the held-out values, capped or not."""
    common = dict(epsilon=epsilon, delta=_delta(config), upper_bound=scenario.upper_bound, rng=rng)
    if kind == "S-PAK":
        theta = pak_threshold(scenario.held, **common)
    else:
        theta = smooth_quantile_threshold(scenario.held, percentile=99.5, **common)
    return cap_threshold(theta, scenario.upper_bound, capped=capped)


def _pak(capped: bool) -> MethodFn:
    """PAK's Mechanism 1 end to end (capped: tau >= B falls back to B; uncapped: as the ToPS paper ran it)."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        pak = PAK(epsilon=epsilon, upper_bound=scenario.upper_bound, hold=config.hold, max_range=config.max_range,
                  capped=capped, delta=_delta(config), seed=rng)
        pak.release(scenario.held)
        released = pak.release(scenario.stream)
        return _released(released), {"threshold": pak.threshold}

    return method


def _nm_e_binary_tree(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    """Figure 3's NM-E: PAK's phase 1 replaced by NM-E; the binary tree is kept.

    NM-E scores thresholds with ToPS's own noise model (fan-out 16, Eq. 6), unchanged, as the
    paper describes the swap.  Scoring for the binary tree (fan-out 2) would weigh its larger
    noise and favour a smaller theta; that variant is not what Figure 3 shows.
    """
    theta = noisy_max_threshold(scenario.held, epsilon=epsilon, upper_bound=scenario.upper_bound,
                                max_range=config.max_range, fanout=16, rng=rng)
    counter = BinaryTreeCounter(epsilon=epsilon, upper_bound=theta, max_range=config.max_range, seed=rng)
    return _released(counter.release(np.minimum(scenario.stream, theta))), {"threshold": theta}


def _binary_tree_bound(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    """The plain binary tree with the public bound B (no threshold)."""
    counter = BinaryTreeCounter(epsilon=epsilon, upper_bound=scenario.upper_bound, max_range=config.max_range, seed=rng)
    return _released(counter.release(scenario.stream)), {"threshold": scenario.upper_bound}


def _smooth_hierarchy(kind: str, capped: bool, smoother: bool, fixed_stream_epsilon: bool) -> MethodFn:
    """A smooth-sensitivity threshold (budget epsilon) + the consistent hierarchy, with or without
    the Recent smoother; the hierarchy gets epsilon, or FIXED_EPSILON in Figure 7."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        theta = _smooth_threshold(kind, scenario, epsilon, config, rng, capped)
        stream_epsilon = FIXED_EPSILON if fixed_stream_epsilon else epsilon
        return _hierarchy_release(scenario.stream, theta, stream_epsilon, config, rng, smoother), {"threshold": theta}

    return method


def _nm_e_hierarchy(fixed: str) -> MethodFn:
    """NM-E + the consistent hierarchy with the Recent smoother; one budget is FIXED_EPSILON.

    ``fixed="stream"``: Figure 7 (the threshold gets epsilon, the hierarchy FIXED_EPSILON).
    ``fixed="threshold"``: Figure 6 (the threshold gets FIXED_EPSILON, the hierarchy epsilon).
    """

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        threshold_epsilon, stream_epsilon = (epsilon, FIXED_EPSILON) if fixed == "stream" else (FIXED_EPSILON, epsilon)
        theta = noisy_max_threshold(scenario.held, epsilon=threshold_epsilon, stream_epsilon=stream_epsilon,
                                    upper_bound=scenario.upper_bound, max_range=_query_range(scenario, config),
                                    fanout=16, rng=rng)
        return _hierarchy_release(scenario.stream, theta, stream_epsilon, config, rng, True), {"threshold": theta}

    return method


def _oracle_percentile(p: float) -> MethodFn:
    """Figure 6: the TRUE p-th percentile of the held-out values as theta -- a NON-PRIVATE oracle."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        theta = true_percentile(scenario.held, p)
        return _hierarchy_release(scenario.stream, theta, epsilon, config, rng, True), {"threshold": theta}

    return method


STUDIES.update(
    {
        # Figure 3 (and Section 3.1's uncapped PAK): end to end on the values after the hold-out.
        "baselines": (
            {
                "PAK": _pak(capped=True),
                "PAK-uncapped": _pak(capped=False),
                "BT-bound": _binary_tree_bound,
                "NM-E+BT": _nm_e_binary_tree,
                "S-PAK+H16c+recent": _smooth_hierarchy("S-PAK", True, True, False),
                "S-PAK-uncapped+H16c+recent": _smooth_hierarchy("S-PAK", False, True, False),
                "ToPS": _tops,
                "Base": _base,
            },
            False,
        ),
        # Figure 6: true percentiles (NON-PRIVATE oracles) vs NM-E at eps 0.05; x-axis: the hierarchy's eps.
        "percentiles": (
            {
                **{f"true-p{p:g}-ORACLE": _oracle_percentile(p) for p in ORACLE_PERCENTILES},
                "NM-E@0.05": _nm_e_hierarchy(fixed="threshold"),
                "Base": _base,
            },
            False,
        ),
        # Figure 7: threshold methods at eps (x-axis), hierarchy at eps 0.05, on the held-out values.
        "threshold-methods": (
            {
                "NM-E+H16c+recent": _nm_e_hierarchy(fixed="stream"),
                "S-PAK+H16c+recent": _smooth_hierarchy("S-PAK", True, True, True),
                "S-PAK+H16c": _smooth_hierarchy("S-PAK", True, False, True),
                "S-P+H16c+recent": _smooth_hierarchy("S-P", True, True, True),
                "S-P+H16c": _smooth_hierarchy("S-P", True, False, True),
                "S-PAK-uncapped+H16c+recent": _smooth_hierarchy("S-PAK", False, True, True),
                "S-P-uncapped+H16c+recent": _smooth_hierarchy("S-P", False, True, True),
                "Base": _base,
            },
            False,
        ),
    }
)
SCENARIO_BUILDERS.update({"percentiles": _held_out_scenario, "threshold-methods": _held_out_scenario})
