"""The words a stage shows, as plain text: what its terms line and the glossary's "under the cursor" read.

`stage_text` joins the stage's label (the stage bar always shows it), the text
of every `Static` of the stage (its views, tabs and live panel; not the rest of
the stage bar, the terms line or the footer) and the column labels of its tables. Rich renderables are read, not rendered: a table's title,
headings and cells row by row, a group's parts in order (laying tables out
would cost a tenth of a second a redraw), so a phrase is never split by wrapping. `cursor_row_text` is the row a focused
table's cursor is on.
"""

from __future__ import annotations

import io

from rich.align import Align
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

RENDER_WIDTH = 400  # wide enough that no table or line of a stage wraps
SKIPPED = frozenset({"stage-bar", "terms-line"})


def plain(content: object) -> str:
    """A Static's content (text, or a Rich renderable holding text) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (Text, Content)):
        return content.plain
    if isinstance(content, Group):
        return "\n".join(plain(part) for part in content.renderables)
    if isinstance(content, Table):
        rows = [plain(content.title), " ".join(plain(column.header) for column in content.columns)]
        cells = [list(column.cells) for column in content.columns]
        rows += [" ".join(plain(column[i]) for column in cells if i < len(column)) for i in range(content.row_count)]
        return "\n".join(rows)
    if isinstance(content, (Padding, Align)):
        return plain(content.renderable)
    if isinstance(content, Panel):
        return "\n".join((plain(content.title), plain(content.renderable)))
    console = Console(width=RENDER_WIDTH, file=io.StringIO(), record=True, color_system=None, force_terminal=False)
    console.print(content)
    return console.export_text(styles=False)


def stage_text(screen: Screen, label: str = "") -> str:
    """Everything `screen` writes in its widgets (every view, shown or not), one widget per line, after `label`."""
    parts = [label]
    for widget in screen.query(Static):
        if widget.id in SKIPPED or any(isinstance(node, Footer) for node in widget.ancestors):
            continue
        parts.append(plain(widget.content))
    for table in screen.query(DataTable):
        parts.append(" | ".join(str(column.label) for column in table.columns.values()))
    return "\n".join(parts)


def cursor_row_text(widget: Widget | None) -> str:
    """The cells of the row under a focused table's cursor ("" for anything else)."""
    if not isinstance(widget, DataTable) or not widget.row_count:
        return ""
    return " | ".join(plain(cell) for cell in widget.get_row_at(widget.cursor_row))
