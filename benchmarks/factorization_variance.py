"""The square-root factorization against the binary tree under the same rho: variances and the real mechanisms.

Continual counting at event level (values in [0, 1], one position's value changes by at most 1) over a
horizon of ``T`` values, both with Gaussian noise at the same rho:

* **binary tree** (``BinaryTreeCounter(rho=...)``, ``release --method bt-zcdp``): one node per level per
  value, L2 sensitivity ``sqrt(h)``; the noise of a prefix sum is that of its tiling's nodes; its exact
  standard errors come from the counter itself (``count_standard_errors``, ``range_standard_error``);
* **square-root factorization, ideal** (Fichtenberger, Henzinger and Upadhyay 2023; Henzinger et al.):
  the prefix-sum matrix ``A`` is ``L L`` with ``L`` the lower-triangular Toeplitz matrix of
  ``c_k = binom(2k, k) / 4^k``; continuous Gaussian noise ``z`` of ``sigma^2 = s^2 / (2 rho)``, ``s`` the
  largest column norm of ``L``; a prefix sum's noise is ``sigma^2 ||row of L||^2``, a range's
  ``sigma^2 ||row_j - row_i||^2``;
* **square-root factorization, as released** (``SqrtFactorization``, ``release --method sqrt-zcdp``):
  the integer encoder, exact discrete Gaussian noise and integer decoding of
  :mod:`dpstream.release.factorization`, on chunks of ``n`` values; its exact standard errors come
  from the mechanism (``range_standard_errors``), and ``--runs`` releases of the real mechanism
  check them (the measured mean squared error of the prefix sums).

Checked against brute-force linear algebra at ``T = 64`` first (``L @ L == A``, the ideal
factorization's variances from explicit matrices).

Run::

    PYTHONPATH=src python benchmarks/factorization_variance.py [--horizon 4096] [--queries 20000] [--runs 20]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.factorization import SqrtFactorization, sqrt_coefficients

RHO = 0.5
CHUNKS = (256, 1024, 4096)


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


def mechanism_variances(chunk: int, rho: float, ranges: np.ndarray) -> np.ndarray:
    """The exact noise variance of each range under ``SqrtFactorization`` on chunks of ``chunk`` values."""
    factorization = SqrtFactorization(rho=rho, upper_bound=1.0, max_range=chunk, granularity=1.0 / 1024, seed=0)
    return factorization.range_standard_errors(ranges[:, 0], ranges[:, 1]) ** 2


def measured_prefix_mse(chunk: int, rho: float, horizon: int, runs: int) -> tuple[float, float, float]:
    """``runs`` releases of ``horizon`` values by the real mechanism: the prefix sums' measured mean squared error,
    the mean of their exact variances, and the seconds per release."""
    values = np.random.default_rng(1).integers(0, 2, horizon).astype(float)
    truth = np.cumsum(values)
    errors, started = np.zeros(horizon), time.perf_counter()
    for run in range(runs):
        factorization = SqrtFactorization(rho=rho, upper_bound=1.0, max_range=chunk, granularity=1.0 / 1024,
                                          seed=run)
        errors += (np.cumsum(factorization.release(values)) - truth) ** 2
    seconds = (time.perf_counter() - started) / runs
    exact = factorization.count_standard_errors(np.arange(1, horizon + 1)) ** 2
    return float(np.mean(errors / runs)), float(np.mean(exact)), seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=4096)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    _check()
    horizon, rng = args.horizon, np.random.default_rng(0)
    families = {
        "prefix sums [0, j)": np.stack((np.zeros(horizon, dtype=int), np.arange(1, horizon + 1)), axis=1),
        "random ranges [i, j)": np.sort(rng.integers(0, horizon + 1, size=(args.queries, 2)), axis=1),
        "windows of 64": np.stack((starts := rng.integers(0, horizon - 64, args.queries), starts + 64), axis=1),
    }
    chunks = [chunk for chunk in CHUNKS if chunk <= horizon]
    print(f"T = {horizon}, rho = {RHO} (all Gaussian at the same rho), mean noise variance per query; "
          "tree / each factorization in brackets")
    print(f"{'queries':<22} {'binary tree':>12} {'ideal sqrt':>16} " + " ".join(
        f"{f'sqrt-zcdp n={chunk}':>20}" for chunk in chunks))
    for name, ranges in families.items():
        ranges = ranges[ranges[:, 1] > ranges[:, 0]]
        tree = np.mean(tree_variances(horizon, RHO, ranges))
        ideal = np.mean(factorization_variances(horizon, RHO, ranges))
        real = [np.mean(mechanism_variances(chunk, RHO, ranges)) for chunk in chunks]
        print(f"{name:<22} {tree:>12.4g} {f'{ideal:.4g} ({tree / ideal:.2f}x)':>16} " + " ".join(
            f"{f'{value:.4g} ({tree / value:.2f}x)':>20}" for value in real))
    print(f"(levels h = {math.ceil(math.log2(horizon))}; the ideal factorization's sensitivity^2 = "
          f"{np.sum(sqrt_coefficients(horizon) ** 2):.4g})")
    print(f"\nthe real mechanism, {args.runs} releases of T = {horizon} values in [0, 1] (prefix sums):")
    print(f"{'chunk':>6} {'exact variance':>15} {'measured MSE':>13} {'measured / exact':>17} "
          f"{'exact / ideal - 1':>18} {'ms per release':>15}")
    ideal_prefix = np.mean(factorization_variances(horizon, RHO, families["prefix sums [0, j)"]))
    for chunk in chunks:
        measured, exact, seconds = measured_prefix_mse(chunk, RHO, horizon, args.runs)
        print(f"{chunk:>6} {exact:>15.4g} {measured:>13.4g} {measured / exact:>17.3f} "
              f"{exact / ideal_prefix - 1 if chunk == horizon else float('nan'):>18.2e} {1000 * seconds:>15.1f}")


if __name__ == "__main__":
    main()
