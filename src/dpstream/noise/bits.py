"""Sources of uniform random bits for the exact samplers of :mod:`dpstream.noise`.

A bit source has one method, ``words(n)``, that returns ``n`` independent uniform 64-bit words
as a ``numpy.uint64`` array (possibly read-only).  Consecutive calls continue one stream: the
words of ``words(3)`` followed by ``words(5)`` are those of one ``words(8)``.

* :class:`SystemBits` reads the operating system's CSPRNG (``os.urandom``) in large blocks.  It
  is what :func:`make_bits` gives for ``seed=None``, and the only choice for a real release.
* :class:`SeededBits` replays numpy's PCG64 from an integer seed, for tests and experiments.
* :class:`GeneratorBits` draws from a ``numpy.random.Generator`` handed in (studies).
* :class:`KeyedBits` is a ChaCha20 keystream keyed by a secret key and a public *identity*
  (say ``("stream-7", 42)``): the same key and identity always give the same words, so noise
  can be recomputed from the key instead of stored, and different identities give independent
  streams.

Privacy
-------
Only :class:`SystemBits` and :class:`KeyedBits` (with a secret key of at least 128 random
bits) are cryptographically secure.  Anyone who knows a seed can regenerate a seeded source's
noise and subtract it; anyone who knows a :class:`KeyedBits` key can do the same for every
identity.  Keep keys as secret as the data.
"""

from __future__ import annotations

import hashlib
import hmac
import numbers
import os
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "BitSource",
    "BitsSeed",
    "GeneratorBits",
    "KeyedBits",
    "SeededBits",
    "SystemBits",
    "encode_identity",
    "make_bits",
]

_WORD = np.dtype("<u8")  # words are read from bytes as little-endian on every platform


@runtime_checkable
class BitSource(Protocol):
    """Anything with ``words(n) -> ndarray[uint64]`` of ``n`` uniform, independent words."""

    def words(self, n: int) -> np.ndarray:  # pragma: no cover - protocol
        ...


#: What :func:`make_bits` accepts.
BitsSeed = int | np.random.Generator | BitSource | None


def _check_count(n: object) -> int:
    if not (isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0):
        raise ValueError(f"number of words must be an integer >= 0, got {n!r}.")
    return int(n)


class SystemBits:
    """Uniform words from the operating system's CSPRNG (``os.urandom``), read in blocks.

    Requests smaller than a block are served from a buffer of ``block_words`` words refilled by
    one ``os.urandom`` call; larger ones are read directly.  The buffer is dropped in a forked
    child process, so parent and child never share random words.  Not thread-safe: give each
    thread its own source.

    Parameters
    ----------
    block_words : int
        Size of the buffer, in 64-bit words (default 2^17, i.e. 1 MiB).

    Examples
    --------
    >>> w = SystemBits().words(4)
    >>> w.dtype, w.shape
    (dtype('uint64'), (4,))
    """

    def __init__(self, *, block_words: int = 1 << 17) -> None:
        if not (isinstance(block_words, numbers.Integral) and not isinstance(block_words, bool) and block_words >= 1):
            raise ValueError(f"block_words must be an integer >= 1, got {block_words!r}.")
        self._block = int(block_words)
        self._buffer = np.empty(0, dtype=np.uint64)
        self._position = 0
        self._pid = os.getpid()
        self._read(1)  # fail now, not at the first draw, when the source cannot be read

    @staticmethod
    def _read(n: int) -> np.ndarray:
        try:
            data = os.urandom(8 * n)
        except (NotImplementedError, OSError) as error:
            raise RuntimeError(f"the operating system's random source (os.urandom) cannot be read: {error}") from error
        return np.frombuffer(data, dtype=_WORD).astype(np.uint64, copy=False)

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform 64-bit words (a read-only array)."""
        n = _check_count(n)
        if os.getpid() != self._pid:  # forked: never reuse the parent's buffered words
            self._buffer, self._position, self._pid = np.empty(0, dtype=np.uint64), 0, os.getpid()
        left = self._buffer.size - self._position
        if n > left:
            if n >= self._block:
                return self._read(n)
            self._buffer, self._position = self._read(self._block), 0
        out = self._buffer[self._position : self._position + n]
        self._position += n
        return out

    def __repr__(self) -> str:
        return f"SystemBits(block_words={self._block})"


class GeneratorBits:
    """Uniform words from a ``numpy.random.Generator`` (shared, not copied).

    ``words(n)`` is ``generator.integers(0, 2**64, size=n, dtype=np.uint64)``; it advances the
    generator as any other draw does.  Not cryptographically secure: for studies.

    >>> rng = np.random.default_rng(3)
    >>> bool((GeneratorBits(generator=rng).words(2) == np.random.default_rng(3).integers(
    ...     0, 2**64, size=2, dtype=np.uint64)).all())
    True
    """

    def __init__(self, *, generator: np.random.Generator) -> None:
        if not isinstance(generator, np.random.Generator):
            raise TypeError(f"generator must be a numpy.random.Generator, got {generator!r}.")
        self.generator = generator

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform 64-bit words."""
        return self.generator.integers(0, 1 << 64, size=_check_count(n), dtype=np.uint64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(generator={self.generator!r})"


class SeededBits(GeneratorBits):
    """Replayable words from numpy's PCG64 seeded with ``seed`` (tests and experiments).

    Privacy
    -------
    Not private against anyone who knows the seed, and PCG64 is not a cryptographic generator.

    >>> bool((SeededBits(seed=5).words(3) == SeededBits(seed=5).words(3)).all())
    True
    """

    def __init__(self, *, seed: int) -> None:
        if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool)):
            raise TypeError(f"seed must be an integer, got {seed!r}.")
        if seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}.")
        self.seed = int(seed)
        super().__init__(generator=np.random.default_rng(self.seed))

    def __repr__(self) -> str:
        return f"SeededBits(seed={self.seed})"


