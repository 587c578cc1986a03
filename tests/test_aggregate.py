"""Population aggregates under unit-level privacy: bounds, sensitivity by brute force, batches, snapshots."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpstream.durable.encoding import decode, encode
from dpstream.hierarchy.tree import aggregate_levels
from dpstream.noise.sampler import ZeroNoise
from dpstream.release.aggregate import UnitAggregate
from dpstream.release.bounding import ContributionBounder, ContributionBounds

NS = 10**9
PARTS = ["p", "q", "r"]


def _small(**options):
    params = dict(epsilon=1.0, bucket=1, window=4, unit_bound=5.0, upper_bound=3.0, clip=True, max_rows=3,
                  max_partitions=2, partitions=PARTS, noise=ZeroNoise())
    params.update(options)
    return UnitAggregate(**params)


def _leaves(agg, rows):
    """The released (zero-noise: true bounded) totals, shape (windows, partitions, buckets per window)."""
    rows = sorted(rows, key=lambda row: row[0])  # time order; ties keep their order
    times = np.array([row[0] for row in rows], dtype=np.int64) * NS
    out = agg.release(times, np.array([row[1] for row in rows]), np.array([row[2] for row in rows], dtype=float),
                      np.array([row[3] for row in rows]))
    last = agg.flush()
    values = np.concatenate((out.values, last.values))
    buckets = np.concatenate((out.buckets, last.buckets)) // NS
    width, parts = agg.width, len(agg.partitions)
    grid = np.zeros((8 // width, parts, width))
    grid[buckets[::parts] // width, :, buckets[::parts] % width] = values.reshape(-1, parts)
    return grid


def _level_changes(agg, a, b):
    """The L1 change of each level's node sums between two inputs (over every window and partition)."""
    changes = np.zeros(agg.levels)
    for window in range(a.shape[0]):
        for part in range(a.shape[1]):
            for k, (x, y) in enumerate(zip(aggregate_levels(a[window, part], agg.fanout, agg.levels),
                                           aggregate_levels(b[window, part], agg.fanout, agg.levels))):
                changes[k] += np.abs(x - y).sum()
    return changes


def _base_rows(rng):
    rows = [(int(t), unit, float(rng.uniform(0, 4)), PARTS[rng.integers(3)])
            for t, unit in zip(rng.integers(0, 8, 30), rng.choice(["a", "b", "c"], 30))]
    rows.append((7, "a", 1.0, "p"))  # the last bucket is always released
    return rows


def _unit_rows(rng, limit):
    """Rows of the unit 'z' in window 0: every set of up to two rows on a small grid, then random bigger ones."""
    cells = [(t, "z", v, p) for t in range(4) for v in (0.0, 2.0, 9.0) for p in PARTS]
    for size in (0, 1, 2):
        yield from itertools.combinations(cells, size)
    for _ in range(limit):
        yield tuple(cells[i] for i in rng.integers(len(cells), size=int(rng.integers(3, 9))))


@pytest.mark.parametrize("options", [{}, {"levels": 3, "fanout": 2}, {"statistic": "count", "unit_bound": 4.0},
                                     {"max_partitions": None, "max_rows": None}])
def test_one_units_rows_change_each_level_by_at_most_the_bound(options):
    rng = np.random.default_rng(5)
    base = _base_rows(rng)
    without = _leaves(_small(**options), base)
    bound = _small(**options).unit_bound
    worst = np.zeros(_small(**options).levels)
    sets = list(_unit_rows(rng, 150))
    for rows in sets:
        changes = _level_changes(_small(**options), without, _leaves(_small(**options), base + list(rows)))
        worst = np.maximum(worst, changes)
    assert np.all(worst <= bound + 1e-9)
    assert np.any(worst > bound / 2)  # the bound is nearly reached: the check can see a violation
    for a, b in zip(sets[::40], sets[7::40]):  # replacement: 2C
        changes = _level_changes(_small(**options), _leaves(_small(**options), base + list(a)),
                                 _leaves(_small(**options), base + list(b)))
        assert np.all(changes <= 2 * bound + 1e-9)


def test_a_wrong_bound_is_caught_by_the_brute_force_check():
    rng = np.random.default_rng(5)
    base = _base_rows(rng)

    def broken():
        agg = _small()
        bounder = agg._bounders[0]
        bounder.bounds = ContributionBounds(bounder.bounds.limit * 2, 3, 2)  # bounds twice what the noise assumes
        return agg

    without = _leaves(broken(), base)
    worst = max(_level_changes(broken(), without, _leaves(broken(), base + list(rows))).max()
                for rows in _unit_rows(rng, 50))
    assert worst > broken().unit_bound


