"""A number that carries its own explanation: value, unit, formula and the figures that went in.

The cost model (`walkthrough.costs.estimate`, `walkthrough.costs.budget`) returns
Figures so the app and `walkthrough estimate --json` can show why, not just what.

Example: derived(69.6, "tokens/s", "bandwidth / bytes per token",
bandwidth=given(128e9, "B/s", "profile"), bytes_per_token=given(1.84e9, "B", "card"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """A number with its unit, the formula that produced it and the figures that went in."""

    value: float
    unit: str
    formula: str = ""
    inputs: tuple[tuple[str, Figure], ...] = ()
    source: str = ""  # where a given (leaf) figure comes from

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit}
        if self.formula:
            out["formula"] = self.formula
        if self.source:
            out["source"] = self.source
        if self.inputs:
            out["inputs"] = {name: fig.to_dict() for name, fig in self.inputs}
        return out


def given(value: float, unit: str, source: str) -> Figure:
    """A figure taken as is (from the card, a profile or the user)."""
    return Figure(float(value), unit, source=source)


def derived(value: float, unit: str, formula: str, **inputs: Figure) -> Figure:
    return Figure(float(value), unit, formula, tuple(inputs.items()))
