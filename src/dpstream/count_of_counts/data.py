"""Count-of-counts inputs: the region tree, the groups and their (private) sizes.

The paper's three tables (Section 3) are Entities(entity_id, group_id), which is private,
Groups(group_id, region_id) and Hierarchy(region_id, level0, ..., levelL), which are public.
Every Hierarchy row is a leaf region; ``level0 .. levelL`` name its ancestors from the root
(one region at level 0) down to the leaf itself.  Region names must be unique within a level.

:class:`CountOfCountsData` holds the same information compactly: the tree and, for every
group, its leaf and its size.  Build it from the tables (:func:`read_tables`, CSV or Parquet),
directly from group sizes per leaf (:meth:`CountOfCountsData.from_leaf_sizes`), or from the
generators of Section 6.1 (:func:`housing_data`, :func:`taxi_data`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dpstream._checks import check_nonnegative_int, check_positive_int
from dpstream.count_of_counts.histograms import LevelHistograms
from dpstream.io import InputError
from dpstream.rng import Seed, make_rng

__all__ = ["CountOfCountsData", "RegionTree", "housing_data", "read_tables", "taxi_data", "write_tables"]


@dataclass(frozen=True, kw_only=True)
class RegionTree:
    """A public region hierarchy with levels ``0 .. L``.

    ``names[l][i]`` is the name of region ``i`` of level ``l`` and ``parents[l][i]`` the index
    of its parent in level ``l - 1`` (``-1`` at the root).  Within a level, regions are sorted
    by parent, so the children of a region are consecutive.
    """

    names: tuple[np.ndarray, ...]
    parents: tuple[np.ndarray, ...]

    @property
    def levels(self) -> int:
        """``L + 1``, the number of levels including the root."""
        return len(self.names)

    def size(self, level: int) -> int:
        """How many regions level ``level`` has."""
        return len(self.names[level])

    def leaf_ancestor(self, level: int) -> np.ndarray:
        """For every leaf, the index of its ancestor at ``level``."""
        index = np.arange(self.size(self.levels - 1))
        for lower in range(self.levels - 1, level, -1):
            index = self.parents[lower][index]
        return index

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[str]]) -> tuple[RegionTree, np.ndarray]:
        """The tree of leaf paths ``(level0, ..., levelL)``, and each path's leaf index.

        >>> tree, leaf = RegionTree.from_paths([("US", "CA", "LA"), ("US", "OR", "Lane"), ("US", "CA", "SF")])
        >>> [names.tolist() for names in tree.names], leaf.tolist()
        ([['US'], ['CA', 'OR'], ['LA', 'SF', 'Lane']], [0, 2, 1])
        """
        table = np.asarray(paths, dtype=str)
        if table.ndim != 2 or table.shape[0] == 0 or table.shape[1] == 0:
            raise ValueError(f"a hierarchy needs at least one leaf and one level, got shape {table.shape}.")
        if len(set(table[:, 0])) != 1:
            raise ValueError(f"level0 must name a single root region, got {sorted(map(str, set(table[:, 0])))[:5]}.")
        names: list[np.ndarray] = []
        parents: list[np.ndarray] = []
        row_node = np.zeros(table.shape[0], dtype=np.int64)
        for level in range(table.shape[1]):
            unique, inverse = np.unique(table[:, level], return_inverse=True)
            parent_of_unique = np.full(unique.size, -1, dtype=np.int64)
            if level:
                parent_of_unique[inverse] = row_node
                clash = parent_of_unique[inverse] != row_node
                if clash.any():
                    name = str(table[np.flatnonzero(clash)[0], level])
                    raise ValueError(
                        f"region {name!r} appears under two parents at level {level}; names must be unique per level."
                    )
            order = np.lexsort((unique, parent_of_unique))
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            names.append(unique[order])
            parents.append(parent_of_unique[order])
            row_node = rank[inverse]
        if len(set(table[:, -1])) != table.shape[0]:
            raise ValueError("every leaf region must appear in exactly one hierarchy row.")
        return cls(names=tuple(names), parents=tuple(parents)), row_node


@dataclass(frozen=True, kw_only=True)
class CountOfCountsData:
    """The tree, and the leaf and size (number of entities) of every group.

    Group sizes are the private part; the tree and the number of groups per leaf are public.
    """

    tree: RegionTree
    leaf: np.ndarray
    size: np.ndarray

    def __post_init__(self) -> None:
        leaf, size = np.asarray(self.leaf), np.asarray(self.size)
        if leaf.ndim != 1 or leaf.shape != size.shape:
            raise ValueError(f"leaf and size need one entry per group (1-D), got shapes {leaf.shape} and {size.shape}.")
        leaves = self.tree.size(self.tree.levels - 1)
        # frozen: store the validated int64 copies (a negative leaf would index from the end)
        object.__setattr__(self, "leaf", _group_column(leaf, "leaf", leaves, f"an integer leaf index in [0, {leaves})"))
        object.__setattr__(self, "size", _group_column(size, "size", np.iinfo(np.int64).max, "an integer >= 0"))

    @classmethod
    def from_leaf_sizes(cls, paths: Sequence[Sequence[str]], sizes: Mapping[str, object]) -> CountOfCountsData:
        """The direct API: leaf paths ``(level0, ..., levelL)`` and the group sizes of every leaf.

        >>> data = CountOfCountsData.from_leaf_sizes([("US", "CA"), ("US", "OR")], {"CA": [1, 2, 2], "OR": [4]})
        >>> data.truth(0).size.tolist(), data.truth(0).count.tolist()
        ([1, 2, 4], [1, 2, 1])
        """
        tree, row_leaf = RegionTree.from_paths(paths)
        leaf_of_name = dict(zip(np.asarray(paths, dtype=str)[:, -1].tolist(), row_leaf.tolist()))
        unknown = [name for name in sizes if name not in leaf_of_name]
        if unknown:
            raise ValueError(f"group sizes given for regions that are not leaves of the hierarchy: {unknown[:5]}.")
        leaves, group_sizes = [], []
        for name, values in sizes.items():
            array = np.asarray(values)
            if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
                raise ValueError(f"group sizes of region {name!r} must be a 1-D array of integers, got {array!r:.60}.")
            leaves.append(np.full(array.size, leaf_of_name[name], dtype=np.int64))
            group_sizes.append(array.astype(np.int64))
        return cls(tree=tree, leaf=_concat(leaves), size=_concat(group_sizes))

    @property
    def n_groups(self) -> int:
        """Total number of groups ``G`` of the root."""
        return int(self.size.size)

    def truth(self, level: int) -> LevelHistograms:
        """The true count-of-counts histograms of every region of ``level``."""
        node = self.tree.leaf_ancestor(level)[self.leaf]
        return LevelHistograms.from_groups(node, self.size, self.tree.size(level))

    def groups(self, level: int) -> np.ndarray:
        """The public number of groups of every region of ``level``."""
        node = self.tree.leaf_ancestor(level)[self.leaf]
        return np.bincount(node, minlength=self.tree.size(level)).astype(np.int64)


def _group_column(values: np.ndarray, name: str, stop: int, wanted: str) -> np.ndarray:
    """``values`` as int64 if every entry is an integer in ``[0, stop)``; else a ValueError naming the first bad one."""
    if values.size and not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        raise ValueError(f"{name} must hold integers, got dtype {values.dtype}.")
    with np.errstate(invalid="ignore"):
        if np.issubdtype(values.dtype, np.integer):
            good = (values >= 0) & (values < stop)
        else:  # floats: finite and integer-valued; 2^63 is exact in float64
            good = (values >= 0) & (values < min(float(stop), 2.0**63)) & (values == np.floor(values))
    if not good.all():
        index = int(np.argmin(good))
        raise ValueError(f"{name}[{index}] must be {wanted}, got {values[index].item()!r}.")
    return values.astype(np.int64)


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------------- tables


def table_format(path: str | os.PathLike[str]) -> str:
    """"parquet" for a ``.parquet`` or ``.pq`` name, else "csv" (both engines read by extension)."""
    return "parquet" if Path(path).suffix in (".parquet", ".pq") else "csv"


# The input errors of both engines (local and Spark) come from these, so they read the same.


def missing_table(path: str | os.PathLike[str], what: str) -> InputError:
    return InputError(f"{what} table {str(path)!r} does not exist or is not a file.")


def missing_columns(path: str | os.PathLike[str], what: str, missing: list[str], have: list[str]) -> InputError:
    return InputError(f"the {what} table {str(path)!r} lacks column(s) {missing}; it has {have}.")


def empty_values(path: str | os.PathLike[str], what: str, column: str) -> InputError:
    return InputError(f"the {what} table {str(path)!r} has empty values in column {column!r}.")


def repeated_entity() -> InputError:
    return InputError("the Entities table lists an entity_id more than once (an entity belongs to one group).")


def repeated_group() -> InputError:
    return InputError("the Groups table lists a group_id more than once.")


def unknown_region(region: object) -> InputError:
    return InputError(f"the Groups table places a group in region {region!r}, which is not in the Hierarchy table.")


def unknown_group(group: object) -> InputError:
    return InputError(f"the Entities table refers to group_id {group!r}, which is not in the Groups table.")


def _read(path: str | os.PathLike[str], columns: Sequence[str] | None, what: str) -> pa.Table:
    path = Path(path)
    if not path.is_file():
        raise missing_table(path, what)
    try:
        if table_format(path) == "parquet":
            table = pq.read_table(path)
        else:
            with pa_csv.open_csv(path) as reader:
                names = reader.schema.names
            # every column is an id or a name: read it as written ("06" and "6" stay apart), and
            # only an empty field counts as missing (a region may be called "NA")
            convert = pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in names}, strings_can_be_null=True, null_values=[""]
            )
            table = pa_csv.read_csv(path, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as error:
        raise InputError(f"cannot read the {what} table {str(path)!r}: {error}") from None
    missing = [name for name in columns or () if name not in table.column_names]
    if missing:
        raise missing_columns(path, what, missing, table.column_names)
    for name in columns or ():
        if table[name].null_count:
            raise empty_values(path, what, name)
    return table


def _keys(*columns: pa.ChunkedArray) -> list[pa.ChunkedArray]:
    """Cast id columns to one comparable type: int64 if all are integers, else strings."""
    if all(pa.types.is_integer(column.type) for column in columns):
        return [column.cast(pa.int64()) for column in columns]
    return [column.cast(pa.string()) for column in columns]


@dataclass(frozen=True, kw_only=True)
class Hierarchy:
    """The Hierarchy table read and checked: the tree, and for every row its region_id and leaf index."""

    tree: RegionTree
    region_id: pa.ChunkedArray
    leaf: np.ndarray


def read_hierarchy(path: str | os.PathLike[str]) -> Hierarchy:
    """Read and check Hierarchy(region_id, level0, ..., levelL) (CSV or Parquet); both engines use it."""
    hier = _read(path, ["region_id", "level0"], "Hierarchy")
    levels = sorted((int(m.group(1)), name) for name in hier.column_names if (m := re.fullmatch(r"level(\d+)", name)))
    if [number for number, _ in levels] != list(range(len(levels))):
        raise InputError(
            f"the Hierarchy table needs columns level0, level1, ... without gaps, got {[n for _, n in levels]}."
        )
    for _, name in levels:
        if hier[name].null_count:
            raise InputError(f"the Hierarchy table has empty values in column {name!r}.")
    paths = np.column_stack([hier[name].cast(pa.string()).to_numpy(zero_copy_only=False) for _, name in levels])
    tree, row_leaf = RegionTree.from_paths(paths)
    if pc.count_distinct(hier["region_id"]).as_py() != hier.num_rows:
        raise InputError("the Hierarchy table lists a region_id more than once.")
    return Hierarchy(tree=tree, region_id=hier["region_id"], leaf=row_leaf)


#: Rows of the Entities table read at a time from Parquet (the out-of-core path).
BATCH_ROWS = 1 << 20
#: Largest span ``max - min + 1`` of integer entity ids checked for repeats with one byte per id;
#: a wider span (or text ids) keeps the ids themselves (8 bytes a row for integers).
MAX_ID_SPAN = 1 << 31


def read_tables(
    entities: str | os.PathLike[str],
    groups: str | os.PathLike[str],
    hierarchy: str | os.PathLike[str],
    *,
    batch_rows: int = BATCH_ROWS,
) -> CountOfCountsData:
    """Read Entities(entity_id, group_id), Groups(group_id, region_id) and
    Hierarchy(region_id, level0, ..., levelL) from CSV or Parquet (by file extension).

    CSV columns are read as text, so ids and region names are compared, and region names
    released, exactly as written: ``06`` and ``6`` are different regions and ``06001`` keeps its
    leading zero.  Only an empty field counts as missing.  Parquet columns keep their stored
    types; an id that is an integer in one table and not in the other is compared as text.

    A Parquet Entities table is read ``batch_rows`` rows at a time: memory holds the Groups
    table, one count per group and, to find a repeated ``entity_id``, one byte per integer id
    between the smallest and the largest (at most :data:`MAX_ID_SPAN`; text ids, or a wider
    span, are kept as they are), not the Entities table.
    """
    batch_rows = check_positive_int(batch_rows, "batch_rows")
    hier = read_hierarchy(hierarchy)
    grp = _read(groups, ["group_id", "region_id"], "Groups")
    if table_format(entities) == "parquet":
        member_counts = _count_members(entities, grp["group_id"], batch_rows)  # checks the schema now
        group_ids = grp["group_id"]
    else:
        ent = _read(entities, ["entity_id", "group_id"], "Entities")
        if pc.count_distinct(ent["entity_id"]).as_py() != ent.num_rows:
            raise repeated_entity()
        group_ids, entity_groups = _keys(grp["group_id"], ent["group_id"])
    if pc.count_distinct(group_ids).as_py() != len(group_ids):
        raise repeated_group()
    group_regions, region_ids = _keys(grp["region_id"], hier.region_id)
    row = pc.index_in(group_regions, value_set=region_ids.combine_chunks())
    if row.null_count:
        raise unknown_region(group_regions.filter(pc.is_null(row))[0].as_py())
    if table_format(entities) == "parquet":
        size = member_counts()
    else:
        member = pc.index_in(entity_groups, value_set=group_ids.combine_chunks())
        if member.null_count:
            raise unknown_group(entity_groups.filter(pc.is_null(member))[0].as_py())
        size = np.bincount(member.to_numpy(zero_copy_only=False).astype(np.int64), minlength=len(group_ids))
    leaf = hier.leaf[row.to_numpy(zero_copy_only=False).astype(np.int64)]
    return CountOfCountsData(tree=hier.tree, leaf=leaf, size=size.astype(np.int64))


def _count_members(path: str | os.PathLike[str], group_column: pa.ChunkedArray, batch_rows: int):
    """Check the Parquet Entities table's schema now; return the function that counts, batch by batch,
    the entities of every group (in the order of ``group_column``) and checks the rows."""
    path = Path(path)
    if not path.is_file():
        raise missing_table(path, "Entities")
    try:
        # no pre-buffering: it would hold every row group's bytes read so far
        file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 22)
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"cannot read the Entities table {str(path)!r}: {error}") from None
    schema = file.schema_arrow
    missing = [name for name in ("entity_id", "group_id") if name not in schema.names]
    if missing:
        raise missing_columns(path, "Entities", missing, schema.names)
    integer = pa.types.is_integer(schema.field("group_id").type) and pa.types.is_integer(group_column.type)
    entity_integer = pa.types.is_integer(schema.field("entity_id").type)

    def count() -> np.ndarray:
        n = len(group_column)
        ids = group_column.cast(pa.int64() if integer else pa.string()).combine_chunks()
        if integer:
            values = ids.to_numpy()
            order = np.argsort(values, kind="stable")
            ordered = values[order]
            # ids 0..G-1 (or any run of consecutive integers, each once): the id is the position
            dense = n > 0 and int(ordered[-1]) - int(ordered[0]) == n - 1 and bool((np.diff(ordered) == 1).all())
        sizes = np.zeros(n, dtype=np.int64)
        repeats = _RepeatCheck(file, entity_integer)
        for batch in file.iter_batches(batch_size=batch_rows, columns=["entity_id", "group_id"], use_threads=False):
            for name in ("entity_id", "group_id"):
                if batch.column(name).null_count:
                    raise empty_values(path, "Entities", name)
            repeats.add(batch.column("entity_id"))
            column = batch.column("group_id")
            if integer:
                wanted = column.cast(pa.int64()).to_numpy()
                if dense:
                    shifted = wanted - ordered[0]
                    found = (shifted >= 0) & (shifted < n)
                    at = np.where(found, shifted, 0)
                else:
                    at = np.minimum(np.searchsorted(ordered, wanted), max(n - 1, 0))
                    found = ordered[at] == wanted if n else np.zeros(wanted.size, dtype=bool)
                if not found.all():
                    raise unknown_group(wanted[np.argmin(found)].item())
                member = order[at]
            else:
                index = pc.index_in(column.cast(pa.string()), value_set=ids)
                if index.null_count:
                    raise unknown_group(column.filter(pc.is_null(index))[0].as_py())
                member = index.to_numpy(zero_copy_only=False).astype(np.int64)
            sizes += np.bincount(member, minlength=n)
        repeats.finish()
        return sizes

    return count


class _RepeatCheck:
    """Finds a repeated entity_id across batches: one byte per id of the span, or the ids themselves."""

    def __init__(self, file: pq.ParquetFile, integer: bool) -> None:
        self.seen: np.ndarray | None = None
        self.kept: list[pa.Array] = []
        if integer:
            low, high = _id_range(file)
            if high >= low and high - low + 1 <= MAX_ID_SPAN:
                self.low = low
                self.seen = np.zeros(high - low + 1, dtype=bool)

    def add(self, column: pa.Array) -> None:
        if self.seen is None:
            self.kept.append(column)
            return
        index = column.cast(pa.int64()).to_numpy() - self.low
        if index.size == 0:
            return
        low, high = int(index.min()), int(index.max())
        if high - low < 4 * index.size:  # ids in runs (the usual case): count them over the batch's span
            twice = np.bincount(index - low, minlength=high - low + 1).max() > 1
        else:
            twice = np.unique(index).size != index.size
        if twice or self.seen[index].any():
            raise repeated_entity()
        self.seen[index] = True

    def finish(self) -> None:
        if self.seen is None and self.kept:
            ids = pa.chunked_array(self.kept)
            if pc.count_distinct(ids).as_py() != len(ids):
                raise repeated_entity()


def _id_range(file: pq.ParquetFile) -> tuple[int, int]:
    """Smallest and largest entity_id: from the row groups' statistics, else from a pass over the column."""
    column = file.schema_arrow.get_field_index("entity_id")
    low, high = None, None
    meta = file.metadata
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            low = None
            break
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if low is None:
        low, high = None, None
        for batch in file.iter_batches(columns=["entity_id"]):
            pair = pc.min_max(batch.column(0))
            if pair["min"].as_py() is not None:
                low = pair["min"].as_py() if low is None else min(low, pair["min"].as_py())
                high = pair["max"].as_py() if high is None else max(high, pair["max"].as_py())
    return (0, -1) if low is None else (int(low), int(high))


