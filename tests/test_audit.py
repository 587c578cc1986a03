"""The privacy auditor: its statistics on toy mechanisms written here with numpy, and the registry.

Tolerances come from two facts.  (1) Hoeffding: a frequency of ``m`` runs is within
``sqrt(log(1/t) / (2m))`` of its probability except with probability ``t``.  (2) A one-sided
Clopper-Pearson bound at confidence ``1 - gamma`` is within ``sqrt(log(1/gamma) / (2m))`` of the
frequency (every proportion further away is excluded by Hoeffding's tail at level gamma).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpstream.audit import (
    DEFAULT_ALPHA,
    MECHANISMS,
    Event,
    MechanismAdapter,
    UnverifiableSupport,
    audit_mechanism,
    clopper_pearson,
    epsilon_lower_bound,
    format_table,
    granularity_of,
    on_lattice,
    run_audit,
)

# -- toy mechanisms ------------------------------------------------------------------------


class RandomizedResponse(MechanismAdapter):
    """Binary randomized response: keeps the bit with probability e^eps / (1 + e^eps)."""

    name = "toy-rr"

    def __init__(self, *, epsilon: float, claimed: float | None = None) -> None:
        self.keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
        self.claimed_epsilon = epsilon if claimed is None else claimed
        self.neighbours = (1.0, 0.0)

    def sample(self, x, n, rng):
        return np.where(rng.random(n) < self.keep, x, 1.0 - x)

    def possible_under(self, x, outputs):
        return np.isin(outputs, (0.0, 1.0))


class FloatLaplace(MechanismAdapter):
    """``x + Lap(1 / eps)`` in float64, neighbours 0 and 1, with an optional declared grid."""

    name = "toy-float-laplace"

    def __init__(self, *, epsilon: float = 1.0, granularity: float | None = None) -> None:
        self.epsilon = self.claimed_epsilon = epsilon
        self.granularity = granularity
        self.neighbours = (0.0, 1.0)

    def sample(self, x, n, rng):
        return x + rng.laplace(0.0, 1.0 / self.epsilon, n)

    def possible_under(self, x, outputs):
        return on_lattice(outputs, x, self.granularity, what="toy Laplace")


class Geometric(FloatLaplace):
    """The geometric mechanism: ``x + G1 - G2`` with ``G ~ Geometric(1 - e^-eps)``, exactly eps-DP
    for integers at distance 1; its noise lives on the integers (granularity 1)."""

    name = "toy-geometric"

    def __init__(self, *, epsilon: float = 1.0) -> None:
        super().__init__(epsilon=epsilon, granularity=1.0)

    def sample(self, x, n, rng):
        success = -math.expm1(-self.epsilon)
        return x + (rng.geometric(success, n) - rng.geometric(success, n)).astype(np.float64)


def _floor(epsilon: float, m: int, events: int, alpha: float, tail: float = 1e-6) -> float:
    """The lower bound an exact-ratio randomized response reaches on ``m`` held-out runs, except
    with probability ``2 tail`` (facts (1) and (2) of the module docstring)."""
    keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
    slack = math.sqrt(math.log(1.0 / tail) / (2 * m)) + math.sqrt(math.log(2 * events / alpha) / (2 * m))
    return math.log((keep - slack) / (1.0 - keep + slack))


# -- statistics ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 17, 50, 99, 100])
def test_clopper_pearson_matches_scipy_exact_interval(k):
    gamma = 0.01
    lower, upper = clopper_pearson(np.array([k]), 100, gamma)
    interval = stats.binomtest(k, 100).proportion_ci(confidence_level=1 - 2 * gamma, method="exact")
    assert lower[0] == pytest.approx(interval.low, abs=1e-12)
    assert upper[0] == pytest.approx(interval.high, abs=1e-12)


def test_epsilon_lower_bound_accounts_for_delta():
    plain = epsilon_lower_bound(600, 100, 1000, delta=0.0, gamma=0.01)
    with_delta = epsilon_lower_bound(600, 100, 1000, delta=0.1, gamma=0.01)
    assert with_delta < plain
    assert epsilon_lower_bound(600, 100, 1000, delta=0.9, gamma=0.01) == -np.inf


def test_event_kinds():
    s = np.array([0.0, 1.0, 2.0, 3.0])
    assert Event(high=1.0).contains(s).tolist() == [True, True, False, False]
    assert Event(low=1.0, high=2.0).contains(s).tolist() == [False, True, True, False]
    assert Event(members=(0.0, 3.0)).contains(s).tolist() == [True, False, False, True]
    assert str(Event(low=1.0)) == "s >= 1" and str(Event(members=(0.0, 3.0))) == "s in {0, 3}"


def test_on_lattice_allows_rounding_but_not_off_grid_values():
    steps = np.arange(-50, 50)
    assert on_lattice(0.3 + 0.1 * steps, 0.3, 0.1).all()  # 0.1 is not a float64 grid: rounding allowed
    assert not on_lattice(np.array([0.35]), 0.3, 0.1)[0]
    with pytest.raises(UnverifiableSupport, match="too fine"):
        on_lattice(np.array([1e6]), 0.0, 1e-12)
    with pytest.raises(UnverifiableSupport, match="no granularity"):
        on_lattice(np.array([1.0, 2.0]), 0.0, np.array([1.0, np.nan]))


def test_granularity_of_ignores_invalid_values():
    class Holder:
        granularity = -1.0

    assert granularity_of(Holder()) is None


# -- (a) and (b): the epsilon check ----------------------------------------------------------


def test_exact_randomized_response_passes_close_below_epsilon():
    n, events = 1_000_000, 4
    result = audit_mechanism(RandomizedResponse(epsilon=1.0), samples=n, seed=1, events=events)
    assert result.passed, result
    floor = _floor(1.0, n - n // 2, events, DEFAULT_ALPHA)
    assert 1.0 - floor < 0.04  # the math: close
    assert floor < result.epsilon_lower_bound <= 1.0


def test_randomized_response_at_twice_the_claim_fails():
    n, events = 200_000, 4
    result = audit_mechanism(RandomizedResponse(epsilon=2.0, claimed=1.0), samples=n, seed=2, events=events)
    floor = _floor(2.0, n - n // 2, events, DEFAULT_ALPHA)
    assert floor > 1.0
    assert result.epsilon_lower_bound > floor and not result.epsilon_ok and not result.passed
    assert result.support_ok
    assert "epsilon lower bound" in format_table([result])


# -- (c) and (d): the support test ----------------------------------------------------------


def test_float_laplace_fails_the_support_test():
    undeclared = audit_mechanism(FloatLaplace(), samples=20_000, seed=3)
    assert not undeclared.support_ok and not undeclared.passed
    assert "no granularity" in undeclared.support_detail
    assert undeclared.epsilon_ok  # the events on the value itself see nothing wrong
    declared = audit_mechanism(FloatLaplace(granularity=2.0**-10), samples=20_000, seed=3)
    assert not declared.support_ok
    assert "impossible under input B" in declared.support_detail
    assert "support:" in format_table([declared])


def test_integer_geometric_mechanism_passes_the_support_test():
    result = audit_mechanism(Geometric(epsilon=1.0), samples=200_000, seed=4)
    assert result.support_ok, result.support_detail
    assert result.passed
    assert 0.5 < result.epsilon_lower_bound <= 1.0


# -- (e): Bonferroni ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_many_events_still_pass_a_tight_mechanism(seed):
    events = 200
    result = audit_mechanism(Geometric(epsilon=0.5), samples=100_000, seed=seed, events=events)
    assert result.events == events
    assert result.confidence == pytest.approx(1.0 - DEFAULT_ALPHA / (2 * events))
    assert result.passed, result


# -- interface checks -----------------------------------------------------------------------


def test_audit_is_replayed_by_its_seed():
    first = audit_mechanism(Geometric(), samples=5000, seed=7)
    again = audit_mechanism(Geometric(), samples=5000, seed=7)
    assert first.epsilon_lower_bound == again.epsilon_lower_bound and first.event == again.event


def test_bad_adapters_and_parameters_are_named():
    class Short(Geometric):
        def sample(self, x, n, rng):
            return np.zeros(n - 1)

    with pytest.raises(ValueError, match="sample must return 100 outputs"):
        audit_mechanism(Short(), samples=100, seed=0)
    with pytest.raises(ValueError, match="samples must be an integer >= 4, got 2"):
        audit_mechanism(Geometric(), samples=2)
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\], got 0.0"):
        audit_mechanism(Geometric(), alpha=0.0)
    with pytest.raises(ValueError, match="names must be among"):
        run_audit(["no-such-mechanism"])


# -- the registry ---------------------------------------------------------------------------

#: Mechanisms whose noise is already exact (or whose outputs are discrete / described by a density).
EXACT = {
    "tops": 4_000,
    "tops-one-level": 20_000,
    "tops-periodic": 4_000,
    "tops-model": 200,
    "tops-window-leaves": 400,
    "tops-stream": 200,
    "tops-selection": 4_000,
    "tops-median": 4_000,
    "tops-selection-rnm": 4_000,
    "tops-selection-exponential": 4_000,
    "binary-tree": 2_048,
    "pak": 400,
    "nm-e": 20_000,
    "nm-e-tail": 20_000,
    "sr": 100_000,
    "pm": 100_000,
    "hm": 100_000,
    "square-wave": 100_000,
    "count-of-counts": 20_000,
    "count-of-counts-hg": 20_000,
    "count-of-counts-naive": 20_000,
    "count-of-counts-top-down": 400,
    "count-of-counts-k": 4_000,
    "bt-by-key": 200,
    "laplace-counts": 100_000,
    "unit-aggregate": 4_000,
    "locations": 20_000,
    "locations-unbounded": 20_000,
    "tops-w-event": 4_000,
    "bt-w-event": 4_000,
    "unit-aggregate-selection": 4_000,
    "binary-tree-gaussian": 2_048,
    "binary-tree-gaussian-1e-6": 2_048,
    "unit-aggregate-gaussian": 4_000,
    "sqrt-zcdp": 2_048,
    "banded-zcdp": 2_048,
    "tops-gaussian": 2_048,
    "tops-gaussian-1e-6": 2_048,
    "tops-stream-gaussian": 200,
    "sqrt-zcdp-1e-6": 2_048,
}
#: Mechanisms that still add floating-point Laplace noise.
#: (None left: every mechanism draws exact noise.)
FLOAT_NOISE: dict[str, int] = {}


def test_registry_is_covered():
    assert set(EXACT) | set(FLOAT_NOISE) == set(MECHANISMS)


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_mechanisms_pass(name):
    [result] = run_audit([name], samples=EXACT[name])
    assert result.passed, format_table([result])
    assert result.claimed_epsilon == 1.0


def test_stream_adapters_declare_the_grids_of_their_outputs():
    """What the exact stream mechanisms expose for the support test: ToPS's released values (s = 0)
    lie on g / q around the truth (q the exact consistency denominator), the binary tree's on g,
    PAK's held-out sum on the grid it declares after its hold-out."""
    from dpstream.release.binary_tree import BinaryTreeCounter

    tops = MECHANISMS["tops"]()
    assert tops.granularity == 2.0**-18 / 5  # theta = 4: g = 2^-18; b = 4, two levels: q = 5
    tree = MECHANISMS["binary-tree"]()
    assert tree.levels == 3 and tree.sample(1.0, 5, np.random.default_rng(0)).shape == (5, 3)
    assert tree.granularity == BinaryTreeCounter(epsilon=1.0, upper_bound=1.0, seed=0).granularity == 2.0**-20
    pak = MECHANISMS["pak"]()
    outputs = pak.sample(pak.neighbours[0], 20, np.random.default_rng(0))
    assert np.all(outputs[:, 2] == 2.0**-16) and pak.possible_under(pak.neighbours[1], outputs).all()
    # a value off the grid would be impossible under either input
    shifted = outputs.copy()
    shifted[:, 0] += 2.0**-18
    assert not pak.possible_under(pak.neighbours[0], shifted).any()