def test_noise_scale_and_guarantee_follow_from_the_bounds():
    agg = UnitAggregate(epsilon=1.0, bucket=1800, window=86400, unit_bound=30, upper_bound=5, clip=True, seed=1,
                        unit="household")
    assert (agg.width, agg.levels, agg.fanout) == (48, 2, 48)
    assert agg._measures[0].arithmetic.scale_value == 60.0  # d C / eps
    text = str(agg.privacy())
    assert text.startswith("1-DP; neighbours: unit level") and "one household in one UTC day" in text
    replaced = UnitAggregate(epsilon=1.0, bucket=1800, window=86400, unit_bound=30, upper_bound=5, replace=True, seed=1)
    assert replaced._measures[0].arithmetic.scale_value == 120.0 and "replaced" in str(replaced.privacy())
    mean = UnitAggregate(epsilon=1.0, bucket=1800, window=86400, unit_bound=30, upper_bound=5, statistic="mean",
                         max_rows=48, seed=1)
    assert [m.arithmetic.scale_value for m in mean._measures] == [120.0, 192.0]  # eps/2 each: 2*2*30, 2*2*48
    assert mean.privacy().epsilon <= 1.0


def _rows(n, seed, units=20):
    rng = np.random.default_rng(seed)
    times = np.sort(rng.integers(0, 3 * 86400, n)) * NS
    return times, rng.choice([f"m{i}" for i in range(units)], n), rng.uniform(0, 2, n), rng.choice(PARTS, n)


def _collect(parts):
    return [np.concatenate([getattr(p, name) for p in parts]) for name in ("buckets", "partitions", "values")]


@pytest.mark.parametrize("statistic", ["sum", "count", "mean"])
def test_a_batch_equals_row_at_a_time_and_the_state_continues_bit_for_bit(statistic):
    times, units, values, parts = _rows(400, 1)

    def make():
        return UnitAggregate(epsilon=1.0, bucket=1800, window=86400, unit_bound=6, upper_bound=1.5, clip=True,
                             max_rows=30, max_partitions=2, partitions=PARTS, statistic=statistic, seed=3)

    whole = make()
    batch = _collect([whole.release(times, units, values, parts), whole.flush()])
    one = make()
    rows = _collect([one.release(times[i:i + 1], units[i:i + 1], values[i:i + 1], parts[i:i + 1])
                     for i in range(times.size)] + [one.flush()])
    for a, b in zip(batch, rows):
        np.testing.assert_array_equal(a, b)
    first = make()
    head = first.release(times[:150], units[:150], values[:150], parts[:150])
    restored = UnitAggregate.from_state(decode(encode(first.state)))
    tail = [restored.release(times[150:], units[150:], values[150:], parts[150:]), restored.flush()]
    for a, b in zip(batch, _collect([head, *tail])):
        np.testing.assert_array_equal(a, b)


def test_keyed_noise_is_recomputed_from_the_key():
    times, units, values, parts = _rows(300, 2)
    key = bytes(range(32))

    def make():
        return UnitAggregate(epsilon=1.0, bucket=1800, window=86400, unit_bound=6, upper_bound=1.5, clip=True,
                             partitions=PARTS, key=key)

    whole = make()
    expected = _collect([whole.release(times, units, values, parts), whole.flush()])
    first = make()
    head = first.release(times[:100], units[:100], values[:100], parts[:100])
    state = first.state
    assert all(measure["noise"] is None for measure in state["measures"])
    restored = UnitAggregate.from_state(decode(encode(state)))
    got = _collect([head, restored.release(times[100:], units[100:], values[100:], parts[100:]), restored.flush()])
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


def test_bad_rows_are_refused_or_dropped_as_stated():
    agg = _small(clip=False)
    with pytest.raises(ValueError, match=r"row 2: the value 4.0 is not in \[0, 3\]"):
        agg.release(np.array([0, 1]) * NS, np.array(["a", "a"]), np.array([1.0, 4.0]), np.array(["p", "p"]))
    agg = _small()
    with pytest.raises(ValueError, match="row 1: the partition 'x' is not one of the public partitions"):
        agg.release(np.array([0]) * NS, np.array(["a"]), np.array([1.0]), np.array(["x"]))
    agg = _small()
    agg.release(np.array([0, 2]) * NS, np.array(["a", "a"]), np.array([1.0, 1.0]), np.array(["p", "p"]))
    with pytest.raises(ValueError, match="row 3: its bucket was released already"):
        agg.release(np.array([1]) * NS, np.array(["a"]), np.array([1.0]), np.array(["p"]))
    dropping = _small(late="drop")
    out = dropping.release(np.array([0, 2, 1, 2]) * NS, np.array(["a", "a", "b", "b"]), np.ones(4),
                           np.array(["p"] * 4))
    assert dropping.late == 1 and dropping.position == 4 and out.values.tolist()[::3] == [1.0, 0.0]
    with pytest.raises(ValueError, match="whole number of buckets"):
        UnitAggregate(epsilon=1.0, bucket=7 * 60, window=3600, unit_bound=1.0)
    with pytest.raises(ValueError, match="max_rows"):
        UnitAggregate(epsilon=1.0, bucket=60, window=3600, unit_bound=1.0, statistic="mean")


