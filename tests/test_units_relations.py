"""The relations of privacy units: w-event and unit level, compared by their parameters."""

from __future__ import annotations

import pytest

from dpstream.privacy import EVENT_LEVEL, PrivacyGuarantee, UnitLevel, WEvent


def _guarantee(relation, epsilon=1.0):
    return PrivacyGuarantee(epsilon=epsilon, delta=0.0, neighbours=relation, composition="x")


def test_unit_level_says_the_unit_the_window_and_the_bounds_in_words():
    add = UnitLevel("household", "UTC day", "at most 30 in total")
    assert "one household in one UTC day" in str(add) and "added or removed" in str(add)
    assert "replaced" in str(UnitLevel("household", "UTC day", "at most 30 in total", replace=True))
    assert "3 consecutive" in str(WEvent(3))


def test_guarantees_compose_only_when_the_parameters_match():
    day = _guarantee(UnitLevel("household", "UTC day", "at most 30 in total"))
    assert day.compose_sequential(_guarantee(UnitLevel("household", "UTC day", "at most 30 in total"))).epsilon == 2
    for other in (UnitLevel("household", "UTC day", "at most 60 in total"),
                  UnitLevel("household", "UTC hour", "at most 30 in total"),
                  UnitLevel("household", "UTC day", "at most 30 in total", replace=True), EVENT_LEVEL, WEvent(48)):
        with pytest.raises(ValueError, match="one neighbour relation"):
            day.compose_sequential(_guarantee(other))
    assert _guarantee(WEvent(3)).same_relation(_guarantee(WEvent(3)))
    assert not _guarantee(WEvent(3)).same_relation(_guarantee(WEvent(4)))
