"""Text the evaluation commands print: aligned tables on stdout, lines on stderr above a progress bar."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["say_above_bar", "text_table"]


def say_above_bar(message: str) -> None:
    """A line on stderr that leaves a running progress bar intact below it."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "") -> str:
    """Columns as wide as their widest cell, two spaces apart; the first column left-aligned,
    the others right-aligned (numbers).

    >>> print(text_table(["method", "eps=0.05,s=0.1", "eps=0.05,s=0.01"], [["MLE", "1529", "1.5e+03"]]))
    method  eps=0.05,s=0.1  eps=0.05,s=0.01
    MLE               1529          1.5e+03
    """
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join([str(first).ljust(widths[0]), *(str(c).rjust(w) for c, w in zip(rest, widths[1:]))]).rstrip()

    return "\n".join(([title] if title else []) + [line(header)] + [line(row) for row in rows])