#: Groups whose entity rows are written at a time (bounds the memory of writing large tables).
WRITE_CHUNK_GROUPS = 1 << 20


def write_tables(data: CountOfCountsData, directory: str | os.PathLike[str], *, parquet: bool = False) -> list[Path]:
    """Write the three tables (entities, groups, hierarchy) of ``data``; returns their paths.

    Group ``g`` has id ``g`` and its entities the next ``size[g]`` ids; the Entities table is
    written :data:`WRITE_CHUNK_GROUPS` groups at a time, so a national table never sits in memory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tree = data.tree
    leaves = tree.size(tree.levels - 1)
    columns = {"region_id": tree.names[-1]}
    for level in range(tree.levels):
        columns[f"level{level}"] = tree.names[level][tree.leaf_ancestor(level)]
    group_id = np.arange(data.n_groups, dtype=np.int64)
    tables = {
        "groups": pa.table({"group_id": group_id, "region_id": tree.names[-1][data.leaf] if leaves else []}),
        "hierarchy": pa.table(columns),
    }
    suffix = "parquet" if parquet else "csv"
    paths = [directory / f"{name}.{suffix}" for name in ("entities", "groups", "hierarchy")]
    schema = pa.schema([("entity_id", pa.int64()), ("group_id", pa.int64())])
    writer = pq.ParquetWriter(paths[0], schema) if parquet else pa_csv.CSVWriter(paths[0], schema)
    with writer:
        first = np.concatenate(([0], np.cumsum(data.size)))
        for lo in range(0, max(data.n_groups, 1), WRITE_CHUNK_GROUPS):
            hi = min(data.n_groups, lo + WRITE_CHUNK_GROUPS)
            chunk = pa.table(
                {
                    "entity_id": np.arange(first[lo], first[hi], dtype=np.int64),
                    "group_id": np.repeat(group_id[lo:hi], data.size[lo:hi]),
                },
                schema=schema,
            )
            writer.write_table(chunk)
    for path, table in zip(paths[1:], tables.values()):
        if parquet:
            pq.write_table(table, path)
        else:
            pa_csv.write_csv(table, path)
    return paths


# ---------------------------------------------------------------------------- generators

#: Shares of household sizes 1..7, shaped like the 2010 Census SF1 national table (the state
#: tables are not shipped); states jitter them.
HOUSEHOLD_SHARES = np.array([0.267, 0.336, 0.158, 0.132, 0.062, 0.025, 0.010])


def _apportion(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integers >= ``minimum`` summing to ``total``, proportional to ``weights`` (largest remainder)."""
    spare = total - minimum * weights.size
    exact = spare * weights / weights.sum()
    base = np.floor(exact).astype(np.int64)
    order = np.argsort(base - exact, kind="stable")
    base[order[: spare - int(base.sum())]] += 1
    return base + minimum


