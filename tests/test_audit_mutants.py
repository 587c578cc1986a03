"""The audit catches real bugs: each injected bug, one at a time, makes ``dpstream audit`` exit 1.

Every mutant patches the library inside this process (``monkeypatch``, undone after the test) in
a way that keeps the claimed epsilon unchanged while the mechanism spends more, then runs the
command on the audit experiment that checks that part, with few runs that still see the bug.
The same audit of the unmutated library passes.  The margins come from the statistics: a 3/4
noise scale spends 4/3 of the claim, a binary tree whose scale counts one level fewer 3/2, and
at these sample sizes the adapters' bounds reach about 0.95 (one measurement) and 0.9 (the
binary tree's three levels) of what is spent, so the mutants' bounds sit near 1.25-1.3 against a
failure threshold of 1 (``REACH`` checks the unmutated side of that margin); a selection without
noise, or one that picks the best true score, releases a different threshold on the two
neighbours every time, and noise shared between keys or reused across chunks makes the runs on
one input alike (bounds of several units).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

import dpstream.count_of_counts.consistency as consistency
import dpstream.hierarchy.arithmetic as hierarchy_arithmetic
import dpstream.release.binary_tree as binary_tree
import dpstream.release.by_key as by_key
import dpstream.release.perturber as perturber
import dpstream.thresholds.model as model
import dpstream.thresholds.noisy_max as noisy_max
from dpstream.audit import format_table, run_audit
from dpstream.cli import cli
from dpstream.noise import ZeroNoise
from dpstream.noise.bits import KeyedBits
from dpstream.noise.grid import GridLaplace


def _scaled_noise(factor: Fraction) -> type[GridLaplace]:
    """GridLaplace whose noise scale is ``factor`` times the right one, the claim unchanged."""

    class Scaled(GridLaplace):
        @classmethod
        def on_grid(cls, *args, **kwargs) -> GridLaplace:
            right = GridLaplace.on_grid(*args, **kwargs)
            return dataclasses.replace(right, scale=right.scale * factor)

    return Scaled


def _no_noise_max(noise, counts, epsilon, *, offsets=None, sensitivity=1, monotone=False) -> int:
    """Report noisy max without the noise: the index of the best exact score (first on ties)."""
    scores = np.asarray(counts, dtype=np.float64) - (0.0 if offsets is None else np.asarray(offsets))
    return int(np.argmax(scores))


def _argmax_select(mechanism, scores, *, epsilon, sensitivity=1.0, monotone=False, seed=None):
    """The model's private selections (the median, step 1, and theta, step 3) pick the best true score."""
    return int(np.argmax(scores))


_estimate_level = consistency.estimate_level


def _exact_root(truth, **options):
    """The top-down release measures its root level (one region) without noise."""
    if truth.n_nodes == 1:
        options["noise"] = ZeroNoise()
    return _estimate_level(truth, **options)


def _tree_one_level_short(exact, *, levels, **options):
    """The binary tree's noise scale counts one level fewer than it measures (sensitivity off by h / (h - 1))."""
    return hierarchy_arithmetic.arithmetic(exact, levels=levels - 1, **options)


_make_source = perturber.make_source


class _FirstChunkNoise:
    """A noise source whose every part draws the first part's noise: each chunk of a stream reuses chunk 0's."""

    def __init__(self, source) -> None:
        self._source = source

    def __getattr__(self, name: str):
        return getattr(self._source, name)

    def sampler(self, *parts):
        return self._source.sampler(0)


def _reused_chunk_noise(**options):
    return _FirstChunkNoise(_make_source(**options))


def _shared_key_bits(*, key: bytes, identity: tuple) -> KeyedBits:
    """Every key of a keyed stream draws the same bits: the secret's, whatever the key."""
    return KeyedBits(key=key, identity=identity[:1])


#: Each mutant: the patch (module, attribute, replacement), the audit experiment and its runs per input.
MUTANTS = {
    "tops-noise-three-quarters": (perturber, "GridLaplace", _scaled_noise(Fraction(3, 4)), "tops-one-level", 400_000),
    "tops-noise-halved": (perturber, "GridLaplace", _scaled_noise(Fraction(1, 2)), "tops-one-level", 20_000),
    "binary-tree-noise-three-quarters": (hierarchy_arithmetic, "GridLaplace", _scaled_noise(Fraction(3, 4)),
                                         "binary-tree", 120_000),
    "binary-tree-one-level-short": (binary_tree, "arithmetic", _tree_one_level_short, "binary-tree", 30_000),
    "nm-e-without-noise": (noisy_max, "report_noisy_max_counts", _no_noise_max, "nm-e", 400),
    "model-threshold-argmax": (model, "select", _argmax_select, "tops-model", 200),
    "noise-reused-across-chunks": (perturber, "make_source", _reused_chunk_noise, "tops-one-level", 20_000),
    "noise-shared-between-keys": (by_key, "KeyedBits", _shared_key_bits, "bt-by-key", 200),
    "count-of-counts-root-without-noise": (consistency, "estimate_level", _exact_root, "count-of-counts-top-down",
                                           2_500),
}


def _audit(name: str, samples: int):
    return CliRunner().invoke(cli, ["audit", name, "--samples", str(samples), "--seed", "1"])


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_audit_fails_on_the_mutant(mutant, monkeypatch):
    module, attribute, replacement, name, samples = MUTANTS[mutant]
    monkeypatch.setattr(module, attribute, replacement)
    result = _audit(name, samples)
    assert result.exit_code == 1, result.output
    assert "1 of 1 audits failed" in result.output and "epsilon lower bound" in result.output


#: The least fraction of the claim the unmutated audit reaches at the mutants' sample sizes (seed 1): enough that
#: 4/3 of the claim (a 3/4 noise scale) is seen above it.
REACH = {"tops-one-level": 0.9, "binary-tree": 0.8}


@pytest.mark.parametrize(("name", "samples"), sorted({(m[3], m[4]) for m in MUTANTS.values()}))
def test_the_audit_passes_on_the_library(name, samples):
    [audited] = run_audit([name], samples=samples, seed=1)  # what the command runs
    assert audited.passed, format_table([audited])
    if samples == max(m[4] for m in MUTANTS.values() if m[3] == name):
        assert audited.fraction >= REACH.get(name, 0.0), format_table([audited])
