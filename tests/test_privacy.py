"""Privacy guarantees (``dpstream.privacy``), keyword-only constructors and the progress protocol
(``dpstream._progress``)."""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from dpstream._progress import notify, shifted
from dpstream.count_of_counts import BottomUpCountOfCounts, CountOfCountsData, TopDownCountOfCounts
from dpstream.ldp import HybridMechanism, PiecewiseMechanism, SquareWave, StochasticRounding
from dpstream.noise import FloatNoise
from dpstream.postprocess import LaplaceCounts
from dpstream.privacy import (
    ENTITY_ROW,
    EVENT_LEVEL,
    LOCAL_REPORT,
    USER_STEP,
    Budget,
    Composition,
    EntityRow,
    EpsilonDelta,
    EventLevel,
    Part,
    PrivacyGuarantee,
    Relation,
)
from dpstream.release import PAK, BinaryTreeCounter, HierarchicalPerturber, ToPL, ToPLCollector, ToPLRandomizer, ToPS
from dpstream.smoothers import ExponentialSmoother, MovingAverageSmoother
from dpstream.thresholds import noisy_max_epsilon


def guarantee(epsilon: float, delta: float = 0.0, neighbours: Relation = EVENT_LEVEL, *, local: bool = False,
              composition: str = "part") -> PrivacyGuarantee:
    return PrivacyGuarantee(epsilon=epsilon, delta=delta, neighbours=neighbours, composition=composition, local=local)


# -- neighbour relations -------------------------------------------------------------------------


def test_relations_are_typed_values_that_print_their_description():
    named = (EVENT_LEVEL, ENTITY_ROW, LOCAL_REPORT, USER_STEP)
    assert all(isinstance(relation, Relation) for relation in named) and len(set(named)) == 4
    assert str(EVENT_LEVEL) == EVENT_LEVEL.description
    assert str(EVENT_LEVEL).startswith("event level: two streams are neighbours")
    assert str(ENTITY_ROW).startswith("entity level: the Entities table differs in one row")
    assert "Definition 2.2" in str(LOCAL_REPORT) and "one user's location at one time step" in str(USER_STEP)
    assert pickle.loads(pickle.dumps(ENTITY_ROW)) is ENTITY_ROW


def test_every_mechanism_names_its_relation():
    stream = [ToPS(epsilon=1.0, upper_bound=10.0), PAK(epsilon=1.0, upper_bound=10.0),
              BinaryTreeCounter(epsilon=1.0, upper_bound=10.0),
              HierarchicalPerturber(threshold=1.0, epsilon=1.0, max_range=64)]
    for mechanism in stream:
        assert mechanism.privacy().neighbours is EVENT_LEVEL and not mechanism.privacy().local
    local = [ToPL(epsilon=1.0, upper_bound=10.0), StochasticRounding(epsilon=1.0), PiecewiseMechanism(epsilon=1.0),
             HybridMechanism(epsilon=1.0), SquareWave(epsilon=1.0)]
    for mechanism in local:
        assert mechanism.privacy().neighbours is LOCAL_REPORT and mechanism.privacy().local
    for mechanism in (TopDownCountOfCounts(epsilon=1.0, max_size=5), BottomUpCountOfCounts(epsilon=1.0, max_size=5)):
        assert mechanism.privacy(2).neighbours is ENTITY_ROW
    assert LaplaceCounts(epsilon=1.0).privacy().neighbours is USER_STEP


@dataclass(frozen=True)
class Window(Relation):
    """A relation with a parameter, as a w-event relation would be: neighbours within ``w`` positions."""

    w: int

    @property
    def description(self) -> str:
        return f"streams that differ in values within {self.w} consecutive positions"


