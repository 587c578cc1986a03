"""Which tree under pure epsilon-DP: fan-out, consistency, and k-ary trees with negative digits.

Every estimator here is linear in the node noise, so the variance of a range query is exact:
``2 beta^2`` times a factor, the sum of the squared weights the estimator puts on the nodes,
with ``beta = theta h / eps`` for a tree of ``h`` levels (one value sits in one node per level:
the levels share the budget equally, as ToPS's perturber and the binary mechanism do).  The
study reports ``h^2 x factor``: the variance in units of ``(theta / eps)^2``.  No noise is drawn;
only the queries are sampled (the paper's random queries, or every prefix).

Estimators, for a forest of ``h`` levels of fan-out ``k`` over ``n`` values (the top level
holds ``ceil(n / k^(h-1))`` nodes and nothing above it, as in ToPS):

* ``least-squares`` -- the consistent estimates of Hay et al. (ToPS's perturber, Appendix C):
  the least-squares fit of all nodes, which for equal node variances is the minimum-variance
  linear unbiased estimate (Gauss-Markov) -- what Honaker (2015) computes by his
  "efficient use of all nodes".  Exact via
  :func:`~dpstream.thresholds.error_model.range_noise_factor`; :func:`least_squares_brute_force`
  checks it on small trees.
* ``plain`` -- no consistency: a prefix is the sum of the nodes of its base-``k`` digits (at
  most ``k - 1`` per level), a range the difference of two prefixes.
* ``negative-digits`` -- Andersson, Pagh and Torkamani (2024): odd ``k`` and balanced digits in
  ``[-(k - 1) / 2, (k - 1) / 2]``, so a prefix adds or subtracts at most ``(k - 1) / 2`` nodes
  per level.  Here the subtracted nodes may end after the prefix: that is ToPS's offline setting
  (a chunk's noise is drawn when it starts, and only noise is combined), not the continual
  counter of the paper, which must avoid nodes that are not complete.

Least squares uses every node with the best weights, so for a given tree it is never worse than
either decomposition; the question the study answers is how much each loses, and which fan-out
is best for each.

Run from the shell::

    python -m dpstream.evaluation.trees --out docs/results
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dpstream.hierarchy import num_levels
from dpstream.thresholds.error_model import range_noise_factor

__all__ = [
    "ESTIMATORS",
    "decomposition_factor",
    "least_squares_brute_force",
    "least_squares_factor",
    "prefix_digits",
    "tree_study",
]

#: The estimators of the study.
ESTIMATORS = ("least-squares", "plain", "negative-digits")


def prefix_digits(x: np.ndarray, *, fanout: int, levels: int, balanced: bool) -> np.ndarray:
    """Digits ``d[l]`` with ``x = sum_l d[l] k^l``: levels ``0 .. h - 2`` in ``[0, k - 1]`` (or
    balanced, odd k), the top level takes what is left.  Shape ``(levels, len(x))``.

    >>> prefix_digits(np.array([7, 8]), fanout=3, levels=3, balanced=True).T.tolist()
    [[1, -1, 1], [-1, 0, 1]]
    """
    rest = np.asarray(x, dtype=np.int64).copy()
    digits = np.zeros((levels, rest.size), dtype=np.int64)
    half = (fanout - 1) // 2
    for level in range(levels - 1):
        d = rest % fanout
        if balanced:
            d = np.where(d > half, d - fanout, d)
        digits[level] = d
        rest = (rest - d) // fanout
    digits[levels - 1] = rest
    return digits


def _intervals(x: np.ndarray, fanout: int, levels: int, balanced: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per level, the nodes a prefix of ``x`` values uses: ``[low, high)`` and the sign (+1 / -1)."""
    digits = prefix_digits(x, fanout=fanout, levels=levels, balanced=balanced)
    low, high, sign = (np.zeros(digits.shape, dtype=np.int64) for _ in range(3))
    above = np.zeros(digits.shape[1], dtype=np.int64)  # the prefix built by the higher levels, in values
    for level in range(levels - 1, -1, -1):
        width = fanout**level
        p, d = above // width, digits[level]
        low[level], high[level] = np.minimum(p, p + d), np.maximum(p, p + d)
        sign[level] = np.where(d < 0, -1, 1)
        above = above + d * width
    return low, high, sign


def decomposition_factor(starts: np.ndarray, stops: np.ndarray, *, fanout: int, levels: int,
                         balanced: bool) -> np.ndarray:
    """Sum of squared node weights of ``P(stop) - P(start)`` for prefixes made of their digits' nodes.

    At each level the two prefixes use intervals ``I`` and ``J`` of nodes with signs ``s`` and
    ``t``; the weights ``s 1_I - t 1_J`` have squared norm ``|I| + |J| - 2 s t |I & J|``.

    >>> decomposition_factor(np.array([0]), np.array([5]), fanout=4, levels=2, balanced=False).tolist()
    [2.0]
    """
    la, ha, sa = _intervals(starts, fanout, levels, balanced)
    lb, hb, sb = _intervals(stops, fanout, levels, balanced)
    overlap = np.maximum(np.minimum(ha, hb) - np.maximum(la, lb), 0)
    return ((ha - la) + (hb - lb) - 2 * sa * sb * overlap).sum(axis=0).astype(np.float64)


