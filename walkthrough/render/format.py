"""Display formatting for the screens: byte sizes, counts and proportions as short strings.

Only presentation lives here (how a number is written); every number shown is
computed elsewhere, from the file or the run.

Example: human_bytes(1536) -> "1.5 KiB", human_count(294080) -> "294.1 K"
"""

from __future__ import annotations

from walkthrough.units import (
    binary_bytes as human_bytes,  # screens other than Costs write bytes in binary units
)
from walkthrough.words import count

__all__ = ["answer_ending", "bar", "head_name", "human_bytes", "human_count", "show"]

_COUNT_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def human_count(n: float | None) -> str:
    """A count with a K/M/B/T suffix above a thousand; "?" for unknown."""
    if n is None:
        return "?"
    for scale, suffix in _COUNT_UNITS:
        if abs(n) >= scale:
            return f"{n / scale:.1f} {suffix}"
    return f"{int(n)}" if float(n).is_integer() else f"{n:.3g}"


def head_name(head: int, n_head: int) -> str:
    """An attention head as every screen names it: its index from 0, as layers are (blk.0 ...), and the count.

    Example: head_name(0, 4) -> "head 0 of 4"
    """
    return f"head {head} of {n_head}"


def show(value: object) -> str:
    """A hyperparameter or None as text, written as every count is: whole numbers with thousands separators,
    never in scientific notation; None becomes "?".

    Example: show(32768) -> "32,768", show(1e6) -> "1,000,000", show(0.5) -> "0.5", show(1e-6) -> "1e-06"
    """
    if value is None:
        return "?"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e18:
            return f"{int(value):,}"
        return f"{value:g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of `width` cells filled to `fraction` (0..1) with block characters."""
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(fraction * width)
    return "█" * full + "░" * (width - full)


def answer_ending(state) -> str:
    """How the run's answer ended, in words ("" while it goes on): the model's own end, or the token cap."""
    if not state.finished:
        return ""
    if state.capped:
        return f"token cap reached: {count(state.max_new_tokens, 'token')}, --max-tokens"
    return "the model ended its turn"
