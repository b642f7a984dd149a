"""`inspect --tensors` and `--metadata`: long tables written a batch of lines at a time, in time linear in the rows.

A Rich table measures and lays out every cell before it prints anything: about
1 ms a row, so 300,000 tiny tensors, or 300,000 metadata keys, took minutes and
hundreds of MB (issue 20). `write_table` lays the same table out itself: one pass
finds each column's width, a second writes the rows in batches of `BATCH_LINES`.
The look is Rich's SIMPLE_HEAD table (a rule under the header, a blank line and
a bold heading between sections). On a narrow terminal the columns that may fold
(tensor names; metadata values, then keys) are narrowed, down to a minimum, and
their longer cells wrap onto more lines (as Rich's `fold` does); figures are never
cut, where Rich's table cropped the last column, and a value column is never
narrower than its longest number, so no number is split across lines.

Example (a 2-layer model, 80 columns):

    Tensors

      name                 shape      type   params      bytes    offset
     ───────────────────────────────────────────────────────────────────────
      model-wide
      token_embd.weight    64 x 268   F32    17.2 K   67.0 KiB     6,208
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.metadata import describe, summarize_value
from walkthrough.inspect.tensors import tensor_layer
from walkthrough.render.format import human_bytes, human_count
from walkthrough.textsafe import visible

BATCH_LINES = 2000  # lines handed to the console at once
MIN_VALUE_WIDTH = 16  # a metadata value column is not narrowed below this
_FIRST = object()  # the section before the first

Rows = Callable[[], Iterable[tuple[str | None, tuple[str, ...]]]]  # (section heading or None, cells), twice


class Column(NamedTuple):
    """A column's header, alignment, and how narrow it may fold (None: it never folds)."""

    header: str
    right: bool = False  # figures are right-aligned
    fold_to: int | None = None


def _width(text: str) -> int:
    """Terminal cells of a text (plain ASCII is one cell a character: the common case, kept fast)."""
    return len(text) if text.isascii() else cell_len(text)


def _widths(columns: Sequence[Column], rows: Rows, space: int) -> list[int]:
    """Each column's width: its widest cell, then, to fit `space`, the widest folding column narrowed (down to
    the next widest or its `fold_to`) until the table fits or none can fold further (as Rich's table does)."""
    widths = [_width(c.header) for c in columns]
    for section, cells in rows():
        if section is not None and _width(section) > widths[0]:
            widths[0] = _width(section)
        for i, cell in enumerate(cells):
            width = _width(cell)
            widths[i] = max(widths[i], width)
    over = 4 + sum(widths) + 3 * (len(widths) - 1) - space
    while over > 0:
        room = [i for i, c in enumerate(columns) if c.fold_to is not None and widths[i] > c.fold_to]
        if not room:
            break
        widest = max(room, key=widths.__getitem__)
        floor = max([columns[widest].fold_to] + [widths[i] for i in room if i != widest])
        cut = min(over, widths[widest] - floor) if floor < widths[widest] else 1  # equal widths: in turn
        widths[widest] -= cut
        over -= cut
    return widths


def _wrapped(text: str, width: int, console: Console) -> list[str]:
    """A cell too wide for its column as lines: wrapped at spaces, words longer than the column folded."""
    return [line.plain.rstrip() for line in Text(text).wrap(console, width, overflow="fold")]


def _line(cells: Sequence[str], columns: Sequence[Column], widths: list[int], console: Console) -> str:
    """The terminal lines of one row, each ending in a newline (more than one when a cell folds)."""
    parts = [_wrapped(c, w, console) if _width(c) > w else [c] for c, w in zip(cells, widths)]
    lines = []
    for k in range(max(len(p) for p in parts)):
        row = [p[k] if k < len(p) else "" for p in parts]
        padded = [" " * (w - _width(c)) + c if col.right else c + " " * (w - _width(c))
                  for c, w, col in zip(row, widths, columns)]
        lines.append("  " + "   ".join(padded) + "  \n")
    return "".join(lines)


