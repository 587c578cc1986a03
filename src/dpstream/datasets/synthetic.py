"""Synthetic, realistic streams: held-out test data for the threshold and smoothing choices.

Three generators, each a pure function of ``(n, seed)`` (the same seed gives the same stream on
every platform numpy supports; the draws are made in a fixed order), vectorized, with a public
upper bound B chosen from the physics of the stream, not read off the data:

* :func:`smart_meter` -- one-minute power readings of a household, in watts (B = 10,000 W):
  a daily profile with morning and evening peaks, later mornings at weekends, an annual
  heating season, a day-to-day factor, appliance events (kettle, oven, washing machine) and
  a cycling fridge on top of a slow base-load fluctuation.
* :func:`taxi_fares` -- fares of consecutive taxi trips, in cents (B = 50,000 = $500): a
  log-normal body from distance and time, flat-rate airport trips, tips, a Pareto tail of
  long trips, and a trip mix that follows the time of day (more long trips at night).
* :func:`bursty_counts` -- events per second at a busy server (B = 5,000): a daily cycle of
  the rate, over-dispersion (gamma-mixed Poisson), bursts that last about a minute and rare
  flash crowds.

The project tunes nothing on these streams: the choices of :mod:`dpstream.thresholds` were
made on POS, and these measure whether they carry over (see
:mod:`dpstream.evaluation.accuracy`).  ``SYNTHETIC`` maps each name to its generator and B.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from dpstream._checks import check_nonnegative_int, check_positive_int

__all__ = ["SYNTHETIC", "bursty_counts", "smart_meter", "taxi_fares"]

_MINUTES_PER_DAY = 1440
_MINUTES_PER_YEAR = 525_600


def _rng(n: object, seed: object) -> tuple[int, np.random.Generator]:
    n = check_positive_int(n, "n")
    seed = check_nonnegative_int(seed, "seed")
    return n, np.random.default_rng(seed)


def _events(rng: np.random.Generator, n: int, probability: np.ndarray, mean_duration: float,
            median_power: float, spread: float) -> np.ndarray:
    """Rectangular load events: one starts at minute t with ``probability[t]``, lasts a geometric
    number of minutes (mean ``mean_duration``) and draws a log-normal power; overlaps add."""
    starts = np.flatnonzero(rng.random(n) < probability)
    durations = rng.geometric(1.0 / mean_duration, starts.size)
    powers = median_power * np.exp(spread * rng.standard_normal(starts.size))
    delta = np.zeros(n + 1)
    np.add.at(delta, starts, powers)
    np.add.at(delta, np.minimum(starts + durations, n), -powers)
    return np.cumsum(delta[:n])


def smart_meter(n: int = 2_000_000, *, seed: int = 0) -> np.ndarray:
    """One-minute household power readings in watts, integers in [0, 10,000].

    Parameters
    ----------
    n : int
        Number of minutes (2,000,000 is about 3.8 years).
    seed : int
        The stream is a deterministic function of ``(n, seed)``.

    Notes
    -----
    Reading ``t`` (minutes from a Monday 00:00 in early January) is the sum of

    * a base load of 120 W times a seasonal factor ``1 + 0.25 cos(2 pi t / year)`` (heating
      in winter) and a day factor (log-normal, sd 0.15, one per day);
    * a daily profile: 40 W at night, a morning peak of 500 W around 7:30 (9:00 at weekends)
      and an evening peak of 700 W around 19:30, both scaled by the seasonal and day factors;
    * a slow fluctuation (AR(1) per minute, coefficient 0.98, stationary sd 30 W);
    * a fridge cycling 90 W on for 20 minutes of every 55;
    * appliance events: kettle-like (2,000 W, about 4 minutes), cooking (1,800 W, 35 minutes)
      and washing (600 W, 80 minutes), starting more often when the profile is high.

    The sum is rounded to whole watts and clipped to [0, 10,000].  The mean is about 420 W.

    >>> x = smart_meter(10_000, seed=1)
    >>> x.shape, bool(x.min() >= 0), bool(x.max() <= 10_000), bool((x == np.round(x)).all())
    ((10000,), True, True, True)
    >>> bool((smart_meter(500, seed=3) == smart_meter(500, seed=3)).all())
    True
    """
    n, rng = _rng(n, seed)
    t = np.arange(n, dtype=np.float64)
    day = (t // _MINUTES_PER_DAY).astype(np.int64)
    hour = (t % _MINUTES_PER_DAY) / 60.0
    weekend = (day % 7) >= 5
    season = 1.0 + 0.25 * np.cos(2.0 * np.pi * t / _MINUTES_PER_YEAR)
    day_factor = np.exp(0.15 * rng.standard_normal(int(day[-1]) + 1))[day]
    morning_centre = np.where(weekend, 9.0, 7.5)
    profile = (
        40.0
        + 500.0 * np.exp(-0.5 * ((hour - morning_centre) / 1.0) ** 2)
        + 700.0 * np.exp(-0.5 * ((hour - 19.5) / 1.6) ** 2)
    )
    level = season * day_factor
    load = 120.0 * level + profile * level
    # AR(1) fluctuation with stationary sd 30 W: x_t = 0.98 x_{t-1} + e_t, by a recursive filter.
    innovations = 30.0 * np.sqrt(1.0 - 0.98**2) * rng.standard_normal(n)
    from scipy.signal import lfilter  # here: scipy.signal takes half a second to import

    load += lfilter([1.0], [1.0, -0.98], innovations)
    fridge_phase = rng.integers(0, 55)
    load += np.where(((t + fridge_phase) % 55) < 20, 90.0, 0.0)
    activity = profile / profile.max()
    load += _events(rng, n, 0.004 * activity, 4.0, 2000.0, 0.15)
    load += _events(rng, n, 0.0012 * activity, 35.0, 1800.0, 0.25)
    load += _events(rng, n, 0.0004 * activity, 80.0, 600.0, 0.3)
    return np.clip(np.round(load), 0.0, 10_000.0)


def taxi_fares(n: int = 2_000_000, *, seed: int = 0) -> np.ndarray:
    """Fares of consecutive taxi trips in cents, integers in [0, 50,000].

    Parameters
    ----------
    n : int
        Number of trips.
    seed : int
        The stream is a deterministic function of ``(n, seed)``.

    Notes
    -----
    Trips arrive at a rate that follows the time of day (about 250,000 a day, fewest around
    5:00); trip ``i`` gets the time of day of its arrival.  Its fare is

    * with probability 4% (12% between 22:00 and 6:00) an airport trip: a flat 5,200 plus
      tolls (0 or 650) and a tip;
    * otherwise a metered trip: 250 + 250 per mile + 50 per minute stuck in traffic, with a
      log-normal distance (median 1.7 miles, sd of the log 0.75, longer at night), a
      speed that drops in the rush hours, and, with probability 0.3%, a long trip whose
      distance is Pareto (alpha 2.2) above 20 miles;
    * a tip of 0 (35% of trips) or a uniform 10-30% of the fare.

    The fare is rounded to whole cents and clipped to [0, 50,000]; the mean is about 1,600.

    >>> x = taxi_fares(10_000, seed=1)
    >>> x.shape, bool(x.min() >= 0), bool(x.max() <= 50_000)
    ((10000,), True, True)
    """
    n, rng = _rng(n, seed)
    # Arrival times: thin a fine grid of minutes by the daily rate profile, as an inverse CDF.
    minutes = np.arange(_MINUTES_PER_DAY) / 60.0
    rate = 0.25 + np.exp(-0.5 * ((minutes - 9.0) / 2.5) ** 2) + 1.4 * np.exp(-0.5 * ((minutes - 19.0) / 3.0) ** 2)
    cumulative = np.cumsum(rate) / rate.sum()
    trips_per_day = 250_000
    position = np.arange(n) / trips_per_day
    hour = np.searchsorted(cumulative, position % 1.0) / 60.0
    night = (hour >= 22.0) | (hour < 6.0)
    rush = np.exp(-0.5 * ((hour - 8.5) / 1.2) ** 2) + np.exp(-0.5 * ((hour - 17.5) / 1.5) ** 2)
    airport = rng.random(n) < np.where(night, 0.12, 0.04)
    distance = 1.7 * np.exp(0.75 * rng.standard_normal(n) + np.where(night, 0.3, 0.0))
    long_trip = rng.random(n) < 0.003
    distance = np.where(long_trip, 20.0 * (1.0 + rng.pareto(2.2, n)), distance)
    speed = 12.0 * (1.0 - 0.45 * rush) * np.exp(0.2 * rng.standard_normal(n))  # miles per hour
    traffic_minutes = np.maximum(distance / speed * 60.0 - distance * 3.0, 0.0)
    metered = 250.0 + 250.0 * distance + 50.0 * traffic_minutes
    tolls = np.where(rng.random(n) < 0.5, 650.0, 0.0)
    fare = np.where(airport, 5200.0 + tolls, metered)
    tip = np.where(rng.random(n) < 0.35, 0.0, rng.uniform(0.10, 0.30, n))
    return np.clip(np.round(fare * (1.0 + tip)), 0.0, 50_000.0)


def bursty_counts(n: int = 2_000_000, *, seed: int = 0) -> np.ndarray:
    """Events per second at a busy server, integers in [0, 5,000].

    Parameters
    ----------
    n : int
        Number of seconds (2,000,000 is about 23 days).
    seed : int
        The stream is a deterministic function of ``(n, seed)``.

    Notes
    -----
    The rate of second ``t`` is a daily cycle between 8 and 50 events per second (peak at
    14:00), times a gamma factor of mean 1 per second (over-dispersion, shape 4), times a
    burst factor: bursts start with probability 1/2,000 per second, last a geometric number of
    seconds (mean 60) and multiply the rate by a log-normal factor (median 6); flash crowds
    start with probability 1/400,000 per second, last about 10 minutes and multiply it by 40.
    The count is Poisson with that rate, clipped to 5,000.  The mean is about 35.

    >>> x = bursty_counts(10_000, seed=1)
    >>> x.shape, bool(x.min() >= 0), bool(x.max() <= 5_000)
    ((10000,), True, True)
    """
    n, rng = _rng(n, seed)
    t = np.arange(n, dtype=np.float64)
    hour = (t % 86_400.0) / 3_600.0
    base = 8.0 + 42.0 * (0.5 + 0.5 * np.cos(2.0 * np.pi * (hour - 14.0) / 24.0)) ** 2
    dispersion = rng.gamma(4.0, 0.25, n)

    def episodes(probability: float, mean_length: float, median: float, spread: float) -> np.ndarray:
        starts = np.flatnonzero(rng.random(n) < probability)
        lengths = rng.geometric(1.0 / mean_length, starts.size)
        log_factor = math.log(median) + spread * rng.standard_normal(starts.size)
        delta = np.zeros(n + 1)
        np.add.at(delta, starts, log_factor)
        np.add.at(delta, np.minimum(starts + lengths, n), -log_factor)
        return np.exp(np.cumsum(delta[:n]))

    burst = episodes(1.0 / 2_000, 60.0, 6.0, 0.5)
    flash = episodes(1.0 / 400_000, 600.0, 40.0, 0.0)
    counts = rng.poisson(base * dispersion * burst * flash)
    return np.minimum(counts, 5_000).astype(np.float64)


#: name -> (generator, public upper bound B, one-line description).
SYNTHETIC: MappingProxyType[str, tuple[Callable[..., np.ndarray], float, str]] = MappingProxyType(
    {
        "smart-meter": (smart_meter, 10_000.0, "synthetic one-minute household power in W (daily and annual cycles)"),
        "taxi-fares": (taxi_fares, 50_000.0, "synthetic taxi fares in cents (heavy tail, time-of-day mix)"),
        "bursty-counts": (bursty_counts, 5_000.0, "synthetic events per second (daily cycle, bursts, flash crowds)"),
    }
)
