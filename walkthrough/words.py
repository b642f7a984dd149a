"""Counts with their noun, singular or plural as the number asks: the one helper every screen and command uses.

Only English words are handled: the plural is the noun plus "s" unless it is given
(`count(1, "pass", "passes")`). Numbers are written with thousands separators.

Example: count(1, "chunk") -> "1 chunk", count(2, "chunk") -> "2 chunks", count(1200, "token") -> "1,200 tokens",
count(0, "pass", "passes") -> "0 passes", noun(1, "layer") -> "layer"
"""

from __future__ import annotations


def noun(n: int, singular: str, plural: str | None = None) -> str:
    """The noun alone, singular for exactly one, else the plural."""
    return singular if n == 1 else (plural if plural is not None else singular + "s")


def count(n: int, singular: str, plural: str | None = None) -> str:
    """ "1 chunk", "3 chunks": the number (with thousands separators) and its noun."""
    return f"{n:,} {noun(n, singular, plural)}"
