"""``repr`` and ``get_params`` on every mechanism (``dpstream._params``), and the package's ``py.typed``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

import dpstream
from dpstream._params import SECRET, Params
from dpstream.count_of_counts import BottomUpCountOfCounts, TopDownCountOfCounts
from dpstream.ldp.mean import HybridMechanism, PiecewiseMechanism, StochasticRounding
from dpstream.ldp.square_wave import SquareWave
from dpstream.postprocess.mechanism import LaplaceCounts
from dpstream.release import HierarchicalPerturber, ToPL, ToPS
from dpstream.release.binary_tree import BinaryTreeCounter
from dpstream.release.by_key import ByKey
from dpstream.release.pak import PAK
from dpstream.release.periodic import PeriodicPerturber
from dpstream.release.registry import REGISTRY
from dpstream.release.topl import ToPLCollector
from dpstream.release.topl_randomizer import ToPLRandomizer

KEY = bytes(range(32))

#: Every mechanism with a noise source: (class, its public arguments, its secret ones).
MECHANISMS = [
    (ToPS, dict(epsilon=0.5, upper_bound=100.0, hold=50, max_range=256), dict(seed=987_654_321)),
    (ToPS, dict(epsilon=0.5, upper_bound=100.0, hold=50, threshold_method="nm-e"), dict(key=KEY)),
    (PAK, dict(epsilon=1.0, upper_bound=100.0, hold=50, max_range=256), dict(seed=987_654_321)),
    (BinaryTreeCounter, dict(epsilon=1.0, upper_bound=20.0, max_range=256), dict(key=KEY)),
    (HierarchicalPerturber, dict(threshold=20.0, epsilon=1.0, max_range=256), dict(seed=987_654_321)),
    (PeriodicPerturber, dict(threshold=20.0, epsilon=1.0, period=24, max_range=1024), dict(seed=987_654_321)),
    (ToPL, dict(epsilon=1.0, upper_bound=100.0, hold=50, max_range=256), dict(seed=987_654_321)),
    (TopDownCountOfCounts, dict(epsilon=1.0, max_size=50), dict(seed=987_654_321)),
    (BottomUpCountOfCounts, dict(epsilon=1.0, max_size=50), dict(key=KEY)),
    (LaplaceCounts, dict(epsilon=1.0, sensitivity=1), dict(seed=987_654_321)),
]

#: Mechanisms without a noise source of their own (the client's or collector's side).
PUBLIC_ONLY = [
    (ToPLCollector, dict(epsilon=1.0, upper_bound=100.0, hold=50)),
    (ToPLRandomizer, dict(epsilon=1.0, upper_bound=100.0, threshold=20.0)),
    (StochasticRounding, dict(epsilon=1.0)),
    (PiecewiseMechanism, dict(epsilon=1.0)),
    (HybridMechanism, dict(epsilon=1.0)),
    (SquareWave, dict(epsilon=1.0, grid=64)),
]


def _name(case) -> str:
    return case[0].__name__


@pytest.mark.parametrize("cls, public, secret", MECHANISMS, ids=[_name(c) for c in MECHANISMS])
def test_repr_names_the_arguments_given_and_hides_the_noise_source(cls, public, secret):
    text = repr(cls(**public, **secret))
    assert text.startswith(f"{cls.__name__}(") and " object at 0x" not in text
    for name, value in public.items():
        assert f"{name}={value!r}" in text
    (name, value), = secret.items()
    assert f"{name}=<{type(value).__name__}>" in text
    assert str(value) not in text and repr(value) not in text and KEY.hex() not in text


@pytest.mark.parametrize("cls, public, secret", MECHANISMS, ids=[_name(c) for c in MECHANISMS])
def test_get_params_rebuilds_the_mechanism(cls, public, secret):
    mechanism = cls(**public, **secret)
    params = mechanism.get_params()
    assert not SECRET & set(params)
    assert {name: params[name] for name in public} == public
    again = cls(**params, **secret)
    assert again.get_params() == params and repr(again) == repr(mechanism)


@pytest.mark.parametrize("cls, public", PUBLIC_ONLY, ids=[_name(c) for c in PUBLIC_ONLY])
def test_public_only_mechanisms_have_params_too(cls, public):
    mechanism = cls(**public)
    params = mechanism.get_params()
    assert {name: params[name] for name in public} == public
    again = cls(**params)
    assert again.get_params() == params and repr(again) == repr(mechanism)
    assert repr(mechanism).startswith(f"{cls.__name__}(") and " object at 0x" not in repr(mechanism)


def test_the_same_parameters_and_seed_release_the_same_values():
    values = np.random.default_rng(0).integers(0, 30, 600).astype(float)
    tops = ToPS(epsilon=0.5, upper_bound=100.0, hold=100, max_range=256, seed=5)
    twin = ToPS(**tops.get_params(), seed=5)
    np.testing.assert_array_equal(tops.release(values), twin.release(values))


def test_a_restored_mechanism_keeps_its_parameters():
    tops = ToPS(epsilon=0.5, upper_bound=100.0, hold=10, max_range=256, smoother="mean", seed=5)
    assert ToPS.from_state(tops.state).get_params() == tops.get_params()


def test_defaults_are_left_out_of_repr_but_not_of_get_params():
    tops = ToPS(epsilon=0.5, upper_bound=100.0)
    assert repr(tops) == "ToPS(epsilon=0.5, upper_bound=100.0)"
    assert tops.get_params()["threshold_method"] == "model"
    # hold's default is None: the paper's 65,536, or fitted to expected_length
    assert tops.get_params()["hold"] is None and tops.hold == 65536


def test_every_registered_and_keyed_mechanism_has_params():
    assert all(issubclass(entry.cls, Params) for entry in REGISTRY.values())
    keyed = ByKey(build=lambda key: ToPS(epsilon=1.0, upper_bound=1.0), max_keys=5)
    assert keyed.get_params()["max_keys"] == 5 and repr(keyed).startswith("ByKey(build=<function ")


def test_the_outermost_constructor_records_the_arguments():
    class Base(Params):
        def __init__(self, *, epsilon: float, fanout: int = 16, seed: object = None) -> None:
            self.epsilon = epsilon

    class Narrow(Base):
        def __init__(self, *, epsilon: float, seed: object = None) -> None:
            super().__init__(epsilon=epsilon, fanout=2, seed=seed)

    narrow = Narrow(epsilon=0.25, seed=11)
    assert narrow.get_params() == {"epsilon": 0.25}
    assert repr(narrow) == "Narrow(epsilon=0.25, seed=<int>)"
    assert repr(Base(epsilon=1.0, fanout=4)) == "Base(epsilon=1.0, fanout=4)"


def test_arrays_and_long_values_stay_short_in_repr():
    class Table(Params):
        def __init__(self, *, weights: object, label: str = "") -> None:
            pass

    text = repr(Table(weights=np.zeros((1000, 3)), label="x" * 500))
    assert "<array (1000, 3) float64>" in text and len(text) < 120


def test_the_package_is_typed():
    assert (Path(dpstream.__file__).parent / "py.typed").is_file()
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["dpstream"]
