"""The stream studies of ToPS (Section 5) and of its baselines, and their figures.

Each study is a table of methods and a way to split a stream into a :class:`Scenario` (the
held-out first m values, the values to release and their ground truth).  A method takes a
scenario, a budget and a generator, and returns a function that answers range queries.  Every
round draws fresh noise and fresh queries; all methods of a round answer the same queries.

* ``end-to-end`` (Figure 3's ToPS line): ToPS with the same epsilon for NM-E and the
  hierarchy (so the whole release is epsilon-DP); ground truth is the raw stream.  With
  ``ExperimentConfig(threshold_method="model")``, ToPS runs the library's default choice of theta,
  s and the prior (:mod:`dpstream.thresholds.model`) instead of the paper's NM-E, here and in
  ``baselines``.
* ``hierarchy`` (Figures 4-5): theta is the true p-th percentile (default 95) of the first m
  values -- a NON-PRIVATE oracle that isolates the perturber and smoother -- and the ground
  truth is the stream truncated at theta.
* ``topl`` (Section 5.5, Figure 8): the study's epsilon is the budget of ToPL's threshold
  reports, the stream reports' is fixed at ``config.stream_epsilon``; SW-W and SW choose theta
  from Square Wave reports of the first m values.  Ground truth is the raw stream.
* ``baselines`` (Figure 3, and Section 3.1's uncapped PAK): PAK, the binary tree, NM-E with
  the binary tree, S-PAK with the hierarchy, end to end on the values after the hold-out.
* ``percentiles`` (Figure 6): true percentiles (NON-PRIVATE oracles) against NM-E at
  epsilon 0.05; the study's epsilon is the hierarchy's.
* ``threshold-methods`` (Figure 7): threshold methods at the study's epsilon, the hierarchy at
  0.05.  Like ``percentiles``, it runs on the held-out values (Section 5.4).

``Base`` always answers 0; every method must beat it.

Queries are random ranges (:func:`~dpstream.evaluation.metrics.random_queries`), or all of one
length with ``ExperimentConfig(query_length=L)``.  :func:`summarize` gives the mean, standard
deviation and 10th/90th percentiles over rounds; :func:`plot_metric` draws the mean with the
10-90% band, which unlike ``mean +- sd`` stays meaningful on the log axis.

Every method runs the float algorithm of its mechanism (``noise=FloatNoise(rng)``: no grid,
numpy's float Laplace), so the studies reproduce the float implementation's numbers and stay
fast.  It is the library's mechanism itself on its float arithmetic
(:mod:`dpstream.hierarchy.arithmetic` says why there is no separate float replica here).  Their
outputs are NOT private releases; ``dpstream release`` and the mechanisms' defaults use exact
noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from dpstream._checks import check_choice, check_epsilon
from dpstream._progress import Progress, notify
from dpstream.evaluation.metrics import (
    METRICS,
    RangeQueries,
    error_metrics,
    fixed_length_queries,
    prefix_range_sums,
    random_queries,
)
from dpstream.evaluation.plots import Panel, Series, counted, save_figure
from dpstream.hierarchy import PlainHierarchy
from dpstream.noise import FloatNoise
from dpstream.release import HierarchicalPerturber, ToPL, ToPS
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.pak import PAK, cap_threshold
from dpstream.release.tops import THRESHOLD_METHODS
from dpstream.rng import Seed, make_rng
from dpstream.thresholds import noisy_max_threshold, true_percentile
from dpstream.thresholds.smooth_sensitivity import pak_threshold, smooth_quantile_threshold

__all__ = [
    "FIXED_EPSILON",
    "ORACLE_PERCENTILES",
    "STUDIES",
    "TOPS_THRESHOLD",
    "ExperimentConfig",
    "Scenario",
    "Study",
    "axis_label",
    "extend_stream",
    "interval_means",
    "plot_metric",
    "plot_moving_average",
    "run_study",
    "summarize",
]

Answer = Callable[[RangeQueries], np.ndarray]
MethodFn = Callable[["Scenario", float, "ExperimentConfig", np.random.Generator], tuple[Answer, dict[str, Any]]]
ScenarioBuilder = Callable[[np.ndarray, float, "ExperimentConfig"], "Scenario"]

#: Budget of the hierarchy in Figure 7 and of NM-E in Figure 6 (the paper fixes both at 0.05).
FIXED_EPSILON = 0.05

#: The true percentiles of Figure 6 (NON-PRIVATE oracle thresholds).
ORACLE_PERCENTILES = (85.0, 90.0, 95.0, 99.5, 99.9)

#: The quantiles over rounds that :func:`summarize` reports and :func:`plot_metric` shades.
BAND = (0.1, 0.9)

#: What ``Base`` is, as the legends say.
BASE_LABEL = "Base (answers 0 to every query)"

#: A plot whose legend has more entries than this puts it beside the axes, not over the curves.
_LEGEND_INSIDE_MAX = 4


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """The paper's settings as defaults: m = 65,536, r = 2^20, 200 random range queries.

    ``query_length`` fixes the length of every query (None: random ranges, as the paper draws
    them); ``stream_epsilon`` is the ``topl`` study's budget of the stream reports (Figure 8: 1);
    ``period`` gives ToPS of the ``end-to-end`` and ``baselines`` studies one leaf per period of that many values
    (:class:`~dpstream.release.periodic.PeriodicPerturber`; None: the paper's blocks of ``b^s``);
    ``threshold_method`` is how their ToPS chooses theta: ``nm-e``, the paper's (the default
    here), or ``model``, the library's default (:class:`~dpstream.release.ToPS`).

    >>> ExperimentConfig(rounds=3).hold
    65536
    """

    hold: int = 65536
    max_range: int = 2**20
    rounds: int = 10
    queries: int = 200
    percentile: float = 95.0
    stream_epsilon: float = 1.0
    query_length: int | None = None
    period: int | None = None
    threshold_method: str = "nm-e"

    def __post_init__(self) -> None:
        check_choice(self.threshold_method, "threshold_method", THRESHOLD_METHODS)


#: What ToPS's threshold is, by :attr:`ExperimentConfig.threshold_method`, as a study's output says.
TOPS_THRESHOLD = MappingProxyType({
    "nm-e": "NM-E (private)",
    "model": "ToPS's default: the error model chooses θ, s and the prior (private)",
})


@dataclass(frozen=True, kw_only=True)
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


# -- scenarios: how a study splits a stream of hold + max_range values ----------------------


def _private_threshold(source: str | None) -> ScenarioBuilder:
    """The methods choose theta privately on the first m values; the truth is the raw stream.

    ``source`` says how; None: as ToPS does (:data:`TOPS_THRESHOLD` of the config's method).
    """

    def build(values: np.ndarray, upper_bound: float, config: ExperimentConfig) -> Scenario:
        held, stream = values[: config.hold], values[config.hold : config.hold + config.max_range]
        return Scenario(held=held, stream=stream, truth=stream, upper_bound=upper_bound, threshold=None,
                        threshold_source=TOPS_THRESHOLD[config.threshold_method] if source is None else source)

    return build


def _oracle_threshold(values: np.ndarray, upper_bound: float, config: ExperimentConfig) -> Scenario:
    """theta is the true percentile of the first m values (NON-PRIVATE); the truth is truncated at it."""
    held, stream = values[: config.hold], values[config.hold : config.hold + config.max_range]
    theta = true_percentile(held, config.percentile)
    source = f"true p{config.percentile:g} of the first {config.hold:,} values (NON-PRIVATE oracle)"
    return Scenario(held=held, stream=stream, truth=np.minimum(stream, theta), upper_bound=upper_bound,
                    threshold=theta, threshold_source=source)


def _held_out(values: np.ndarray, upper_bound: float, config: ExperimentConfig) -> Scenario:
    """Section 5.4's setting: the hierarchy runs on the same first m values that choose theta;
    the ground truth is those values, untruncated."""
    held = values[: config.hold]
    source = "per method (true percentiles are NON-PRIVATE oracles; NM-E, S-PAK and S-P are private)"
    return Scenario(held=held, stream=held, truth=held, upper_bound=upper_bound, threshold=None,
                    threshold_source=source)


def _delta(config: ExperimentConfig) -> float:
    """delta = 1 / n^2 with n = m + r values (ToPS Appendix B)."""
    return 1.0 / (config.hold + config.max_range) ** 2


def _query_range(scenario: Scenario, config: ExperimentConfig) -> int:
    """The largest range a query can span: r, or fewer when the released stream is shorter.

    In Figures 6 and 7 the hierarchy runs on the m held-out values, so no query spans more than
    m values; with r = 2^20 > m = 4,096, Eq. 7 would pick blocks of 16^3 = 4,096 values and the
    whole stream would be a single smoothed block.  Both the hierarchy and NM-E's score (whose
    r is "the maximal range of any query") therefore use min(r, stream length).
    """
    return max(2, min(config.max_range, scenario.stream.size))


# -- methods -------------------------------------------------------------------------------


def _released(values: np.ndarray) -> Answer:
    return lambda queries: prefix_range_sums(values, queries)


def _base(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    return (lambda queries: np.zeros(queries.starts.size)), {}


def _tops(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    tops = ToPS(epsilon=epsilon, upper_bound=scenario.upper_bound, hold=config.hold, max_range=config.max_range,
                threshold_method=config.threshold_method, period=config.period, noise=FloatNoise(rng=rng))
    tops.release(scenario.held)
    released = tops.release(scenario.stream)
    return _released(released), {"threshold": tops.threshold, "smoothed_levels": tops.smoothed_levels}


def _plain(*, fanout: int) -> MethodFn:
    """The plain (unconsistent) hierarchy of fan-out ``fanout`` at the scenario's theta."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        tree = PlainHierarchy(
            scenario.truth,
            threshold=scenario.threshold,
            epsilon=epsilon,
            max_range=config.max_range,
            fanout=fanout,
            noise=FloatNoise(rng=rng),
        )
        return (lambda queries: tree.range_sums(queries.starts, queries.stops)), {"smoothed_levels": 0}

    return method


