"""The registry of release mechanisms: the one table the CLI, the service, durable releases and the tests read.

Each :class:`Mechanism` entry says, under the mechanism's one name (``release --method NAME``, the
HTTP API's ``method``, the ledger's ``method``):

* ``cls`` -- the class it builds, and ``fixed`` -- the constructor keywords the entry sets itself
  (``pak-uncapped`` is PAK with ``capped=False``);
* ``kind`` -- the ``mechanism`` field of its snapshots (:mod:`dpstream.release.contract`), which
  is how a stored snapshot finds its class again (:func:`class_of_kind`);
* ``options`` -- the command's method-specific options it reads, each mapped to the constructor
  keyword it sets (the options every mechanism reads, :data:`COMMON_OPTIONS`, are passed as they
  are); an option of another mechanism is refused rather than silently ignored;
* ``noise`` -- how a ``seed`` or a durable release's secret ``key`` reaches the constructor;
* ``describe`` -- the line ``release`` says about what the mechanism chose;
* whether ``release --state`` continues it (``durable``), whether it runs per key
  (``per_key``) and whether the service offers it (``service``);
* ``audits`` -- the :mod:`dpstream.audit` experiments that check its privacy claim;
* ``command`` -- the command that runs it: ``release`` (its ``--method`` choices are these
  entries, :func:`release_methods`) or another (``aggregate``: :class:`~dpstream.release.aggregate.UnitAggregate`,
  rows of privacy units rather than one stream of values, so ``release`` does not offer it).

Adding a mechanism is its module, one :func:`register` call (here, for the built-in ones) and,
when it is new, its relation; ``tests/test_registry.py`` fails if a registered mechanism has no
audit experiment or no contract test.

Names stored by earlier versions keep being read: the binary tree's snapshots said
``"binary-tree"`` (:data:`dpstream.release.contract.STORED_KINDS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dpstream.noise.bits import KeyedBits
from dpstream.release.aggregate import AGGREGATE, UnitAggregate
from dpstream.release.banded import BANDED_ZCDP, BandedFactorization
from dpstream.release.binary_tree import BinaryTreeCounter, ZcdpBinaryTree
from dpstream.release.contract import BINARY_TREE, PAK_STATE, TOPL, TOPS, stored_kind
from dpstream.release.factorization import SQRT_ZCDP, SqrtFactorization
from dpstream.release.locations import LOCATIONS, LocationCounts
from dpstream.release.pak import PAK
from dpstream.release.topl import ToPL
from dpstream.release.tops import ToPS
from dpstream.release.tops_zcdp import ZcdpToPS

__all__ = [
    "COMMON_OPTIONS",
    "REGISTRY",
    "Mechanism",
    "class_of_kind",
    "mechanism",
    "register",
    "release_methods",
    "served",
    "specific_options",
    "unregister",
]

#: The options every mechanism reads, passed to its constructor under the same name.
COMMON_OPTIONS = ("epsilon", "upper_bound", "max_range", "clip")


def keyed_noise(seed: int | None, key: bytes | None) -> dict[str, Any]:
    """The constructor keywords of a mechanism with a ``key=`` mode: its ``seed``, or the durable release's key."""
    return {"seed": seed, "key": key}


#: The identity of the simulated clients' keyed bits of ``release --method topl --state``.
TOPL_IDENTITY = ("topl",)


def _topl_noise(seed: int | None, key: bytes | None) -> dict[str, Any]:
    # ToPL has no key= mode: with a key its clients' bits are one keyed stream, whose snapshot records how many
    # words were read, and a resumed run reads the same words again for the values after it
    return {"seed": seed if key is None else KeyedBits(key=key, identity=TOPL_IDENTITY)}


