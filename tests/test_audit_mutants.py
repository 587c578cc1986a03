"""The audit catches real bugs: each injected bug, one at a time, makes ``dpstream audit`` exit 1.

Every mutant is a set of textual patches (an exact piece of source replaced by another, each
of which must occur exactly once, so a renamed target fails loudly and never passes silently)
applied to a copy of the package; the command then runs in a subprocess whose ``PYTHONPATH`` is
that copy, on the audit experiment that checks that part, with the fewest runs that still see
the bug.  It must exit 1 on its epsilon check.  The same audits of an unmutated copy exit 0, and
a harmless patch (a comment) is not detected, so the test tells a bug from a change.

Every mutant keeps the claimed epsilon while the mechanism spends more.  The margins come from
the statistics: a 3/4 noise scale spends 4/3 of the claim, a binary tree whose scale counts one
level fewer 3/2, a halved sensitivity or a budget split over one level too few twice the claim;
at these sample sizes the adapters' bounds reach about 0.95 (one measurement), 0.9 (the binary
tree's three levels) and 0.8 (the naive count-of-counts, the top-down levels) of what is spent,
so the mutants' bounds sit above the failure threshold of 1 (``REACH`` checks the unmutated side
of the finest margin).  A selection without noise, or one that picks the best true score,
releases a different threshold on the two neighbours every time, and noise shared between keys
or reused across chunks makes the runs on one input alike (bounds of several units).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import dpstream

#: The package under test: its copies are mutated, never the package itself.
PACKAGE = Path(dpstream.__file__).parent

#: One textual patch: the file (under the package), the exact source to replace, its replacement.
Patch = tuple[str, str, str]


@dataclass(frozen=True)
class Mutant:
    """An injected bug (``bug``, the docstring of the function that declares it), its patches, and
    the audit experiment with the runs per input that must see it."""

    name: str
    bug: str
    patches: tuple[Patch, ...]
    audit: str
    runs: int


MUTANTS: dict[str, Mutant] = {}


def mutant(audit: str, runs: int) -> Callable[[Callable[[], tuple[Patch, ...]]], Callable[[], tuple[Patch, ...]]]:
    """Declare a mutant: the decorated function returns its patches and its docstring says the bug."""

    def declare(patches: Callable[[], tuple[Patch, ...]]) -> Callable[[], tuple[Patch, ...]]:
        name = patches.__name__.replace("_", "-")
        MUTANTS[name] = Mutant(name, (patches.__doc__ or "").strip(), patches(), audit, runs)
        return patches

    return declare


_GRID_ON_PERTURBER = ("            noise = GridLaplace.on_grid(threshold, self.epsilon, g, "
                      "levels=self.measured_levels)\n")
_IMPORT_REPLACE = ("release/perturber.py", "from dataclasses import dataclass\n",
                   "from dataclasses import dataclass, replace\n")


@mutant("tops-one-level", 400_000)
def tops_noise_three_quarters() -> tuple[Patch, ...]:
    """ToPS's hierarchy noise at 3/4 of its scale (the perturber spends 4/3 of its claim)."""
    return (_IMPORT_REPLACE, ("release/perturber.py", _GRID_ON_PERTURBER,
                              _GRID_ON_PERTURBER + "            noise = replace(noise, scale=noise.scale * 3 / 4)\n"))


@mutant("tops-one-level", 20_000)
def tops_noise_halved() -> tuple[Patch, ...]:
    """ToPS's hierarchy noise at half its scale (twice the claim)."""
    return (_IMPORT_REPLACE, ("release/perturber.py", _GRID_ON_PERTURBER,
                              _GRID_ON_PERTURBER + "            noise = replace(noise, scale=noise.scale / 2)\n"))


@mutant("binary-tree", 120_000)
def binary_tree_noise_three_quarters() -> tuple[Patch, ...]:
    """The exact hierarchy arithmetic (the binary tree's) draws noise at 3/4 of its scale."""
    chosen = "        return GridArithmetic(GridLaplace.choose(bound, epsilon, granularity, levels=levels))\n"
    return (("hierarchy/arithmetic.py", "from fractions import Fraction\n",
             "from dataclasses import replace\nfrom fractions import Fraction\n"),
            ("hierarchy/arithmetic.py", chosen,
             "        noise = GridLaplace.choose(bound, epsilon, granularity, levels=levels)\n"
             "        return GridArithmetic(replace(noise, scale=noise.scale * 3 / 4))\n"))