def test_run_audit_reports_progress_and_formats_a_table():
    messages = []
    results = run_audit(["sr", "nm-e"], samples=2000, seed=5, log=messages.append)
    assert messages == ["auditing sr (1/2)", "auditing nm-e (2/2)"]
    table = format_table(results).splitlines()
    assert table[0].startswith("mechanism") and table[1].startswith("sr") and table[2].startswith("nm-e")


def test_the_audit_command_prints_the_table_and_exits_by_the_result():
    from click.testing import CliRunner

    from dpstream.cli import cli

    passed = CliRunner().invoke(cli, ["audit", "sr", "count-of-counts", "--samples", "2000"])
    assert passed.exit_code == 0, passed.output
    assert "eps lower bound" in passed.output and "sr " in passed.output and "FAIL" not in passed.output
    unknown = CliRunner().invoke(cli, ["audit", "no-such-mechanism"])
    assert unknown.exit_code == 2 and "unknown mechanism 'no-such-mechanism'" in unknown.output


def test_the_audit_takes_an_epsilon_and_describes_its_best_event():
    from click.testing import CliRunner

    from dpstream.cli import cli

    result = CliRunner().invoke(cli, ["audit", "sr", "tops-one-level", "--epsilon", "0.5", "--runs", "20000"])
    assert result.exit_code == 0, result.output
    [sr, tops] = run_audit(["sr", "tops-one-level"], epsilon=0.5, samples=20_000)
    assert sr.claimed_epsilon == 0.5 and tops.claimed_epsilon == 0.5
    assert sr.passed and tops.passed
    assert tops.description.startswith("the released value is ") and "more often on input" in tops.description
    assert "best events" in result.output and "tops-one-level: the released value is " in result.output