def write_table(console: Console, title: str, columns: Sequence[Column], rows: Rows) -> None:
    """Write a titled table of `rows()` (called twice: widths, then lines) to the console.

    Rows go straight to the console's file in batches (they hold no style, and every text
    from the file went through `visible()`); the bold header and section lines go through
    the console.
    """
    widths = _widths(columns, rows, console.width)
    total = 4 + sum(widths) + 3 * (len(widths) - 1)
    blank = " " * total + "\n"
    batch: list[str] = [blank, title.ljust(total) + "\n", blank]  # the title, then the table's top edge

    def styled(text: str) -> None:
        console.file.write("".join(batch))
        batch.clear()
        console.print(Text(text, style="bold"), end="", soft_wrap=True)

    styled(_line([c.header for c in columns], columns, widths, console))
    batch.append(" " + "─" * (total - 2) + " \n")
    previous = _FIRST
    for section, cells in rows():
        if section != previous and section is not None:
            if previous is not _FIRST:
                batch.append(blank)
            styled("  " + section.ljust(total - 2) + "\n")
        previous = section
        batch.append(_line(cells, columns, widths, console))
        if len(batch) >= BATCH_LINES:
            console.file.write("".join(batch))
            batch.clear()
    batch.append(blank)  # the bottom edge
    console.file.write("".join(batch))


def _tensor_cells(layer: int | None, t: TensorInfo) -> tuple[str, ...]:
    """One row's text: the name without its `blk.N.` (the section says the layer), then the figures."""
    short = t.name if layer is None else t.name.split(".", 2)[2]
    return (visible(short), " x ".join(map(str, t.shape)), t.type_name, human_count(t.n_elements),
            human_bytes(t.nbytes), f"{t.offset:,}")


def _section(layer: int | None) -> str:
    return "model-wide" if layer is None else f"layer {layer}"


def print_tensor_table(f: GGUFFile, console: Console, name_min: int) -> None:
    """Write every tensor, model-wide ones first, then layer by layer (ggml shape order: row length first).

    Args:
        f: the opened file.
        console: where to write; its width decides whether names longer than `name_min` fold.
        name_min: names up to this many cells stay whole (so `grep` finds them), even if the
            lines then run past a narrow terminal; figures are never cut.
    """
    ordered = sorted(((tensor_layer(t.name), t) for t in f.tensors.values()),
                     key=lambda r: -1 if r[0] is None else r[0])

    def rows():
        return ((_section(layer), _tensor_cells(layer, t)) for layer, t in ordered)

    columns = [Column("name", fold_to=name_min), Column("shape"), Column("type"), Column("params", right=True),
               Column("bytes", right=True), Column("offset", right=True)]
    write_table(console, "Tensors", columns, rows)


def _longest_number(f: GGUFFile, value: Callable[[str], str]) -> int:
    """Cells of the longest word in a numeric key's value ('9.999999974752427e-07', '[0.25,'): the value
    column is not narrowed below it, so a number is never split across lines (a text still wraps)."""
    numeric = (value(key) for key, field in f.fields.items()
               if "string" not in field.type_name and "bool" not in field.type_name)
    return max((_width(word) for cell in numeric for word in cell.split()), default=0)


def print_metadata_table(f: GGUFFile, console: Console, key_min: int, max_value: int,
                         templates: Iterable[tuple[str, str]] = ()) -> None:
    """Write every metadata key, in file order, with its type and value (long arrays as count and first items,
    cut to `max_value` characters); the keys in `templates` say their template is printed below.

    Keys up to `key_min` cells stay whole; values fold first, down to `MIN_VALUE_WIDTH`.
    """
    printed_below = {key: len(text) for key, text in templates}

    def value(key: str) -> str:
        if key in printed_below:
            return f"(chat template, {printed_below[key]:,} characters, printed below)"
        return visible(describe(summarize_value(f, key), max_value))

    def rows():
        return ((None, (visible(key), field.type_name, value(key))) for key, field in f.fields.items())

    longest = max((_width(visible(k)) for k in f.fields), default=3)
    columns = [Column("key", fold_to=min(longest, key_min)), Column("type"),
               Column("value", fold_to=max(MIN_VALUE_WIDTH, _longest_number(f, value)))]
    write_table(console, "Metadata", columns, rows)