@mutant("binary-tree", 30_000)
def binary_tree_one_level_short() -> tuple[Patch, ...]:
    """The binary tree's noise scale counts one level fewer than it measures (sensitivity off by h / (h - 1))."""
    return (("release/binary_tree.py",
             "arithmetic(self.exact, bound=bound, epsilon=self.epsilon, levels=self.levels,",
             "arithmetic(self.exact, bound=bound, epsilon=self.epsilon, levels=self.levels - 1,"),)


@mutant("nm-e", 400)
def nm_e_without_noise() -> tuple[Patch, ...]:
    """Report noisy max (NM-E's selection) adds no noise: the best exact count wins."""
    return (("noise/laplace.py", "    noisy = values + noise.laplace_units(scale, values.size)\n",
             "    noisy = values + 0 * noise.laplace_units(scale, values.size)\n"),)


@mutant("unit-aggregate", 4_000)
def unit_bound_doubled() -> tuple[Patch, ...]:
    """Contribution bounding lets a unit add twice the L1 bound C that the noise is drawn for."""
    return (("release/bounding.py", "        limit = self.bounds.limit\n", "        limit = 2 * self.bounds.limit\n"),)


@mutant("locations", 40_000)
def locations_bounded_sensitivity_one() -> tuple[Patch, ...]:
    """Location counts under bounded neighbours draw noise for L1 sensitivity 1, but a user who moves changes two
    counts (it is 2)."""
    return (("release/locations.py", 'NEIGHBOURS = {"bounded": 2, "unbounded": 1}',
             'NEIGHBOURS = {"bounded": 1, "unbounded": 1}'),)


@mutant("tops-w-event", 4_000)
def w_event_sensitivity_of_one_value() -> tuple[Patch, ...]:
    """The w-event hierarchy takes a window's sensitivity per level as one value's (theta) instead of the sum over the
    bounded periods the window touches (S = 2C here: twice the claim)."""
    return (("release/wevent.py", "    return max(totals)\n", "    return step\n"),)


@mutant("tops-w-event", 4_000)
def w_event_periods_not_bounded() -> tuple[Patch, ...]:
    """The w-event release draws the noise for periods bounded at C but measures the unbounded ones."""
    return (("release/wevent.py", "        return perturber.release(self._values(bounded))\n",
             "        return perturber.release(values)\n"),)


@mutant("unit-aggregate-selection", 8_000)
def selection_noise_halved() -> tuple[Patch, ...]:
    """Private partition selection draws the noise of its distinct-unit counts at half the scale it claims."""
    return (("release/partition_selection.py", "laplace_units(self.scale, 1)", "laplace_units(self.scale / 2, 1)"),)


@mutant("tops-model", 200)
def model_threshold_argmax() -> tuple[Patch, ...]:
    """The model threshold's private selections (the median, step 1, and theta, step 3) take the best true score."""
    return (("thresholds/model.py",
             'index = select("permute-and-flip", self.rank_scores(), epsilon=epsilon, seed=self.bits)',
             "index = int(np.argmax(self.rank_scores()))"),
            ("thresholds/model.py", "index = select(selection, scores, epsilon=epsilon, monotone=True, seed=self.bits)",
             "index = int(np.argmax(scores))"))


@mutant("count-of-counts-top-down", 200)
def count_of_counts_root_without_noise() -> tuple[Patch, ...]:
    """Top-down count-of-counts measures its root level without noise."""
    return (("count_of_counts/consistency.py",
             "from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler\n",
             "from dpstream.noise.sampler import ExactNoise, FloatNoise, NoiseSampler, ZeroNoise\n"),
            ("count_of_counts/consistency.py", "                    noise=noise.child(level),\n",
             "                    noise=noise.child(level) if level else ZeroNoise(),\n"))


@mutant("count-of-counts-top-down", 1_000)
def count_of_counts_levels_overspend() -> tuple[Patch, ...]:
    """Top-down count-of-counts splits its budget over L levels instead of L + 1 (the shares sum to (L + 1) / L)."""
    return (("count_of_counts/consistency.py",
             "        per_level = Fraction(self.epsilon) / levels  # exact",
             "        per_level = Fraction(self.epsilon) / (levels - 1)  # exact"),)


