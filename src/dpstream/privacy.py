"""What a mechanism spends: its privacy guarantee, stated in full, and how guarantees compose.

A guarantee is about a neighbour relation: which two inputs the bound
``Pr[A(V) in O] <= e^epsilon Pr[A(V') in O] + delta`` compares.  A relation is a value: a frozen
dataclass deriving from :class:`Relation`, equal to another when its class and its fields are,
so a relation with parameters (a window of ``w`` events, say) is told apart from the same
relation with other parameters.  The relations of dpstream, importable by name:

* :data:`EVENT_LEVEL` -- two streams that differ in the value at one position (ToPS, PAK, the
  binary tree; Definition 2.1 of the ToPS paper);
* :data:`ENTITY_ROW` -- two count-of-counts databases whose Entities tables differ in one row;
* :data:`LOCAL_REPORT` -- any two values of one client's report (local DP, Definition 2.2);
* :data:`USER_STEP` -- two databases of ``n`` users that differ in one user's location at one
  time step (the post-processing release of Cao et al.);
* :class:`RowsKept` (``RowsKept(EVENT_LEVEL)``) -- a relation on the stream of the rows kept when
  rows with a missing value are dropped before the release (``release --missing skip``);
* :class:`WEvent` (``w`` consecutive positions) and :class:`UnitLevel` (one unit's rows in one aligned window).

A guarantee keeps how its budget breaks down over the mechanism's parts: a :class:`Part` (what
it is, its :class:`EpsilonDelta` budget, its noise) or a :class:`Composition` of parts, read
sequentially (the parts read the same data: budgets add) or in parallel (disjoint data: the
largest).  The statement printed is rendered from that breakdown.  Each part carries its own
budget object, so another accounting can join as another budget class with the same methods.

Two guarantees compose only when they are about the same relation (and both local or both
central): :meth:`PrivacyGuarantee.compose_sequential` adds epsilons and deltas,
:meth:`PrivacyGuarantee.compose_parallel` takes the largest.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from dpstream._checks import check_bool, check_nonnegative, check_probability

__all__ = [
    "ENTITY_ROW",
    "EVENT_LEVEL",
    "LOCAL_REPORT",
    "USER_STEP",
    "Budget",
    "Composition",
    "EntityRow",
    "EpsilonDelta",
    "EventLevel",
    "LocalReport",
    "Part",
    "PrivacyGuarantee",
    "Relation",
    "RowsKept",
    "UnitLevel",
    "UserStep",
    "WEvent",
]


# -- neighbour relations -----------------------------------------------------------------


class Relation:
    """A neighbour relation: which two inputs a guarantee compares.

    Subclasses are frozen dataclasses: relations compare (and hash) by class and fields, so a
    relation with parameters is a subclass with fields.  They say in :attr:`description`, which
    ``str()`` prints, which inputs are neighbours.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Window(Relation):
    ...     w: int
    ...     @property
    ...     def description(self) -> str:
    ...         return f"streams differing in the values of {self.w} consecutive positions"
    >>> Window(10) == Window(10), Window(10) == Window(20), Window(10).name
    (True, False, 'Window(w=10)')
    """

    __slots__ = ()

    @property
    def description(self) -> str:
        """Which inputs are neighbours, in words."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        """A short name for error messages: the relation's ``repr`` (its class and fields)."""
        return repr(self)

    def __str__(self) -> str:
        return self.description


