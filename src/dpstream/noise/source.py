"""Where a stream mechanism's noise comes from: ``seed=``, ``noise=`` or ``key=``, in one object.

Every release mechanism (ToPS, its perturber, the binary tree, PAK) takes at most one of

* ``seed`` -- None (default): exact samplers on the operating system's CSPRNG
  (:class:`~dpstream.noise.bits.SystemBits`); an int: the same exact samplers on a replayable
  PCG64 (:class:`~dpstream.noise.bits.SeededBits`, for tests: not secret); a numpy
  ``Generator``: exact samplers on its bits (:class:`~dpstream.noise.bits.GeneratorBits`);
* ``noise`` -- a :class:`~dpstream.noise.sampler.NoiseSampler` used as it is: ``ZeroNoise()``
  for tests of the arithmetic, ``FloatNoise(rng)`` for the studies' float path (NOT for
  publication: the mechanisms then run their old float algorithm);
* ``key`` -- a secret key (bytes): every part of the release draws from its own keyed stream
  ``KeyedBits(key, identity)``, e.g. chunk ``c`` of ToPS from the identity ``("tops", c)``, so
  a restarted release *recomputes* rather than re-draws the noise of what it already released.

:class:`NoiseSource` turns these into one object.  ``source.sampler(*parts)`` is the sampler of
one part: with a key, a fresh :class:`~dpstream.noise.sampler.ExactNoise` on
``KeyedBits(key, identity + parts)``, which depends on nothing but the key and the identity;
otherwise the one shared sampler, whose draws follow each other in the order the parts ask.

Exact samplers are wrapped in :class:`PooledNoise`: a discrete Laplace draw costs about a
millisecond of fixed overhead whatever its size, so small requests (one selection of NM-E, the
few hundred nodes of a chunk's hierarchy) are served from blocks drawn ahead.  The values are
the same law; which values a request gets is a deterministic function of the sequence of
requests, so the same seed still replays the same release.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np

from dpstream.noise.bits import BitsSeed, GeneratorBits, KeyedBits, SeededBits, SystemBits, make_bits
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler, ZeroNoise

__all__ = ["NoiseSource", "PooledNoise", "bits_from_state", "bits_state", "describe_noise", "make_source"]

Size = int | tuple[int, ...]


class PooledNoise:
    """An :class:`~dpstream.noise.sampler.ExactNoise` that draws small requests in blocks.

    A request of ``n < block`` values is served from a pool of that scale's draws, refilled
    when it runs short with one call of ``min(block, max(8 n, 1024))`` draws; larger requests
    go straight to the sampler.  At most 8 scales keep a pool (the oldest is dropped), and the
    pools are dropped in a forked child, so two processes never share noise.

    Parameters
    ----------
    sampler : ExactNoise
    block : int
        Largest refill (default 2^14 draws).

    >>> noise = PooledNoise(ExactNoise(bits=0))
    >>> a = noise.laplace_units(Fraction(3), 5)
    >>> b = PooledNoise(ExactNoise(bits=0)).laplace_units(Fraction(3), 5)
    >>> bool((a == b).all()), a.dtype
    (True, dtype('int64'))
    """

    def __init__(self, sampler: ExactNoise, *, block: int = 1 << 14) -> None:
        if not isinstance(sampler, ExactNoise):
            raise TypeError(f"sampler must be an ExactNoise, got {sampler!r}.")
        self.sampler = sampler
        self.block = int(block)
        self._pools: dict[Fraction, np.ndarray] = {}
        self._gaussian_pools: dict[Fraction, np.ndarray] = {}
        self._pid = os.getpid()

    @property
    def bits(self):
        """The bit source of the wrapped sampler."""
        return self.sampler.bits

    def laplace_units(self, scale: Fraction, size: Size) -> np.ndarray:
        """Discrete Laplace draws of rational ``scale`` in grid units, int64 (see ExactNoise)."""
        return self._pooled("laplace", Fraction(scale), size)

    def gaussian_units(self, sigma2: Fraction, size: Size) -> np.ndarray:
        """Discrete Gaussian draws of variance parameter ``sigma2`` in grid units, int64 (see ExactNoise), from
        pools of their own."""
        return self._pooled("gaussian", Fraction(sigma2), size)

    def _pooled(self, law: str, key: Fraction, size: Size) -> np.ndarray:
        """``size`` draws of ``law`` (``"laplace"`` or ``"gaussian"``) of parameter ``key``, from its pool."""
        draw = getattr(self.sampler, f"{law}_units")
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        n = math.prod(shape)
        if n >= self.block:
            return draw(key, shape)
        if os.getpid() != self._pid:
            self._pools, self._gaussian_pools, self._pid = {}, {}, os.getpid()
        pools = self._pools if law == "laplace" else self._gaussian_pools
        pool = pools.pop(key, np.empty(0, dtype=np.int64))
        if pool.size < n:
            refill = min(self.block, max(8 * n, 1024))
            pool = np.concatenate((pool, draw(key, refill)))
        pools[key] = pool[n:]  # now the most recent
        if len(pools) > 8:
            del pools[next(iter(pools))]
        return pool[:n].reshape(shape)

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        """Not available: exact noise lives on a grid (see ExactNoise.laplace)."""
        return self.sampler.laplace(scale, size)


    def __repr__(self) -> str:
        return f"PooledNoise({self.sampler!r})"


_LAPLACE = "exact discrete Laplace in grid units"


def _describe_bits(bits: object) -> str:
    if isinstance(bits, SystemBits):
        return "OS CSPRNG bits (os.urandom)"
    if isinstance(bits, KeyedBits):
        return "keyed ChaCha20 bits (recomputable from the secret key)"
    if isinstance(bits, SeededBits):
        return f"seeded PCG64 bits (seed {bits.seed}: replayable, NOT secret)"
    if isinstance(bits, GeneratorBits):
        return "bits of a numpy Generator (NOT secret)"
    return f"bits of {bits!r}"


def describe_noise(noise: object, law: str = "discrete Laplace") -> str:
    """One line naming a sampler and its randomness source, for a privacy statement (``law``: the noise's).

    >>> describe_noise(ExactNoise(bits=3))
    'exact discrete Laplace in grid units, seeded PCG64 bits (seed 3: replayable, NOT secret)'
    >>> describe_noise(ZeroNoise())
    'NO noise (ZeroNoise: tests only, NOT private)'
    """
    if isinstance(noise, PooledNoise):
        noise = noise.sampler
    if isinstance(noise, ExactNoise):
        return f"{_LAPLACE.replace('discrete Laplace', law)}, {_describe_bits(noise.bits)}"
    if isinstance(noise, FloatNoise):
        return "FLOAT Laplace from numpy (studies only: NOT for publication)"
    if isinstance(noise, ZeroNoise):
        return "NO noise (ZeroNoise: tests only, NOT private)"
    return f"noise from {noise!r}"


# -- snapshots: a source as plain data and back ----------------------------------------------------

#: numpy bit generators whose state a snapshot can carry (their ``state`` dict is plain data).
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _generator_state(generator: np.random.Generator) -> dict:
    state = generator.bit_generator.state
    if state.get("bit_generator") not in _BIT_GENERATORS:
        raise TypeError(f"cannot snapshot a numpy Generator on {state.get('bit_generator')!r}.")
    return state


def _generator_from_state(state: dict) -> np.random.Generator:
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"a noise snapshot names an unknown bit generator {name!r}.")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def bits_state(bits: object) -> dict:
    """A bit source as plain data, from which :func:`bits_from_state` continues its stream exactly.

    :class:`~dpstream.noise.bits.SystemBits` has no state (a restored one reads the OS CSPRNG
    afresh); a seeded or generator source carries its generator's state; a
    :class:`~dpstream.noise.bits.KeyedBits` carries its key, identity and the words it gave
    (SECRET: the key).

    >>> bits = SeededBits(seed=4); _ = bits.words(3)
    >>> bool((bits_from_state(bits_state(bits)).words(2) == bits.words(2)).all())
    True
    """
    if isinstance(bits, SystemBits):
        return {"kind": "system"}
    if isinstance(bits, SeededBits):
        return {"kind": "seeded", "seed": bits.seed, "generator": _generator_state(bits.generator)}
    if isinstance(bits, GeneratorBits):
        return {"kind": "generator", "generator": _generator_state(bits.generator)}
    if isinstance(bits, KeyedBits):
        return {"kind": "keyed", "key": bits.key_bytes, "identity": bits.identity, "words": bits.words_given}
    raise TypeError(f"cannot snapshot the bit source {bits!r} (SystemBits, SeededBits, GeneratorBits and KeyedBits "
                    "can be).")


def bits_from_state(data: dict) -> object:
    """The bit source :func:`bits_state` described, at the point where it was taken."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "system":
        return SystemBits(block_words=1 << 14)
    if kind == "seeded":
        bits = SeededBits(seed=data["seed"])
        bits.generator = _generator_from_state(data["generator"])
        return bits
    if kind == "generator":
        return GeneratorBits(generator=_generator_from_state(data["generator"]))
    if kind == "keyed":
        bits = KeyedBits(key=data["key"], identity=data["identity"])
        bits.words(data["words"])  # the words already given, skipped
        return bits
    raise ValueError(f"a noise snapshot names an unknown bit source {kind!r}.")


def _sampler_state(sampler: object) -> dict:
    if isinstance(sampler, PooledNoise):
        # draws pooled from the OS CSPRNG are left out: two continuations of one snapshot must never share them
        secret = isinstance(sampler.bits, SystemBits)
        pools, gaussian = ([] if secret else [(scale.numerator, scale.denominator, pool.copy())
                                               for scale, pool in kept.items()]
                           for kept in (sampler._pools, sampler._gaussian_pools))
        return {"kind": "pooled", "bits": bits_state(sampler.bits), "block": sampler.block, "pools": pools,
                **({"gaussian_pools": gaussian} if gaussian else {})}  # only when used: older snapshots unchanged
    if type(sampler) is ExactNoise:
        return {"kind": "exact", "bits": bits_state(sampler.bits)}
    if type(sampler) is FloatNoise:
        return {"kind": "float", "generator": _generator_state(sampler.rng)}
    if type(sampler) is ZeroNoise:
        return {"kind": "zero"}
    raise TypeError(f"cannot snapshot the noise sampler {sampler!r}.")


def _sampler_from_state(data: dict) -> NoiseSampler:
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "pooled":
        pooled = PooledNoise(ExactNoise(bits=bits_from_state(data["bits"])), block=data["block"])
        pooled._pools, pooled._gaussian_pools = ({Fraction(numerator, denominator): np.asarray(pool, dtype=np.int64)
                                                  for numerator, denominator, pool in data.get(name, [])}
                                                 for name in ("pools", "gaussian_pools"))
        return pooled
    if kind == "exact":
        return ExactNoise(bits=bits_from_state(data["bits"]))
    if kind == "float":
        return FloatNoise(rng=_generator_from_state(data["generator"]))
    if kind == "zero":
        return ZeroNoise()
    raise ValueError(f"a noise snapshot names an unknown sampler {kind!r}.")


class NoiseSource:
    """The noise of a release, from ``seed``, ``noise`` or ``key`` (see the module docstring).

    Parameters
    ----------
    seed : None, int, numpy Generator or bit source
        Bits for exact samplers (None: the OS CSPRNG).
    noise : NoiseSampler, optional
        A sampler used as it is (``ZeroNoise``, ``FloatNoise`` for studies, ``ExactNoise``).
    key : bytes, optional
        A secret key (at least 16 bytes): one keyed stream per part of the release.
    identity : tuple
        Prefix of the identities of the parts, e.g. ``("tops",)``.

    Examples
    --------
    >>> key = bytes(range(32))
    >>> a = NoiseSource(key=key, identity=("tops",)).sampler(3).laplace_units(Fraction(5), 4)
    >>> b = NoiseSource(key=key, identity=("tops",)).sampler(3).laplace_units(Fraction(5), 4)
    >>> bool((a == b).all()), NoiseSource(seed=1).exact, NoiseSource(noise=FloatNoise(rng=1)).exact
    (True, True, False)
    """

    def __init__(
        self,
        *,
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
        key: bytes | None = None,
        identity: tuple = (),
    ) -> None:
        self.identity = identity
        self._key: bytes | None = None
        self._shared: NoiseSampler | None = None
        given = [name for name, value in (("seed", seed), ("noise", noise), ("key", key)) if value is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of seed, noise and key, got {' and '.join(given)}.")
        if not isinstance(identity, tuple):
            raise TypeError(f"identity must be a tuple, got {identity!r}.")
        if key is not None:
            KeyedBits(key=key, identity=identity)  # checks the key (type, length) now
            self._key = bytes(key)
        elif noise is not None:
            if not isinstance(noise, NoiseSampler):
                raise TypeError(
                    f"noise must be a NoiseSampler (ExactNoise, FloatNoise, ZeroNoise) or None, got {noise!r}."
                )
            self._shared = PooledNoise(noise) if type(noise) is ExactNoise else noise
        else:  # unseeded: the OS CSPRNG, read 128 KiB at a time (a release draws a few thousand values)
            if seed is None:
                try:
                    bits = SystemBits(block_words=1 << 14)
                except RuntimeError as error:  # an OS error: the command line reports it in one line
                    raise OSError(f"no secure source of randomness: {error}") from error
            else:
                bits = make_bits(seed)
            self._shared = PooledNoise(ExactNoise(bits=bits))

    @property
    def keyed(self) -> bool:
        """True when every part draws from its own keyed stream."""
        return self._key is not None

    @property
    def exact(self) -> bool:
        """False only for the studies' float path (an explicit ``FloatNoise``)."""
        return not isinstance(self._shared, FloatNoise)

    @property
    def shared(self) -> NoiseSampler | None:
        """The one sampler of an unkeyed source (None for a keyed one)."""
        return self._shared

    def sampler(self, *parts: object) -> NoiseSampler:
        """The sampler of the part ``identity + parts`` (the shared one unless keyed)."""
        if self._key is not None:
            return ExactNoise(bits=KeyedBits(key=self._key, identity=self.identity + parts))
        assert self._shared is not None
        return self._shared

    def child(self, *parts: object) -> NoiseSource:
        """The same source for a sub-mechanism whose identities start with ``identity + parts``."""
        other = object.__new__(NoiseSource)
        other.identity, other._key, other._shared = self.identity + parts, self._key, self._shared
        return other

    def describe(self, law: str = "discrete Laplace") -> str:
        """The sampler (of noise ``law``) and its randomness source, in words (for
        :class:`~dpstream.privacy.PrivacyGuarantee`)."""
        if self._key is not None:
            return (f"{_LAPLACE.replace('discrete Laplace', law)}, keyed ChaCha20 bits per part (recomputable from "
                    "the secret key)")
        return describe_noise(self._shared, law)

    @property
    def state(self) -> dict:
        """The source as plain data (SECRET: the key, or the bits' state and pooled draws).

        A keyed source is its key and identity; an unkeyed one the state of its one sampler,
        so that :meth:`from_state` continues its draws exactly (the OS CSPRNG has no state: a
        restored one reads fresh bits, which is all a secure source can promise).
        """
        if self._key is not None:
            return {"kind": "keyed", "key": self._key, "identity": self.identity}
        return {"kind": "shared", "sampler": _sampler_state(self._shared), "identity": self.identity}

    @classmethod
    def from_state(cls, state: dict) -> NoiseSource:
        """The source :attr:`state` described, continuing where it was taken."""
        kind = state.get("kind") if isinstance(state, dict) else None
        if kind == "keyed":
            return cls(key=state["key"], identity=tuple(state["identity"]))
        if kind != "shared":
            raise ValueError(f"a noise snapshot must be keyed or shared, got {kind!r}.")
        other = object.__new__(cls)
        other.identity, other._key, other._shared = tuple(state["identity"]), None, _sampler_from_state(
            state["sampler"])
        return other

    def __repr__(self) -> str:
        inner = "key=<secret>" if self._key is not None else f"noise={self._shared!r}"
        return f"NoiseSource({inner}, identity={self.identity!r})"


def make_source(
    *, seed: BitsSeed = None, noise: NoiseSampler | NoiseSource | None = None, key: bytes | None = None,
    identity: tuple = (),
) -> NoiseSource:
    """A :class:`NoiseSource` from a mechanism's ``seed``, ``noise`` and ``key`` arguments.

    ``noise`` may already be a source (a mechanism sharing its source with a part): it is used
    as it is, and ``seed`` and ``key`` must then be None.

    >>> make_source(seed=0).exact, make_source(noise=ZeroNoise()).describe()
    (True, 'NO noise (ZeroNoise: tests only, NOT private)')
    """
    if isinstance(noise, NoiseSource):
        if seed is not None or key is not None:
            raise ValueError("give at most one of seed, noise and key, got a noise source and a seed or key.")
        return noise
    return NoiseSource(seed=seed, noise=noise, key=key, identity=identity)
