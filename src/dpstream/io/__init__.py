"""Reading value streams: CSV or plain text (optionally gzipped, or stdin) and Parquet.

A stream is read lazily, so a stream of any length is read in constant memory: value by value
(:func:`iter_values`, :func:`iter_records`), or in chunks of arrays (:func:`iter_batches`, the
fast path for files).  :class:`StreamReader` opens a path of either format and offers all three.

Text streams
------------
One row per line.  The fields of a line are separated by a comma if line 1 holds one, else by a
tab if line 1 holds one; otherwise the stream has one column and a line is one field.  Every
line must have as many fields as line 1.  A field is trimmed of surrounding blanks and of one
pair of enclosing quotes (``"`` or ``'``); a quoted field cannot hold the separator.

*Header.*  Line 1 is a header if and only if every field is a *name*: it starts with a letter or
an underscore, is not a missing-value token and is not a number (nor a word that Python's
``float`` reads, such as ``inf``).  Anything else on line 1 is data: ``NA`` or ``12a`` on line 1
is a value (missing, or an error), never a header.  Column names must be unique.  A stream with
several columns needs a header, and ``column`` names the value column (it may be left out when
the time and key columns leave exactly one other column).

*Numbers.*  A value is a decimal number: an optional sign, ASCII digits with an optional
fraction, and an optional exponent (``[+-]?(digits[.digits] | .digits)([eE][+-]?digits)?``,
where the digits after the point may be absent).  Other spellings Python would accept are
rejected: ``1_0``, ``0x1A``, ``inf``, ``infinity``, non-ASCII digits; so is a number beyond the
range of a float (``1e999``), because stream values are finite.  ``nan`` is a missing value.

*Missing values.*  An empty field and the tokens ``NA``, ``NaN`` and ``null``, in any letter
case, are missing.  The ``missing`` policy decides: ``"error"`` (the default) stops at the
first one, naming its line; ``"zero"`` reads it as 0, so positions are kept; ``"skip"`` drops
its row, so every later value moves one position up and positions no longer follow lines.  A
:class:`ReadStats` counts what was replaced or skipped.  Only the value column is checked: time
and key fields are text and may be empty.

*Blank lines.*  A blank line is a row whose one field is empty: in a one-column stream it is a
missing value (an error, a 0 or skipped, by the policy); with several columns it has the wrong
number of fields, an error.  Blank lines at the very end of the input hold no row and are
ignored (with a live stream, a blank line is therefore judged when the next line arrives).

*Numbering.*  Line numbers are 1-based and count every line, header and blank lines included
("line 3"); Parquet rows are 1-based ("row 3").  A stream *position* is the 0-based index of a
value among the values read ("position 2 (0-based)"): the header and skipped rows make the two
differ, and :attr:`Batch.lines` maps each value back to its line.

Time and key columns
--------------------
:func:`iter_records` and :func:`iter_batches` also return the text of a time column and of a key
column, as written (trimmed of blanks and quotes, never parsed), for output beside the values.

Parquet streams
---------------
A file named ``*.parquet`` (or starting with Parquet's magic bytes) is read with pyarrow, one
record batch at a time.  The same column, time, key and missing rules apply: the value column
must be numeric (integer, floating point or decimal); a null or NaN is missing; an infinity is
an error; time and key values are cast to text, a null giving ``""``.  Rows count from 1.

Errors are :class:`InputError` (a ``ValueError``): one line naming the file, the 1-based line or
row, the rule and the offending text (at most 80 characters of it).

Modules
-------
:func:`read_lines` reads a slice of a text stream's lines with their numbers in the whole stream,
for readers that split a file among workers (Spark's).

:mod:`~dpstream.io.records` holds what the readers return (:class:`Record`, :class:`Batch`,
:class:`ReadStats`, :class:`InputError`) and the grammar above, with the choice of columns among
a header's or a schema's names (:func:`resolve_columns`, for readers outside this package);
:mod:`~dpstream.io.text` reads text, :mod:`~dpstream.io.parquet` Parquet,
:mod:`~dpstream.io.reader` a file of either format (:class:`StreamReader`), and
:mod:`~dpstream.io.matrix` the count and transition matrices of ``dpstream postprocess``
(:func:`read_matrix`, :func:`read_matrix_with_header`).  Import them from :mod:`dpstream.io`.
"""

from __future__ import annotations

from dpstream.io.matrix import read_matrix, read_matrix_with_header
from dpstream.io.reader import StreamReader, iter_chunks, read_values
from dpstream.io.records import (
    MISSING_POLICIES,
    MISSING_TOKENS,
    QUOTE_LIMIT,
    Batch,
    InputError,
    ReadStats,
    Record,
    resolve_columns,
)
from dpstream.io.text import iter_batches, iter_records, iter_values, open_input, read_lines

__all__ = [
    "InputError",
    "MISSING_POLICIES",
    "MISSING_TOKENS",
    "QUOTE_LIMIT",
    "ReadStats",
    "Record",
    "Batch",
    "StreamReader",
    "open_input",
    "iter_values",
    "iter_records",
    "iter_batches",
    "read_lines",
    "iter_chunks",
    "read_values",
    "read_matrix",
    "read_matrix_with_header",
    "resolve_columns",
]