def _one_by_one(units, amounts, parts, limit, max_rows, max_partitions):
    """The bounding as the module docstring words it, row by row."""
    state, out = {}, []
    for unit, amount, part in zip(units, amounts, parts):
        rows, total, seen = state.get(unit, (0, 0, ()))
        if max_partitions is not None and part not in seen:
            if len(seen) >= max_partitions:
                out.append(0)
                continue
            seen = (*seen, part)
        if max_rows is not None and rows >= max_rows:
            state[unit] = (rows, total, seen)
            out.append(0)
            continue
        out.append(min(total + amount, limit) - min(total, limit))
        state[unit] = (rows + 1, min(total + amount, limit), seen)
    return out


def test_the_bounding_keeps_and_scales_the_rows_the_docstring_says_in_any_batches():
    rng = np.random.default_rng(0)
    for trial in range(400):
        n = int(rng.integers(1, 40))
        limit, max_rows = int(rng.integers(1, 30)), [None, int(rng.integers(1, 5))][trial % 2]
        max_partitions = [None, int(rng.integers(1, 3))][(trial // 2) % 2]
        units, amounts, parts = rng.choice(list("abcd"), n), rng.integers(0, 10, n), rng.integers(0, 4, n)
        bounder = ContributionBounder(ContributionBounds(limit, max_rows, max_partitions))
        cut = int(rng.integers(0, n + 1))
        got = [*bounder.bound(units[:cut], amounts[:cut], parts[:cut]),
               *bounder.bound(units[cut:], amounts[cut:], parts[cut:])]
        assert got == _one_by_one(units, amounts, parts, limit, max_rows, max_partitions), trial


def test_count_and_mean_without_noise_are_the_bounded_truth():
    times = np.array([0, 10, 20, 1800, 1810]) * NS
    units, values = np.array(["a", "a", "b", "a", "b"]), np.array([1.0, 3.0, 2.0, 4.0, 0.5])
    options = dict(epsilon=1.0, bucket=1800, window=3600, upper_bound=5.0, noise=ZeroNoise())
    count = UnitAggregate(**options, unit_bound=3.0, statistic="count", max_rows=2)
    got = [*count.release(times, units, values).values, *count.flush().values]
    assert got == [3.0, 1.0]  # a's third row is beyond max_rows
    mean = UnitAggregate(**options, unit_bound=5.0, statistic="mean", max_rows=2)
    got = [*mean.release(times, units, values).values, *mean.flush().values]
    assert got == [2.0, 0.5]  # bucket 0: (1 + 3 + 2) / 3; bucket 1: a's row is its third (dropped), b adds 0.5


def test_replacement_doubles_the_noise_not_the_bound():
    options = dict(epsilon=1.0, bucket=1800, window=3600, unit_bound=4.0, upper_bound=4.0, replace=True)
    agg = UnitAggregate(**options, noise=ZeroNoise())
    out = agg.release(np.array([0, 1, 2]) * NS, np.array(["a"] * 3), np.full(3, 4.0))
    assert [*out.values, *agg.flush().values] == [4.0]  # a's 12 brought down to C = 4, not 2C
    assert UnitAggregate(**options, seed=1).noise_scale == 2 * 2 * 4.0  # d = 2 levels at 2C each
    assert "L1 sensitivity per level 2C = 8" in str(UnitAggregate(**options, seed=1).privacy())


def test_a_window_too_many_leaves_for_memory_is_refused_before_allocating():
    with pytest.raises(ValueError, match=r"a window of 86,400,000 buckets x 1 partitions is more than the 4,194,304"):
        UnitAggregate(epsilon=1.0, bucket=1, window=1000 * 86400, unit_bound=1.0, seed=0)
    with pytest.raises(ValueError, match="x 3 partitions"):
        _small(bucket=1, window=2_000_000)


@pytest.mark.parametrize(("options", "message"), [
    (dict(statistic="count", unit_bound=8.5), "unit_bound is a number of rows: a whole number, got 8.5"),
    (dict(unit_bound=5e-324, upper_bound=2.0), "unit_bound 4.94066e-324 is below what the exact noise's grid"),
    (dict(unit_bound=1e300, upper_bound=2.0), "unit_bound 1e[+]300 is too large: the released values would overflow"),
    (dict(statistic="mean", unit_bound=8.0, max_rows=10**23), "max_rows 1e[+]23 with epsilon 1: noise scale"),
])
def test_bounds_the_grid_would_enforce_otherwise_or_overflow_are_refused(options, message):
    """The stated bound must be the one enforced: a count bound of 8.5 rows was enforced as 9, a subnormal C as a
    whole grid step (0.5), and a C near float64's top released inf."""
    with pytest.raises(ValueError, match=message):
        UnitAggregate(epsilon=1.0, bucket=60, window=3600, seed=0, **options)


def test_a_partition_bound_at_or_above_the_partitions_is_no_bound_and_holds_no_columns():
    rows = [(0, "a", 1.0, "p"), (1, "a", 1.0, "q"), (2, "a", 1.0, "r"), (5, "b", 2.0, "r")]
    huge = _small(max_partitions=10**23)
    assert huge._bounders[0]._parts.shape[1] == 0
    np.testing.assert_array_equal(_leaves(huge, rows), _leaves(_small(max_partitions=None), rows))


def test_a_late_row_is_refused_naming_its_bucket_and_the_open_one():
    agg = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5.0, noise=ZeroNoise())
    agg.release(np.array([1709254800]) * NS, np.array(["a"]), np.array([1.0]))
    with pytest.raises(ValueError, match=r"row 2: its bucket was released already or lies before the start "
                                         r"\(2024-03-01T00:00:00Z, before the open bucket 2024-03-01T01:00:00Z;"):
        agg.release(np.array([1709251300]) * NS, np.array(["a"]), np.array([1.0]))


def test_a_long_gap_is_released_a_window_at_a_time():
    """Rows years apart release every bucket in between: in pieces of one window, so memory stays that of a window."""
    times = np.array([0, 3 * 365 * 86400 + 5]) * NS
    whole = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5.0, seed=3)
    parts = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5.0, seed=3)
    joined = whole.release(times, np.array(["a", "a"]), np.array([1.0, 2.0]))
    pieces = list(parts.release_parts(times, np.array(["a", "a"]), np.array([1.0, 2.0])))
    assert len(joined) == 3 * 365 * 24 and max(len(p) for p in pieces) == 24
    np.testing.assert_array_equal(np.concatenate([p.values for p in pieces]), joined.values)
    np.testing.assert_array_equal(np.concatenate([p.buckets for p in pieces]), joined.buckets)
    assert parts.state["released"] == whole.state["released"] and parts.position == whole.position == 2