@dataclass(frozen=True)
class Mechanism:
    """One registered release mechanism (see the module docstring)."""

    #: The one name: ``release --method``, the API's ``method``, the ledger's ``method``.
    name: str
    #: The class (or any callable taking its keyword arguments) the entry builds.
    cls: Callable[..., Any]
    #: The ``mechanism`` field of its snapshots.
    kind: str
    #: What ``release`` says about the mechanism once it chose its threshold.
    describe: Callable[[Any], str]
    #: Method-specific options of ``release`` -> the constructor keyword each sets.
    options: Mapping[str, str] = field(default_factory=dict)
    #: Method-specific options set only when given (None: the constructor's default), recorded in a state only
    #: then (states made before they existed stay valid) -> the constructor keyword each sets.
    optional: Mapping[str, str] = field(default_factory=dict)
    #: Constructor keywords the entry sets itself.
    fixed: Mapping[str, Any] = field(default_factory=dict)
    #: ``noise(seed, key)``: the constructor keywords of a seed (None: the OS CSPRNG) or a durable release's key.
    noise: Callable[[int | None, bytes | None], dict[str, Any]] = keyed_noise
    #: Whether ``release --state`` continues it (its snapshots restore with the key alone).
    durable: bool = True
    #: Whether ``release --key-column`` runs one of it per key.
    per_key: bool = True
    #: Whether the service offers it (``POST /streams`` with this ``method``): 0 if not, else its place in the
    #: service's list of methods (which its error messages name in that order).
    service: int = 0
    #: The names of the :mod:`dpstream.audit` experiments that check its privacy claim.
    audits: tuple[str, ...] = ()
    #: The command that runs it: ``release --method NAME``, or a command of its own (``aggregate``).
    command: str = "release"
    #: Whether how many input values it consumed is public under its relation (event level: a stream's positions
    #: are; unit level: the rows are data), and so may be printed by ``dpstream budget`` and a stopped run.
    public_counts: bool = True

    def build(self, options: Mapping[str, Any], *, seed: Any = None, key: bytes | None = None) -> Any:
        """The mechanism of ``release``'s ``options`` (by option name), with noise from ``seed`` or ``key``.

        ``seed`` is what the mechanism's ``seed=`` takes (an int, a generator or bits: the Spark
        engine passes each key's bits); ``options`` needs the common options and this entry's own.
        """
        keywords = {name: options[name] for name in COMMON_OPTIONS}
        keywords.update((keyword, options[name]) for name, keyword in self.options.items())
        keywords.update((keyword, options[name]) for name, keyword in self.optional.items()
                        if options.get(name) is not None)
        return self.cls(**keywords, **self.fixed, **self.noise(seed, key))


#: Every registered mechanism by name, in the order ``release --method`` lists them (read-only view).
_ENTRIES: dict[str, Mechanism] = {}
REGISTRY: Mapping[str, Mechanism] = MappingProxyType(_ENTRIES)


def register(entry: Mechanism) -> Mechanism:
    """Add ``entry`` to the registry (its name must be new); return it."""
    if not isinstance(entry, Mechanism):
        raise TypeError(f"register takes a Mechanism, got {type(entry).__name__}.")
    if entry.name in _ENTRIES:
        raise ValueError(f"a mechanism named {entry.name!r} is registered already.")
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove the mechanism ``name`` from the registry (tests that register a throw-away one)."""
    del _ENTRIES[name]


def mechanism(name: str) -> Mechanism:
    """The registered mechanism ``name``.

    >>> mechanism("bt").cls.__name__
    'BinaryTreeCounter'
    """
    if name not in _ENTRIES:
        raise ValueError(f"method must be one of {', '.join(release_methods())}; got {name!r}.")
    return _ENTRIES[name]


def release_methods() -> dict[str, Mechanism]:
    """The mechanisms ``release --method`` offers, by name, in registration order."""
    return {name: entry for name, entry in _ENTRIES.items() if entry.command == "release"}


def specific_options() -> frozenset[str]:
    """The method-specific options of all registered mechanisms."""
    return frozenset().union(*(entry.options.keys() | entry.optional.keys() for entry in _ENTRIES.values()))


def class_of_kind(kind: object) -> Callable[..., Any] | None:
    """The class whose snapshots have ``mechanism`` field ``kind`` (names of earlier versions too), or None.

    >>> class_of_kind("binary-tree").__name__
    'BinaryTreeCounter'
    """
    wanted = stored_kind(kind)
    return next((entry.cls for entry in _ENTRIES.values() if entry.kind == wanted), None)


def served() -> dict[str, Mechanism]:
    """The mechanisms the service offers, by name, in the service's order."""
    return {entry.name: entry for entry in sorted(_ENTRIES.values(), key=lambda entry: entry.service) if entry.service}