def test_events_in_words():
    assert Event(high=2.0).describe("x") == "x is at most 2"
    assert Event(low=3.0, high=3.0).describe("theta") == "theta is 3"
    assert Event(members=(1.0,)).describe("theta") == "theta is 1"
    assert Event(members=(1.0, 2.0)).describe("theta") == "theta is one of 1, 2"


# -- statistics that reach the claim ------------------------------------------------------------


def test_consistent_log_ratio_is_the_likelihood_ratio_of_the_consistent_leaves():
    """The closed form against a numerical integral of the nodes' Laplace densities along the line of
    measurements that give the same consistent leaves (``y + t (1, ..., 1, -1)``)."""
    from dpstream.audit.tops import consistent_log_ratio

    rng = np.random.default_rng(0)
    mean_a, mean_b, scale = np.zeros(5), np.array([4.0, 0.0, 0.0, 0.0, 4.0]), 8.0
    leaves = rng.laplace(0.0, 10.0, (6, 4))
    t = np.linspace(-400.0, 400.0, 400_001)
    for row, ratio in zip(leaves, consistent_log_ratio(leaves, mean_b, mean_a, scale), strict=True):
        nodes = np.concatenate((row[:, None] + t, (row.sum() - t)[None, :]))
        density = [np.trapezoid(np.exp(-np.abs(nodes - m[:, None]).sum(axis=0) / scale), t) for m in (mean_b, mean_a)]
        assert ratio == pytest.approx(math.log(density[0] / density[1]), abs=1e-6)
        assert abs(ratio) <= 2 * 4.0 / scale + 1e-12  # never beyond the two levels' budget


