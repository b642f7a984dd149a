"""The File stage's tensor table a page at a time: rows in layer order, filtered, cut into pages.

A Textual DataTable measures every row it holds, so a file with 300,000 tiny
tensors took minutes to show its first screen (issue 20). The table holds one
page (`PAGE_ROWS`) of the rows; the order is worked out once per file, and a
filter is a scan over names, groups and types, linear in the number of tensors.

Example: 300,021 tensors, page 2 -> rows 2,001-3,000, label
"tensors 2,001-3,000 of 300,021 ([ and ] for the other pages)".
"""

from __future__ import annotations

from typing import NamedTuple

from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.tensors import tensor_place

PAGE_ROWS = 1000  # rows the table holds at once; real models have up to a few thousand tensors


class Row(NamedTuple):
    """One tensor with what the table and the filter need."""

    layer: int | None
    group: str
    tensor: TensorInfo


def ordered_rows(f: GGUFFile) -> list[Row]:
    """Every tensor of the file, model-wide ones first, then by layer (file order within each)."""
    rows = [Row(*tensor_place(t.name), t) for t in f.tensors.values()]
    rows.sort(key=_layer_order)
    return rows


def _layer_order(row: Row) -> int:
    return -1 if row.layer is None else row.layer


def matching(rows: list[Row], needle: str) -> list[Row]:
    """The rows whose name, group or type contains `needle` (any case); all of them for an empty one."""
    needle = needle.lower().strip()
    if not needle:
        return rows
    return [r for r in rows if needle in r.tensor.name.lower() or needle in r.group
            or needle in r.tensor.type_name.lower()]


def page_count(n_rows: int) -> int:
    """Pages for n_rows (at least one, so an empty table still has a page to show)."""
    return max(1, -(-n_rows // PAGE_ROWS))


def page(rows: list[Row], number: int) -> list[Row]:
    """Page `number` (0-based) of the rows."""
    return rows[number * PAGE_ROWS:(number + 1) * PAGE_ROWS]


def page_label(number: int, n_rows: int, n_all: int) -> str:
    """Where the page sits among the rows (and the tensors, when a filter leaves fewer), or "" for one page."""
    if page_count(n_rows) == 1:
        return ""
    first, last = number * PAGE_ROWS + 1, min(n_rows, (number + 1) * PAGE_ROWS)
    of = f"{n_rows:,}" if n_rows == n_all else f"{n_rows:,} matching (of {n_all:,})"
    return f"tensors {first:,}-{last:,} of {of} ([ and ] for the other pages)"