def test_a_relation_with_parameters_is_told_apart_by_its_parameters():
    ten, twenty = Window(10), Window(20)
    assert ten == Window(10) and hash(ten) == hash(Window(10)) and ten != twenty and ten != EVENT_LEVEL
    assert str(twenty) == "streams that differ in values within 20 consecutive positions" and ten.name == "Window(w=10)"
    first, second = guarantee(0.5, neighbours=ten), guarantee(0.25, neighbours=Window(10))
    assert first.same_relation(second) and first.compose_sequential(second).neighbours == ten
    assert not first.same_relation(guarantee(0.5, neighbours=twenty))
    with pytest.raises(ValueError, match=r"needs one neighbour relation, got 'Window\(w=10\)' and 'Window\(w=20\)'"):
        first.compose_parallel(guarantee(0.5, neighbours=twenty))
    assert str(first).startswith("0.5-DP; neighbours: streams that differ in values within 10 consecutive positions;")


def test_the_named_relations_are_values_and_singletons():
    assert EVENT_LEVEL == EventLevel() and EVENT_LEVEL != ENTITY_ROW and ENTITY_ROW == EntityRow()
    assert all(isinstance(relation, Relation) for relation in (EVENT_LEVEL, ENTITY_ROW, LOCAL_REPORT, USER_STEP))
    assert copy.deepcopy(USER_STEP) is USER_STEP and pickle.loads(pickle.dumps(EventLevel())) is EVENT_LEVEL
    assert [relation.name for relation in (EVENT_LEVEL, ENTITY_ROW, LOCAL_REPORT, USER_STEP)] == [
        "EVENT_LEVEL", "ENTITY_ROW", "LOCAL_REPORT", "USER_STEP"]


def test_neighbours_is_a_deprecated_alias_of_the_named_relations():
    import dpstream.privacy as privacy

    with pytest.warns(DeprecationWarning, match="Neighbours is deprecated"):
        alias = privacy.Neighbours
    assert alias.EVENT_LEVEL is EVENT_LEVEL and alias["USER_STEP"] is USER_STEP and len(alias) == 4
    assert alias(ENTITY_ROW.description) is ENTITY_ROW and isinstance(LOCAL_REPORT, alias)
    assert isinstance(Window(3), alias) and not isinstance("event level", alias)
    with pytest.raises(AttributeError):
        alias.WINDOW  # noqa: B018
    with pytest.raises(ValueError, match="is not a valid Neighbours"):
        alias("no such relation")
    with pytest.warns(DeprecationWarning, match="relation.value is deprecated"):
        assert EVENT_LEVEL.value == EVENT_LEVEL.description


# -- the guarantee -------------------------------------------------------------------------------


def test_str_is_the_guarantee_the_relation_and_the_composition():
    assert str(guarantee(0.5, composition="c")) == f"0.5-DP; neighbours: {EVENT_LEVEL.description}; c"
    assert str(guarantee(2.0, 1e-6, composition="c")).startswith("(2, 1e-06)-DP; neighbours: event level")
    assert guarantee(1.0, neighbours=LOCAL_REPORT, local=True).label == "1-LDP"


def test_cli_lines_keep_their_text():
    # The line of the float path, as `dpstream release --method bt` printed it before exact noise,
    # with the noise part appended.
    line = str(BinaryTreeCounter(epsilon=0.5, upper_bound=100.0, max_range=1024, noise=FloatNoise(rng=0)).privacy())
    assert line == ("0.5-DP; neighbours: event level: two streams are neighbours when they differ in the value at "
                    "one position; Lap(tau*h/eps) = Lap(2000) on every node of h = 10 levels (eps/10 each, "
                    "sequential); a fresh tree per 1024 values (parallel); "
                    "noise: FLOAT Laplace from numpy (studies only: NOT for publication)")
    # The exact path (the default): g = 2^-14, tau = 100 / g = 1638400 units, scale 1638400 * 10 / 0.5.
    line = str(BinaryTreeCounter(epsilon=0.5, upper_bound=100.0, max_range=1024, seed=1).privacy())
    assert line == ("0.5-DP; neighbours: event level: two streams are neighbours when they differ in the value at "
                    "one position; discrete Laplace of scale tau*h/eps = 32768000/1 grid units (= 2000; "
                    "g = 6.10352e-05, tau = 1638400 units) on every node of h = 10 levels (eps/10 each, "
                    "sequential); a fresh tree per 1024 values (parallel); "
                    "noise: exact discrete Laplace in grid units, seeded PCG64 bits (seed 1: replayable, NOT secret)")


