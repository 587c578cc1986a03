"""The square-root factorization against the binary tree under the same rho: the variance computation.

Continual counting at event level (values in [0, 1], one position's value changes by at most 1) over a
horizon of ``T`` values, both with Gaussian noise at the same rho:

* **binary tree** (``BinaryTreeCounter(rho=...)``, what dpstream releases): one node per level per
  value, L2 sensitivity ``sqrt(h)``; the noise of a prefix sum is that of its tiling's nodes; its exact
  standard errors come from the counter itself (``count_standard_errors``, ``range_standard_error``);
* **square-root factorization** (Fichtenberger, Henzinger and Upadhyay 2023; Henzinger et al.): the
  prefix-sum matrix ``A`` (lower-triangular ones) is ``L L`` with ``L`` the lower-triangular Toeplitz
  matrix of ``c_k = binom(2k, k) / 4^k``; the mechanism releases ``L (L x + z)``, ``z`` Gaussian of
  ``sigma^2 = s^2 / (2 rho)`` with ``s`` the largest column norm of ``L`` (``sqrt(sum_{k<T} c_k^2)``),
  so a prefix sum's noise is ``sigma^2 ||row of L||^2`` and a range's ``sigma^2 ||row_j - row_i||^2``.

This is the variance computation only, not a mechanism: the factor's entries are not on the grid,
so an exact-noise release of ``L x + z`` needs the rounding construction of the issue (round
``L x`` to the grid on chunks and add the rounding's bound to the sensitivity), which is not built.
Both are checked against brute-force linear algebra at ``T = 64`` first (``L @ L == A``, the
factorization's variances from explicit matrices).

Run::

    PYTHONPATH=src python benchmarks/factorization_variance.py [--horizon 4096] [--queries 20000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from dpstream.release.binary_tree import BinaryTreeCounter

RHO = 0.5


def sqrt_coefficients(horizon: int) -> np.ndarray:
    """``c_k = binom(2k, k) / 4^k`` for ``k < horizon`` (by the ratio ``c_k = c_{k-1} (2k - 1) / (2k)``)."""
    ratios = (2.0 * np.arange(1, horizon) - 1.0) / (2.0 * np.arange(1, horizon))
    return np.concatenate(([1.0], np.cumprod(ratios)))


def factorization_variances(horizon: int, rho: float, ranges: np.ndarray) -> np.ndarray:
    """The noise variance of each range ``[i, j)`` (rows of ``ranges``) under the square-root factorization."""
    c = sqrt_coefficients(horizon)
    sigma2 = float(np.sum(c**2)) / (2.0 * rho)
    padded = np.concatenate((np.zeros(horizon), c))  # padded[horizon + k] = c_k, zero for k < 0
    out = np.empty(len(ranges))
    for n, (i, j) in enumerate(ranges):  # row_j - row_i of L (the prefix after j values minus after i)
        k = np.arange(j)
        row_j = padded[horizon + j - 1 - k]
        row_i = padded[horizon + i - 1 - k] if i > 0 else np.zeros(j)
        out[n] = sigma2 * float(np.sum((row_j - row_i) ** 2))
    return out


def tree_variances(horizon: int, rho: float, ranges: np.ndarray) -> np.ndarray:
    """The noise variance of each range under the binary tree at ``rho`` (its own exact standard errors)."""
    tree = BinaryTreeCounter(rho=rho, upper_bound=1.0, max_range=horizon, granularity=1.0 / 1024, seed=0)
    return np.array([tree.range_standard_error(int(i), int(j)) ** 2 for i, j in ranges])


def _check(horizon: int = 64) -> None:
    """Brute force at a small horizon: ``L @ L`` is the prefix-sum matrix and the variances are the matrices'."""
    c = sqrt_coefficients(horizon)
    lower = np.array([[c[r - k] if r >= k else 0.0 for k in range(horizon)] for r in range(horizon)])
    assert np.allclose(lower @ lower, np.tril(np.ones((horizon, horizon))))
    sigma2 = np.max(np.sum(lower**2, axis=0)) / (2 * RHO)
    ranges = np.array([(0, 5), (3, 17), (10, 64), (0, 64)])
    prefix = np.vstack((np.zeros(horizon), lower))  # row t: the noise weights of the prefix after t values
    want = np.array([sigma2 * np.sum((prefix[j] - prefix[i]) ** 2) for i, j in ranges])
    assert np.allclose(factorization_variances(horizon, RHO, ranges), want)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=4096)
    parser.add_argument("--queries", type=int, default=20_000)
    args = parser.parse_args(argv)
    _check()
    horizon, rng = args.horizon, np.random.default_rng(0)
    families = {
        "prefix sums [0, j)": np.stack((np.zeros(horizon, dtype=int), np.arange(1, horizon + 1)), axis=1),
        "random ranges [i, j)": np.sort(rng.integers(0, horizon + 1, size=(args.queries, 2)), axis=1),
        "windows of 64": np.stack((starts := rng.integers(0, horizon - 64, args.queries), starts + 64), axis=1),
    }
    print(f"T = {horizon}, rho = {RHO} (both Gaussian at the same rho), mean noise variance per query")
    print(f"{'queries':<22} {'binary tree':>12} {'sqrt factorization':>19} {'tree / factorization':>21}")
    for name, ranges in families.items():
        ranges = ranges[ranges[:, 1] > ranges[:, 0]]
        tree, factor = np.mean(tree_variances(horizon, RHO, ranges)), np.mean(
            factorization_variances(horizon, RHO, ranges))
        print(f"{name:<22} {tree:>12.4g} {factor:>19.4g} {tree / factor:>20.2f}x")
    print(f"(levels h = {math.ceil(math.log2(horizon))}; the factorization's sensitivity^2 = "
          f"{np.sum(sqrt_coefficients(horizon) ** 2):.4g})")


if __name__ == "__main__":
    main()
