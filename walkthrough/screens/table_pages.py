"""The File stage's long tables a page at a time: the table holds one page of rows, a line says where it sits.

A Textual DataTable measures every row it holds, so a file with 300,000 tiny
tensors, or 300,000 metadata keys, took minutes and hundreds of MB to show its
first screen (issue 20). `Pages` keeps every item (a tensor record, a key name:
nothing made for display) and which page is on show; `fill` turns only that
page's items into cells and puts them in the table. Both the tensor table and
the metadata table use them; a table of one page looks as it did before paging
(no page line, no page keys).

Example: 300,021 tensors, page 2 -> rows 2,001-3,000, label
"tensors 2,001-3,000 of 300,021 ([ and ] for the other pages)".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import DataTable, Static

PAGE_ROWS = 1000  # rows a table holds at once; real models have up to a few thousand tensors or keys


def page_count(n_rows: int) -> int:
    """Pages for n_rows (at least one, so an empty table still has a page to show)."""
    return max(1, -(-n_rows // PAGE_ROWS))


def page_label(noun: str, number: int, n_rows: int, n_all: int) -> str:
    """Where page `number` (0-based) sits among the rows (and among all, when a filter leaves fewer), or ""
    for one page.

    Example: page_label("keys", 1, 300_000, 300_000) -> "keys 1,001-2,000 of 300,000 ([ and ] for the other pages)"
    """
    if page_count(n_rows) == 1:
        return ""
    first, last = number * PAGE_ROWS + 1, min(n_rows, (number + 1) * PAGE_ROWS)
    of = f"{n_rows:,}" if n_rows == n_all else f"{n_rows:,} matching (of {n_all:,})"
    return f"{noun} {first:,}-{last:,} of {of} ([ and ] for the other pages)"


class Pages:
    """A table's items, cut into pages of `PAGE_ROWS`, and the page on show."""

    def __init__(self, noun: str) -> None:
        self.noun = noun  # what the rows are, for the label: "tensors", "keys"
        self.items: Sequence[Any] = ()
        self.n_all = 0  # items before any filter
        self.number = 0  # the page on show, 0-based

    def start(self, items: Sequence[Any], n_all: int | None = None) -> bool:
        """Show `items` (of `n_all`, when a filter kept fewer) from their first page; False when that page
        holds the same items as the page on show before (a filter typed on that still keeps the first
        1,000 rows), so the table need not be filled again, only the label."""
        before = self.on_page()
        self.items, self.number = items, 0
        self.n_all = len(items) if n_all is None else n_all
        return self.on_page() != before

    @property
    def count(self) -> int:
        return page_count(len(self.items))

    def turn(self, step: int) -> None:
        """Move `step` pages on, past the last to the first and before the first to the last."""
        self.number = (self.number + step) % self.count

    def on_page(self) -> Sequence[Any]:
        return self.items[self.number * PAGE_ROWS:(self.number + 1) * PAGE_ROWS]

    def label(self) -> str:
        return page_label(self.noun, self.number, len(self.items), self.n_all)


def fill(table: DataTable, line: Static, pages: Pages, columns: Sequence[str],
         row: Callable[[Any], tuple[Sequence[Any], str]]) -> None:
    """Put the page on show in `table` (row(item) gives its cells and row key) and its label in `line`
    (hidden for a table of one page)."""
    table.clear(columns=True)
    table.add_columns(*columns)
    for item in pages.on_page():
        cells, key = row(item)
        table.add_row(*cells, key=key)
    show_label(line, pages)


def show_label(line: Static, pages: Pages) -> None:
    """Say in `line` where the page on show sits (hidden for a table of one page)."""
    label = pages.label()
    line.update(Text(label, style="dim"))
    line.display = bool(label)
