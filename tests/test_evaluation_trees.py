"""The tree study (``dpstream.evaluation.trees``): exact variance factors against explicit constructions."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.evaluation.trees import (
    decomposition_factor,
    least_squares_brute_force,
    least_squares_factor,
    prefix_digits,
    tree_study,
)


@pytest.mark.parametrize("fanout, levels, n", [(2, 4, 16), (4, 3, 64), (3, 3, 27), (4, 3, 40), (5, 3, 60)])
def test_least_squares_factor_is_the_brute_force_least_squares(fanout, levels, n):
    """Hay's consistent estimate is the least-squares fit, i.e. the Gauss-Markov (Honaker) estimate:
    q^T (X^T X)^+ q on the explicit design matrix, padded forests included."""
    ends = np.sort(np.random.default_rng(n).integers(0, n + 1, size=(150, 2)), axis=1)
    ends = ends[ends[:, 0] < ends[:, 1]]
    np.testing.assert_allclose(least_squares_factor(ends[:, 0], ends[:, 1], fanout=fanout, levels=levels),
                               least_squares_brute_force(ends[:, 0], ends[:, 1], fanout=fanout, levels=levels, n=n),
                               rtol=1e-9, atol=1e-12)


def explicit_weights(x: int, fanout: int, levels: int, balanced: bool) -> dict:
    """Node weights of the prefix [0, x) built greedily from the top, node by node."""
    weights: dict = {}
    digits = prefix_digits(np.array([x]), fanout=fanout, levels=levels, balanced=balanced)[:, 0]
    position = 0
    for level in range(levels - 1, -1, -1):
        width = fanout**level
        step = 1 if digits[level] > 0 else -1
        for _ in range(abs(int(digits[level]))):
            node = position // width if step > 0 else position // width - 1
            weights[(level, node)] = weights.get((level, node), 0) + step
            position += step * width
    assert position == x
    return weights


@pytest.mark.parametrize("fanout, levels, balanced", [(3, 4, True), (5, 3, True), (4, 3, False), (2, 5, False)])
def test_decompositions_rebuild_every_prefix_and_their_factor_is_the_weights_norm(fanout, levels, balanced):
    top = fanout ** (levels - 1)
    n = 3 * top
    values = np.random.default_rng(1).integers(0, 10, size=4 * top)
    prefix = np.concatenate(([0], np.cumsum(values)))
    half = (fanout - 1) // 2
    pairs = np.sort(np.random.default_rng(2).integers(0, n + 1, size=(200, 2)), axis=1)
    for a, b in pairs:
        wa = explicit_weights(int(a), fanout, levels, balanced)
        wb = explicit_weights(int(b), fanout, levels, balanced)
        for weights, x in ((wa, a), (wb, b)):  # zero noise: the signed node sums are the prefix
            total = sum(w * values[node * fanout**lv : (node + 1) * fanout**lv].sum()
                        for (lv, node), w in weights.items())
            assert total == prefix[x]
            if balanced:
                assert all(sum(1 for (lv, _) in weights if lv == level) <= half for level in range(levels - 1))
        combined = {key: wb.get(key, 0) - wa.get(key, 0) for key in set(wa) | set(wb)}
        expected = sum(w * w for w in combined.values())
        got = decomposition_factor(np.array([a]), np.array([b]), fanout=fanout, levels=levels, balanced=balanced)
        assert got[0] == expected


def test_least_squares_is_never_worse_than_a_decomposition_of_the_same_tree():
    rows = tree_study(n=3**8, fanouts=(3, 9), queries=500)
    for k in (3, 9):
        by = {r["estimator"]: r for r in rows if r["fanout"] == k}
        for other in ("plain", "negative-digits"):
            assert by["least-squares"]["range_variance"] <= by[other]["range_variance"]
            assert by["least-squares"]["prefix_variance"] <= by[other]["prefix_variance"]
