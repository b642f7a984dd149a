"""Held against read per token, drawn as two bars per file on one axis (costs.held_read), and as a table of
every type for `walkthrough inspect --held-read`.

The axis stays put while the type changes, so the bars shrink with the bits:
it is the machine's memory when the largest the files get (at any type, given
as `largest`) fills at least a cell of it, else that largest size (the line
under the bars says how much longer the memory would be), so a small file
still shows its two bars.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.costs.held_read import HeldRead
from walkthrough.costs.memory_bar import cells
from walkthrough.textsafe import safe_text
from walkthrough.units import fmt

HELD, READ, EMPTY = ("█", "blue"), ("▓", "magenta"), ("·", "dim")
LABEL = 6  # "held ", "read "


def _bar(nbytes: float, scale: float, width: int, look: tuple[str, str]) -> Text:
    filled = cells([nbytes, max(scale - nbytes, 0.0)], scale, width)
    return Text.assemble((look[0] * filled[0], look[1]), (EMPTY[0] * filled[1], EMPTY[1]), no_wrap=True)


def _kind(row: HeldRead) -> str:
    return "mixture of experts" if row.moe else "dense"


def held_read_view(rows: Sequence[HeldRead], memory: float, machine: str, width: int,
                   largest: float | None = None) -> Group:
    """Two bars per file (held, read per token) on one axis, each with its bytes and the ratio."""
    width = max(width, 30)
    bar_width = width - LABEL - 12
    largest = max(largest or 0.0, *(r.held for r in rows))
    scale = memory if largest * bar_width >= memory else largest
    out: list[Text] = []
    for r in rows:
        out.append(Text.assemble(safe_text(r.name, "bold"), f" ({_kind(r)}) ", (r.quant, "bold"),
                                 f", {r.bits:.2f} bits per weight"))
        line = Text("held  ", no_wrap=True)
        line.append_text(_bar(r.held, scale, bar_width, HELD))
        line.append(f" {fmt(r.held, 'B')}")
        out.append(line)
        line = Text("read  ", no_wrap=True)
        if r.read is None:
            line.append("the file does not say what a token reads", style="dim")
        else:
            line.append_text(_bar(r.read, scale, bar_width, READ))
            line.append(f" {fmt(r.read, 'B')}")
        out.append(line)
        if r.ratio is not None:
            out.append(Text(f"      a token reads 1/{r.ratio:.3g} of what is held", style="dim"))
    if scale == memory:
        axis = f"axis: the {machine} memory, {fmt(memory, 'B')}"
    else:
        axis = (f"axis: {fmt(largest, 'B')}, the most either file holds at any type; the {machine} memory "
                f"({fmt(memory, 'B')}) is {memory / largest:,.0f} times as long")
    out.append(Text(axis, style="dim"))
    return Group(*out)


def held_read_table(rows: Sequence[HeldRead]) -> Table:
    """One file's rows (as stored, then each type): bits per weight, held, read per token, held / read."""
    first = rows[0]
    table = Table(box=None, padding=(0, 1), show_edge=False, title_justify="left",
                  title=Text.assemble(safe_text(first.name, "bold"), f" ({_kind(first)})"))
    for name in ("quant", "bits/weight", "held", "read/token", "held/read"):
        table.add_column(name, justify="left" if name == "quant" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r.quant, f"{r.bits:.2f}", fmt(r.held, "B"), "?" if r.read is None else fmt(r.read, "B"),
                      "?" if r.ratio is None else f"{r.ratio:.2f}")
    return table
