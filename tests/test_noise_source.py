"""Noise sources of the release mechanisms (``dpstream.noise.source``): seed, noise or key, pooled draws."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpstream.noise import ExactNoise, FloatNoise, KeyedBits, SeededBits, SystemBits, ZeroNoise
from dpstream.noise.discrete_laplace_law import discrete_laplace, discrete_laplace_pmf
from dpstream.noise.source import NoiseSource, PooledNoise, describe_noise, make_source

KEY = bytes(range(32))


def test_pooled_noise_is_deterministic_in_the_requests_and_keeps_the_law():
    """The same sequence of requests gives the same values; small requests come from refills of
    min(2^14, max(8 n, 1024)) draws (so the first 8 draws of a fresh pool are the first 8 of one
    1024-draw call); the pooled values follow the exact pmf (5 binomial sds per value)."""
    a, b = PooledNoise(ExactNoise(bits=3)), PooledNoise(ExactNoise(bits=3))
    requests = [(Fraction(5), 8), (Fraction(5), 100), (Fraction(1, 3), 2), (Fraction(5), 3000), (Fraction(5), (2, 3))]
    for scale, size in requests:
        x, y = a.laplace_units(scale, size), b.laplace_units(scale, size)
        assert np.array_equal(x, y) and x.dtype == np.int64
        assert x.shape == ((size,) if isinstance(size, int) else size)
    first = PooledNoise(ExactNoise(bits=4)).laplace_units(Fraction(5), 8)
    assert np.array_equal(first, discrete_laplace(SeededBits(seed=4), 5, 1, 1024)[:8])
    pooled = PooledNoise(ExactNoise(bits=5))
    draws = np.concatenate([pooled.laplace_units(Fraction(2), 7) for _ in range(30_000)])
    for x in range(-5, 6):
        p = float(discrete_laplace_pmf(x, 2, 1))
        assert abs(np.mean(draws == x) - p) < 5 * math.sqrt(p * (1 - p) / draws.size)


def test_pooled_noise_large_requests_bypass_and_pools_are_bounded():
    pooled = PooledNoise(ExactNoise(bits=6), block=64)
    big = pooled.laplace_units(Fraction(3), 64)
    assert np.array_equal(big, discrete_laplace(SeededBits(seed=6), 3, 1, 64))  # straight to the sampler
    for k in range(1, 12):
        pooled.laplace_units(Fraction(k), 1)
    assert len(pooled._pools) == 8  # the oldest scales were dropped
    pooled._pid = -1  # as in a forked child: the pools are dropped, never shared
    pooled.laplace_units(Fraction(11), 1)
    assert list(pooled._pools) == [Fraction(11)]
    with pytest.raises(NotImplementedError, match="integer grid"):
        pooled.laplace(1.0, 3)
    with pytest.raises(TypeError, match="sampler must be an ExactNoise"):
        PooledNoise(ZeroNoise())


def test_sources_from_seed_noise_or_key():
    assert isinstance(NoiseSource().shared.bits, SystemBits)  # unseeded: the OS CSPRNG
    assert isinstance(NoiseSource(seed=1).shared.bits, SeededBits)
    zero = ZeroNoise()
    assert NoiseSource(noise=zero).sampler("anything") is zero
    floats = NoiseSource(noise=FloatNoise(rng=0))
    assert not floats.exact and NoiseSource(noise=zero).exact and NoiseSource(key=KEY).exact
    for given in (dict(seed=1, noise=zero), dict(seed=1, key=KEY), dict(noise=zero, key=KEY)):
        with pytest.raises(ValueError, match="give at most one of seed, noise and key"):
            NoiseSource(**given)
    with pytest.raises(TypeError, match="noise must be a NoiseSampler"):
        NoiseSource(noise="laplace")
    with pytest.raises(ValueError, match="key must be at least 16 bytes"):
        NoiseSource(key=b"short")
    with pytest.raises(TypeError, match="identity must be a tuple"):
        NoiseSource(identity="tops")
    source = NoiseSource(seed=2)
    assert source.sampler(0) is source.sampler(1)  # one sequential stream for every part
    assert make_source(noise=source) is source
    with pytest.raises(ValueError, match="give at most one"):
        make_source(seed=1, noise=source)


def test_keyed_parts_draw_from_their_own_identity():
    """A keyed source gives part p the keystream of KeyedBits(key, identity + p): the same for
    every source with that key, whatever was drawn before; children extend the identity."""
    source = NoiseSource(key=KEY, identity=("tops",))
    source.sampler(0).laplace_units(Fraction(7), 50)  # draws elsewhere do not matter
    got = source.sampler(3).laplace_units(Fraction(7), 20)
    want = discrete_laplace(KeyedBits(key=KEY, identity=("tops", 3)), 7, 1, 20)
    assert np.array_equal(got, want)
    child = NoiseSource(key=KEY, identity=("pak",)).child("tree")
    assert child.identity == ("pak", "tree") and child.keyed
    assert np.array_equal(child.sampler(1).laplace_units(Fraction(7), 20),
                          discrete_laplace(KeyedBits(key=KEY, identity=("pak", "tree", 1)), 7, 1, 20))
    assert "secret" in repr(source) and KEY.hex() not in repr(source)


def test_descriptions_name_the_sampler_and_the_source():
    assert describe_noise(ExactNoise(bits=SystemBits())) == (
        "exact discrete Laplace in grid units, OS CSPRNG bits (os.urandom)"
    )
    seeded = describe_noise(PooledNoise(ExactNoise(bits=7)))
    assert seeded.endswith("seeded PCG64 bits (seed 7: replayable, NOT secret)")
    assert describe_noise(ExactNoise(bits=np.random.default_rng(0))).endswith("bits of a numpy Generator (NOT secret)")
    assert "keyed ChaCha20" in describe_noise(ExactNoise(bits=KeyedBits(key=KEY, identity=1)))
    assert describe_noise(FloatNoise(rng=0)) == "FLOAT Laplace from numpy (studies only: NOT for publication)"
    assert describe_noise(ZeroNoise()) == "NO noise (ZeroNoise: tests only, NOT private)"
    assert NoiseSource(key=KEY).describe().startswith("exact discrete Laplace in grid units, keyed ChaCha20")
    assert NoiseSource().describe() == "exact discrete Laplace in grid units, OS CSPRNG bits (os.urandom)"
