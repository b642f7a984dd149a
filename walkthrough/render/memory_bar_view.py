"""The memory budget drawn as one stacked bar with its legend (costs.memory_bar), for the Costs stage and
`walkthrough estimate`.

Each part has its own character as well as its colour, so the bar reads in 16
colours and in none; a red edge marks where the memory ends when the parts
exceed it.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from walkthrough.costs.memory_bar import MemoryBar, cells
from walkthrough.units import fmt

LOOK = {  # part -> (character, colour)
    "weights": ("█", "blue"),
    "kv": ("▓", "magenta"),
    "state": ("▒", "cyan"),
    "buffers": ("▒", "yellow"),
    "reserve": ("░", "white"),
}
FREE = ("·", "green")
EDGE = "┃"


def share(fraction: float) -> str:
    """A share of the memory as a percentage; "<1%" for a part too small to round to one."""
    return "<1%" if 0 < fraction < 0.005 else f"{fraction:.0%}"


def memory_bar_view(bar: MemoryBar, width: int, where: str = "") -> Group:
    """The bar (`width` cells), then the legend: each part's bytes and share of the memory, never split across lines."""
    width = max(width, 10)
    sizes = [p.nbytes for p in bar.parts] + [bar.free]
    widths = cells(sizes, bar.scale, width)
    line = Text(no_wrap=True)
    for part, n in zip(bar.parts, widths):
        char, colour = LOOK[part.key]
        line.append(char * n, style=colour)
    line.append(FREE[0] * widths[-1], style=FREE[1])
    if bar.over:
        edge = min(round(bar.memory / bar.scale * width), width - 1)
        line = line[:edge] + Text(EDGE, style="bold red") + line[edge + 1 :]
    head = Text.assemble(("memory ", "bold"), f"{fmt(bar.memory, 'B')}{where}: ",
                         (f"{fmt(bar.over, 'B')} over" if bar.over else f"{fmt(bar.free, 'B')} free",
                          "bold red" if bar.over else "bold green"))
    items = [Text.assemble((LOOK[part.key][0], LOOK[part.key][1]),
                           f" {part.label} {fmt(part.nbytes, 'B')} ({share(part.nbytes / bar.memory)})")
             for part in bar.parts]
    items.append(Text.assemble((FREE[0], FREE[1]), f" free {fmt(bar.free, 'B')}"))
    if bar.over:
        items.append(Text(f"{EDGE} the memory ends: {fmt(bar.over, 'B')} do not fit", style="red"))
    return Group(head, line, *legend_lines(items, width))


def legend_lines(items: list[Text], width: int, gap: str = "  ") -> list[Text]:
    """The legend's items on as few lines of `width` cells as hold them, never one split across two
    (a wrapped line parted "compute buffers 112 MB" from its "(<1%)")."""
    lines: list[Text] = []
    for item in items:
        if lines and lines[-1].cell_len + len(gap) + item.cell_len <= width:
            lines[-1].append(gap)
            lines[-1].append_text(item)
        else:
            lines.append(item.copy())
    return lines