def _three_quarter_scale():
    """GridLaplace whose noise scale is 3/4 of the right one, the claim unchanged (4/3 of it spent)."""
    import dataclasses
    from fractions import Fraction

    from dpstream.noise.grid import GridLaplace

    class Scaled(GridLaplace):
        @classmethod
        def on_grid(cls, *args, **kwargs):
            right = GridLaplace.on_grid(*args, **kwargs)
            return dataclasses.replace(right, scale=right.scale * Fraction(3, 4))

    return Scaled


@pytest.mark.parametrize(("name", "module"), [("tops", "dpstream.release.perturber"),
                                              ("tops-periodic", "dpstream.release.perturber"),
                                              ("tops-window-leaves", "dpstream.release.perturber"),
                                              ("bt-by-key", "dpstream.hierarchy.arithmetic"),
                                              ("pak", "dpstream.release.pak")])
def test_the_default_audit_sees_a_three_quarter_noise_scale(name, module, monkeypatch):
    """The adapters whose statistics reach about 0.8 of the claim or more: at their default runs a
    mechanism that spends 4/3 of its claim (noise at 3/4 of its scale) fails."""
    import importlib

    monkeypatch.setattr(importlib.import_module(module), "GridLaplace", _three_quarter_scale())
    [result] = run_audit([name], seed=1)
    assert not result.epsilon_ok, format_table([result])


# -- the model threshold's selections, and what a pair's output law spends -----------------------

SELECTION_ADAPTERS = ("tops-selection", "tops-median", "tops-selection-rnm", "tops-selection-exponential")


