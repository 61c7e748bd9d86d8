"""Terminal tables that fit: as wide as the terminal (``$COLUMNS`` or 80 columns when
the output is not a terminal). Headers wrap between words; a table whose values do not
fit side by side is printed in parts, each repeating the columns that name the rows,
so a narrow terminal shows more lines, never a cut value."""

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


def print_table(table, out=None, keys: int = 1) -> None:
    """Print rich ``table`` on ``out`` (default: :func:`console`) within its width; the
    first ``keys`` columns name a row and are repeated in every part."""
    from rich.table import Table

    out = out or console()
    needs = [_need(c) for c in table.columns]
    parts = _parts(needs, min(keys, len(needs)), out.width)
    # Columns exactly as wide as their longest value (headers wrap between words); only a
    # terminal narrower than the row-naming columns alone leaves the widths to rich, which
    # then folds values onto more lines.
    fixed = sum(needs[i] + 3 for i in parts[0]) + 1 <= out.width
    for k, idx in enumerate(parts):
        t = Table(title=table.title if k == 0 else None, caption=table.caption if k == len(parts) - 1 else None,
                  show_lines=table.show_lines)
        for i in idx:
            c = table.columns[i]
            t.add_column(c.header, justify=c.justify, overflow="fold", width=needs[i] if fixed else None)
        for r, row in enumerate(table.rows):
            t.add_row(*[table.columns[i]._cells[r] for i in idx], style=row.style, end_section=row.end_section)
        out.print(t)