class _NamedRelation(Relation):
    """A relation without parameters, named at module level: its class has that one instance.

    A subclass gives its ``name`` (the constant's) and its ``description`` as class keywords.
    """

    __slots__ = ()
    _instance: ClassVar[_NamedRelation | None] = None

    def __init_subclass__(cls, *, name: str, description: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.description = name, description  # type: ignore[misc, assignment]

    def __new__(cls) -> _NamedRelation:
        if cls.__dict__.get("_instance") is None:
            cls._instance = super().__new__(cls)
        return cls._instance  # type: ignore[return-value]

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return type(self), ()  # unpickles (and copies) to the one instance

    @property
    def value(self) -> str:
        """Deprecated (the value of the former ``Neighbours`` enum): use :attr:`description`."""
        warnings.warn("relation.value is deprecated; use relation.description (or str(relation)).",
                      DeprecationWarning, stacklevel=2)
        return self.description


@dataclass(frozen=True)
class EventLevel(_NamedRelation, name="EVENT_LEVEL",
                 description="event level: two streams are neighbours when they differ in the value at one position"):
    """Streams that differ in the value at one position (central DP, Definition 2.1)."""


@dataclass(frozen=True)
class EntityRow(_NamedRelation, name="ENTITY_ROW",
                description="entity level: the Entities table differs in one row (one group's size changes by one)"):
    """Count-of-counts databases whose Entities tables differ in one row (Kuo et al., Theorem 5.6)."""


@dataclass(frozen=True)
class LocalReport(_NamedRelation, name="LOCAL_REPORT", description=(
        "local DP (Definition 2.2) at event level: each report carries one value; any two values are neighbours")):
    """Any two values of one report: the relation of a local randomizer (Definition 2.2)."""


@dataclass(frozen=True)
class UserStep(_NamedRelation, name="USER_STEP",
               description="bounded databases of n users differing in one user's location at one time step"):
    """Databases of n users that differ in one user's location at one time step (Cao et al., Section 4)."""


@dataclass(frozen=True)
class RowsKept(Relation):
    """``within``, on the stream of the rows kept when rows with a missing value are dropped first.

    Dropping a row (``--missing skip``) moves every later value up one position, which no relation
    about the values at positions covers: the guarantee then holds between inputs that have their
    missing values in the same rows, and whether a row is missing is not protected.

    >>> print(RowsKept(EVENT_LEVEL))  # doctest: +NORMALIZE_WHITESPACE
    event level: two streams are neighbours when they differ in the value at one position, on the
    stream of the rows kept: rows with a missing value are dropped first, so whether a row is missing
    (which moves every later value up one position) is not protected
    >>> RowsKept(EVENT_LEVEL) == RowsKept(EVENT_LEVEL), RowsKept(EVENT_LEVEL) == EVENT_LEVEL
    (True, False)
    """

    within: Relation

    def __post_init__(self) -> None:
        if not isinstance(self.within, Relation):
            raise TypeError(f"within must be a Relation (e.g. EVENT_LEVEL), got {self.within!r}.")

    @property
    def description(self) -> str:
        return (f"{self.within.description}, on the stream of the rows kept: rows with a missing value are dropped "
                "first, so whether a row is missing (which moves every later value up one position) is not protected")


@dataclass(frozen=True)
class WEvent(Relation):
    """Streams that differ in the values of at most ``w`` consecutive positions (Kellaris et al., VLDB 2014)."""

    w: int
    description = property(lambda self: f"w-event (w = {self.w}): streams that differ in at most {self.w} "
                                        "consecutive values are neighbours")


@dataclass(frozen=True)
class UnitLevel(Relation):
    """One ``unit``'s rows in one aligned ``window`` added or removed (L1 sensitivity C) or, with ``replace``,
    replaced (2C), under the contribution ``bounds`` (words); see ``docs/units.md``."""

    unit: str
    window: str
    bounds: str
    replace: bool = False
    description = property(lambda self: (
        f"unit level: inputs that differ in the rows of one {self.unit} in one {self.window} are neighbours "
        f"({'replaced by any rows within the bounds' if self.replace else 'added or removed'}; {self.bounds})"))


#: Streams that differ in the value at one position (central DP, Definition 2.1).
EVENT_LEVEL = EventLevel()
#: Count-of-counts databases whose Entities tables differ in one row (Kuo et al., Theorem 5.6).
ENTITY_ROW = EntityRow()
#: Any two values of one report: the relation of a local randomizer (Definition 2.2).
LOCAL_REPORT = LocalReport()
#: Databases of n users that differ in one user's location at one time step (Cao et al., Section 4).
USER_STEP = UserStep()

_NAMED = {relation.name: relation for relation in (EVENT_LEVEL, ENTITY_ROW, LOCAL_REPORT, USER_STEP)}


class _NeighboursType(type):
    """What the former ``Neighbours`` enum answered: members by attribute, name and value, iteration."""

    def __getattr__(cls, name: str) -> Relation:
        try:
            return _NAMED[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(cls, name: str) -> Relation:
        return _NAMED[name]

    def __call__(cls, description: str) -> Relation:
        for relation in _NAMED.values():
            if relation.description == description:
                return relation
        raise ValueError(f"{description!r} is not a valid Neighbours")

    def __iter__(cls) -> Iterator[Relation]:
        return iter(_NAMED.values())

    def __len__(cls) -> int:
        return len(_NAMED)

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, Relation)


class _Neighbours(metaclass=_NeighboursType):
    """Deprecated: the relations are values deriving from :class:`Relation`; ``Neighbours.EVENT_LEVEL``
    is :data:`EVENT_LEVEL`, and iterating gives the four relations dpstream names."""


def __getattr__(name: str) -> object:
    if name == "Neighbours":
        warnings.warn("dpstream.privacy.Neighbours is deprecated; use dpstream.privacy.Relation and the relations "
                      "EVENT_LEVEL, ENTITY_ROW, LOCAL_REPORT, USER_STEP.", DeprecationWarning, stacklevel=2)
        return _Neighbours
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- budgets and the breakdown of a guarantee -------------------------------------------


class Budget:
    """What a part spends, in one accounting: how it prints and how budgets of its kind compose.

    :class:`EpsilonDelta` is the accounting of dpstream; another (a zCDP ``rho``, say) is another
    subclass with these three methods.  A :class:`Composition` composes budgets of one class.
    """

    __slots__ = ()

    def label(self, local: bool = False) -> str:
        """The budget as a guarantee names it (``"1-DP"``)."""
        raise NotImplementedError

    @classmethod
    def sequential(cls, budgets: Sequence[Budget]) -> Budget:
        """The budget of parts that read the same data."""
        raise NotImplementedError

    @classmethod
    def parallel(cls, budgets: Sequence[Budget]) -> Budget:
        """The budget of parts that read disjoint data."""
        raise NotImplementedError


@dataclass(frozen=True)
class EpsilonDelta(Budget):
    """An (epsilon, delta)-DP budget: pure DP when delta is 0.

    :meth:`sequential` adds (basic composition; a delta above 1 says nothing and is capped at 1),
    :meth:`parallel` takes the largest.

    >>> EpsilonDelta(0.5).label(), EpsilonDelta(1.0, 1e-6).label(), EpsilonDelta(1.0).label(local=True)
    ('0.5-DP', '(1, 1e-06)-DP', '1-LDP')
    >>> EpsilonDelta.sequential([EpsilonDelta(0.5, 0.75), EpsilonDelta(0.25, 0.5)])
    EpsilonDelta(epsilon=0.75, delta=1.0)
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_nonnegative(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))

    def label(self, local: bool = False) -> str:
        """``"1-DP"``, ``"(1, 1e-06)-DP"`` or, for local DP, ``"1-LDP"``."""
        dp = "LDP" if local else "DP"
        return f"{self.epsilon:g}-{dp}" if self.delta == 0 else f"({self.epsilon:g}, {self.delta:g})-{dp}"

    @classmethod
    def sequential(cls, budgets: Sequence[EpsilonDelta]) -> EpsilonDelta:  # type: ignore[override]
        """The budget of parts that read the same data: epsilons add, deltas add (capped at 1)."""
        return cls(math.fsum(b.epsilon for b in budgets), min(1.0, math.fsum(b.delta for b in budgets)))

    @classmethod
    def parallel(cls, budgets: Sequence[EpsilonDelta]) -> EpsilonDelta:  # type: ignore[override]
        """The budget of parts that read disjoint data: the largest epsilon and the largest delta."""
        return cls(max(b.epsilon for b in budgets), max(b.delta for b in budgets))


@dataclass(frozen=True, kw_only=True)
class Part:
    """One piece of a release: what it is, what it spends and which noise it draws.

    Attributes
    ----------
    what : str
        The piece, named (``"NM-E threshold"``, ``"hierarchy"``).
    budget : Budget
        What it spends (an :class:`EpsilonDelta`).
    noise : str or None
        The sampler and source of randomness of its noise, when stated.
    text : str or None
        How the statement says it (default: ``what``).
    """

    what: str
    budget: Budget
    noise: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        _check_text(self.what, "what")
        if not isinstance(self.budget, Budget):
            raise TypeError(f"budget must be a Budget such as EpsilonDelta, got {self.budget!r}.")
        _check_text(self.noise, "noise", optional=True)
        _check_text(self.text, "text", optional=True)

    def render(self, local: bool = False) -> str:
        """The statement's words for this part (``local`` is for compositions that list labels)."""
        return self.what if self.text is None else self.text

    def leaves(self) -> tuple[Part, ...]:
        """The parts, in order: this one."""
        return (self,)


_KINDS = ("sequential", "parallel")


@dataclass(frozen=True, kw_only=True)
class Composition:
    """Parts composed sequentially (they read the same data) or in parallel (disjoint data).

    Attributes
    ----------
    kind : str
        ``"sequential"`` or ``"parallel"``.
    parts : tuple of Part or Composition
        What composes, in order.
    layout : str or None
        How the statement says it: a :meth:`str.format` template with one ``{}`` per part,
        filled with the parts' words.  None lists them:
        ``"sequential composition of [0.5-DP: A] and [0.25-DP: B]"``.

    >>> a = Part(what="a", budget=EpsilonDelta(0.5), noise="x")
    >>> b = Part(what="b", budget=EpsilonDelta(0.25, 1e-9), noise="x + y")
    >>> both = Composition(kind="sequential", parts=(a, b))
    >>> both.budget, both.noise
    (EpsilonDelta(epsilon=0.75, delta=1e-09), 'x + y')
    >>> both.render(), Composition(kind="parallel", parts=(a, b), layout="{}; {}; parallel").render()
    ('sequential composition of [0.5-DP: a] and [(0.25, 1e-09)-DP: b]', 'a; b; parallel')
    """

    kind: str
    parts: tuple[Part | Composition, ...]
    layout: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(_KINDS)}, got {self.kind!r}.")
        parts = tuple(self.parts)
        if not parts or not all(isinstance(part, (Part, Composition)) for part in parts):
            raise TypeError(f"parts must be a non-empty sequence of Part and Composition, got {self.parts!r}.")
        if len({type(part.budget) for part in parts}) > 1:
            raise TypeError("parts must spend budgets of one accounting, got "
                            f"{', '.join(dict.fromkeys(type(part.budget).__name__ for part in parts))}.")
        object.__setattr__(self, "parts", parts)
        _check_text(self.layout, "layout", optional=True)

    @property
    def budget(self) -> Budget:
        """What the parts spend together."""
        budgets = [part.budget for part in self.parts]
        compose = type(budgets[0]).sequential if self.kind == "sequential" else type(budgets[0]).parallel
        return compose(budgets)

    @property
    def noise(self) -> str | None:
        """The distinct noise texts of the parts (each split at ``" + "``), in order, joined by ``" + "``.

        None if no part states one.
        """
        pieces = [piece for part in self.parts if part.noise is not None for piece in part.noise.split(" + ")]
        texts = list(dict.fromkeys(pieces))
        return " + ".join(texts) if texts else None

    def render(self, local: bool = False) -> str:
        """The statement's words: the layout filled with the parts' words, else the parts listed."""
        if self.layout is not None:
            return self.layout.format(*(part.render(local) for part in self.parts))
        if len(self.parts) == 1:
            return self.parts[0].render(local)
        items = [f"[{part.budget.label(local)}: {part.render(local)}]" for part in self.parts]
        return f"{self.kind} composition of {', '.join(items[:-1])} and {items[-1]}"

    def leaves(self) -> tuple[Part, ...]:
        """Every :class:`Part` inside, in order."""
        return tuple(leaf for part in self.parts for leaf in part.leaves())


