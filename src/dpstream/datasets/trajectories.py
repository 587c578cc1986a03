"""Synthetic trajectories: users moving on a public Markov chain of locations (``release-locations``).

:func:`trajectories` gives ``users`` users over ``steps`` hourly steps on ``locations`` locations,
as the rows a location service's log holds: ``time,user,location``, time-major (every user's
location at one step, then the next), one row per user and step.  The chain is
:func:`markov_chain`: from each location a user stays with probability ``stay`` (default 0.5) and
otherwise moves by a Dirichlet(0.3) draw over all locations (a few likely destinations each), so
the counts are correlated in time as in Cao et al.'s setting; users start uniformly at random.
Everything is drawn from one seeded generator: the same arguments give the same rows.

From the command line (``docs/locations.md``)::

    python -m dpstream.datasets.trajectories DIR --users 1000 --locations 20 --steps 200

writes ``DIR/rows.csv``, ``DIR/locations.txt`` (one name a line) and ``DIR/transition.csv`` (the
public matrix, a header row of the names).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpstream._checks import check_positive_int, check_probability
from dpstream.rng import Seed, make_rng

__all__ = ["Trajectories", "main", "markov_chain", "trajectories"]

#: The time of the first step (hourly steps from it).
START = np.datetime64("2024-01-01T00:00", "s")


def markov_chain(locations: int, *, stay: float = 0.5, seed: Seed = 0) -> np.ndarray:
    """A ``locations x locations`` row-stochastic matrix: stay with ``stay``, else move by a Dirichlet(0.3) row.

    >>> m = markov_chain(4, seed=1)
    >>> m.shape, bool(np.allclose(m.sum(axis=1), 1)), bool((np.diag(m) >= 0.5).all())
    ((4, 4), True, True)
    """
    m = check_positive_int(locations, "locations")
    stay = check_probability(stay, "stay")
    rng = make_rng(seed)
    moves = rng.dirichlet(np.full(m, 0.3), size=m)
    return stay * np.eye(m) + (1.0 - stay) * moves


@dataclass(frozen=True)
class Trajectories:
    """Rows of ``users x steps`` locations, time-major, and the public chain they follow."""

    matrix: np.ndarray  # the transition matrix (row = from)
    locations: list[str]  # "L00", "L01", ...
    users: list[str]  # "U0000", ...
    path: np.ndarray  # int64 (steps, users): each user's location index at each step

    def counts(self) -> np.ndarray:
        """The true counts, ``(steps, locations)`` int64."""
        m = len(self.locations)
        steps = self.path.shape[0]
        return np.bincount((np.arange(steps)[:, None] * m + self.path).ravel(), minlength=steps * m).reshape(steps, m)

    def write(self, directory: str | Path) -> None:
        """Write ``rows.csv`` (``time,user,location``), ``locations.txt`` and ``transition.csv`` into ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        steps, n = self.path.shape
        times = np.char.add((START + np.arange(steps).astype("timedelta64[h]")).astype(str), "Z")
        names = np.array(self.locations)[self.path]
        lines = np.char.add(np.char.add(np.char.add(np.char.add(np.repeat(times, n), ","),
                                                    np.tile(np.array(self.users), steps)), ","), names.ravel())
        (out / "rows.csv").write_text("time,user,location\n" + "\n".join(lines.tolist()) + "\n")
        (out / "locations.txt").write_text("\n".join(self.locations) + "\n")
        rows = [",".join(self.locations)] + [",".join(repr(float(p)) for p in row) for row in self.matrix]
        (out / "transition.csv").write_text("\n".join(rows) + "\n")


def trajectories(users: int = 1000, locations: int = 20, steps: int = 200, *, stay: float = 0.5,
                 seed: Seed = 0) -> Trajectories:
    """``users`` users moving for ``steps`` steps on :func:`markov_chain` (``locations``, ``stay``), start uniform.

    >>> t = trajectories(users=50, locations=3, steps=4, seed=2)
    >>> t.path.shape, t.counts().sum(axis=1).tolist()
    ((4, 50), [50, 50, 50, 50])
    """
    n, m, t = (check_positive_int(v, name) for v, name in ((users, "users"), (locations, "locations"),
                                                            (steps, "steps")))
    rng = make_rng(seed)
    matrix = markov_chain(m, stay=stay, seed=rng)
    cumulative = np.cumsum(matrix, axis=1)
    path = np.empty((t, n), dtype=np.int64)
    path[0] = rng.integers(0, m, size=n)
    for step in range(1, t):  # vectorized over the users
        draws = rng.random(n)
        path[step] = np.minimum((draws[:, None] >= cumulative[path[step - 1]]).sum(axis=1), m - 1)
    width = len(str(m - 1))
    return Trajectories(matrix=matrix, locations=[f"L{i:0{width}d}" for i in range(m)],
                        users=[f"U{i:0{len(str(n - 1))}d}" for i in range(n)], path=path)


def main(argv: list[str] | None = None) -> None:
    """``python -m dpstream.datasets.trajectories DIR [--users N] [--locations M] [--steps T] [--seed S]``."""
    parser = argparse.ArgumentParser(prog="python -m dpstream.datasets.trajectories", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--locations", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--stay", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        data = trajectories(args.users, args.locations, args.steps, stay=args.stay, seed=args.seed)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    data.write(args.directory)


if __name__ == "__main__":
    main()
