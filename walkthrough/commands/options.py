"""Option value types for argparse: numbers checked when the command line is read, not deep inside a run.

`--seed -1`, `--pace nan` or `--min-p inf` would otherwise fail late (a numpy
ValueError, a timer firing without pause, an empty set of candidates). Each type
here turns a bad value into argparse's one-line usage error (exit status 2).

Example: `finite(low=0)("-1")` raises ArgumentTypeError("-1 is below 0").
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def whole(low: int = 0) -> Callable[[str], int]:
    """A whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


def finite(low: float | None = None, high: float | None = None, *, above: bool = False) -> Callable[[str], float]:
    """A finite number in [low, high] (`above`: strictly greater than low)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"{value:g} must be {'above' if above else 'at least'} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value:g} is above {high:g}")
        return value

    return parse


SEED = whole(0)
TEMPERATURE = finite(0.0)
PROBABILITY = finite(0.0, 1.0)
PACE = finite(0.0, 3600.0, above=True)  # seconds between autoplay moves: an hour at most