def test_the_noise_field_names_the_sampler_and_joins_under_composition():
    exact = guarantee(0.5, composition="a")
    assert exact.noise is None and "noise:" not in str(exact)
    with_noise = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="a", noise="exact x")
    assert str(with_noise).endswith("; a; noise: exact x")
    other = PrivacyGuarantee(epsilon=0.25, delta=0.0, neighbours=EVENT_LEVEL, composition="b", noise="float y")
    assert with_noise.compose_sequential(other).noise == "exact x + float y"
    assert with_noise.compose_parallel(with_noise).noise == "exact x"
    assert with_noise.compose_parallel(exact).noise == "exact x"
    with pytest.raises(TypeError, match="noise must be a string or None, got 3"):
        PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="a", noise=3)


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(neighbours="event level"), TypeError, "neighbours must be a Neighbours relation .*got 'event level'"),
        (dict(epsilon=-1.0), ValueError, r"epsilon must be a finite number >= 0, got -1\.0\."),
        (dict(epsilon=math.inf), ValueError, "epsilon must be a finite number >= 0, got inf"),
        (dict(delta=1.5), ValueError, r"delta must be in \[0, 1\], got 1\.5\."),
        (dict(local=1), TypeError, "local must be True or False, got 1."),
        (dict(composition=None), TypeError, "composition must be a string, got None."),
    ],
)
def test_bad_fields_are_refused(fields, error, match):
    arguments = dict(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="c") | fields
    with pytest.raises(error, match=match):
        PrivacyGuarantee(**arguments)


def test_fields_are_keyword_only():
    with pytest.raises(TypeError):
        PrivacyGuarantee(1.0, 0.0, EVENT_LEVEL, "c")  # type: ignore[misc]


def test_same_relation_needs_the_same_relation_and_the_same_model():
    assert guarantee(1.0).same_relation(guarantee(3.0, 1e-9))
    assert not guarantee(1.0).same_relation(guarantee(1.0, neighbours=ENTITY_ROW))
    central = guarantee(1.0, neighbours=LOCAL_REPORT)
    assert not central.same_relation(guarantee(1.0, neighbours=LOCAL_REPORT, local=True))
    with pytest.raises(TypeError, match="other must be a PrivacyGuarantee"):
        guarantee(1.0).same_relation("event level")  # type: ignore[arg-type]


def test_sequential_composition_adds_epsilons_and_deltas():
    parts = [guarantee(0.1, 1e-6), guarantee(0.2), guarantee(0.3, 2e-6)]
    total = parts[0].compose_sequential(*parts[1:])
    assert total.epsilon == math.fsum([0.1, 0.2, 0.3]) and total.delta == pytest.approx(3e-6, rel=1e-12)
    assert total.neighbours is EVENT_LEVEL and not total.local
    assert total.composition.startswith("sequential composition of [(0.1, 1e-06)-DP: part], [0.2-DP: part] and")
    assert guarantee(0.5).compose_sequential() == guarantee(0.5)
    assert guarantee(0.5, 0.75).compose_sequential(guarantee(0.5, 0.75)).delta == 1.0  # capped: says nothing
    assert guarantee(1.0).compose_sequential(guarantee(1.0), composition="mine").composition == "mine"


