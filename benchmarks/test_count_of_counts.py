"""End-to-end time and memory of the hierarchical count-of-counts release at census-like scale.

A 3-level hierarchy with 1 + 50 + 3,000 regions, 10 million groups (the Section 6.1 housing
generator) and the public bound K = 100,000: the Hc method on every level (3,051 noisy
cumulative histograms of 100,000 cells, L1 isotonic regression), Algorithm 2 matching and
Eq. 5-6 merging over 10 million groups per level, back-substitution.  The criterion is
<= 10 minutes and <= 16 GiB; peak memory is the process's maximum resident set size.

The second benchmark is the command line from Parquet tables to the output CSV (about 25
million entity rows).  Run each in its own process, since peak RSS is per process:
``.venv/bin/python -m pytest benchmarks/test_count_of_counts.py --benchmark-only -o addopts="" -s -k <name>``.
"""

from __future__ import annotations

import resource
import sys

import numpy as np
from click.testing import CliRunner

from dpstream.cli import cli
from dpstream.count_of_counts import TopDownCountOfCounts, housing_data, write_tables

GROUPS, STATES, COUNTIES, K = 10_000_000, 50, 3000, 100_000
MINUTES, GIB = 10, 16


def _peak_rss_gib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**30 if sys.platform == "darwin" else peak / 2**20  # bytes on macOS, KiB on Linux


def test_three_levels_ten_million_groups(benchmark):
    data = housing_data(GROUPS, n_states=STATES, n_counties=COUNTIES, seed=0)
    assert [data.tree.size(level) for level in range(3)] == [1, STATES, COUNTIES]

    def release():
        return TopDownCountOfCounts(epsilon=1.0, method="hc", max_size=K, seed=1).release(data)

    out = benchmark.pedantic(release, rounds=1, iterations=1)
    seconds = benchmark.stats.stats.max
    peak = _peak_rss_gib()
    benchmark.extra_info.update(groups=data.n_groups, seconds=seconds, peak_rss_gib=peak)
    print(
        f"\n{data.n_groups:,} groups, 1 + {STATES} + {COUNTIES} regions, K = {K:,}: "
        f"{seconds:.1f} s, peak RSS {peak:.2f} GiB"
    )
    for level, hist in enumerate(out.levels):
        assert np.array_equal(hist.groups(), data.groups(level))
    assert seconds <= MINUTES * 60 and peak <= GIB


def test_command_line_from_parquet_tables(benchmark, tmp_path):
    data = housing_data(GROUPS, n_states=STATES, n_counties=COUNTIES, seed=0)
    entities, groups, hierarchy = write_tables(data, tmp_path, parquet=True)
    del data
    out = tmp_path / "out.csv"
    args = [
        "count-of-counts",
        "--entities",
        str(entities),
        "--groups",
        str(groups),
        "--hierarchy",
        str(hierarchy),
        "--epsilon",
        "1",
        "--max-size",
        str(K),
        "--seed",
        "1",
        "-o",
        str(out),
        "--force",
    ]

    result = benchmark.pedantic(lambda: CliRunner().invoke(cli, args), rounds=1, iterations=1)
    assert result.exit_code == 0, result.output
    seconds = benchmark.stats.stats.max
    peak = _peak_rss_gib()
    benchmark.extra_info.update(seconds=seconds, peak_rss_gib=peak, output_bytes=out.stat().st_size)
    print(f"\ncommand line, Parquet in, CSV out: {seconds:.1f} s, peak RSS {peak:.2f} GiB")
    assert seconds <= MINUTES * 60 and peak <= GIB