def housing_data(
    n_groups: int = 1_000_000,
    *,
    n_states: int = 50,
    n_counties: int = 3000,
    n_outliers: int = 50,
    max_outlier: int = 10_000,
    seed: Seed = None,
) -> CountOfCountsData:
    """The partially synthetic housing data of Section 6.1, with about ``n_groups`` groups.

    National / state / county.  Every state gets a share of the households (log-normal
    weights) and a jittered copy of :data:`HOUSEHOLD_SHARES` for sizes 1..7; beyond 7 the number
    of households of size ``k`` is ``Binomial(n_{k-1}, r)`` with the state's ratio
    ``r = n_7 / n_6``, so neighbouring sizes keep that ratio in expectation (a geometric tail).
    Then ``n_outliers`` groups of size uniform on ``1 .. max_outlier`` go to random states.
    Counties are apportioned to states by size (at least one each) and every group goes to a
    county of its state with probability proportional to the county's (log-normal) size.

    >>> data = housing_data(10_000, n_states=3, n_counties=9, seed=1)
    >>> data.tree.size(1), data.tree.size(2), bool(abs(data.n_groups - 10_050) < 200)
    (3, 9, True)
    """
    n_groups = check_positive_int(n_groups, "n_groups")
    n_states = check_positive_int(n_states, "n_states")
    n_counties = check_positive_int(n_counties, "n_counties", minimum=n_states)
    n_outliers = check_nonnegative_int(n_outliers, "n_outliers")
    max_outlier = check_positive_int(max_outlier, "max_outlier")
    rng = make_rng(seed)
    state_weights = rng.lognormal(0.0, 1.0, n_states)
    households = _apportion(n_groups, state_weights)
    outlier_state = rng.integers(0, n_states, n_outliers)
    outlier_size = rng.integers(1, max_outlier + 1, n_outliers)
    counties = _apportion(n_counties, state_weights, minimum=1)
    county_offset = np.concatenate(([0], np.cumsum(counties)[:-1]))
    leaves, sizes = [], []
    for state in range(n_states):
        shares = HOUSEHOLD_SHARES * rng.lognormal(0.0, 0.1, HOUSEHOLD_SHARES.size)
        counts = list(rng.multinomial(households[state], shares / shares.sum()))
        ratio = min(counts[6] / counts[5], 0.9) if counts[5] else 0.0
        while counts[-1] > 0:
            counts.append(int(rng.binomial(counts[-1], ratio)))
        state_sizes = np.concatenate(
            (np.repeat(np.arange(1, len(counts) + 1), counts), outlier_size[outlier_state == state])
        )
        county_weights = rng.lognormal(0.0, 1.0, counties[state])
        county = rng.choice(counties[state], size=state_sizes.size, p=county_weights / county_weights.sum())
        leaves.append(county_offset[state] + county)
        sizes.append(state_sizes)
    paths = [
        ("US", f"S{state:02d}", f"S{state:02d}C{county:04d}")
        for state in range(n_states)
        for county in range(counties[state])
    ]
    tree, row_leaf = RegionTree.from_paths(paths)
    leaf = row_leaf[np.concatenate(leaves)]
    return CountOfCountsData(tree=tree, leaf=leaf, size=np.concatenate(sizes).astype(np.int64))


