"""`inspect --tensors`: the tensor table written a batch of lines at a time, in time linear in the tensors.

A Rich table measures and lays out every cell before it prints anything: about
1 ms a row, so 300,000 tiny tensors took minutes (issue 20). This writer lays the
same table out itself: one pass finds each column's width, a second writes the
rows in batches of `BATCH_LINES`. The look is Rich's SIMPLE_HEAD table (a rule
under the header, a blank line and a bold title between sections). On a narrow
terminal only names longer than the caller's minimum fold onto more lines (as
Rich's `fold` does); figures are never cut, where Rich's table cropped the last
column.

Example (a 2-layer model, 80 columns):

    Tensors

      name                 shape      type   params      bytes    offset
     ───────────────────────────────────────────────────────────────────────
      model-wide
      token_embd.weight    64 x 268   F32    17.2 K   67.0 KiB     6,208
"""

from __future__ import annotations

from rich.cells import cell_len, chop_cells
from rich.console import Console
from rich.text import Text

from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.tensors import tensor_layer
from walkthrough.screens.format import human_bytes, human_count
from walkthrough.textsafe import visible

HEADERS = ("name", "shape", "type", "params", "bytes", "offset")
LEFT = {"name", "shape", "type"}  # the other columns are numbers, right-aligned
BATCH_LINES = 2000  # lines handed to the console at once
_FIRST = object()  # the section before the first


def _cells(layer: int | None, t: TensorInfo) -> tuple[str, ...]:
    """One row's text: the name without its `blk.N.` (the section says the layer), then the figures."""
    short = t.name if layer is None else t.name.split(".", 2)[2]
    return (visible(short), " x ".join(map(str, t.shape)), t.type_name, human_count(t.n_elements),
            human_bytes(t.nbytes), f"{t.offset:,}")


def _width(text: str) -> int:
    """Terminal cells of a text (plain ASCII is one cell a character: the common case, kept fast)."""
    return len(text) if text.isascii() else cell_len(text)


def _widths(rows: list[tuple[int | None, TensorInfo]], name_min: int, space: int) -> list[int]:
    """Each column's width: its widest cell, the name column narrowed (not below name_min) to fit `space`."""
    widths = [_width(h) for h in HEADERS]
    for layer, t in rows:
        for i, cell in enumerate(_cells(layer, t)):
            width = _width(cell)
            if width > widths[i]:
                widths[i] = width
    for layer in {layer for layer, _ in rows}:
        widths[0] = max(widths[0], _width(_section(layer)))
    over = 4 + sum(widths) + 3 * (len(widths) - 1) - space
    if over > 0:
        widths[0] = max(min(widths[0], name_min), widths[0] - over)
    return widths


def _section(layer: int | None) -> str:
    return "model-wide" if layer is None else f"layer {layer}"


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    """The terminal lines of one row, each ending in a newline (more than one when the name folds)."""
    names = chop_cells(cells[0], widths[0]) if _width(cells[0]) > widths[0] else [cells[0]]
    lines = []
    for k, name in enumerate(names):
        row = (name, *cells[1:]) if k == 0 else (name, *[""] * (len(cells) - 1))
        padded = [c + " " * (w - _width(c)) if h in LEFT else " " * (w - _width(c)) + c
                  for c, w, h in zip(row, widths, HEADERS)]
        lines.append("  " + "   ".join(padded) + "  \n")
    return "".join(lines)


def print_tensor_table(f: GGUFFile, console: Console, name_min: int) -> None:
    """Write every tensor, model-wide ones first, then layer by layer (ggml shape order: row length first).

    Rows go straight to the console's file in batches (they hold no style, and every name
    went through `visible()`); the bold header and section lines go through the console.

    Args:
        f: the opened file.
        console: where to write; its width decides whether names longer than `name_min` fold.
        name_min: names up to this many cells stay whole (so `grep` finds them), even if the
            lines then run past a narrow terminal; figures are never cut.
    """
    rows = sorted(((tensor_layer(t.name), t) for t in f.tensors.values()),
                  key=lambda r: -1 if r[0] is None else r[0])
    widths = _widths(rows, name_min, console.width)
    total = 4 + sum(widths) + 3 * (len(widths) - 1)
    blank = " " * total + "\n"
    batch: list[str] = [blank, "Tensors".ljust(total) + "\n", blank]  # the title, then the table's top edge

    def styled(text: str) -> None:
        console.file.write("".join(batch))
        batch.clear()
        console.print(Text(text, style="bold"), end="", soft_wrap=True)

    styled(_line(HEADERS, widths))
    batch.append(" " + "─" * (total - 2) + " \n")
    previous = _FIRST
    for layer, t in rows:
        if layer != previous:
            if previous is not _FIRST:
                batch.append(blank)
            styled("  " + _section(layer).ljust(total - 2) + "\n")
            previous = layer
        batch.append(_line(_cells(layer, t), widths))
        if len(batch) >= BATCH_LINES:
            console.file.write("".join(batch))
            batch.clear()
    batch.append(blank)  # the bottom edge
    console.file.write("".join(batch))
