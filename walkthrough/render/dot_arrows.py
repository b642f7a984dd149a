"""A query and a key drawn as two arrows in text, with the score they give (`engine.query_key.DotPair`).

The arrows are the two vectors projected on the keys' first two principal directions (u1 across,
u2 up), drawn from the origin with line characters chosen by slope; a terminal cell is about twice
as tall as wide, so a step up is worth two across. The lines under the drawing give the real score
(q.k x scale, from the run), the score the projection alone gives (labelled as such), the angle
and lengths in the head's own dimensions. Nothing is computed here beyond placing characters.
"""

from __future__ import annotations

import math

from rich.text import Text

from walkthrough.engine.query_key import DotPair

ASPECT = 2.0  # a cell is about twice as tall as it is wide
STYLES = {"q": "bold cyan", "k": "bold magenta"}


def _slope_char(dx: float, dy: float) -> str:
    """The line character for a direction in screen units (dy up)."""
    angle = math.degrees(math.atan2(dy, dx)) % 180
    if angle < 22.5 or angle >= 157.5:
        return "-"
    if angle < 67.5:
        return "/"
    if angle < 112.5:
        return "|"
    return "\\"


def arrows_canvas(pair: DotPair, width: int, height: int) -> Text:
    """The two projected arrows on a width x height character grid, origin in the middle."""
    width, height = max(11, width | 1), max(5, height | 1)
    cx, cy = width // 2, height // 2
    across = max(abs(pair.q2[0]), abs(pair.k2[0]), 1e-30)
    up = max(abs(pair.q2[1]), abs(pair.k2[1]), 1e-30)
    unit = min((cx - 1) / across, (cy - 1) * ASPECT / up)  # cells across per unit of length
    grid = [[(" ", "") for _ in range(width)] for _ in range(height)]
    for x in range(width):
        grid[cy][x] = ("·", "dim")
    for y in range(height):
        grid[y][cx] = ("·", "dim")
    grid[cy - 1][width - 2], grid[0][cx + 1] = ("u1", "dim"), ("u2", "dim")
    for name, (a, b) in (("k", pair.k2), ("q", pair.q2)):
        ex, ey = a * unit, b * unit / ASPECT  # cells across, cells up
        char = _slope_char(ex, ey * ASPECT)
        steps = max(1, int(max(abs(ex), abs(ey)) * 2))
        for i in range(1, steps + 1):
            x, y = round(cx + ex * i / steps), round(cy - ey * i / steps)
            grid[y][x] = (char, STYLES[name])
        grid[round(cy - ey)][round(cx + ex)] = (name, STYLES[name] + " reverse")
    grid[cy][cx] = ("o", "bold")
    out = Text()
    for y, row in enumerate(grid):
        if y:
            out.append("\n")
        x = 0
        while x < width:
            char, style = row[x]
            if char in ("u1", "u2"):
                out.append(char[: width - x], style=style)
                x += 2
                continue
            out.append(char, style=style)
            x += 1
    return out


def _scale_text(pair: DotPair, *, value: bool = False) -> str:
    """How the scale is written: "/ √64" (or "/ 8" with value=True) when it is 1/sqrt(hd), else "x 0.125"."""
    hd = pair.query.shape[0]
    if math.isclose(pair.scale, 1 / math.sqrt(hd), rel_tol=1e-5):
        return f"/ {math.sqrt(hd):.4g}" if value else f"/ √{hd}"
    return f"x {pair.scale:.4g}"


def pair_lines(pair: DotPair, weight: float | None) -> Text:
    """The real score, the projection's score (labelled), the angle and the lengths."""
    hd = pair.query.shape[0]
    out = Text()
    out.append("score ", style="bold")
    out.append(f"q·k {_scale_text(pair)} = {pair.dot:.4g} {_scale_text(pair, value=True)} = ")
    out.append(f"{pair.score:.4g}", style="bold")
    out.append(f" (the run's, over all {hd} dimensions")
    out.append(f"; weight {weight:.1%} after the softmax)" if weight is not None else ")")
    out.append("\nprojected ", style="bold")
    out.append(f"(q1 k1 + q2 k2) {_scale_text(pair)} = {pair.projected_score:.4g}: the plane alone, an "
               f"approximation (it holds {pair.plane_share:.0%} of the {pair.n_keys} keys' squared length)")
    out.append(f"\nin {hd} dimensions: angle {pair.angle:.0f}°, |q| {math.sqrt(float(pair.query @ pair.query)):.3g}, "
               f"|k| {math.sqrt(float(pair.key_vector @ pair.key_vector)):.3g}; q = ({pair.q2[0]:.3g}, "
               f"{pair.q2[1]:.3g}), k = ({pair.k2[0]:.3g}, {pair.k2[1]:.3g}) on (u1, u2)", style="dim")
    return out