# -- how each mechanism describes what it chose ------------------------------------------------


def _describe_tops(tops: ToPS) -> str:
    if tops.rho is not None:
        return f"{_describe_tops_choice(tops)}, discrete Gaussian noise at rho = {tops.rho:.6g} (zCDP)"
    return _describe_tops_choice(tops)


def _describe_tops_choice(tops: ToPS) -> str:
    if tops.public_threshold is not None:
        where = (f"one leaf per period of {tops.period} values, d = {tops.period_levels} measured levels"
                 if tops.period is not None else f"smoothed levels s = {tops.smoothed_levels} of h = {tops.levels}")
        return (f"threshold theta = {tops.threshold:g} (public, given: no hold-out, nothing spent on it; values above "
                f"it are clipped to it), {where}")
    if tops.period is not None:
        how = "NM-E" if tops.model_choice is None else (
            f"prior {tops.model_choice.prior:.6g}; error model for windows of {tops.query_length or tops.period} "
            "values from a period boundary")
        return (f"threshold theta = {tops.threshold:g}, one leaf per period of {tops.period} values (the first "
                f"released value at phase {tops.hold % tops.period}), d = {tops.period_levels} measured levels ({how})")
    if tops.leaf is not None:
        return (f"threshold theta = {tops.threshold:g}, leaves of {tops.leaf} values counted from the first value "
                f"(the first released value at phase {tops.hold % tops.leaf}), d = {tops.period_levels} measured "
                f"levels, prior {tops.model_choice.prior:.6g} (error model for windows of {tops.query_length} values "
                "starting anywhere)")
    if tops.model_choice is None:
        return (f"threshold theta = {tops.threshold:g} (NM-E), smoothed levels s = {tops.smoothed_levels} "
                f"of h = {tops.levels}")
    windows = "random queries" if tops.query_length is None else f"windows of {tops.query_length} values"
    return (f"threshold theta = {tops.threshold:g}, smoothed levels s = {tops.smoothed_levels} of h = {tops.levels}, "
            f"prior {tops.model_choice.prior:.6g} (error model for {windows})")


def _describe_pak(pak: PAK) -> str:
    kind = "capped at B" if pak.capped else "UNCAPPED, as in the ToPS paper"
    return (f"threshold tau = {pak.threshold:g} (S-PAK {kind}; before the cap {pak.raw_threshold:g}); "
            f"noisy sum of the first {pak.hold:,} values = {pak.held_sum:.6g}")


def _describe_bt(counter: BinaryTreeCounter) -> str:
    noise = "" if counter.rho is None else f", discrete Gaussian noise at rho = {counter.rho:.6g} (zCDP)"
    return f"binary tree with bound B = {counter.upper_bound:g}, {counter.levels} levels, no hold-out{noise}"


def _describe_sqrt(factorization: SqrtFactorization) -> str:
    return (f"square-root factorization with bound B = {factorization.upper_bound:g}, chunks of "
            f"{factorization.max_range:,} values, discrete Gaussian noise at rho = {factorization.rho:.6g} (zCDP), "
            "no hold-out")


def _describe_banded(factorization: BandedFactorization) -> str:
    return (f"banded square-root factorization with bound B = {factorization.upper_bound:g}, band of "
            f"{factorization.max_range:,} values (no horizon), discrete Gaussian noise at rho = "
            f"{factorization.rho:.6g} (zCDP), no hold-out")


def _describe_topl(topl: ToPL) -> str:
    return (f"threshold theta = {topl.threshold:g} (Square Wave reports + Eq. 8, {topl.collector.variant}); "
            f"every later value is one Hybrid-mechanism report, released as its unbiased estimate")


def _describe_aggregate(agg: UnitAggregate) -> str:
    chosen = ("public bounds only (nothing chosen from the data)" if agg.selection_threshold is None else
              f"public bounds; partitions not listed selected privately per window (threshold "
              f"{agg.selection_threshold} units)")
    return (f"buckets of {agg.bucket} s, {agg.width} per window of {agg.window} s; {agg.levels} measured levels of "
            f"fan-out {agg.fanout}; {chosen}")