def test_parallel_composition_takes_the_largest_epsilon_and_delta():
    total = guarantee(0.5, 1e-9).compose_parallel(guarantee(2.0), guarantee(1.0, 1e-6))
    assert (total.epsilon, total.delta) == (2.0, 1e-6)
    local = guarantee(1.0, neighbours=LOCAL_REPORT, local=True).compose_parallel(
        guarantee(3.0, neighbours=LOCAL_REPORT, local=True))
    assert local.local and local.label == "3-LDP"


@pytest.mark.parametrize("compose", ["compose_sequential", "compose_parallel"])
def test_composition_refuses_different_relations(compose):
    with pytest.raises(ValueError, match="needs one neighbour relation, got 'EVENT_LEVEL' and 'ENTITY_ROW'"):
        getattr(guarantee(1.0), compose)(guarantee(1.0), guarantee(1.0, neighbours=ENTITY_ROW))
    with pytest.raises(ValueError, match="got 'LOCAL_REPORT' and 'local LOCAL_REPORT'"):
        getattr(guarantee(1.0, neighbours=LOCAL_REPORT), compose)(guarantee(1.0, neighbours=LOCAL_REPORT, local=True))


def test_mechanisms_compose_their_parts():
    # PAK: (eps1, delta) + (eps2, 0) on the hold-out, sequentially; eps on the rest; parallel.
    pak = PAK(epsilon=0.8, upper_bound=100.0, hold=100, max_range=1000, threshold_fraction=0.25, delta=1e-7)
    assert (pak.privacy().epsilon, pak.privacy().delta) == (pytest.approx(0.8), 1e-7)
    tops = ToPS(epsilon=0.5, upper_bound=100.0, threshold_epsilon=2.0, hold=10, max_range=256)
    assert tops.privacy().epsilon == 2.0
    with_k = TopDownCountOfCounts(epsilon=1.0, max_size_epsilon=0.25).privacy(2)
    assert with_k.epsilon == 1.25 and with_k.composition.endswith("plus 0.25 to estimate K (sequential composition)")


# -- the breakdown -------------------------------------------------------------------------------


def test_budgets_compose_sequentially_and_in_parallel():
    budgets = [EpsilonDelta(0.1, 1e-6), EpsilonDelta(0.2), EpsilonDelta(0.3, 0.5), EpsilonDelta(0.4, 0.75)]
    assert EpsilonDelta.sequential(budgets) == EpsilonDelta(math.fsum([0.1, 0.2, 0.3, 0.4]), 1.0)
    assert EpsilonDelta.parallel(budgets) == EpsilonDelta(0.4, 0.75)
    assert (EpsilonDelta(2.0).label(), EpsilonDelta(2.0, 1e-9).label(local=True)) == ("2-DP", "(2, 1e-09)-LDP")
    with pytest.raises(ValueError, match="epsilon must be a finite number >= 0"):
        EpsilonDelta(-0.5)
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\]"):
        EpsilonDelta(1.0, 2.0)


def test_the_statement_is_rendered_from_the_breakdown():
    a = Part(what="a", budget=EpsilonDelta(0.5), noise="x", text="part a")
    b = Part(what="b", budget=EpsilonDelta(0.25, 1e-9), noise="y + x")
    laid_out = Composition(kind="parallel", parts=(a, b), layout="{} and {}; in parallel")
    g = PrivacyGuarantee.of(laid_out, neighbours=EVENT_LEVEL)
    assert (g.epsilon, g.delta, g.composition, g.noise) == (0.5, 1e-9, "part a and b; in parallel", "x + y")
    assert g.breakdown is laid_out and g.breakdown.leaves() == (a, b)
    # Without a layout the parts are listed, as compose_sequential lists guarantees.
    listed = PrivacyGuarantee.of(Composition(kind="sequential", parts=(a, b)), neighbours=EVENT_LEVEL)
    first = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="part a", noise="x")
    second = PrivacyGuarantee(epsilon=0.25, delta=1e-9, neighbours=EVENT_LEVEL, composition="b", noise="y + x")
    assert str(listed) == str(first.compose_sequential(second))
    # A guarantee built from its fields is one part holding them; a text with braces is kept as written.
    assert first.breakdown == Part(what="part a", budget=EpsilonDelta(0.5), noise="x")
    assert first.compose_parallel(second, composition="{mine}").composition == "{mine}"


