"""Plain-text tables as condor_q prints them: columns as wide as their widest
cell, two spaces apart, and only the last (elastic) column cut to the width.

Made for big tables: one pass over the rows for the widths and one to print,
no per-cell objects, so 100,000 rows take well under a second. Identifiers
and numbers are never shortened; a narrow terminal cuts the command.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

GAP = "  "
ELLIPSIS = "..."


def widths_of(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """The width of each column: its widest cell or heading."""
    widths = [len(column) for column in columns]
    for row in rows:
        for index, cell in enumerate(row):
            if len(cell) > widths[index]:
                widths[index] = len(cell)
    return widths


def _cell(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        text = text[:max(0, width - len(ELLIPSIS))] + ELLIPSIS if width > len(ELLIPSIS) \
            else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def render_lines(columns: Sequence[str], rows: Sequence[Sequence[str]],
                 width: int | None = None, right: Collection[str] = ()) -> Iterable[str]:
    """The heading line and one line per row. With `width`, the last column is cut
    so that each line fits, but never below its heading's width; the other
    columns keep their full width whatever the terminal."""
    widths = widths_of(columns, rows)
    if width is not None and widths:
        fixed = sum(widths[:-1]) + len(GAP) * (len(widths) - 1)
        widths[-1] = max(len(columns[-1]), min(widths[-1], width - fixed))
    aligned = [column in right for column in columns]
    last = len(columns) - 1

    def line(cells: Sequence[str]) -> str:
        parts = [_cell(cell, widths[i], aligned[i]) for i, cell in enumerate(cells)]
        if not aligned[last]:
            parts[last] = parts[last].rstrip()
        return GAP.join(parts).rstrip()

    yield line(columns)
    for row in rows:
        yield line(row)


def render(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None,
           right: Collection[str] = ()) -> str:
    """`render_lines` joined, with a final newline."""
    return "\n".join(render_lines(columns, rows, width, right)) + "\n"