def _describe_locations(counts: LocationCounts) -> str:
    return (f"{len(counts.locations)} locations, steps of {counts.step} s, {counts.neighbours} neighbours, "
            f"discrete Laplace of scale {counts.scale:g} per cell")


def _same_names(*names: str) -> dict[str, str]:
    return {name: name for name in names}


_TOPS_OPTIONS = _same_names("hold", "fanout", "smoother", "window", "alpha", "threshold_epsilon", "threshold_step",
                            "granularity", "threshold_method", "query_length", "smoothed_levels", "period")
# ``noise`` is the name the option has in state files and ledgers (--threshold-noise, formerly --noise)
_PAK_OPTIONS = {**_same_names("hold", "delta", "threshold_fraction", "multiplier", "granularity"),
                "noise": "threshold_noise"}

register(Mechanism("tops", ToPS, TOPS, _describe_tops, _TOPS_OPTIONS, service=1,
                   optional=_same_names("selection", "profile_bins", "window_leaves", "c", "threshold",
                                        "expected_length", "w_event", "period_bound"),
                   audits=("tops", "tops-one-level", "tops-periodic", "tops-window-leaves", "tops-stream",
                           "tops-model", "tops-selection", "tops-median", "tops-selection-rnm",
                           "tops-selection-exponential", "nm-e", "nm-e-tail", "tops-w-event")))
register(Mechanism("pak", PAK, PAK_STATE, _describe_pak, _PAK_OPTIONS, service=3, audits=("pak",)))
register(Mechanism("pak-uncapped", PAK, PAK_STATE, _describe_pak, _PAK_OPTIONS, fixed={"capped": False},
                   audits=("pak",)))
register(Mechanism("bt", BinaryTreeCounter, BINARY_TREE, _describe_bt, _same_names("granularity"), service=2,
                   optional=_same_names("w_event"), audits=("binary-tree", "bt-by-key", "bt-w-event")))
register(Mechanism("topl", ToPL, TOPL, _describe_topl, _same_names("hold", "threshold_epsilon"), noise=_topl_noise,
                   audits=("square-wave", "hm")))
register(Mechanism("aggregate", UnitAggregate, AGGREGATE, _describe_aggregate, per_key=False, command="aggregate",
                   public_counts=False,
                   audits=("unit-aggregate", "unit-aggregate-selection", "unit-aggregate-gaussian")))
register(Mechanism("locations", LocationCounts, LOCATIONS, _describe_locations, per_key=False,
                   command="release-locations", public_counts=False, audits=("locations", "locations-unbounded")))
# the binary tree under zCDP: --epsilon and --delta are its (epsilon, delta) target, spent as the rho they afford
register(Mechanism("bt-zcdp", ZcdpBinaryTree, BINARY_TREE, _describe_bt, _same_names("granularity", "delta"), service=4,
                   audits=("binary-tree-gaussian", "binary-tree-gaussian-1e-6")))
# the square-root factorization under zCDP, the same options (lower error than bt-zcdp on every query family)
register(Mechanism(SQRT_ZCDP, SqrtFactorization, SQRT_ZCDP, _describe_sqrt, _same_names("granularity", "delta"),
                   service=5, audits=("sqrt-zcdp", "sqrt-zcdp-1e-6")))
# ToPS under zCDP: --epsilon and --delta are its (epsilon, delta) target, spent as the rho they afford
register(Mechanism("tops-zcdp", ZcdpToPS, TOPS, _describe_tops, {**_TOPS_OPTIONS, **_same_names("delta")}, service=6,
                   optional=_same_names("selection", "profile_bins", "window_leaves", "c", "threshold",
                                        "expected_length"),
                   audits=("tops-gaussian", "tops-gaussian-1e-6", "tops-stream-gaussian")))
# the banded square-root factorization: unbounded streams under zCDP, --max-range is the band
register(Mechanism(BANDED_ZCDP, BandedFactorization, BANDED_ZCDP, _describe_banded, _same_names("granularity", "delta"),
                   service=7, audits=("banded-zcdp",)))
