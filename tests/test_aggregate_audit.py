"""The audit of the unit aggregate passes on the library and fails on injected bugs of its bounds and noise."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.hierarchy.arithmetic as hierarchy_arithmetic
import dpstream.release.aggregate as aggregate
from dpstream.audit import format_table, run_audit
from dpstream.cli import cli
from dpstream.noise.grid import GridLaplace
from dpstream.release.bounding import ContributionBounder


class _Unbounded(ContributionBounder):
    """Bounding that forgets the L1 bound: every row adds its whole amount."""

    def bound(self, units, amounts, partitions):
        super().bound(units, amounts, partitions)
        return np.asarray(amounts, dtype=np.int64)


class _HalfNoise(GridLaplace):
    @classmethod
    def on_grid(cls, *args, **kwargs) -> GridLaplace:
        right = GridLaplace.on_grid(*args, **kwargs)
        return dataclasses.replace(right, scale=right.scale * Fraction(1, 2))


MUTANTS = {
    "unit-bound-not-enforced": (aggregate, "ContributionBounder", _Unbounded),
    "unit-noise-halved": (hierarchy_arithmetic, "GridLaplace", _HalfNoise),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_audit_fails_on_the_mutant(mutant, monkeypatch):
    module, attribute, replacement = MUTANTS[mutant]
    monkeypatch.setattr(module, attribute, replacement)
    result = CliRunner().invoke(cli, ["audit", "unit-aggregate", "--samples", "4000", "--seed", "1"])
    assert result.exit_code == 1, result.output
    assert "1 of 1 audits failed" in result.output


def test_the_audit_passes_on_the_library():
    [audited] = run_audit(["unit-aggregate"], samples=20_000, seed=1)
    assert audited.passed and audited.fraction >= 0.8, format_table([audited])
