"""Built-in datasets and stream files (``dpstream.datasets``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpstream import load_dataset
from dpstream.io import read_values

SHARED_POS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pos.csv.gz"


@pytest.fixture(scope="module")
def pos():
    return load_dataset("pos")


def test_pos_size_bound_and_name(pos):
    assert pos.name == "pos"
    assert pos.values.size == 515_597  # Table 1: n
    assert pos.values.dtype == np.float64
    assert pos.upper_bound == 1657.0  # Table 1: "max", the public B
    assert "515,597" in pos.description


def test_pos_matches_table_1(pos):
    """Table 1: p85 = 13, p95 = 21, p99.5 = 39, p100 = 165, average 7.5.  Transaction sizes are
    integers, so every percentile definition gives the same integers (checked: linear,
    inverted CDF)."""
    v = pos.values
    assert np.all(v == np.round(v)) and v.min() >= 0
    for p, expected in [(85, 13), (95, 21), (99.5, 39), (100, 165)]:
        assert np.percentile(v, p) == expected
        assert np.percentile(v, p, method="inverted_cdf") == expected
    assert v.max() == 165.0 <= pos.upper_bound
    assert round(float(v.mean()), 1) == 7.5


@pytest.mark.skipif(not SHARED_POS.exists(), reason=f"{SHARED_POS} not present")
def test_pos_matches_shared_copy(pos):
    np.testing.assert_array_equal(pos.values, read_values(SHARED_POS))


def test_upper_bound_override(pos):
    assert load_dataset("pos", upper_bound=2000).upper_bound == 2000.0


def test_a_bound_below_the_data_is_an_error_or_clips(pos):
    """A public bound below a built-in dataset's values is checked like a file's: an error that
    names the first value outside [0, B] and the way out, or, with clip=True, every value clipped."""
    first = int(np.argmax(pos.values > 100))
    expected = rf"position {first} \(0-based\) must be in \[0, 100\] \(clip=True, or --clip, clips it\)"
    with pytest.raises(ValueError, match=expected):
        load_dataset("pos", upper_bound=100)
    clipped = load_dataset("pos", upper_bound=100, clip=True)
    assert clipped.upper_bound == 100.0
    np.testing.assert_array_equal(clipped.values, np.minimum(pos.values, 100.0))


def test_unknown_name_is_an_error():
    with pytest.raises(ValueError) as info:
        load_dataset("no-such-dataset")
    message = str(info.value)
    assert "'no-such-dataset'" in message and "pos" in message


def test_load_file_by_path(tmp_path):
    path = tmp_path / "fares.csv"
    path.write_text("time,fare\n1,3.5\n2,10\n3,0\n")
    data = load_dataset(path, column="fare")
    np.testing.assert_array_equal(data.values, [3.5, 10.0, 0.0])
    assert data.upper_bound == 10.0  # the data's max when no public bound is given
    assert data.name == "fares"
    assert load_dataset(str(path), column="fare", upper_bound=50).upper_bound == 50.0


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("value\n")
    with pytest.raises(ValueError, match="holds no values"):
        load_dataset(path)


def test_a_dataset_file_is_checked_against_its_bound(tmp_path):
    negative, zeros = tmp_path / "negative.txt", tmp_path / "zeros.txt"
    negative.write_text("1\n2\n-5\n")
    zeros.write_text("0\n0\n")
    with pytest.raises(ValueError, match=r"position 2 \(0-based\) must be in \[0, 2\] .*, got -5\.$"):
        load_dataset(negative)
    with pytest.raises(ValueError, match="no positive value"):
        load_dataset(zeros)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\] .*, got 2"):
        load_dataset(negative, upper_bound=1.0)


@pytest.mark.parametrize("name, bound", [("smart-meter", 10_000.0), ("taxi-fares", 50_000.0),
                                         ("bursty-counts", 5_000.0)])
def test_synthetic_streams_load_by_name(name, bound):
    from dpstream.datasets.synthetic import SYNTHETIC

    data = load_dataset(name, length=3_000)
    assert data.name == name and data.upper_bound == bound and data.values.size == 3_000
    np.testing.assert_array_equal(data.values, SYNTHETIC[name][0](3_000, seed=0))
    assert 0.0 <= data.values.min() and data.values.max() <= bound
    assert load_dataset(name, length=3_000, upper_bound=bound / 2, clip=True).values.max() <= bound / 2


def test_length_is_for_synthetic_streams_only():
    with pytest.raises(ValueError, match="length applies to the synthetic streams"):
        load_dataset("pos", length=10)


def test_unknown_name_lists_every_builtin_name():
    with pytest.raises(ValueError) as info:
        load_dataset("no-such-dataset")
    assert all(name in str(info.value) for name in ("pos", "smart-meter", "taxi-fares", "bursty-counts"))