def _check_text(value: object, name: str, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise TypeError(f"{name} must be a string{' or None' if optional else ''}, got {value!r}.")


# -- the guarantee -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PrivacyGuarantee:
    """An (epsilon, delta)-DP guarantee together with the neighbour relation it is about.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee: ``Pr[A(V) in O] <= e^epsilon Pr[A(V') in O] + delta`` for neighbours.
    neighbours : Relation
        Which inputs are neighbours (:data:`EVENT_LEVEL`, :data:`ENTITY_ROW`, ...).
    composition : str
        How the budget is split over the mechanism's parts and why they compose to the total.
    local : bool
        True for local DP: the bound holds for each report a client sends, about any two values
        of that client, and no trusted curator sees raw data.
    noise : str or None
        Which sampler and which source of randomness produced the release, e.g.
        ``"exact discrete Laplace in grid units, OS CSPRNG bits (os.urandom)"`` or
        ``"FLOAT Laplace from numpy (studies only: NOT for publication)"``.  The guarantee is
        about the numbers the computer produces only for exact samplers on a secret source.
    breakdown : Part or Composition
        The structure behind ``epsilon``, ``delta``, ``composition`` and ``noise``: set by
        :meth:`of` and the ``compose_*`` methods; one :class:`Part` holding those fields for a
        guarantee built from them.

    ``str()`` joins the parts of :meth:`_parts` with ``"; "``: the guarantee, the relation, the
    composition and, when set, ``"noise: ..."``.

    Examples
    --------
    >>> g = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=ENTITY_ROW, composition="all on the leaves")
    >>> print(g)  # doctest: +NORMALIZE_WHITESPACE
    1-DP; neighbours: entity level: the Entities table differs in one row (one group's size changes by one);
    all on the leaves
    >>> a = PrivacyGuarantee(epsilon=0.5, delta=1e-6, neighbours=EVENT_LEVEL, composition="part a")
    >>> b = PrivacyGuarantee(epsilon=0.25, delta=0.0, neighbours=EVENT_LEVEL, composition="part b")
    >>> a.compose_sequential(b).label, a.compose_parallel(b).label
    ('(0.75, 1e-06)-DP', '(0.5, 1e-06)-DP')
    >>> [part.what for part in a.compose_parallel(b).breakdown.leaves()]
    ['part a', 'part b']
    """

    epsilon: float
    delta: float
    neighbours: Relation
    composition: str
    local: bool = False
    noise: str | None = None
    breakdown: Part | Composition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_nonnegative(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))
        if not isinstance(self.neighbours, Relation):
            raise TypeError(f"neighbours must be a Neighbours relation (e.g. EVENT_LEVEL), got {self.neighbours!r}.")
        if not isinstance(self.composition, str):
            raise TypeError(f"composition must be a string, got {self.composition!r}.")
        check_bool(self.local, "local")
        if self.noise is not None and not isinstance(self.noise, str):
            raise TypeError(f"noise must be a string or None, got {self.noise!r}.")
        object.__setattr__(self, "breakdown", Part(what=self.composition, budget=EpsilonDelta(self.epsilon, self.delta),
                                                   noise=self.noise))

    @classmethod
    def of(cls, breakdown: Part | Composition, *, neighbours: Relation, local: bool = False) -> PrivacyGuarantee:
        """The guarantee of ``breakdown`` about ``neighbours``: its budget, its words and its noise.

        >>> threshold = Part(what="threshold", budget=EpsilonDelta(0.5), text="threshold 0.5-DP on the hold-out")
        >>> rest = Part(what="tree", budget=EpsilonDelta(1.0), noise="exact", text="tree 1-DP on the rest")
        >>> g = PrivacyGuarantee.of(Composition(kind="parallel", parts=(threshold, rest), layout="{}; {}"),
        ...                         neighbours=EVENT_LEVEL)
        >>> g.epsilon, g.composition, g.noise
        (1.0, 'threshold 0.5-DP on the hold-out; tree 1-DP on the rest', 'exact')
        """
        if not isinstance(breakdown, (Part, Composition)):
            raise TypeError(f"breakdown must be a Part or a Composition, got {breakdown!r}.")
        budget = breakdown.budget
        if not isinstance(budget, EpsilonDelta):
            raise TypeError(f"an (epsilon, delta) guarantee needs EpsilonDelta budgets, got {budget!r}.")
        guarantee = cls(epsilon=budget.epsilon, delta=budget.delta, neighbours=neighbours,
                        composition=breakdown.render(local), local=local, noise=breakdown.noise)
        object.__setattr__(guarantee, "breakdown", breakdown)
        return guarantee

    # -- text ----------------------------------------------------------------------------

    @property
    def label(self) -> str:
        """``"1-DP"``, ``"(1, 1e-06)-DP"`` or ``"1-LDP"``: the guarantee without its context."""
        return EpsilonDelta(self.epsilon, self.delta).label(self.local)

    def _parts(self) -> list[str]:
        """The pieces ``str()`` joins, in order."""
        parts = [self.label, f"neighbours: {self.neighbours}", self.composition]
        if self.noise is not None:
            parts.append(f"noise: {self.noise}")
        return parts

    def __str__(self) -> str:
        return "; ".join(self._parts())

    # -- composition ---------------------------------------------------------------------

    def same_relation(self, other: PrivacyGuarantee) -> bool:
        """True when ``other`` is about the same neighbour relation (and equally local or central).

        Relations are compared by value: a relation with parameters matches only the same
        parameters.

        >>> g = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="")
        >>> g.same_relation(g), g.same_relation(PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=ENTITY_ROW,
        ...                                                        composition=""))
        (True, False)
        """
        if not isinstance(other, PrivacyGuarantee):
            raise TypeError(f"other must be a PrivacyGuarantee, got {other!r}.")
        return self.neighbours == other.neighbours and self.local == other.local

    def _composed(self, kind: str, others: tuple[PrivacyGuarantee, ...], composition: str | None) -> PrivacyGuarantee:
        for other in others:
            if not self.same_relation(other):
                raise ValueError(
                    f"{kind} composition needs one neighbour relation, got "
                    f"{self._relation_text()!r} and {other._relation_text()!r}."
                )
        if not others and composition is None:
            return PrivacyGuarantee.of(self.breakdown, neighbours=self.neighbours, local=self.local)
        layout = None if composition is None else composition.replace("{", "{{").replace("}", "}}")
        breakdown = Composition(kind=kind, parts=(self.breakdown, *(other.breakdown for other in others)),
                                layout=layout)
        return PrivacyGuarantee.of(breakdown, neighbours=self.neighbours, local=self.local)

    def _relation_text(self) -> str:
        return f"{'local ' if self.local else ''}{self.neighbours.name}"

    def compose_sequential(self, *others: PrivacyGuarantee, composition: str | None = None) -> PrivacyGuarantee:
        """The guarantee of running this mechanism and ``others`` on the same data.

        Epsilons add and deltas add (basic composition; a delta above 1 says nothing and is
        capped at 1).  All must be about the same relation, else ``ValueError``.
        ``composition`` replaces the default text, which lists the parts; the ``noise`` of the
        parts that state one are joined (:attr:`Composition.noise`).

        >>> a = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="A")
        >>> b = PrivacyGuarantee(epsilon=0.25, delta=1e-9, neighbours=EVENT_LEVEL, composition="B")
        >>> both = a.compose_sequential(b)
        >>> both.epsilon, both.delta, both.composition
        (0.75, 1e-09, 'sequential composition of [0.5-DP: A] and [(0.25, 1e-09)-DP: B]')
        """
        return self._composed("sequential", others, composition)

    def compose_parallel(self, *others: PrivacyGuarantee, composition: str | None = None) -> PrivacyGuarantee:
        """The guarantee of running this mechanism and ``others`` on disjoint parts of the data.

        Neighbours differ in one part only, so the guarantee is the largest epsilon and the
        largest delta.  All must be about the same relation, else ``ValueError``.

        >>> a = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=ENTITY_ROW, composition="A")
        >>> b = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="B")
        >>> a.compose_parallel(b)
        Traceback (most recent call last):
        ValueError: parallel composition needs one neighbour relation, got 'ENTITY_ROW' and 'EVENT_LEVEL'.
        """
        return self._composed("parallel", others, composition)