def taxi_data(n_taxis: int = 2000, *, mean_pickups: float = 300.0, seed: Seed = None) -> CountOfCountsData:
    """A small taxi-like dataset: taxis in neighbourhoods as groups, pick-ups as entities.

    Manhattan / {upper, lower} / 28 neighbourhoods (14 each), like the paper's NYC data.  Every
    (taxi, neighbourhood) pair is a group (so the number of groups is public), whose size is
    Poisson with mean ``activity * popularity``: taxis have log-normal activity with mean
    ``mean_pickups`` in total, neighbourhoods Dirichlet popularity.

    >>> data = taxi_data(10, seed=0)
    >>> data.tree.size(2), data.n_groups
    (28, 280)
    """
    n_taxis = check_positive_int(n_taxis, "n_taxis")
    rng = make_rng(seed)
    activity = rng.lognormal(0.0, 0.8, n_taxis)
    activity *= mean_pickups / activity.mean()
    popularity = rng.dirichlet(np.full(28, 0.7))
    sizes = rng.poisson(np.outer(popularity, activity)).astype(np.int64)  # (neighbourhood, taxi)
    paths = [("Manhattan", "upper" if hood < 14 else "lower", f"N{hood:02d}") for hood in range(28)]
    tree, row_leaf = RegionTree.from_paths(paths)
    return CountOfCountsData(tree=tree, leaf=np.repeat(row_leaf, n_taxis), size=sizes.ravel())
