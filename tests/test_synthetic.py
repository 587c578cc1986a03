"""The synthetic streams (dpstream.datasets.synthetic): deterministic, bounded, as documented."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.datasets.synthetic import SYNTHETIC, bursty_counts, smart_meter, taxi_fares

N = 200_000


@pytest.fixture(scope="module", params=list(SYNTHETIC))
def generated(request):
    generator, bound, _ = SYNTHETIC[request.param]
    return request.param, generator, bound, generator(N, seed=0)


def test_deterministic_for_a_seed(generated):
    name, generator, _, values = generated
    assert np.array_equal(values, generator(N, seed=0))
    assert not np.array_equal(values[:5000], generator(5000, seed=1))


def test_bounded_whole_numbers(generated):
    _, _, bound, values = generated
    assert values.shape == (N,) and values.dtype == np.float64
    assert values.min() >= 0 and values.max() <= bound and np.all(values == np.round(values))


def test_a_shorter_stream_has_the_same_law(generated):
    """Draws are made per position in a fixed order, so a shorter stream is not a prefix in
    general; it is still a valid stream of the same law (same bound and similar mean)."""
    _, generator, bound, values = generated
    short = generator(N // 4, seed=0)
    assert short.max() <= bound
    assert abs(short.mean() / values.mean() - 1) < 0.3


@pytest.mark.parametrize(("generator", "low", "high"), [(smart_meter, 300, 550), (taxi_fares, 1300, 2000),
                                                         (bursty_counts, 20, 50)])
def test_documented_means(generator, low, high):
    assert low < generator(N, seed=0).mean() < high


def test_daily_cycle_of_the_smart_meter():
    """Evening readings (19:00-20:00) exceed night readings (2:00-4:00) on average."""
    values = smart_meter(14 * 1440, seed=2).reshape(14, 1440)
    assert values[:, 19 * 60 : 20 * 60].mean() > 3 * values[:, 2 * 60 : 4 * 60].mean()


def test_bad_arguments():
    with pytest.raises(ValueError, match="n must be"):
        smart_meter(0)
    with pytest.raises(ValueError, match="seed must be"):
        taxi_fares(10, seed=-1)