@mutant("count-of-counts-top-down", 8_000)
def count_of_counts_levels_four_thirds() -> tuple[Patch, ...]:
    """Top-down count-of-counts gives each of its two levels 2/3 of the budget (the shares sum to 4/3, as a
    3/4 noise scale would spend)."""
    return (("count_of_counts/consistency.py",
             "        per_level = Fraction(self.epsilon) / levels  # exact",
             "        per_level = Fraction(self.epsilon) * 2 / (levels + 1)  # exact"),)


@mutant("count-of-counts-naive", 20_000)
def count_of_counts_naive_sensitivity_halved() -> tuple[Patch, ...]:
    """The naive count-of-counts method's sensitivity is taken as 1 (one entity moves two cells: it is 2)."""
    return (("count_of_counts/estimators.py", 'SENSITIVITY = {"hc": 1, "hg": 1, "naive": 2}',
             'SENSITIVITY = {"hc": 1, "hg": 1, "naive": 1}'),)


@mutant("bt-by-key", 200)
def noise_shared_between_keys() -> tuple[Patch, ...]:
    """Every key of a keyed stream draws the same bits: the secret's, whatever the key."""
    return (("release/by_key.py", "    return KeyedBits(key=secret, identity=(KEY_IDENTITY, key))\n",
             "    return KeyedBits(key=secret, identity=(KEY_IDENTITY,))\n"),)


@mutant("tops-one-level", 20_000)
def noise_reused_across_chunks() -> tuple[Patch, ...]:
    """Every chunk of the perturber draws the first chunk's noise (its keyed identity is always chunk 0)."""
    return (("release/perturber.py", "ar.draw(self._source.sampler(self._clock() // self.max_range),",
             "ar.draw(self._source.sampler(0),"),)


@mutant("tops-one-level", 20_000)
def noise_identity_without_parts() -> tuple[Patch, ...]:
    """A keyed noise source leaves the part out of the identity: every part of a release (every chunk,
    every region) draws the same noise."""
    return (("noise/source.py", "ExactNoise(bits=KeyedBits(key=self._key, identity=self.identity + parts))",
             "ExactNoise(bits=KeyedBits(key=self._key, identity=self.identity))"),)


@mutant("binary-tree-gaussian", 200_000)
def gaussian_levels_left_out() -> tuple[Patch, ...]:
    """The discrete Gaussian's L2 sensitivity leaves the levels out (one node's, not sqrt(h) of them): the
    binary tree under zCDP draws sigma sqrt(3) times too small and spends 3 rho."""
    return (("noise/grid_gaussian.py", "        square = units * units * levels\n",
             "        square = units * units\n"),)


@mutant("sqrt-zcdp", 2_000)
def factorization_column_of_the_real_factor() -> tuple[Patch, ...]:
    """The square-root factorization calibrates its noise to the column norm of the real factor (binom(2k, k) / 4^k),
    not of the integer one it measures (s = 2^b + 1 times it): sigma s times too small."""
    return (("release/factorization.py", "        column = int(np.dot(self.coefficients, self.coefficients))\n",
             "        column = max(1, round(float(np.sum(sqrt_coefficients(self.max_range) ** 2))))\n"),)


@mutant("banded-zcdp", 2_000)
def banded_band_of_the_real_factor() -> tuple[Patch, ...]:
    """The banded factorization calibrates its noise to the band of the real factor (binom(2k, k) / 4^k for k < b),
    not of the integer encoder it measures (s = 2^bits + 1 times it): sigma s times too small.  (The factorizations
    share the line: the audit of the banded one must see it on its own.)"""
    return (("release/factorization.py", "        column = int(np.dot(self.coefficients, self.coefficients))\n",
             "        column = max(1, round(float(np.sum((self.coefficients / self.coefficients[0]) ** 2))))\n"),)


@mutant("tops-gaussian", 120_000)
def tops_gaussian_levels_left_out() -> tuple[Patch, ...]:
    """ToPS's hierarchy under zCDP draws its discrete Gaussian for one measured level's L2 sensitivity (theta, not
    theta sqrt(h - s)): with three levels sigma is sqrt(3) too small and the hierarchy spends 3 rho."""
    return (("release/perturber.py", "rho=self.rho, granularity=granularity,\n"
             "                                          levels=self.measured_levels)",
             "rho=self.rho, granularity=granularity,\n                                          levels=1)"),)