def test_dropping_late_rows_states_that_the_arrival_order_is_public():
    """One unit's row that runs ahead makes every other unit's rows of the buckets it closes late: with late="drop"
    the release moves far beyond C, so the relation must say the arrival order is public (and without it, not)."""
    others = [(h * 3600 + 60, f"v{i}", 1.0) for h in range(23) for i in range(20)]

    def total(rows):
        agg = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5.0, late="drop", start=0,
                            noise=ZeroNoise())
        out = agg.release(np.array([r[0] for r in rows]) * NS, np.array([r[1] for r in rows]),
                          np.array([r[2] for r in rows]))
        return float(out.values.sum() + agg.flush().values.sum()), agg

    alone, agg = total(others)
    ahead, _ = total([(23 * 3600, "u", 1.0), *others])
    assert alone - ahead > 5.0 * 10  # far beyond C: the order, not the bound, decides
    assert "the order rows arrive in public" in str(agg.privacy())
    assert "order" not in _small().relation().bounds


def test_a_large_partition_bound_needs_no_rows_x_k_memory():
    """Step 1 compared every row with its unit's K partitions at once (rows x K int64): 20,000 rows with K = 2,000
    took 320 MB.  It now matches (unit, partition) pairs, and keeps what it kept."""
    import tracemalloc

    rng = np.random.default_rng(5)
    units, parts = rng.integers(0, 5, 20_000), rng.integers(0, 6_000, 20_000)
    bounder = ContributionBounder(ContributionBounds(limit=10**9, max_partitions=2_000))
    tracemalloc.start()
    kept = bounder.bound(units, np.ones(units.size, dtype=np.int64), parts)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20
    expected = _one_by_one(units.tolist(), [1] * units.size, parts.tolist(), 10**9, None, 2_000)
    assert kept.tolist() == expected and 0 < expected.count(0) < units.size


def test_datetime64_times_of_any_unit_are_read_as_instants():
    """``datetime64[s]`` cast to int64 gave seconds where nanoseconds are meant: every row fell in 1970's first
    bucket, silently."""
    seconds = np.array(["2024-03-01T00:10", "2024-03-01T01:10"], dtype="datetime64[s]")
    agg = UnitAggregate(epsilon=1.0, bucket=3600, window=86400, unit_bound=5.0, noise=ZeroNoise())
    out = agg.release(seconds, np.array(["a", "a"]), np.array([1.0, 2.0]))
    assert out.buckets.tolist() == [1709251200 * NS] and out.values.tolist() == [1.0]
