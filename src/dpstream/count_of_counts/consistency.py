"""Consistent hierarchical count-of-counts histograms (Kuo et al., Section 5, Algorithm 1).

:class:`TopDownCountOfCounts` spends ``epsilon / (L + 1)`` on every level (a Section 4 method
per region), then makes the estimates consistent top-down: it matches the parent's groups to
its children's groups (Algorithm 2, :func:`match_level`), merges the two size estimates of
every matched group by inverse-variance weighting (Eq. 5-6) and rounds, and finally rebuilds
every parent as the sum of its children (back-substitution; these steps live in
:mod:`dpstream.count_of_counts.matching`).  :class:`BottomUpCountOfCounts`
is the baseline of Section 6.2.2: all budget on the leaves, sums upward.

Every output satisfies the four desiderata of Problem 1 exactly: integral, non-negative,
``G`` groups per region, and children summing to their parent.

Privacy
-------
Both are epsilon-DP at the entity level (Theorem 5.6): neighbouring databases share the public
Hierarchy and Groups tables and differ in one Entities row, so one group's size changes by
one.  Top-down: sequential composition over the ``L + 1`` levels (``epsilon / (L + 1)`` each),
parallel composition over the disjoint regions of a level.  Bottom-up: ``epsilon`` on the leaves,
parallel composition.  Matching, merging, rounding and summing are post-processing.  If ``K``
is estimated from the data (:func:`~dpstream.count_of_counts.estimators.estimate_max_size`), its
budget adds to ``epsilon`` by sequential composition.

The noise is exact discrete Laplace (:class:`~dpstream.noise.sampler.ExactNoise`, random bits
from the operating system's CSPRNG unless seeded) at the scale ``sensitivity / budget`` rounded
up to a multiple of ``2^-20`` (:func:`~dpstream.noise.discrete_laplace_law.discrete_laplace_scale`), so each
part spends at most its share, exactly.  A study may pass ``noise=FloatNoise(rng)`` for speed;
that path is not exact and not for publication.

The guarantee is that of one release.  Every release of a mechanism spends noise of its own
(:meth:`TopDownCountOfCounts.take_noise`): a new key, or the next one of a seed's bits; a key
given by the caller serves one release, and a second is refused.  Two releases of the same data
cost twice the budget (sequential composition); two under one key would cost everything, since
the same noise on two datasets reveals their difference exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from dpstream._checks import check_choice, check_epsilon, check_positive_int
from dpstream._deprecation import renamed_keyword
from dpstream._params import Params
from dpstream._progress import Progress, notify, shifted
from dpstream.count_of_counts.data import CountOfCountsData, RegionTree
from dpstream.count_of_counts.estimators import (
    ISOTONIC,
    METHODS,
    LevelEstimate,
    dense_memory,
    estimate_level,
    estimate_max_size,
    format_bytes,
    noise_scale,
)
from dpstream.count_of_counts.histograms import LevelHistograms
from dpstream.count_of_counts.matching import (
    MERGES,
    back_substitute,
    consistent_children,
    estimate_groups,
    groups_to_histograms,
    match_groups,
    match_level,
    merge_estimates,
    top_down,
)
from dpstream.noise.bits import BitSource, BitsSeed, KeyedBits, make_bits
from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler
from dpstream.noise.source import NoiseSource, PooledNoise
from dpstream.privacy import ENTITY_ROW, Composition, EpsilonDelta, Part, PrivacyGuarantee

__all__ = [
    "IDENTITY",
    "MERGES",
    "BottomUpCountOfCounts",
    "CountOfCountsRelease",
    "TopDownCountOfCounts",
    "consistent_children",
    "estimate_groups",
    "groups_to_histograms",
    "release_source",
    "match_groups",
    "match_level",
    "merge_estimates",
]

#: Prefix of the identities of a release's keyed noise: region ``r`` of level ``l`` draws all its cells
#: from ``KeyedBits(key, IDENTITY + (l, r))``, the estimate of ``K`` from ``IDENTITY + ("max-size",)``.
IDENTITY = ("count-of-counts",)


@dataclass(frozen=True, kw_only=True)
class CountOfCountsRelease:
    """Released histograms of every level (``levels[l]`` for level ``l``) of ``tree``.

    ``max_size`` is the public bound ``K`` the release used (given, or estimated with its own
    budget), or None when no method needed one: size ``K`` then means "``K`` or more".
    """

    tree: RegionTree
    levels: tuple[LevelHistograms, ...]
    max_size: int | None = None

    def rows(self) -> list[tuple[str, int, int, int]]:
        """``(region, level, size, count)`` for every non-zero count, root first."""
        out = []
        for level, hist in enumerate(self.levels):
            names = self.tree.names[level][hist.node]
            out.extend(zip(names.tolist(), [level] * hist.node.size, hist.size.tolist(), hist.count.tolist()))
        return out


# ---------------------------------------------------------------------------- mechanisms


def release_source(
    *, seed: BitsSeed = None, noise: NoiseSampler | None = None, key: bytes | None = None
) -> NoiseSource:
    """The noise of one release: keyed per region unless a sampler is handed in.

    ``key`` (at least 16 secret bytes) keys the noise of every region (:data:`IDENTITY`); without
    it the key is 32 bytes from the bits of ``seed``: None (default) reads the operating
    system's CSPRNG, so every call makes a new secret key; an int derives the key from a
    replayable PCG64 (tests: NOT secret), the same key at every call.  Either way a region's noise
    is a function of the key and the region alone, whatever engine or order computes it: a key
    must serve one release only (two releases under one key on different data would reveal
    their difference exactly).  ``noise`` (``ZeroNoise`` for tests, ``FloatNoise`` for studies)
    is used as it is, in one sequence.

    >>> a = release_source(seed=3).child(1).sampler(7).laplace_units(Fraction(2), 3)
    >>> b = release_source(seed=3).child(1).sampler(7).laplace_units(Fraction(2), 3)
    >>> bool((a == b).all()), release_source(seed=3).keyed, release_source(noise=ExactNoise(bits=1)).keyed
    (True, True, False)
    """
    if noise is not None:
        given = [name for name, value in (("seed", seed), ("key", key)) if value is not None]
        if given:
            raise ValueError(f"give seed, key or noise, not both, got noise={noise!r} and a {given[0]}.")
        if not isinstance(noise, NoiseSampler):
            raise TypeError(f"noise must be a NoiseSampler (ExactNoise, FloatNoise, ZeroNoise), got {noise!r}.")
        return NoiseSource(noise=noise, identity=IDENTITY)
    if key is None:
        key = KeyedBits.new_key() if seed is None else _derived_key(make_bits(seed))
    elif seed is not None:
        raise ValueError("give seed or key, not both, got both.")
    return NoiseSource(key=key, identity=IDENTITY)


def _derived_key(bits: BitSource) -> bytes:
    """A 32-byte key from the next four words of ``bits`` (a seeded release's key)."""
    return bits.words(4).astype("<u8").tobytes()


def _noise_name(noise: NoiseSource) -> str:
    """How a release draws its discrete Laplace noise, for the privacy statement."""
    if noise.keyed:
        return "exact discrete Laplace noise (keyed ChaCha20 bits per region)"
    shared = noise.shared.sampler if isinstance(noise.shared, PooledNoise) else noise.shared
    if isinstance(shared, ExactNoise):
        return "exact discrete Laplace noise"
    if isinstance(shared, FloatNoise):
        return "double-geometric noise from numpy's float sampler (not exact: not for publication)"
    return f"noise from {type(shared).__name__}"


class _Mechanism(Params):
    """Shared parameters: the budget, the public ``K`` (or the budget to estimate it), the noise of each release.

    Every release spends noise of its own (:meth:`take_noise`): unseeded, a new key from the
    operating system's CSPRNG; seeded, the next key from the seed's bits (replayable); with a
    given ``key``, that key once -- a second release is refused, since it would draw the same
    noise again; with a ``noise`` sampler, the sampler's next draws.
    """

    def __init__(
        self,
        *,
        epsilon: float,
        max_size: int | None,
        max_size_epsilon: float | None,
        isotonic: str | None,
        seed: BitsSeed,
        noise: NoiseSampler | None,
        key: bytes | None,
        memory_limit: int | None,
    ):
        self.epsilon = check_epsilon(epsilon)
        self.max_size = None if max_size is None else check_positive_int(max_size, "max_size")
        self.max_size_epsilon = (
            None if max_size_epsilon is None else check_epsilon(max_size_epsilon, "max_size_epsilon")
        )
        self.isotonic = None if isotonic is None else check_choice(isotonic, "isotonic", ISOTONIC)
        self.memory_limit = None if memory_limit is None else check_positive_int(memory_limit, "memory_limit")
        #: The bits every key of a seeded mechanism is derived from, one key per release.
        self._bits = make_bits(seed) if seed is not None and noise is None and key is None else None
        self._given_key = key is not None
        self._next: NoiseSource | None = (
            release_source(seed=seed, noise=noise, key=key) if self._bits is None
            else release_source(key=_derived_key(self._bits))
        )
        self._kind = self._next  # how every release draws its noise, for the privacy statement

    @property
    def noise(self) -> NoiseSource:
        """The noise source the next release will spend (:meth:`take_noise`); reading it spends nothing.

        With a given ``key`` whose release was made, reading it raises the ``ValueError`` of
        :meth:`take_noise`.
        """
        if self._next is None:
            self._next = self._new_source()
        return self._next

    def take_noise(self) -> NoiseSource:
        """The noise of one release, spent: the next release draws other noise, or is refused.

        Every engine calls it once per release (:meth:`release`, :meth:`estimates` and the Spark
        engine), before it draws: unseeded, the next release gets a new key from the CSPRNG;
        seeded, the next key from the seed's bits (so a seeded object's releases replay, each with
        its own noise); a ``noise`` sampler continues its sequence.  A given ``key`` serves one
        release: afterwards this raises a ``ValueError`` saying why.
        """
        source = self.noise
        self._next = None
        return source

    def _new_source(self) -> NoiseSource:
        """The noise of a release after the first: fresh, or refused for a given key."""
        if self._given_key:
            raise ValueError(
                f"this {type(self).__name__} has made its release with the key it was given; a second release under "
                "the same key would draw the same noise, and two releases on different data would then reveal their "
                "difference exactly. Give every release its own key (a new mechanism with a new key), or no key for "
                "a fresh one."
            )
        if self._bits is not None:
            return release_source(key=_derived_key(self._bits))
        return release_source() if self._kind.keyed else self._kind

    def _needs_max_size(self) -> bool:
        raise NotImplementedError

    def _level_methods(self, levels: int) -> tuple[str, ...]:
        """The method of every estimated level (see :meth:`plan`)."""
        raise NotImplementedError

    def plan(
        self, tree: RegionTree, largest_group: int, noise: NoiseSource | None = None
    ) -> tuple[tuple[str, ...], int | None]:
        """What a release of a dataset on ``tree`` does, for any engine: the method of every estimated
        level (top-down: every level, root first; bottom-up: the leaves only) and the public ``K`` --
        the given one, or one estimated from ``largest_group`` (the size of the largest group, with
        ``max_size_epsilon`` and the keyed noise of the release, ``noise`` from :meth:`take_noise`;
        without it, an estimate spends noise of its own) when a method needs it, or None.  A ``K``
        whose dense rows exceed :attr:`memory_limit` is refused here, before anything is allocated.
        """
        methods = self._level_methods(tree.levels)
        max_size = self.max_size
        if max_size is None and self._needs_max_size():
            if self.max_size_epsilon is None:
                raise ValueError(
                    "methods hc and naive need max_size (K) or max_size_epsilon to estimate it, got neither."
                )
            source = self.take_noise() if noise is None else noise
            max_size = estimate_max_size(largest_group, self.max_size_epsilon, source.sampler("max-size"))
        levels = range(tree.levels) if len(methods) == tree.levels else [tree.levels - 1]
        dense = [tree.size(level) for level, method in zip(levels, methods) if method != "hg"]
        self._check_memory(max_size, max(dense, default=0))
        return methods, max_size

    def _check_memory(self, max_size: int | None, n_regions: int) -> None:
        """Refuse, before allocating, a ``K`` whose dense rows would exceed :attr:`memory_limit`."""
        if self.memory_limit is None or max_size is None or n_regions == 0:
            return
        need = dense_memory(n_regions, max_size)
        if need > self.memory_limit:
            what = "the given" if self.max_size is not None else "the estimated"
            raise ValueError(
                f"{what} K = {max_size:,} needs about {format_bytes(need)} of memory (dense rows of K + 1 cells), "
                f"more than the memory limit of {format_bytes(self.memory_limit)}; nothing was released."
            )

    def _with_k(self, histograms: str) -> PrivacyGuarantee:
        """The guarantee of the histograms (``epsilon``, said ``histograms``), plus the estimate of ``K`` when
        the release makes one (sequential composition)."""
        release: Part | Composition = Part(what="histograms", budget=EpsilonDelta(self.epsilon), text=histograms)
        if self.max_size is None and self._needs_max_size() and self.max_size_epsilon is not None:
            k = EpsilonDelta(self.max_size_epsilon)
            estimate_k = Part(what="noisy largest group size K (noise scale 1/epsilon rounded up)", budget=k,
                              text=f"{k.epsilon:g} to estimate K")
            release = Composition(kind="sequential", parts=(release, estimate_k),
                                  layout="{} plus {} (sequential composition)")
        return PrivacyGuarantee.of(release, neighbours=ENTITY_ROW)


def _scale_text(scale: Fraction) -> str:
    """A rounded scale as an exact decimal (a multiple of 2^-20 has at most 20 decimals).

    >>> _scale_text(Fraction(3)), _scale_text(Fraction(3, 2**20))
    ('3', '0.00000286102294921875')
    """
    whole, rest = divmod(scale.numerator, scale.denominator)
    if not rest:
        return str(whole)
    k = scale.denominator.bit_length() - 1  # the denominator is 2^k: k decimals are exact
    decimals = str(rest * 10**k // scale.denominator).rjust(k, "0").rstrip("0")
    return f"{whole}.{decimals}"


def _levels_text(methods: Sequence[str], epsilon: Fraction) -> str:
    """The scale each method draws with at per-level budget ``epsilon``.

    >>> _levels_text(["hg", "hc", "naive"], Fraction(1, 3))
    'hg 3, hc 3, naive 6'
    """
    return ", ".join(f"{method} {_scale_text(noise_scale(method, epsilon))}" for method in dict.fromkeys(methods))


class TopDownCountOfCounts(_Mechanism):
    """Algorithm 1: per-level estimates made consistent top-down.

    Parameters
    ----------
    epsilon : float
        Total budget of the histograms, ``epsilon / (L + 1)`` per level.
    method : str or sequence of str
        "hc" (default), "hg" or "naive"; one for all levels or one per level, root first.
    max_size : int, optional
        Public bound ``K`` on group sizes (needed by "hc" and "naive"; "hg" caps at it too).
    max_size_epsilon : float, optional
        Without ``max_size``: the extra budget to estimate ``K`` (footnote of Section 4.3) when a
        method needs it.  The estimated ``K`` then applies to every level.
    isotonic : {"l1", "l2"}, optional
        Isotonic regression of the Section 4 methods (default: "l1" for hc, "l2" for hg).
    merge : {"weighted", "average"}
        Eq. 5-6 or the plain average (Section 5.3).
    seed : None, int, numpy Generator or bit source
        Where the secret key of each release's noise comes from (:meth:`take_noise`): None
        (default) reads a new key from the operating system's CSPRNG for every release; an int
        derives the first release's key from a seeded PCG64 and every later release's from its
        next bits, so the releases replay and none repeats another's noise (tests; never publish a
        seeded release).  Every region draws its noise from
        ``KeyedBits(key, ("count-of-counts", level, region))``, so the local and Spark engines
        release the same tables for the same key.
    key : bytes, optional
        Instead of ``seed``: the secret key of one release (at least 16 bytes).  A second release
        of the object is refused: it would draw the same noise again.
    noise : NoiseSampler, optional
        Instead of ``seed``: the sampler itself, drawn in one sequence over the releases, e.g.
        ``FloatNoise(rng=...)`` for a fast study (not exact, not for publication) or
        ``ZeroNoise()`` for tests.
    memory_limit : int, optional
        Bytes the dense rows of the hc and naive methods may take (:func:`dense_memory`); a
        ``K`` that needs more is refused before anything is allocated or drawn.

    Privacy
    -------
    epsilon-DP at the entity level; sequential over levels, parallel within a level.  Level
    ``l`` draws exact discrete Laplace noise of scale ``Delta_l / (epsilon / (L + 1))`` rounded
    up to a multiple of ``2^-20`` (``Delta_l`` = 1 for hc and hg, 2 for naive), so it spends
    ``Delta_l / scale <= epsilon / (L + 1)``, computed on the exact value of ``epsilon``: the
    levels spend at most ``epsilon`` in total.  Estimating ``K`` adds ``max_size_epsilon``.

    >>> data = CountOfCountsData.from_leaf_sizes([("US", "CA"), ("US", "OR")], {"CA": [1, 2, 2], "OR": [4]})
    >>> out = TopDownCountOfCounts(epsilon=1.0, max_size=10, seed=0).release(data)
    >>> [int(hist.count.sum()) for hist in out.levels], out.max_size
    ([4, 4], 10)
    """

    def __init__(
        self,
        *,
        epsilon: float,
        method: str | Sequence[str] = "hc",
        max_size: int | None = None,
        max_size_epsilon: float | None = None,
        isotonic: str | None = None,
        merge: str = "weighted",
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
        key: bytes | None = None,
        memory_limit: int | None = None,
        methods: str | Sequence[str] | None = None,  # deprecated name of ``method``
    ):
        method = renamed_keyword("TopDownCountOfCounts", "methods", "method", methods, method)
        super().__init__(
            epsilon=epsilon, max_size=max_size, max_size_epsilon=max_size_epsilon, isotonic=isotonic, seed=seed,
            noise=noise, key=key, memory_limit=memory_limit,
        )
        names = (method,) if isinstance(method, str) else tuple(method)
        if not names:
            raise ValueError("methods must name at least one method, got an empty sequence.")
        self.methods = tuple(check_choice(name, "method", METHODS) for name in names)
        self.merge = check_choice(merge, "merge", MERGES)

    def _needs_max_size(self) -> bool:
        return any(method != "hg" for method in self.methods)

    def _level_methods(self, levels: int) -> tuple[str, ...]:
        if len(self.methods) == 1:
            return self.methods * levels
        if len(self.methods) != levels:
            raise ValueError(f"methods needs one entry or one per level ({levels}), got {list(self.methods)}.")
        return self.methods

    def _estimates(
        self, data: CountOfCountsData, progress: Progress | None
    ) -> tuple[list[LevelEstimate], int | None]:
        levels = data.tree.levels
        noise = self.take_noise()
        methods, max_size = self.plan(data.tree, int(data.size.max(initial=0)), noise)
        per_level = Fraction(self.epsilon) / levels  # exact: the levels' scales are rounded up from it
        regions = [data.tree.size(level) for level in range(levels)]
        total = sum(regions)
        notify(progress, 0, total)
        out = []
        for level, method in enumerate(methods):
            out.append(
                estimate_level(
                    data.truth(level),
                    method=method,
                    epsilon=per_level,
                    noise=noise.child(level),
                    max_size=max_size,
                    isotonic=self.isotonic,
                    progress=shifted(progress, sum(regions[:level]), total),
                )
            )
        return out, max_size

    def estimates(self, data: CountOfCountsData, *, progress: Progress | None = None) -> list[LevelEstimate]:
        """Lines 1-5 of Algorithm 1: the independent noisy estimates of every level.

        ``progress`` is called with the regions done out of the regions of all levels (the
        protocol of :mod:`dpstream._progress`).
        """
        return self._estimates(data, progress)[0]

    def release(self, data: CountOfCountsData, *, progress: Progress | None = None) -> CountOfCountsRelease:
        """Consistent histograms of every region of every level (``progress`` as for :meth:`estimates`)."""
        estimates, max_size = self._estimates(data, progress)
        return CountOfCountsRelease(
            tree=data.tree, levels=top_down(data.tree, estimates, self.merge), max_size=max_size
        )

    def privacy(self, levels: int | None = None) -> PrivacyGuarantee:
        """What a release spends (``levels``: ``L + 1`` of the hierarchy, for the split and the scales)."""
        if levels:
            per_level = Fraction(self.epsilon) / levels
            split = (
                f"epsilon/(L+1) = {self.epsilon / levels:g} per level, {_noise_name(self._kind)} of scale "
                f"sensitivity / (epsilon/(L+1)) rounded up ({_levels_text(self._level_methods(levels), per_level)})"
            )
        else:
            split = (
                f"epsilon/(L+1) per level, {_noise_name(self._kind)} of scale sensitivity / (epsilon/(L+1)) "
                "rounded up"
            )
        return self._with_k(f"{split}, sequential over levels, parallel over the regions of a level")


class BottomUpCountOfCounts(_Mechanism):
    """The bottom-up baseline (Section 6.2.2): all budget on the leaves, parents as sums.

    Parameters
    ----------
    epsilon : float
        The budget, all spent on the leaves.
    method : {"hc", "hg", "naive"}
        The Section 4 method of the leaves (default "hc").
    max_size, max_size_epsilon, isotonic, seed, key, noise, memory_limit
        As for :class:`TopDownCountOfCounts`.

    Privacy
    -------
    epsilon-DP at the entity level; parallel composition over the leaves.  The leaves draw exact
    discrete Laplace noise of scale ``Delta / epsilon`` rounded up to a multiple of ``2^-20``
    (``Delta`` = 1 for hc and hg, 2 for naive), so they spend ``Delta / scale <= epsilon``; the
    parents are sums of the leaves (post-processing).  Estimating ``K`` adds ``max_size_epsilon``.

    >>> data = CountOfCountsData.from_leaf_sizes([("US", "CA"), ("US", "OR")], {"CA": [1, 2, 2], "OR": [4]})
    >>> out = BottomUpCountOfCounts(epsilon=1.0, max_size=10, seed=0).release(data)
    >>> [int(hist.count.sum()) for hist in out.levels]
    [4, 4]
    """

    def __init__(
        self,
        *,
        epsilon: float,
        method: str = "hc",
        max_size: int | None = None,
        max_size_epsilon: float | None = None,
        isotonic: str | None = None,
        seed: BitsSeed = None,
        noise: NoiseSampler | None = None,
        key: bytes | None = None,
        memory_limit: int | None = None,
    ):
        super().__init__(
            epsilon=epsilon, max_size=max_size, max_size_epsilon=max_size_epsilon, isotonic=isotonic, seed=seed,
            noise=noise, key=key, memory_limit=memory_limit,
        )
        self.method = check_choice(method, "method", METHODS)

    def _needs_max_size(self) -> bool:
        return self.method != "hg"

    def _level_methods(self, levels: int) -> tuple[str, ...]:
        return (self.method,)

    def release(self, data: CountOfCountsData, *, progress: Progress | None = None) -> CountOfCountsRelease:
        """Leaf estimates with the whole budget, summed up the tree.

        ``progress`` is called with the leaf regions done out of all leaf regions (the protocol
        of :mod:`dpstream._progress`).
        """
        leaf = data.tree.levels - 1
        noise = self.take_noise()
        _, max_size = self.plan(data.tree, int(data.size.max(initial=0)), noise)
        estimate = estimate_level(
            data.truth(leaf),
            method=self.method,
            epsilon=self.epsilon,
            noise=noise.child(leaf),
            max_size=max_size,
            isotonic=self.isotonic,
            progress=progress,
        )
        return CountOfCountsRelease(
            tree=data.tree, levels=back_substitute(data.tree, estimate.histograms), max_size=max_size
        )

    def privacy(self, levels: int | None = None) -> PrivacyGuarantee:
        """What a release spends (``levels`` is accepted for symmetry with the top-down release)."""
        scale = _scale_text(noise_scale(self.method, self.epsilon))
        return self._with_k(
            f"all of epsilon on the leaves ({self.method}, {_noise_name(self._kind)} of scale "
            f"sensitivity / epsilon rounded up = {scale}), parallel over the leaves; the upper levels are sums of the "
            "leaves"
        )