def apply_patches(root: Path, patches: tuple[Patch, ...]) -> None:
    """Apply each patch to the package copied under ``root``; a target that does not occur exactly once fails."""
    for path, old, new in patches:
        source = root / "dpstream" / path
        text = source.read_text()
        found = text.count(old)
        if found != 1:
            raise AssertionError(f"{path}: the patch's target occurs {found} times, not once: {old!r}")
        source.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A copy of the package, compiled once (every mutant's copy starts from it)."""
    root = tmp_path_factory.mktemp("pristine")
    shutil.copytree(PACKAGE, root / "dpstream", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "dpstream")], check=True)
    return root


def _copy(pristine: Path, tmp_path: Path, patches: tuple[Patch, ...] = ()) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)  # the compiled files stay valid for every file left unpatched
    apply_patches(root, patches)
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run([sys.executable, *args], env=env, cwd=root, capture_output=True, text=True, timeout=600)


def _audit(root: Path, name: str, runs: int) -> subprocess.CompletedProcess:
    return _run(root, "-m", "dpstream.cli", "audit", name, "--runs", str(runs), "--seed", "1")


def _fraction(stdout: str, name: str) -> float:
    """The ``lb/claim`` column of ``name``'s row in the audit's table."""
    row = re.search(rf"^{re.escape(name)}\s+\S+\s+\S+\s+\S+\s+(\S+)", stdout, flags=re.MULTILINE)
    assert row is not None, stdout
    return float(row.group(1))


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_audit_fails_on_the_mutant(name, pristine, tmp_path):
    bug = MUTANTS[name]
    assert bug.bug, f"{name} must say in its docstring what bug it models"
    result = _audit(_copy(pristine, tmp_path, bug.patches), bug.audit, bug.runs)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "1 of 1 audits failed" in result.stderr and f"{bug.audit}: epsilon lower bound" in result.stdout, (
        result.stdout + result.stderr)


#: The least fraction of the claim the unmutated audit reaches at the mutants' largest sample sizes (seed 1):
#: enough that 4/3 of the claim (a 3/4 noise scale) is seen above it.
REACH = {"tops-one-level": 0.9, "binary-tree": 0.8, "count-of-counts-top-down": 0.75}


@pytest.mark.parametrize(("name", "runs"), sorted({(m.audit, m.runs) for m in MUTANTS.values()}))
def test_the_audit_passes_on_the_package(name, runs, pristine, tmp_path):
    result = _audit(_copy(pristine, tmp_path), name, runs)
    assert result.returncode == 0, result.stdout + result.stderr
    if runs == max(m.runs for m in MUTANTS.values() if m.audit == name):
        assert _fraction(result.stdout, name) >= REACH.get(name, 0.0), result.stdout


def test_a_harmless_patch_is_not_detected(pristine, tmp_path):
    """A comment changed next to where ``nm-e-without-noise`` removes the noise: the audit passes."""
    line = "    noisy = values + noise.laplace_units(scale, values.size)\n"
    root = _copy(pristine, tmp_path, (("noise/laplace.py", line, "    # the noisy counts\n" + line),))
    result = _audit(root, "nm-e", MUTANTS["nm-e-without-noise"].runs)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_copy_is_what_the_subprocess_runs(pristine, tmp_path):
    root = _copy(pristine, tmp_path)
    result = _run(root, "-c", "import dpstream; print(dpstream.__file__)")
    assert Path(result.stdout.strip()) == root / "dpstream" / "__init__.py", result.stdout + result.stderr


def test_a_patch_whose_target_moved_fails_loudly(tmp_path):
    (tmp_path / "dpstream").mkdir()
    (tmp_path / "dpstream" / "m.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(AssertionError, match="occurs 2 times, not once"):
        apply_patches(tmp_path, (("m.py", "x = 1\n", "x = 2\n"),))
    with pytest.raises(AssertionError, match="occurs 0 times, not once"):
        apply_patches(tmp_path, (("m.py", "y = 1\n", "y = 2\n"),))


def test_every_mutant_targets_the_package_once():
    """Every patch of every mutant finds its target exactly once in the package as it is (a rename
    of a target shows here, before any audit runs)."""
    for bug in MUTANTS.values():
        for path, old, _ in bug.patches:
            assert (PACKAGE / path).read_text().count(old) == 1, (bug.name, path, old)