def _consistent(*, smoother: str | None) -> MethodFn:
    """The consistent hierarchy of fan-out 16 at the scenario's theta, with ``smoother`` or none."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        perturber = HierarchicalPerturber(
            threshold=scenario.threshold,
            epsilon=epsilon,
            max_range=config.max_range,
            fanout=16,
            smoothed_levels=0 if smoother is None else None,
            smoother=smoother or "recent",
            noise=FloatNoise(rng=rng),
        )
        released = perturber.release(scenario.truth)
        return _released(released), {"smoothed_levels": perturber.smoothed_levels}

    return method


def _topl(*, variant: str) -> MethodFn:
    """ToPL end to end: the study's epsilon goes to the threshold reports, ``stream_epsilon`` to the stream's."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        check_epsilon(config.stream_epsilon, "stream_epsilon")
        topl = ToPL(
            epsilon=config.stream_epsilon,
            upper_bound=scenario.upper_bound,
            threshold_epsilon=epsilon,
            hold=config.hold,
            max_range=config.max_range,
            variant=variant,
            seed=rng,
        )
        topl.release(scenario.held)
        released = topl.release(scenario.stream)
        return _released(released), {"threshold": topl.threshold}

    return method


def _hierarchy_release(
    values: np.ndarray,
    theta: float,
    epsilon: float,
    config: ExperimentConfig,
    rng: np.random.Generator,
    *,
    smoother: str | None,
) -> Answer:
    """The consistent hierarchy (fan-out 16) on ``values`` truncated at ``theta``, smoothed or not."""
    max_range = max(2, min(config.max_range, values.size))
    perturber = HierarchicalPerturber(
        threshold=theta,
        epsilon=epsilon,
        max_range=max_range,
        fanout=16,
        smoothed_levels=0 if smoother is None else None,
        smoother=smoother or "recent",
        noise=FloatNoise(rng=rng),
    )
    return _released(perturber.release(np.minimum(values, theta)))