def least_squares_factor(starts: np.ndarray, stops: np.ndarray, *, fanout: int, levels: int) -> np.ndarray:
    """The least-squares (Hay / Honaker) factor of ranges ``[start, stop)`` of a forest of leaves
    of one value; a prefix is a range from a top node's start (the forest repeats every top node).

    >>> least_squares_factor(np.array([0]), np.array([1]), fanout=2, levels=2).tolist()  # a leaf and its parent
    [0.6666666666666666]
    """
    period = fanout ** (levels - 1)  # shifting by a top node keeps every offset and makes start >= 1
    return range_noise_factor(np.asarray(starts, dtype=np.int64) + period, np.asarray(stops, dtype=np.int64) + period,
                              block_size=1, fanout=fanout, measured_levels=levels)


def least_squares_brute_force(starts: Sequence[int], stops: Sequence[int], *, fanout: int, levels: int,
                              n: int) -> np.ndarray:
    """The same factor by explicit least squares on the design matrix of a small forest of ``n`` leaves:
    ``q^T (X^T X)^+ q`` for each range's indicator ``q`` (a check of :func:`least_squares_factor`).
    The last top node is completed with leaves that are measured but never queried, as ToPS does."""
    top = fanout ** (levels - 1)
    n = -(-n // top) * top
    rows = []
    for level in range(levels):
        width = fanout**level
        for node in range(-(-n // width)):
            row = np.zeros(n)
            row[node * width : (node + 1) * width] = 1.0
            rows.append(row)
    design = np.array(rows)
    inverse = np.linalg.pinv(design.T @ design)
    out = []
    for a, b in zip(starts, stops, strict=True):
        q = np.zeros(n)
        q[a:b] = 1.0
        out.append(float(q @ inverse @ q))
    return np.array(out)


def _factor(name: str, starts: np.ndarray, stops: np.ndarray, fanout: int, levels: int) -> np.ndarray:
    if name == "least-squares":
        return least_squares_factor(starts, stops, fanout=fanout, levels=levels)
    return decomposition_factor(starts, stops, fanout=fanout, levels=levels, balanced=name == "negative-digits")


def tree_study(*, n: int = 2**20, fanouts: Sequence[int] = (2, 4, 8, 16, 17, 19, 32), queries: int = 20_000,
               seed: int = 0) -> list[dict]:
    """Variance of random range queries and of prefix sums, in ``(theta / eps)^2``, per fan-out and estimator.

    Random queries: two uniform positions in ``[0, n]``, sorted (the paper's).  Prefixes: every
    ``n / queries``-th prefix.  ``negative-digits`` needs an odd fan-out.
    """
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.integers(0, n + 1, size=(queries, 2)), axis=1)
    prefixes = np.linspace(1, n, queries).astype(np.int64)
    rows = []
    for k in fanouts:
        h = num_levels(n, k)
        for name in ESTIMATORS:
            if name == "negative-digits" and k % 2 == 0:
                continue
            ranges = _factor(name, ends[:, 0], ends[:, 1], k, h)
            prefix = _factor(name, np.zeros_like(prefixes), prefixes, k, h)
            rows.append({"fanout": k, "levels": h, "estimator": name,
                         "range_variance": float(2 * h * h * ranges.mean()),
                         "prefix_variance": float(2 * h * h * prefix.mean())})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m dpstream.evaluation.trees``: print the table and write it as JSON."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m dpstream.evaluation.trees", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2**20, help="values per tree (ToPS's r)")
    parser.add_argument("--fanouts", default="2,4,8,16,17,19,32")
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--out", default=None, help="directory for trees.json")
    args = parser.parse_args(argv)
    rows = tree_study(n=args.n, fanouts=[int(k) for k in args.fanouts.split(",")], queries=args.queries)
    reference = next(r for r in rows if r["fanout"] == 16 and r["estimator"] == "least-squares") if any(
        r["fanout"] == 16 for r in rows) else rows[0]
    for row in rows:
        row["range_ratio"] = row["range_variance"] / reference["range_variance"]
        row["prefix_ratio"] = row["prefix_variance"] / reference["prefix_variance"]
        print(f"k={row['fanout']:>3} h={row['levels']} {row['estimator']:<16} range {row['range_variance']:10.1f} "
              f"({row['range_ratio']:.2f}x)  prefix {row['prefix_variance']:10.1f} ({row['prefix_ratio']:.2f}x)")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "trees.json").write_text(json.dumps({"n": args.n, "queries": args.queries, "rows": rows}, indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
