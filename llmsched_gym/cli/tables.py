"""Terminal tables that fit: as wide as the terminal (``$COLUMNS`` or 80 columns when
the output is not a terminal). Headers wrap between words; a table whose values do not
fit side by side is printed in parts, each repeating the columns that name the rows
(which wrap when even they are too wide), so a narrow terminal shows more lines, never
a cut value."""

from __future__ import annotations


def console():
    """A rich Console of the terminal's width."""
    from rich.console import Console

    return Console()


def _need(col) -> int:
    """Characters column ``col`` needs: its longest value or header word."""
    words = str(col.header).split() or [""]
    return max([len(str(c)) for c in col._cells] + [max(map(len, words))])


def _parts(needs: list[int], keys: int, width: int) -> list[list[int]]:
    """Column indices per part: the ``keys`` first columns in every part, then as many of
    the others as fit in ``width`` (3 characters of padding and border per column)."""
    base = sum(n + 3 for n in needs[:keys]) + 1
    parts, cur, used = [], [], base
    for i in range(keys, len(needs)):
        if cur and used + needs[i] + 3 > width:
            parts.append(cur)
            cur, used = [], base
        cur.append(i)
        used += needs[i] + 3
    return [list(range(keys)) + p for p in parts + [cur]]


def _key_widths(needs: list[int], keys: int, width: int) -> list[int]:
    """Widths of the row-naming columns: their needs, or, where they and the widest other
    column do not fit side by side, shares of what is left (those names wrap)."""
    widest = max(needs[keys:], default=0) + 3 if len(needs) > keys else 0
    avail = width - 1 - widest - 3 * keys
    want = needs[:keys]
    if sum(want) <= avail:
        return want
    out, left = list(want), max(avail, 4 * keys)
    for j, i in enumerate(sorted(range(keys), key=want.__getitem__)):  # short names whole, long ones wrap
        out[i] = max(4, min(want[i], left // (keys - j)))
        left -= out[i]
    return out


def print_table(table, out=None, keys: int = 1) -> None:
    """Print rich ``table`` on ``out`` (default: :func:`console`) within its width; the
    first ``keys`` columns name a row and are repeated in every part."""
    from rich.table import Table

    out = out or console()
    keys = min(keys, len(table.columns))
    needs = [_need(c) for c in table.columns]
    widths = _key_widths(needs, keys, out.width) + needs[keys:]
    parts = _parts(widths, keys, out.width)
    # Every column exactly its width: values whole on one line, headers (and row names
    # that had to give way) wrapping within it.
    for k, idx in enumerate(parts):
        t = Table(title=table.title if k == 0 else None, caption=table.caption if k == len(parts) - 1 else None,
                  show_lines=table.show_lines)
        for i in idx:
            c = table.columns[i]
            t.add_column(c.header, justify=c.justify, overflow="fold", width=widths[i])
        for r, row in enumerate(table.rows):
            t.add_row(*[table.columns[i]._cells[r] for i in idx], style=row.style, end_section=row.end_section)
        out.print(t)
