"""Names that moved or were renamed keep working for one release, with a DeprecationWarning.

Each old name must resolve to the very object at its new home (not a copy), warn, and name that
home in the warning; an unknown name still raises AttributeError.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import dpstream.noise.discrete_gaussian_law as gaussian_law
import dpstream.noise.discrete_laplace_law as laplace_law
import dpstream.noise.exact_primitives as primitives
import dpstream.noise.float_noise as float_noise
import dpstream.noise.rounded_laplace as rounded
from dpstream.client import ToPLClient as HttpToPLClient
from dpstream.count_of_counts import CountOfCountsData, TopDownCountOfCounts
from dpstream.noise.laplace import report_noisy_max_counts
from dpstream.postprocess import dispatch
from dpstream.release.topl_randomizer import ToPLRandomizer
from dpstream.thresholds.select import report_noisy_max_scores

MOVED = [
    ("dpstream.noise.exact", "MAX_LAPLACE_NUMERATOR", laplace_law),
    ("dpstream.noise.exact", "discrete_laplace", laplace_law),
    ("dpstream.noise.exact", "discrete_laplace_pmf", laplace_law),
    ("dpstream.noise.exact", "discrete_gaussian", gaussian_law),
    ("dpstream.noise.exact", "discrete_gaussian_pmf", gaussian_law),
    ("dpstream.noise.exact", "bernoulli", primitives),
    ("dpstream.noise.exact", "bernoulli_exp", primitives),
    ("dpstream.noise.exact", "uniform_below", primitives),
    ("dpstream.noise.geometric", "SCALE_BITS", laplace_law),
    ("dpstream.noise.geometric", "discrete_laplace_scale", laplace_law),
    ("dpstream.noise.geometric", "double_geometric_pmf", laplace_law),
    ("dpstream.noise.geometric", "double_geometric_variance", laplace_law),
    ("dpstream.noise.float_geometric", "MAX_SCALE", float_noise),
    ("dpstream.noise.float_geometric", "double_geometric_noise", float_noise),
    ("dpstream.noise.float_continuous", "laplace_noise", float_noise),
    ("dpstream.noise.float_continuous", "float_laplace", float_noise),
    ("dpstream.noise.float_continuous", "float_gaussian", float_noise),
    ("dpstream.noise.continuous", "rounded_laplace", rounded),
]


@pytest.mark.parametrize("old, name, home", MOVED)
def test_old_noise_module_paths_resolve_to_the_new_homes_with_a_warning(old, name, home):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated: use {home.__name__}\.{name}"):
        value = getattr(module, name)
    assert value is getattr(home, name)


def test_old_from_import_form_works():
    with pytest.warns(DeprecationWarning):
        from dpstream.noise.exact import discrete_laplace  # noqa: PLC0415
    assert discrete_laplace is laplace_law.discrete_laplace


RENAMED = [
    ("dpstream.noise", "report_noisy_max", report_noisy_max_counts),
    ("dpstream.noise.laplace", "report_noisy_max", report_noisy_max_counts),
    ("dpstream.thresholds.select", "report_noisy_max", report_noisy_max_scores),
    ("dpstream.release", "ToPLClient", ToPLRandomizer),
    ("dpstream.release.topl", "ToPLClient", ToPLRandomizer),
    ("dpstream.postprocess.estimators", "postprocess", dispatch.postprocess),
    ("dpstream.postprocess.estimators", "METHODS", dispatch.METHODS),
]


@pytest.mark.parametrize("module, old, new", RENAMED)
def test_renamed_public_names_are_deprecated_aliases(module, old, new):
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated"):
        value = getattr(importlib.import_module(module), old)
    assert value is new


@pytest.mark.parametrize("module", ["dpstream.noise", "dpstream.noise.exact", "dpstream.release"])
def test_unknown_names_still_raise_attribute_error(module):
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = importlib.import_module(module).no_such_name


def test_the_two_topl_clients_are_two_classes():
    # the service's HTTP client keeps its name; the library's randomizer is another class
    assert HttpToPLClient is not ToPLRandomizer and HttpToPLClient.__module__ == "dpstream.client"


def test_the_two_noisy_max_differ_as_their_names_say():
    # counts: integer queries with public offsets; scores: real numbers floored to a grid first
    assert report_noisy_max_counts(1, np.array([0, 10**6, 0]), 1.0) == 1
    assert report_noisy_max_scores([0.0, 50.5, 0.0], epsilon=1.0, seed=1) == 1
    with pytest.raises(ValueError, match="counts must be integers"):
        report_noisy_max_counts(1, np.array([0.0, 50.5, 0.0]), 1.0)


def test_top_down_methods_keyword_is_a_deprecated_alias_of_method():
    data = CountOfCountsData.from_leaf_sizes([("US", "CA"), ("US", "OR")], {"CA": [1, 2, 2, 7], "OR": [4, 1]})
    with pytest.warns(DeprecationWarning, match=r"\(methods=\) is deprecated: use method="):
        old = TopDownCountOfCounts(epsilon=1.0, methods=("hg", "hc"), max_size=10, seed=3)
    new = TopDownCountOfCounts(epsilon=1.0, method=("hg", "hc"), max_size=10, seed=3)
    assert old.methods == new.methods == ("hg", "hc")
    for a, b in zip(old.release(data).levels, new.release(data).levels, strict=True):
        assert np.array_equal(a.count, b.count) and np.array_equal(a.size, b.size)
