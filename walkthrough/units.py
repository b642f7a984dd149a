"""Figures as short text in decimal units, shared by `walkthrough estimate` and the app's Costs and Summary stages.

Only how a number is written lives here; the numbers come from the cost model
(`walkthrough.engine.costs`). Decimal prefixes throughout (1 GB = 1e9 bytes).

Example: fmt(1.84e9, "B") -> "1.84 GB", fmt(0.0012, "s") -> "1.2 ms", fmt(0.25, "") -> "25%"
"""

from __future__ import annotations

_SCALES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_PREFIXED = ("B", "B/s", "FLOP", "FLOP/s")  # units written with a decimal prefix


def fmt(value: float, unit: str) -> str:
    """A figure as short text: seconds as s or ms, "" (a share) as a percentage, bytes and FLOPs prefixed.

    Args:
        value: the number, in `unit`.
        unit: "s", "" (a fraction of one), one of "B", "B/s", "FLOP", "FLOP/s", or any other unit (tokens/s...).
    """
    if unit == "s":
        if value >= 100:
            return f"{value:,.0f} s"
        return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"
    if unit == "":
        return f"{value:.0%}"
    if unit in _PREFIXED:
        for scale, prefix in _SCALES:
            if abs(value) >= scale:
                return f"{value / scale:.3g} {prefix}{unit}"
        return f"{value:.3g} {unit}"
    return f"{value:,.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