def _pak(*, capped: bool) -> MethodFn:
    """PAK's Mechanism 1 end to end (capped: tau >= B falls back to B; uncapped: as the ToPS paper ran it)."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        pak = PAK(
            epsilon=epsilon,
            upper_bound=scenario.upper_bound,
            hold=config.hold,
            max_range=config.max_range,
            capped=capped,
            delta=_delta(config),
            noise=FloatNoise(rng=rng),
        )
        pak.release(scenario.held)
        released = pak.release(scenario.stream)
        return _released(released), {"threshold": pak.threshold}

    return method


def _binary_tree_bound(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    """The plain binary tree with the public bound B (no threshold)."""
    counter = BinaryTreeCounter(upper_bound=scenario.upper_bound, epsilon=epsilon, max_range=config.max_range,
                                noise=FloatNoise(rng=rng))
    return _released(counter.release(scenario.stream)), {"threshold": scenario.upper_bound}


def _nm_e_binary_tree(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
    """Figure 3's NM-E: PAK's phase 1 replaced by NM-E; the binary tree is kept.

    NM-E scores thresholds with ToPS's own noise model (fan-out 16, Eq. 6), unchanged, as the
    paper describes the swap.  Scoring for the binary tree (fan-out 2) would weigh its larger
    noise and favour a smaller theta; that variant is not what Figure 3 shows.
    """
    theta = noisy_max_threshold(
        scenario.held, epsilon=epsilon, upper_bound=scenario.upper_bound, max_range=config.max_range, fanout=16,
        noise=FloatNoise(rng=rng),
    )
    counter = BinaryTreeCounter(upper_bound=theta, epsilon=epsilon, max_range=config.max_range,
                                noise=FloatNoise(rng=rng))
    return _released(counter.release(np.minimum(scenario.stream, theta))), {"threshold": theta}


def _smooth_hierarchy(*, threshold: str, capped: bool, smoother: str | None, stream_epsilon: float | None) -> MethodFn:
    """A smooth-sensitivity threshold + the consistent hierarchy.

    ``threshold`` is ``"S-PAK"`` (PAK's defaults, ToPS Appendix B) or ``"S-P"`` (p = 99.5), on
    the held-out values with the study's epsilon, then capped at B or not (:func:`cap_threshold`).
    The hierarchy gets ``stream_epsilon``, or the study's epsilon when it is None.
    """

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        common = dict(epsilon=epsilon, delta=_delta(config), upper_bound=scenario.upper_bound,
                      sampler=FloatNoise(rng=rng))
        if threshold == "S-PAK":
            raw = pak_threshold(scenario.held, **common)
        else:
            raw = smooth_quantile_threshold(scenario.held, percentile=99.5, **common)
        theta = cap_threshold(raw, scenario.upper_bound, capped=capped)
        budget = epsilon if stream_epsilon is None else stream_epsilon
        answer = _hierarchy_release(scenario.stream, theta, budget, config, rng, smoother=smoother)
        return answer, {"threshold": theta}

    return method


def _nm_e_hierarchy(*, threshold_epsilon: float | None, stream_epsilon: float | None) -> MethodFn:
    """NM-E + the consistent hierarchy with the Recent smoother.

    Each budget is a fixed number or, when None, the study's epsilon: Figure 7 fixes the
    hierarchy's (``stream_epsilon=FIXED_EPSILON``), Figure 6 the threshold's.
    """

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        theta_budget = epsilon if threshold_epsilon is None else threshold_epsilon
        stream_budget = epsilon if stream_epsilon is None else stream_epsilon
        theta = noisy_max_threshold(
            scenario.held,
            epsilon=theta_budget,
            stream_epsilon=stream_budget,
            upper_bound=scenario.upper_bound,
            max_range=_query_range(scenario, config),
            fanout=16,
            noise=FloatNoise(rng=rng),
        )
        answer = _hierarchy_release(scenario.stream, theta, stream_budget, config, rng, smoother="recent")
        return answer, {"threshold": theta}

    return method


def _oracle_percentile(*, percentile: float) -> MethodFn:
    """Figure 6: the TRUE percentile of the held-out values as theta -- a NON-PRIVATE oracle."""

    def method(scenario: Scenario, epsilon: float, config: ExperimentConfig, rng: np.random.Generator):
        theta = true_percentile(scenario.held, percentile)
        return _hierarchy_release(scenario.stream, theta, epsilon, config, rng, smoother="recent"), {"threshold": theta}

    return method


# -- the studies ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Study:
    """A study: its methods, in the order they run and are reported, its scenario, and what its
    epsilon is (``xlabel``: the x axis of its plot, formatted with the :class:`ExperimentConfig`).

    ``close`` names methods whose curves lie within a few percent of each other (the smoothers of
    the hierarchy study): :func:`plot_metric` gives them distinct markers and a second panel of
    their metric relative to the first one's, where their differences can be read.
    """

    methods: Mapping[str, MethodFn]
    scenario: ScenarioBuilder
    xlabel: str = "ε"
    close: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "methods", MappingProxyType(dict(self.methods)))


#: Every stream study, by name (read-only).
STUDIES: Mapping[str, Study] = MappingProxyType(
    {
        "end-to-end": Study(
            methods={"ToPS": _tops, "Base": _base},
            scenario=_private_threshold(None),
            xlabel="ε of the whole release (the NM-E threshold and the hierarchy each get ε)",
        ),
        "hierarchy": Study(
            methods={
                "H2": _plain(fanout=2),
                "H16": _plain(fanout=16),
                "H16c": _consistent(smoother=None),
                "H16c+recent": _consistent(smoother="recent"),
                "H16c+mean": _consistent(smoother="mean"),
                "H16c+median": _consistent(smoother="median"),
                "H16c+moving_average": _consistent(smoother="moving_average"),
                "H16c+exponential": _consistent(smoother="exponential"),
                "Base": _base,
            },
            scenario=_oracle_threshold,
            xlabel="ε of the hierarchy (θ = true p{percentile:g} of the held-out values: a non-private oracle)",
            close=("H16c+recent", "H16c+mean", "H16c+median", "H16c+moving_average", "H16c+exponential"),
        ),
        "topl": Study(
            methods={"SW-W": _topl(variant="SW-W"), "SW": _topl(variant="SW"), "Base": _base},
            scenario=_private_threshold("Square Wave + Eq. 8 (LDP)"),
            xlabel="ε of each threshold report (each stream report: ε = {stream_epsilon:g})",
        ),
        "baselines": Study(
            methods={
                "PAK": _pak(capped=True),
                "PAK-uncapped": _pak(capped=False),
                "BT-bound": _binary_tree_bound,
                "NM-E+BT": _nm_e_binary_tree,
                "S-PAK+H16c+recent": _smooth_hierarchy(
                    threshold="S-PAK", capped=True, smoother="recent", stream_epsilon=None
                ),
                "S-PAK-uncapped+H16c+recent": _smooth_hierarchy(
                    threshold="S-PAK", capped=False, smoother="recent", stream_epsilon=None
                ),
                "ToPS": _tops,
                "Base": _base,
            },
            scenario=_private_threshold(None),
            xlabel="ε of the whole release (each method is ε-DP, or (ε, δ)-DP with a smooth-sensitivity threshold)",
        ),
        "percentiles": Study(
            methods={
                **{f"true-p{p:g}-ORACLE": _oracle_percentile(percentile=p) for p in ORACLE_PERCENTILES},
                "NM-E@0.05": _nm_e_hierarchy(threshold_epsilon=FIXED_EPSILON, stream_epsilon=None),
                "Base": _base,
            },
            scenario=_held_out,
            xlabel=f"ε of the hierarchy (NM-E's threshold: ε = {FIXED_EPSILON:g}; true percentiles: non-private)",
        ),
        "threshold-methods": Study(
            methods={
                "NM-E+H16c+recent": _nm_e_hierarchy(threshold_epsilon=None, stream_epsilon=FIXED_EPSILON),
                "S-PAK+H16c+recent": _smooth_hierarchy(
                    threshold="S-PAK", capped=True, smoother="recent", stream_epsilon=FIXED_EPSILON
                ),
                "S-PAK+H16c": _smooth_hierarchy(
                    threshold="S-PAK", capped=True, smoother=None, stream_epsilon=FIXED_EPSILON
                ),
                "S-P+H16c+recent": _smooth_hierarchy(
                    threshold="S-P", capped=True, smoother="recent", stream_epsilon=FIXED_EPSILON
                ),
                "S-P+H16c": _smooth_hierarchy(
                    threshold="S-P", capped=True, smoother=None, stream_epsilon=FIXED_EPSILON
                ),
                "S-PAK-uncapped+H16c+recent": _smooth_hierarchy(
                    threshold="S-PAK", capped=False, smoother="recent", stream_epsilon=FIXED_EPSILON
                ),
                "S-P-uncapped+H16c+recent": _smooth_hierarchy(
                    threshold="S-P", capped=False, smoother="recent", stream_epsilon=FIXED_EPSILON
                ),
                "Base": _base,
            },
            scenario=_held_out,
            xlabel=f"ε of the threshold (the hierarchy: ε = {FIXED_EPSILON:g})",
        ),
    }
)


def axis_label(study: str, config: ExperimentConfig) -> str:
    """What the epsilon of ``study`` is, as its plot's x axis says.

    >>> axis_label("topl", ExperimentConfig(stream_epsilon=0.5))
    'ε of each threshold report (each stream report: ε = 0.5)'
    """
    return STUDIES[study].xlabel.format(**config.__dict__)


def prepare(values: np.ndarray, upper_bound: float, study: str, config: ExperimentConfig) -> Scenario:
    """Split a stream of exactly hold + max_range values into a study's scenario."""
    return STUDIES[study].scenario(values, upper_bound, config)


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
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Run a study; return one record per (round, epsilon, method) with every metric.

    ``values`` is extended (see :func:`extend_stream`) or cut to ``hold + max_range`` values.
    ``progress`` is called with the runs done (one run: one method at one epsilon in one round)
    out of ``rounds * len(epsilons) * len(methods)``, the protocol of :mod:`dpstream._progress`;
    ``log`` receives what was done to the data and where the threshold comes from.
    """
    if study not in STUDIES:
        raise ValueError(f"study must be one of {', '.join(STUDIES)}; got {study!r}.")
    table = STUDIES[study].methods
    names = list(table) if methods is None else list(methods)
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"study {study!r} has no method {unknown[0]!r}; it has {', '.join(table)}.")
    values, note = extend_stream(values, config.hold + config.max_range)
    log(f"{dataset}: {note}")
    scenario = prepare(values, upper_bound, study, config)
    log(
        f"{dataset}: threshold {scenario.threshold_source}"
        + (f" = {scenario.threshold:g}" if scenario.threshold is not None else "")
    )
    if config.query_length is not None and not 1 <= config.query_length <= scenario.truth.size:
        raise ValueError(f"query_length must be between 1 and the {scenario.truth.size:,} positions the study "
                         f"{study!r} answers queries over, got {config.query_length!r}.")
    rng = make_rng(seed)
    records: list[dict[str, Any]] = []
    total = config.rounds * len(epsilons) * len(names)
    notify(progress, 0, total)
    for round_index in range(config.rounds):
        if config.query_length is None:
            queries = random_queries(rng, scenario.truth.size, config.queries)
        else:
            queries = fixed_length_queries(rng, scenario.truth.size, config.queries, config.query_length)
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
                notify(progress, len(records), total)
    return records


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, standard deviation and 10th/90th percentiles over rounds of every metric, per
    (method, epsilon): columns ``<metric>_mean``, ``_std``, ``_q10`` and ``_q90``."""
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
            row[f"{metric}_q10"], row[f"{metric}_q90"] = (float(q) for q in np.quantile(column, BAND))
        rows.append(row)
    return rows


# -- figures -------------------------------------------------------------------------------


def plot_metric(
    rows: Sequence[dict[str, Any]],
    path: Path,
    *,
    config: ExperimentConfig = ExperimentConfig(),
    metric: str = "mse",
    title: str = "",
) -> Path:
    """One line per method: the mean ``metric`` over rounds against the study's epsilon, on a
    log scale (Figures 3-8), shaded between the 10th and 90th percentiles over rounds.

    ``rows`` come from :func:`summarize`; the x axis says what the study's epsilon is
    (:func:`axis_label`, with ``config``), the legend what the band and ``Base`` are.  A legend
    of more than four entries goes beside the axes.  When two or more of the study's
    :attr:`Study.close` methods are in ``rows``, they get distinct markers, and a second panel
    below shows each one's mean relative to the first's.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}.")
    study = rows[0].get("study")
    methods = list(dict.fromkeys(row["method"] for row in rows))
    close = [name for name in (STUDIES[study].close if study in STUDIES else ()) if name in methods]
    close = close if len(close) > 1 else []
    lines = {method: sorted((row for row in rows if row["method"] == method), key=lambda row: row["epsilon"])
             for method in methods}
    series = []
    for method, mine in lines.items():
        series.append(
            Series(
                label=BASE_LABEL if method == "Base" else method,
                x=[row["epsilon"] for row in mine],
                y=[row[f"{metric}_mean"] for row in mine],
                band=([row[f"{metric}_q10"] for row in mine], [row[f"{metric}_q90"] for row in mine]),
                reference=method == "Base",
                **_close_style(close, method),
            )
        )
    rounds = max(row["rounds"] for row in rows)
    queries = "random range queries" if config.query_length is None else f"queries of {config.query_length:,} values"
    outside = len(series) > _LEGEND_INSIDE_MAX
    xlabel = axis_label(study, config) if study in STUDIES else "ε"
    panels = [Panel(
        series=series,
        xlabel=xlabel,
        ylabel=f"{metric.upper()} of {queries} (mean over rounds)",
        title=title,
        ylog=True,
        legend="outside" if outside else "inside",
        legend_title=f"line: mean of {counted(rounds, 'round')}\nshaded: 10th-90th percentile",
    )]
    if close:
        first = {row["epsilon"]: row[f"{metric}_mean"] for row in lines[close[0]]}
        panels.append(Panel(
            series=[Series(label=method, x=[row["epsilon"] for row in lines[method]],
                           y=[row[f"{metric}_mean"] / first[row["epsilon"]] for row in lines[method]],
                           **_close_style(close, method)) for method in close],
            xlabel=xlabel,
            ylabel=f"{metric.upper()} / {metric.upper()} of {close[0]}",
            title=f"the {len(close)} close lines above, relative to {close[0]}",
            legend="outside",
            legend_title=f"ratio of the means of {counted(rounds, 'round')}",
        ))
    size = (10.0, 4.8) if outside or close else (7.2, 4.8)
    return save_figure(path, panels, panel_size=size, stacked=True)


#: Markers that tell the close lines of a study apart.
_CLOSE_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def _close_style(close: Sequence[str], method: str) -> dict[str, Any]:
    """Each close method's marker (hollow but the first) and colour, the same in both panels."""
    if method not in close:
        return {}
    index = close.index(method)
    return {"marker": _CLOSE_MARKERS[index % len(_CLOSE_MARKERS)], "hollow": index > 0,
            "color": f"C{3 + index}"}


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
    x = np.arange(intervals)
    panel = Panel(
        series=[
            Series(label="true stream", x=x, y=interval_means(truth, intervals), marker=None, color="black",
                   linewidth=1.5),
            Series(
                label="released stream",
                x=x,
                y=interval_means(released, intervals),
                marker=None,
                color="tab:red",
                linewidth=1.0,
            ),
        ],
        xlabel=f"time: interval of the released stream ({intervals} intervals of ~{truth.size // intervals:,} values)",
        ylabel="mean value in the interval",
        title=title,
    )
    return save_figure(path, [panel], panel_size=(8.0, 3.6))