def test_a_composition_refuses_bad_parts_and_mixed_accountings():
    @dataclass(frozen=True)
    class Rho(Budget):
        """Another accounting (zCDP-like): rho adds under both compositions here."""

        rho: float

        def label(self, local: bool = False) -> str:
            return f"{self.rho:g}-zCDP"

        @classmethod
        def sequential(cls, budgets):
            return cls(math.fsum(b.rho for b in budgets))

        parallel = sequential

    one, two = Part(what="a", budget=Rho(0.5)), Part(what="b", budget=Rho(0.25))
    both = Composition(kind="sequential", parts=(one, two))
    assert both.budget == Rho(0.75) and both.render() == "sequential composition of [0.5-zCDP: a] and [0.25-zCDP: b]"
    with pytest.raises(TypeError, match="parts must spend budgets of one accounting, got Rho, EpsilonDelta"):
        Composition(kind="parallel", parts=(one, Part(what="c", budget=EpsilonDelta(1.0))))
    with pytest.raises(TypeError, match=r"an \(epsilon, delta\) guarantee needs EpsilonDelta budgets"):
        PrivacyGuarantee.of(both, neighbours=EVENT_LEVEL)
    with pytest.raises(ValueError, match="kind must be one of sequential, parallel, got 'serial'"):
        Composition(kind="serial", parts=(one,))
    with pytest.raises(TypeError, match="parts must be a non-empty sequence"):
        Composition(kind="parallel", parts=())
    with pytest.raises(TypeError, match="budget must be a Budget"):
        Part(what="a", budget=0.5)  # type: ignore[arg-type]


def test_mechanisms_state_their_breakdown():
    tops = ToPS(epsilon=0.5, upper_bound=100.0, threshold_method="nm-e", hold=10, max_range=256, seed=1)
    g = tops.privacy()
    assert g.breakdown.kind == "parallel" and [part.what for part in g.breakdown.leaves()] == ["NM-E threshold",
                                                                                                 "hierarchy"]
    threshold, hierarchy = g.breakdown.leaves()
    assert threshold.budget == EpsilonDelta(noisy_max_epsilon(0.5, monotone=True)) and hierarchy.budget.epsilon == 0.5
    assert g.epsilon == max(threshold.budget.epsilon, hierarchy.budget.epsilon)
    assert threshold.noise == hierarchy.noise == g.noise

    pak = PAK(epsilon=0.8, upper_bound=100.0, hold=100, max_range=1000, threshold_fraction=0.25, delta=1e-7, seed=1)
    g = pak.privacy()
    hold_out, rest = g.breakdown.parts
    assert (g.breakdown.kind, hold_out.kind, rest.what) == ("parallel", "sequential", "binary tree on the rest")
    spike, held_sum = hold_out.parts
    assert spike.budget == EpsilonDelta(pak.threshold_epsilon, 1e-7) and held_sum.budget.delta == 0.0
    assert g.epsilon == max(math.fsum([pak.threshold_epsilon, held_sum.budget.epsilon]), rest.budget.epsilon)

    tree = BinaryTreeCounter(epsilon=0.5, upper_bound=100.0, max_range=1024, seed=1).privacy()
    assert tree.breakdown.kind == "parallel" and [part.what for part in tree.breakdown.leaves()] == ["binary tree"]

    topl = ToPL(epsilon=1.0, upper_bound=10.0, hold=20, threshold_epsilon=0.5).privacy()
    assert topl.local and [part.budget.epsilon for part in topl.breakdown.leaves()] == [0.5, 1.0]
    assert topl.epsilon == 1.0

    with_k = TopDownCountOfCounts(epsilon=1.0, max_size_epsilon=0.25).privacy(2)
    assert with_k.breakdown.kind == "sequential"
    assert [part.budget.epsilon for part in with_k.breakdown.leaves()] == [1.0, 0.25]
    without_k = BottomUpCountOfCounts(epsilon=1.0, max_size=5).privacy()
    assert without_k.breakdown == Part(what="histograms", budget=EpsilonDelta(1.0), text=without_k.composition)
    assert SquareWave(epsilon=2.0).privacy().breakdown.what == "SW report"
    assert LaplaceCounts(epsilon=1.0).privacy().breakdown.budget == EpsilonDelta(1.0)


