"""A causal attention matrix drawn in half blocks: two query rows per terminal line, 16 colours.

Each cell is "▀": its foreground is the upper row's weight, its background the
lower row's, so a 24-line terminal shows about 30 rows. A weight is shown on a
square-root scale (small weights stay visible) through `RAMP`, from black (0)
to bright white (1); a masked entry (a key after the query: the causal mask) is
`MASKED` grey, so the upper triangle is seen as a triangle. The rows shown
follow the cursor (`window`), and the columns end at the last row shown, so the
diagonal stays in view over a 300-token request.

Example: rows 0-3 of a 4 x 4 matrix give two lines; the first line's cell 1 is
grey over lit (row 0 cannot see key 1, row 1 can).
"""

from __future__ import annotations

import math

import numpy as np
from rich.style import Style
from rich.text import Text

RAMP = ("black", "blue", "bright_blue", "cyan", "bright_cyan", "green", "bright_green", "yellow", "bright_yellow",
        "bright_white")
MASKED = "bright_black"
HALF = "▀"


def colour(weight: float) -> str:
    """The ramp colour of one weight (NaN: masked)."""
    if math.isnan(weight):
        return MASKED
    return RAMP[min(len(RAMP) - 1, int(math.sqrt(max(weight, 0.0)) * len(RAMP)))]


def window(length: int, cursor: int, size: int) -> tuple[int, int]:
    """[start, end) of `size` items out of `length` that keeps `cursor` in view, near the middle."""
    if length <= size:
        return 0, length
    start = min(max(0, cursor - size // 2), length - size)
    if start % 2:  # rows go in pairs: keep a row on the same half of its line as the cursor moves
        # At the end, one row fewer rather than one earlier, so the last row (an odd count's) stays in view.
        start += 1 if start == length - size else -1
    return start, min(length, start + size)


def heat_map(matrix: np.ndarray, cursor: int, lines: int, columns: int) -> tuple[Text, tuple[int, int, int, int]]:
    """The matrix [T, T] as `lines` lines of at most `columns` cells around row `cursor`.

    Returns:
        the drawing (a 6-character row label, then the cells) and the rows and columns shown,
        (row start, row end, column start, column end).
    """
    length = matrix.shape[0]
    r0, r1 = window(length, cursor, 2 * lines)
    c1 = min(length, max(r1, min(length, columns)))
    c0 = max(0, c1 - columns)
    out = Text(no_wrap=True, overflow="crop")
    for top in range(r0, r1, 2):
        bottom = top + 1 if top + 1 < r1 else None
        mark = "▲" if cursor == top else "▼" if cursor == bottom else " "
        out.append(f"{top:>5}{mark}", style="bold" if mark != " " else "dim")
        for col in range(c0, c1):
            upper = colour(float(matrix[top, col]))
            lower = "default" if bottom is None else colour(float(matrix[bottom, col]))
            out.append(HALF, style=Style(color=upper, bgcolor=lower))
        out.append("\n")
    axis = Text(" " * 6, no_wrap=True, overflow="crop")
    for col in range(c0, c1):
        axis.append("|" if col % 10 == 0 else " ", style="dim")
    out.append_text(axis)
    out.append(f"\n      keys {c0}..{c1 - 1} across, queries {r0}..{r1 - 1} down", style="dim")
    return out, (r0, r1, c0, c1)


def legend() -> Text:
    """One line: what the colours mean."""
    line = Text("weight 0 ", no_wrap=True, overflow="ellipsis")
    for name in RAMP:
        line.append("█", style=name)
    line.append(" 1 (square-root scale)   ")
    line.append("█", style=MASKED)
    line.append(" masked: a token cannot see later ones")
    return line