def test_the_selections_pair_changes_the_true_best_and_permute_and_flip_spends_its_claim():
    """On A candidate 0 is the true best (its grid score ties with 1's), on B the true worst by the
    sensitivity; permute-and-flip's exact law then shows its budget up to the grid's extra step
    (1024 / 1025), report-noisy-max and the exponential mechanism less (their adapters say how much)."""
    for name in SELECTION_ADAPTERS:
        adapter = MECHANISMS[name]()
        a, b = adapter.neighbours
        assert int(np.argmax(a)) == 0 and int(np.argmax(b)) == 1 and np.abs(b - a).max() <= 1.0
        laws = [adapter.law(x) for x in adapter.neighbours]
        assert adapter.spends == pytest.approx(np.abs(np.log(laws[0] / laws[1])).max())
    assert MECHANISMS["tops-selection"]().spends == pytest.approx(1024 / 1025)
    assert MECHANISMS["tops-median"]().spends == pytest.approx(1024 / 1025)
    assert 0.55 < MECHANISMS["tops-selection-rnm"]().spends < 0.65
    # P(0) is 1/2 on A and 1 / (1 + e^(eps 1024 / 1025)) on B
    assert MECHANISMS["tops-selection-exponential"]().spends == pytest.approx(math.log((math.exp(1024 / 1025) + 1) / 2))


@pytest.mark.parametrize("name", ["tops-selection", "tops-median"])
def test_the_default_audit_sees_a_selection_that_spends_four_thirds(name, monkeypatch):
    """Permute-and-flip's coins computed with 3/4 of the sensitivity (true eps 4/3 of the claim) fail."""
    from dpstream.thresholds import select

    monkeypatch.setattr(select, "_SENSITIVITY_UNITS", (3 * select._SENSITIVITY_UNITS) // 4)
    [result] = run_audit([name], seed=1)
    assert not result.epsilon_ok, format_table([result])


@pytest.mark.parametrize("name", SELECTION_ADAPTERS)
def test_the_default_audit_sees_a_selection_of_the_best_true_score(name, monkeypatch):
    from dpstream.thresholds import select

    for mechanism in select.SELECTIONS:
        monkeypatch.setitem(select.SELECTIONS, mechanism, lambda scores, **_: int(np.argmax(scores)))
    [result] = run_audit([name], seed=1)
    assert not result.epsilon_ok, format_table([result])


def test_nm_e_spends_what_its_pair_can_show_and_the_report_says_so():
    """NM-E's choice between candidates 1 and 2: candidate 1 wins when D = Z_1 - Z_2 >= gap on A and
    >= gap + 1 on B; the largest log ratio of that law, from the difference's law in closed form."""
    q = math.exp(-1.0)  # discrete Laplace of scale 1 (eps = 1, monotone): P[Z = z] = c q^|z|
    c = (1 - q) / (1 + q)
    d = np.arange(-400, 401)
    law = c**2 * q ** np.abs(d) * ((1 + q**2) / (1 - q**2) + np.abs(d))  # sum over z of P[z] P[z - d]
    assert law.sum() == pytest.approx(1.0)
    for gap, name in ((0, "nm-e"), (3, "nm-e-tail")):
        wins = [law[d >= g].sum() for g in (gap, gap + 1)]
        expected = max(math.log(wins[0] / wins[1]), math.log((1 - wins[1]) / (1 - wins[0])))
        assert MECHANISMS[name]().spends == pytest.approx(expected, rel=1e-9)
    assert MECHANISMS["nm-e"]().spends == pytest.approx(0.5762, abs=1e-4)
    [result] = run_audit(["nm-e"], samples=20_000)
    table = format_table([result])
    assert result.spent == MECHANISMS["nm-e"]().spends and result.spent_fraction == pytest.approx(
        result.epsilon_lower_bound / result.spent)
    assert "lb/spent" in table.splitlines()[0] and "nm-e: eps 0.576 of the claimed 1" in table


def test_the_audit_accepts_registered_mechanism_names():
    """A registered mechanism's name stands for its audits (bt: binary-tree, bt-by-key and bt-w-event); an
    experiment's name for itself, first (tops is both)."""
    from click.testing import CliRunner

    from dpstream.audit import experiments
    from dpstream.cli import cli
    from dpstream.release.registry import REGISTRY

    assert experiments(["bt"]) == ["binary-tree", "bt-by-key", "bt-w-event"]
    assert experiments(["tops", "bt", "binary-tree"]) == ["tops", "binary-tree", "bt-by-key", "bt-w-event"]
    assert experiments(["topl"]) == list(REGISTRY["topl"].audits)
    result = CliRunner().invoke(cli, ["audit", "bt", "--runs", "200"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("mechanism "))
    assert [line.split()[0] for line in lines[header + 1 : header + 4]] == ["binary-tree", "bt-by-key", "bt-w-event"], (
        result.output)
    assert not lines[header + 4].strip(), result.output  # nothing else ran
