"""What a mechanism spends: its privacy guarantee, stated in full, and how guarantees compose.

A guarantee is about a neighbour relation: which two inputs the bound
``Pr[A(V) in O] <= e^epsilon Pr[A(V') in O] + delta`` compares.  The relations of dpstream are
the members of :class:`Neighbours`, also importable by name:

* :data:`EVENT_LEVEL` -- two streams that differ in the value at one position (ToPS, PAK, the
  binary tree; Definition 2.1 of the ToPS paper);
* :data:`ENTITY_ROW` -- two count-of-counts databases whose Entities tables differ in one row;
* :data:`LOCAL_REPORT` -- any two values of one client's report (local DP, Definition 2.2);
* :data:`USER_STEP` -- two databases of ``n`` users that differ in one user's location at one
  time step (the post-processing release of Cao et al.).

Two guarantees compose only when they are about the same relation (and both local or both
central): :meth:`PrivacyGuarantee.compose_sequential` adds epsilons and deltas (the parts read
the same data), :meth:`PrivacyGuarantee.compose_parallel` takes the largest (the parts read
disjoint data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from dpstream._checks import check_bool, check_nonnegative, check_probability

__all__ = ["ENTITY_ROW", "EVENT_LEVEL", "LOCAL_REPORT", "USER_STEP", "Neighbours", "PrivacyGuarantee"]


class Neighbours(Enum):
    """A neighbour relation; its value is the human description that ``str()`` prints.

    >>> print(Neighbours.ENTITY_ROW)
    entity level: the Entities table differs in one row (one group's size changes by one)
    >>> EVENT_LEVEL is Neighbours.EVENT_LEVEL
    True
    """

    EVENT_LEVEL = "event level: two streams are neighbours when they differ in the value at one position"
    ENTITY_ROW = "entity level: the Entities table differs in one row (one group's size changes by one)"
    LOCAL_REPORT = (
        "local DP (Definition 2.2) at event level: each report carries one value; any two values are neighbours"
    )
    USER_STEP = "bounded databases of n users differing in one user's location at one time step"

    @property
    def description(self) -> str:
        """Which inputs are neighbours, in words."""
        return self.value

    def __str__(self) -> str:
        return self.value


#: Streams that differ in the value at one position (central DP, Definition 2.1).
EVENT_LEVEL = Neighbours.EVENT_LEVEL
#: Count-of-counts databases whose Entities tables differ in one row (Kuo et al., Theorem 5.6).
ENTITY_ROW = Neighbours.ENTITY_ROW
#: Any two values of one report: the relation of a local randomizer (Definition 2.2).
LOCAL_REPORT = Neighbours.LOCAL_REPORT
#: Databases of n users that differ in one user's location at one time step (Cao et al., Section 4).
USER_STEP = Neighbours.USER_STEP


@dataclass(frozen=True, kw_only=True)
class PrivacyGuarantee:
    """An (epsilon, delta)-DP guarantee together with the neighbour relation it is about.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee: ``Pr[A(V) in O] <= e^epsilon Pr[A(V') in O] + delta`` for neighbours.
    neighbours : Neighbours
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
    """

    epsilon: float
    delta: float
    neighbours: Neighbours
    composition: str
    local: bool = False
    noise: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_nonnegative(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))
        if not isinstance(self.neighbours, Neighbours):
            raise TypeError(f"neighbours must be a Neighbours relation (e.g. EVENT_LEVEL), got {self.neighbours!r}.")
        if not isinstance(self.composition, str):
            raise TypeError(f"composition must be a string, got {self.composition!r}.")
        check_bool(self.local, "local")
        if self.noise is not None and not isinstance(self.noise, str):
            raise TypeError(f"noise must be a string or None, got {self.noise!r}.")

    # -- text ----------------------------------------------------------------------------

    @property
    def label(self) -> str:
        """``"1-DP"``, ``"(1, 1e-06)-DP"`` or ``"1-LDP"``: the guarantee without its context."""
        dp = "LDP" if self.local else "DP"
        return f"{self.epsilon:g}-{dp}" if self.delta == 0 else f"({self.epsilon:g}, {self.delta:g})-{dp}"

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

        >>> g = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="")
        >>> g.same_relation(g), g.same_relation(PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=ENTITY_ROW,
        ...                                                        composition=""))
        (True, False)
        """
        if not isinstance(other, PrivacyGuarantee):
            raise TypeError(f"other must be a PrivacyGuarantee, got {other!r}.")
        return self.neighbours is other.neighbours and self.local == other.local

    def _check_composable(self, others: tuple[PrivacyGuarantee, ...], kind: str) -> None:
        for other in others:
            if not self.same_relation(other):
                raise ValueError(
                    f"{kind} composition needs one neighbour relation, got "
                    f"{self._relation_text()!r} and {other._relation_text()!r}."
                )

    def _relation_text(self) -> str:
        return f"{'local ' if self.local else ''}{self.neighbours.name}"

    def compose_sequential(self, *others: PrivacyGuarantee, composition: str | None = None) -> PrivacyGuarantee:
        """The guarantee of running this mechanism and ``others`` on the same data.

        Epsilons add and deltas add (basic composition; a delta above 1 says nothing and is
        capped at 1).  All must be about the same relation, else ``ValueError``.
        ``composition`` replaces the default text, which lists the parts; the ``noise`` of the
        parts that state one are joined (:func:`_joined_noise`).

        >>> a = PrivacyGuarantee(epsilon=0.5, delta=0.0, neighbours=EVENT_LEVEL, composition="A")
        >>> b = PrivacyGuarantee(epsilon=0.25, delta=1e-9, neighbours=EVENT_LEVEL, composition="B")
        >>> both = a.compose_sequential(b)
        >>> both.epsilon, both.delta, both.composition
        (0.75, 1e-09, 'sequential composition of [0.5-DP: A] and [(0.25, 1e-09)-DP: B]')
        """
        self._check_composable(others, "sequential")
        parts = (self, *others)
        return PrivacyGuarantee(
            epsilon=math.fsum(part.epsilon for part in parts),
            delta=min(1.0, math.fsum(part.delta for part in parts)),
            neighbours=self.neighbours,
            composition=composition if composition is not None else _listed("sequential", parts),
            local=self.local,
            noise=_joined_noise(parts),
        )

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
        self._check_composable(others, "parallel")
        parts = (self, *others)
        return PrivacyGuarantee(
            epsilon=max(part.epsilon for part in parts),
            delta=max(part.delta for part in parts),
            neighbours=self.neighbours,
            composition=composition if composition is not None else _listed("parallel", parts),
            local=self.local,
            noise=_joined_noise(parts),
        )


def _listed(kind: str, parts: tuple[PrivacyGuarantee, ...]) -> str:
    if len(parts) == 1:
        return parts[0].composition
    items = [f"[{part.label}: {part.composition}]" for part in parts]
    return f"{kind} composition of {', '.join(items[:-1])} and {items[-1]}"


def _joined_noise(parts: tuple[PrivacyGuarantee, ...]) -> str | None:
    """The distinct ``noise`` texts of the parts (each split at ``" + "``), in order, joined by ``" + "``.

    None if no part states one.

    >>> a = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="A", noise="x")
    >>> b = PrivacyGuarantee(epsilon=1.0, delta=0.0, neighbours=EVENT_LEVEL, composition="B", noise="y")
    >>> _joined_noise((a, a)), _joined_noise((a, b)), _joined_noise((a.compose_sequential(b), b))
    ('x', 'x + y', 'x + y')
    """
    pieces = [piece for part in parts if part.noise is not None for piece in part.noise.split(" + ")]
    texts = list(dict.fromkeys(pieces))
    return " + ".join(texts) if texts else None