# -- keyed, recomputable bits --------------------------------------------------------------------


def encode_identity(identity: object) -> bytes:
    """The unambiguous byte encoding of an identity that :class:`KeyedBits` authenticates.

    An identity is bytes, a str, an int, or a tuple of identities (nested freely).  Each is
    encoded as a one-byte tag, the payload's length as 8 bytes big-endian, and the payload:

    * ``b`` + raw bytes (``bytes``, ``bytearray``, ``memoryview``);
    * ``s`` + UTF-8 of a str;
    * ``i`` + an int in big-endian two's complement on the fewest whole bytes
      (``(bit_length + 8) // 8``), so ``0 -> 00``, ``255 -> 00 ff``, ``-1 -> ff``;
    * ``t`` + the concatenated encodings of a tuple's items.

    Every encoding is prefix-free, so two different identities never share one: ``("ab", "c")``,
    ``("a", "bc")``, ``"abc"``, ``b"abc"`` and ``(("abc",),)`` all differ.  Booleans, floats and
    other types are refused (``True`` would otherwise collide with ``1``).

    >>> encode_identity(1) == b"i" + (1).to_bytes(8, "big") + b"\x01"
    True
    >>> a, empty = b"s" + (1).to_bytes(8, "big") + b"a", b"b" + bytes(8)  # "a" and b""
    >>> encode_identity(("a", b"")) == b"t" + (len(a) + len(empty)).to_bytes(8, "big") + a + empty
    True
    """
    if isinstance(identity, numbers.Integral) and not isinstance(identity, (bool, np.bool_)):
        identity = int(identity)  # numpy integers too
        tag, payload = b"i", identity.to_bytes((identity.bit_length() + 8) // 8, "big", signed=True)
    elif isinstance(identity, str):
        tag, payload = b"s", identity.encode("utf-8")
    elif isinstance(identity, tuple):
        tag, payload = b"t", b"".join(encode_identity(item) for item in identity)
    elif isinstance(identity, (bytes, bytearray, memoryview)):
        tag, payload = b"b", bytes(identity)
    else:  # booleans (True would collide with 1), floats, None, lists, ...
        raise TypeError(
            f"identity must be bytes, a str, an int or a tuple of these, got {type(identity).__name__} {identity!r}."
        )
    return tag + len(payload).to_bytes(8, "big") + payload


_DOMAIN = b"dpstream.noise.KeyedBits/v1\x00"
_MAX_KEYED_WORDS = 1 << 35  # ChaCha20's 32-bit block counter: 2^32 blocks of 64 bytes


class KeyedBits:
    """A recomputable CSPRNG: the ChaCha20 keystream of a key derived from a secret key and an identity.

    The stream's key is ``HMAC-SHA256(key, b"dpstream.noise.KeyedBits/v1\\x00" +
    encode_identity(identity))`` (see :func:`encode_identity`); the ChaCha20 nonce and block
    counter start at zero (each identity has its own key, so no key-nonce pair repeats).  Word
    ``i`` of the stream is bytes ``8 i .. 8 i + 7`` of the keystream read as a little-endian
    integer, so the same key and identity give the same words on every platform and run, and a
    release's noise can be recomputed from the key rather than stored.  Different identities
    (or keys) give independent streams as long as ChaCha20 and HMAC-SHA256 are secure.  One
    stream holds at most 2^35 words (256 GiB); asking for more raises ``OverflowError``.

    Parameters
    ----------
    key : bytes
        The secret: at least 16 bytes, 32 random bytes recommended (:meth:`new_key`).
    identity : bytes, str, int or tuple of these
        Public name of the stream, e.g. ``("counts", 3)``.

    Privacy
    -------
    The noise is as secret as the key: whoever holds it can recompute and subtract every
    identity's noise.  The identity need not be secret.  Never use one identity for two
    different releases: their noise would be the same.

    Examples
    --------
    >>> key = bytes(range(32))  # a real key comes from KeyedBits.new_key()
    >>> a = KeyedBits(key=key, identity=("stream", 1))
    >>> b = a.for_identity(("stream", 1))
    >>> bool((a.words(4) == b.words(4)).all())
    True
    >>> bool((a.for_identity(("stream", 2)).words(4) == b.words(4)).any())
    False
    """

    def __init__(self, *, key: bytes, identity: object) -> None:
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes, got {type(key).__name__}.")
        if len(key) < 16:
            raise ValueError(f"key must be at least 16 bytes (32 random bytes recommended), got {len(key)} bytes.")
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        self._key = bytes(key)
        self.identity = identity
        subkey = hmac.new(self._key, _DOMAIN + encode_identity(identity), hashlib.sha256).digest()
        self._cipher = Cipher(algorithms.ChaCha20(subkey, bytes(16)), mode=None).encryptor()
        self._produced = 0
        self._buffer = np.empty(0, dtype=np.uint64)
        self._position = 0

    @property
    def key_bytes(self) -> bytes:
        """The secret key (for a snapshot of the source; never print it)."""
        return self._key

    @property
    def words_given(self) -> int:
        """How many words :meth:`words` has returned so far."""
        return self._produced - (self._buffer.size - self._position)

    @staticmethod
    def new_key() -> bytes:
        """32 fresh bytes from the operating system's CSPRNG, to use as a key."""
        return os.urandom(32)

    def for_identity(self, identity: object) -> KeyedBits:
        """A new source with the same key and another identity (its stream starts at word 0)."""
        return KeyedBits(key=self._key, identity=identity)

    def _keystream(self, n: int) -> np.ndarray:
        if self._produced + n > _MAX_KEYED_WORDS:
            raise OverflowError(f"a KeyedBits stream holds at most 2^35 words, asked for {self._produced + n}.")
        self._produced += n
        data = self._cipher.update(bytes(8 * n))
        return np.frombuffer(data, dtype=_WORD).astype(np.uint64, copy=False)

    def words(self, n: int) -> np.ndarray:
        """The next ``n`` words of the identity's stream (a read-only array)."""
        n = _check_count(n)
        left = self._buffer.size - self._position
        if n <= left:
            out = self._buffer[self._position : self._position + n]
            self._position += n
            return out
        head = self._buffer[self._position :]
        rest = n - left
        if rest >= 4096:
            self._buffer, self._position = np.empty(0, dtype=np.uint64), 0
            tail = self._keystream(rest)
        else:
            self._buffer, self._position = self._keystream(4096), rest
            tail = self._buffer[:rest]
        return np.concatenate((head, tail)) if left else tail

    def __repr__(self) -> str:  # never shows the key
        return f"KeyedBits(key=<secret>, identity={self.identity!r})"


def make_bits(seed: BitsSeed = None) -> BitSource:
    """A bit source for ``seed``: None -> :class:`SystemBits`, an int -> :class:`SeededBits`,
    a ``numpy.random.Generator`` -> :class:`GeneratorBits`, a bit source -> itself.

    >>> type(make_bits()).__name__, type(make_bits(3)).__name__
    ('SystemBits', 'SeededBits')
    >>> make_bits(-1)
    Traceback (most recent call last):
    ValueError: seed must be an integer >= 0, got -1.
    """
    if seed is None:
        return SystemBits()
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return SeededBits(seed=int(seed))
    if isinstance(seed, np.random.Generator):
        return GeneratorBits(generator=seed)
    if isinstance(seed, BitSource):
        return seed
    raise TypeError(f"seed must be None, an integer >= 0, a numpy Generator or a bit source, got {seed!r}.")
