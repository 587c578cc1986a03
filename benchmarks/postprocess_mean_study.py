"""MSE of the posterior-mean and temporal estimators against MLE and MAP (Cao et al., Fig. 4(a)).

Run (one core; about 15 minutes for 50 rounds):

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/postprocess_mean_study.py --rounds 50 --out results.json

``--noise continuous`` replaces the release by continuous Laplace noise of the same scale (the
project's release before it drew exact discrete noise; the MLE and MAP numbers are then those of
docs/postprocess.md's Fig. 4(a) table) and tells the estimators so (``likelihood="laplace"``).

Settings.  ``fig3``: the epsilon study of Section 6 as the project's study runs it -- n = 200 users
starting uniformly at the 3 locations of Fig. 3 and moving by its matrix (s = 0), T = 500 steps,
one release per round by ``LaplaceCounts`` (discrete Laplace noise of scale 2 / epsilon), round
``k`` of epsilon number ``i`` seeded by ``SeedSequence([seed, i, k])`` (data and noise spawned
from it as in the study).  ``ring``: a
second model, 8 locations on a ring where a user stays with probability 0.8 and moves to either
neighbour with 0.1 (slow mixing: correlations last tens of steps), otherwise the same.

Every method post-processes the same release.  Reported per method: mean MSE over rounds with a
95 % t interval, and the paired mean difference to the MLE and to the MAP of the same prior
(negative: better) with its 95 % t interval.  For the approximation: the largest absolute
difference to the exact posterior mean over all cells and rounds and the MSE relative difference.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy import stats

from dpstream.postprocess import (
    FIG3_MATRIX,
    LaplaceCounts,
    laplace_scale,
    map_estimate,
    mle_estimate,
    posterior_mean_solve,
    postprocess,
    prior_marginals,
    simulate_counts,
    smoothed_transition,
)

EPSILONS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
PRIORS = ("frequency", "uniform")


def ring_matrix(m: int = 8, stay: float = 0.8) -> np.ndarray:
    move = (1.0 - stay) / 2.0
    eye = np.eye(m)
    return stay * eye + move * np.roll(eye, 1, axis=1) + move * np.roll(eye, -1, axis=1)


MODELS = {"fig3": smoothed_transition(FIG3_MATRIX, 0.0), "ring": ring_matrix()}


def one_round(matrix: np.ndarray, epsilon: float, users: int, steps: int, seed: np.random.SeedSequence,
              noise: str = "discrete") -> dict:
    data_seed, noise_seed = seed.spawn(2)
    truth = simulate_counts(matrix, users=users, steps=steps, seed=np.random.default_rng(data_seed))
    if noise == "discrete":  # the project's release: exact discrete Laplace noise
        noisy = LaplaceCounts(epsilon=epsilon, seed=np.random.default_rng(noise_seed)).release(truth)
        likelihood = "discrete_laplace"
    else:  # continuous Laplace noise of the same scale (the release before the exact noise)
        noisy = truth + np.random.default_rng(noise_seed).laplace(0.0, laplace_scale(epsilon), truth.shape)
        likelihood = "laplace"
    out, seconds = {}, {}

    def record(name, counts, start):
        out[name] = float(np.mean((counts - truth) ** 2))
        seconds[name] = time.perf_counter() - start

    start = time.perf_counter()
    record("MLE", mle_estimate(noisy, users=users).counts, start)
    for prior in PRIORS:
        start = time.perf_counter()
        record(f"MAP {prior}", map_estimate(noisy, matrix, users=users, epsilon=epsilon, prior=prior).counts, start)
        for method, label in (("mean", "mean"), ("kalman", "kalman"), ("smooth", "smooth")):
            start = time.perf_counter()
            estimate = postprocess(noisy, matrix, users=users, epsilon=epsilon, method=method, prior=prior,
                                   likelihood=likelihood)
            record(f"{label} {prior}", estimate.counts, start)
    marginals = prior_marginals(noisy, matrix, "uniform")
    options = dict(users=users, epsilon=epsilon, likelihood=likelihood)
    exact = posterior_mean_solve(noisy, marginals, exact=True, **options).counts
    approx = posterior_mean_solve(noisy, marginals, exact=False, **options).counts
    out["approx uniform"] = float(np.mean((approx - truth) ** 2))
    gap = {"max_abs": float(np.abs(approx - exact).max()),
           "mse_exact": float(np.mean((exact - truth) ** 2))}
    return {"mse": out, "seconds": seconds, "approx_gap": gap}


def interval(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t interval."""
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return float(values.mean()), float("nan")
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean()), float(half)


def summarize(rounds: list[dict]) -> dict:
    methods = list(rounds[0]["mse"])
    table = {}
    for method in methods:
        values = np.array([r["mse"][method] for r in rounds])
        mle = np.array([r["mse"]["MLE"] for r in rounds])
        row = {"mse": interval(values), "vs_mle": interval(values - mle),
               "seconds": float(np.mean([r["seconds"].get(method, np.nan) for r in rounds]))}
        prior = method.split()[-1]
        if prior in PRIORS:
            row["vs_map"] = interval(values - np.array([r["mse"][f"MAP {prior}"] for r in rounds]))
        table[method] = row
    gaps = [r["approx_gap"] for r in rounds]
    table["_approx"] = {"max_abs": max(g["max_abs"] for g in gaps),
                        "mse_rel": float(np.mean([r["mse"]["approx uniform"] for r in rounds])
                                         / np.mean([g["mse_exact"] for g in gaps]) - 1.0)}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="fig3,ring")
    parser.add_argument("--epsilons", default=",".join(str(e) for e in EPSILONS))
    parser.add_argument("--noise", choices=("discrete", "continuous"), default="discrete",
                        help="discrete: LaplaceCounts' exact discrete Laplace noise; continuous: Laplace noise")
    parser.add_argument("--out", default=None, help="JSON file for the per-round and summary results")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    results = {}
    for model in args.models.split(","):
        matrix = MODELS[model]
        for index, epsilon in enumerate(epsilons):
            rounds = [one_round(matrix, epsilon, args.users, args.steps, np.random.SeedSequence([args.seed, index, k]),
                                args.noise) for k in range(args.rounds)]
            summary = summarize(rounds)
            results[f"{model} eps={epsilon:g}"] = {"summary": summary, "rounds": rounds}
            print(f"\n## {model}, epsilon = {epsilon:g} ({args.rounds} rounds, n = {args.users}, T = {args.steps}, "
                  f"{args.noise} noise)")
            columns = ("MSE (95% CI)", 24), ("minus MLE (95% CI)", 26), ("minus MAP (95% CI)", 26), ("s/round", 9)
            print(f"{'method':<20}" + "".join(f"{name:>{width}}" for name, width in columns))
            for method, row in summary.items():
                if method.startswith("_"):
                    continue
                mse, vs_mle = row["mse"], row["vs_mle"]
                vs_map = row.get("vs_map", (np.nan, np.nan))
                print(f"{method:<20}{mse[0]:>14.4g} +- {mse[1]:<7.2g}{vs_mle[0]:>16.4g} +- {vs_mle[1]:<7.2g}"
                      f"{vs_map[0]:>16.4g} +- {vs_map[1]:<7.2g}{row['seconds']:>9.3f}")
            approx = summary["_approx"]
            print(f"approximation vs exact (uniform prior): max |diff| {approx['max_abs']:.3g} counts, "
                  f"MSE {100 * approx['mse_rel']:+.3f} %")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
