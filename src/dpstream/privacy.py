"""What a mechanism spends: its privacy guarantee, stated in full."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PrivacyGuarantee"]


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta)-DP guarantee together with the neighbour relation it is about.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee: ``Pr[A(V) in O] <= e^epsilon Pr[A(V') in O] + delta`` for neighbours.
    neighbours : str
        Which inputs are neighbours (e.g. event level: streams differing in one value).
    composition : str
        How the budget is split over the mechanism's parts and why they compose to the total.
    """

    epsilon: float
    delta: float
    neighbours: str
    composition: str

    def __str__(self) -> str:
        kind = f"{self.epsilon:g}-DP" if self.delta == 0 else f"({self.epsilon:g}, {self.delta:g})-DP"
        return f"{kind}; neighbours: {self.neighbours}; {self.composition}"
