"""Text at array speed, through pyarrow's compute kernels: float64 values written exactly as Python
writes them (:func:`repr_strings`, :func:`value_lines`, :func:`csv_rows`), and a block of well-formed
lines split into columns and numbers (:func:`split_block`, :func:`parse_numbers`).

Both directions are fast paths with an exact fallback.  Writing: pyarrow finds the same shortest
round-trip digits as ``repr`` but lays them out differently (``1e-05`` vs ``0.00001``, ``100``
vs ``100.0``); where the layouts agree (``1e-4 <= |x| < 1e10``, the usual range of a released
value) its text is kept, with ``.0`` added to integral values, and every other value is written by
``repr`` itself, so the bytes are those of ``repr`` always.  Reading: a block is taken only when
every line has its fields plain (ASCII, no quotes, no blanks at the ends, no ``\\r``) and every
value field is a decimal number of :data:`~dpstream.io.records._NUMBER` (or a missing-value token
where the policy allows); otherwise the caller reads the block line by line, with the rules and
error messages of :mod:`dpstream.io`.  pyarrow converts decimal text to the nearest float64, as
``float`` does.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from dpstream.io.records import _NUMBER, MISSING_TOKENS

__all__ = ["csv_rows", "parse_numbers", "repr_strings", "split_block", "value_lines"]

#: ``repr`` and pyarrow both write fixed notation (no exponent) for magnitudes in ``[1e-4, 1e10)``.
_FIXED = (1e-4, 1e10)
#: A value field that is a decimal number, whole (pyarrow's RE2 syntax).
_NUMBER_FIELD = f"^(?:{_NUMBER.pattern})$"
#: Blanks at either end of a field (``str.strip`` removes them; ASCII blocks only), or a quote.
_UNCLEAN = r"^[ \t\x0b\x0c\x1c-\x1f]|[ \t\x0b\x0c\x1c-\x1f]$|[\"']"
#: A field the csv module would quote (or that it writes specially), see :func:`csv_rows`.
_QUOTED = '[,"\r\n]'
_MISSING_TOKENS = sorted({token.lower() for token in MISSING_TOKENS} | {""})
_NEWLINE = ord("\n")


# pyarrow.array() imports pandas where it is installed (a second or so): arrays are made from buffers here.


def _numbers(values: np.ndarray) -> pa.Array:
    """A float64 or int64 numpy array as a pyarrow array, without a copy."""
    values = np.ascontiguousarray(values)
    kind = pa.float64() if values.dtype == np.float64 else pa.int64()
    return pa.Array.from_buffers(kind, values.size, [None, pa.py_buffer(values)])


def _mask(mask: np.ndarray) -> pa.Array:
    """A boolean numpy array as a pyarrow array."""
    return pa.Array.from_buffers(pa.bool_(), mask.size, [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def _strings(texts: Sequence[str]) -> pa.Array:
    """A list of str as a pyarrow string array (raises pyarrow's error for a text it cannot hold)."""
    joined = "".join(texts)
    if not joined.isascii() or len(joined) >= 2**31:
        return pa.array(texts, type=pa.string())
    lengths = np.fromiter(map(len, texts), dtype=np.int32, count=len(texts))
    offsets = np.concatenate((np.zeros(1, dtype=np.int32), np.cumsum(lengths, dtype=np.int32)))
    return pa.Array.from_buffers(pa.string(), len(texts), [None, pa.py_buffer(offsets),
                                                           pa.py_buffer(joined.encode("ascii"))])


def _buffer_text(strings: pa.Array) -> str:
    """The concatenated characters of a string array (no nulls), as one str."""
    strings = strings.combine_chunks() if isinstance(strings, pa.ChunkedArray) else strings
    _, offsets, data = strings.buffers()
    width = 8 if pa.types.is_large_string(strings.type) else 4
    bounds = np.frombuffer(offsets, dtype=np.int64 if width == 8 else np.int32)
    start, stop = int(bounds[strings.offset]), int(bounds[strings.offset + len(strings)])
    return memoryview(data)[start:stop].tobytes().decode("utf-8")


def repr_strings(values: np.ndarray) -> pa.Array:
    """``repr`` of every float64 in ``values``, as a pyarrow string array (bytes for bytes).

    >>> repr_strings(np.array([100.0, -0.0, 1e-05, 0.1, 1e16, 123456789012.5])).to_pylist()
    ['100.0', '-0.0', '1e-05', '0.1', '1e+16', '123456789012.5']
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    text = pc.cast(_numbers(values), pa.string())
    magnitude = np.abs(values)
    fixed = (magnitude >= _FIXED[0]) & (magnitude < _FIXED[1])
    zero = magnitude == 0.0
    with np.errstate(invalid="ignore"):  # NaN, written by repr below
        point = zero | (fixed & (values == np.trunc(values)))  # pyarrow writes 100 and 0 without '.0'
    if point.any():
        text = pc.if_else(_mask(point), pc.binary_join_element_wise(text, ".0", ""), text)
    other = ~(fixed | zero)  # exponents and non-finite values: repr itself
    if other.any():
        text = pc.replace_with_mask(text, _mask(other), _strings(list(map(repr, values[other].tolist()))))
    return text


def value_lines(values: np.ndarray) -> str:
    """The values, one ``repr`` a line, each line ended by ``\\n`` (``""`` for none).

    >>> value_lines(np.array([1.5, 2.0]))
    '1.5\\n2.0\\n'
    """
    if not len(values):
        return ""
    return _buffer_text(pc.binary_join_element_wise(repr_strings(values), "", "\n"))


def csv_rows(columns: Sequence[Sequence[str] | np.ndarray]) -> str:
    """CSV rows, each ended by ``\\n``, exactly as :func:`csv.writer` (``lineterminator="\\n"``)
    writes them: text columns (lists of str), integer columns (int64 arrays) and float columns
    (float64 arrays, written as their ``repr``).

    Text fields that the csv module quotes or writes specially (a comma, a quote or a line end
    in them; a row of one empty field) send the rows through the csv module itself.

    >>> csv_rows([["a", "b,c"], np.array([0, 1]), np.array([1.5, 2.0])])
    'a,0,1.5\\n"b,c",1,2.0\\n'
    """
    count = len(columns[0])
    if not count:
        return ""
    fields = []
    for column in columns:
        if isinstance(column, np.ndarray) and column.dtype.kind == "f":
            fields.append(repr_strings(column))
        elif isinstance(column, np.ndarray):
            fields.append(pc.cast(_numbers(column.astype(np.int64, copy=False)), pa.string()))
        else:
            try:
                text = _strings(column)
            except (pa.ArrowException, UnicodeError):  # such as a lone surrogate
                return _csv_module_rows(columns)
            quoted = _QUOTED if len(columns) > 1 else f"{_QUOTED}|^$"  # a row of one empty field is written ""
            if pc.any(pc.match_substring_regex(text, quoted)).as_py():
                return _csv_module_rows(columns)
            fields.append(text)
    rows = pc.binary_join_element_wise(*fields, ",") if len(fields) > 1 else fields[0]
    return _buffer_text(pc.binary_join_element_wise(rows, "", "\n"))


def _csv_module_rows(columns: Sequence[Sequence[str] | np.ndarray]) -> str:
    sink = io.StringIO()
    lists = [column.tolist() if isinstance(column, np.ndarray) else column for column in columns]
    csv.writer(sink, lineterminator="\n").writerows(zip(*lists))
    return sink.getvalue()


# -- reading ---------------------------------------------------------------------------------


def split_block(block: str, *, separator: str | None, width: int, wanted: Sequence[int | None]) -> list | None:
    """The fields of columns ``wanted`` (indices; None gives None) of every line of ``block``, as string
    arrays, or None unless every line is plain: ``block`` ASCII, without ``\\r``, each line ended by
    ``\\n`` with ``width`` fields split by ``separator`` (None: one field a line, ``width`` 1), the
    text fields (all but the first wanted) without blanks at their ends or quotes.

    >>> [column.to_pylist() for column in split_block("a,1\\nb,2\\n", separator=",", width=2, wanted=[1, 0])]
    [['1', '2'], ['a', 'b']]
    >>> split_block("a, 1\\n", separator=",", width=2, wanted=[0, 1]) is None  # a blank before a text field
    True
    """
    if not block.isascii() or "\r" in block or not block.endswith("\n") or block[0] == "\n" or "\n\n" in block:
        return None  # pyarrow would read an empty line as a row of empty fields
    data = block.encode("ascii")
    if separator is None:
        ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
        if ends.size >= 2**31 // 2 or len(data) >= 2**31:
            return None
        offsets = np.concatenate(([0], ends - np.arange(ends.size))).astype(np.int32)
        lines = pa.Array.from_buffers(pa.string(), ends.size, [None, pa.py_buffer(offsets),
                                                               pa.py_buffer(data.replace(b"\n", b""))])
        columns = {0: lines}
        count = ends.size
    else:
        names = [f"f{index}" for index in range(width)]
        needed = sorted({index for index in wanted if index is not None})
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(data),
                read_options=pa_csv.ReadOptions(column_names=names, block_size=max(1 << 20, len(data) + 1),
                                                use_threads=False),
                parse_options=pa_csv.ParseOptions(delimiter=separator, quote_char=False, escape_char=False,
                                                  double_quote=False, newlines_in_values=False,
                                                  ignore_empty_lines=False),
                convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in names},
                                                      include_columns=[names[index] for index in needed],
                                                      strings_can_be_null=False, quoted_strings_can_be_null=False))
        except pa.ArrowInvalid:  # a line with another number of fields
            return None
        count = data.count(b"\n")
        if table.num_rows != count:
            return None
        columns = {index: table.column(names[index]).combine_chunks() for index in needed}
    texts = [index for index in wanted[1:] if index is not None]
    if any(pc.any(pc.match_substring_regex(columns[index], _UNCLEAN)).as_py() for index in texts):
        return None
    return [None if index is None else columns[index] for index in wanted]


def parse_numbers(fields: pa.Array, *, missing: bool) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The float64 values of value fields that are all decimal numbers (with ``missing``, or
    missing-value tokens: their mask is returned too, their values are 0), or None for anything
    else, or for a number beyond the float range.

    >>> values, mask = parse_numbers(_strings(["1.5", "NA", "-2e3"]), missing=True)
    >>> values.tolist(), mask.tolist()
    ([1.5, 0.0, -2000.0], [False, True, False])
    >>> parse_numbers(_strings(["1.5", "0x1p3"]), missing=True) is None
    True
    """
    numbers = pc.match_substring_regex(fields, _NUMBER_FIELD)
    mask = None
    if not pc.all(numbers).as_py():
        if not missing:
            return None
        mask = np.asarray(pc.is_in(pc.ascii_lower(fields), value_set=_strings(_MISSING_TOKENS)))
        if not (mask | np.asarray(numbers)).all():
            return None
        fields = pc.if_else(_mask(mask), "0", fields)
    try:
        values = np.asarray(pc.cast(fields, pa.float64()))
    except pa.ArrowInvalid:  # a number pyarrow does not convert (out of range, say): the careful path says why
        return None
    if not np.isfinite(values).all():
        return None
    return values, mask