# -- keyword-only constructors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ToPS(1.0, 10.0),
        lambda: PAK(1.0, 10.0),
        lambda: ToPL(1.0, 10.0),
        lambda: ToPLCollector(1.0, 10.0),
        lambda: ToPLRandomizer(1.0, 10.0),
        lambda: BinaryTreeCounter(1.0, 10.0),
        lambda: SquareWave(1.0),
        lambda: StochasticRounding(1.0),
        lambda: PiecewiseMechanism(1.0),
        lambda: HybridMechanism(1.0),
        lambda: MovingAverageSmoother(4),
        lambda: ExponentialSmoother(0.5),
        lambda: LaplaceCounts(1.0),
        lambda: TopDownCountOfCounts(1.0),
        lambda: CountOfCountsData(None, np.zeros(1), np.zeros(1)),
    ],
)
def test_public_constructors_are_keyword_only(build):
    with pytest.raises(TypeError, match="positional"):
        build()


def test_the_binary_tree_and_pak_say_max_range():
    counter = BinaryTreeCounter(epsilon=1.0, upper_bound=4.0, max_range=8)
    assert (counter.max_range, counter.upper_bound, counter.threshold, counter.levels) == (8, 4.0, 4.0, 3)
    assert PAK(epsilon=1.0, upper_bound=10.0, hold=5, max_range=64).max_range == 64
    with pytest.raises(TypeError, match="length"):
        BinaryTreeCounter(epsilon=1.0, upper_bound=4.0, length=8)  # type: ignore[call-arg]


# -- the progress protocol -----------------------------------------------------------------------


def test_notify_and_shifted():
    calls: list[tuple[int, int]] = []

    def record(done: int, total: int) -> None:
        calls.append((done, total))

    notify(None, 0, 3)
    assert shifted(None, 2, 3) is None
    notify(record, 0, 10)
    part = shifted(record, 4, 10)
    assert part is not None
    part(0, 6)
    part(6, 6)
    assert calls == [(0, 10), (4, 10), (10, 10)]


def test_rows_kept_is_a_relation_of_its_own_and_states_what_it_leaves_unprotected():
    """--missing skip: a release's guarantee on the rows kept is not event level on the input, and does not
    compose with it; its words say that a row's being missing is not protected."""
    from dpstream.privacy import RowsKept

    kept = RowsKept(EVENT_LEVEL)
    assert kept == RowsKept(EVENT_LEVEL) and kept != EVENT_LEVEL and kept != RowsKept(LOCAL_REPORT)
    assert str(kept).startswith(str(EVENT_LEVEL)) and "whether a row is missing" in str(kept)
    assert ";" not in str(kept)  # a statement joins its parts with "; "
    part = Part(what="tree", budget=EpsilonDelta(1.0))
    on_rows = PrivacyGuarantee.of(part, neighbours=kept)
    with pytest.raises(ValueError, match="needs one neighbour relation"):
        on_rows.compose_sequential(PrivacyGuarantee.of(part, neighbours=EVENT_LEVEL))
    assert on_rows.compose_sequential(on_rows).epsilon == 2.0
    with pytest.raises(TypeError, match="within must be a Relation"):
        RowsKept("event level")
