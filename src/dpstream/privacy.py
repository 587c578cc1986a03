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
    local : bool
        True for local DP: the bound holds for each report a client sends, about any two values
        of that client, and no trusted curator sees raw data.

    >>> print(PrivacyGuarantee(1.0, 0.0, "one value", "one report", local=True))
    1-LDP; neighbours: one value; one report
    """

    epsilon: float
    delta: float
    neighbours: str
    composition: str
    local: bool = False

    def __str__(self) -> str:
        dp = "LDP" if self.local else "DP"
        kind = f"{self.epsilon:g}-{dp}" if self.delta == 0 else f"({self.epsilon:g}, {self.delta:g})-{dp}"
        return f"{kind}; neighbours: {self.neighbours}; {self.composition}"
