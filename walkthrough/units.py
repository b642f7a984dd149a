"""Figures as short text, in the two conventions the project writes bytes in; one per screen, never both.

Only how a number is written lives here; the numbers come from the file, the run
or the cost model. `fmt` writes decimal units (1 GB = 1e9 bytes): the cost
model's figures (the Costs stage, `estimate`, `bench`), as bandwidth is sold in
GB/s. `binary_bytes` writes binary units (1 MiB = 2^20 bytes): sizes of files,
tensors and caches everywhere else (File, Prefill, Decode, Summary, the live
panel, `inspect`, `trace`).

Example: fmt(1.84e9, "B") -> "1.84 GB", fmt(0.0012, "s") -> "1.2 ms", fmt(0.25, "") -> "25%",
binary_bytes(1536) -> "1.5 KiB", exact_bytes(4483843808) -> "4.2 GiB (4,483,843,808 bytes)"
"""

from __future__ import annotations

_SCALES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB")
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


def binary_bytes(n: float | None) -> str:
    """Bytes in binary units, one decimal above 1 KiB; "?" for unknown."""
    if n is None:
        return "?"
    value = float(n)
    for unit in _BINARY:
        if abs(value) < 1024 or unit == _BINARY[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_BINARY[-1]}"


def exact_bytes(n: int) -> str:
    """Bytes in binary units with the exact count beside them, for a figure the reader may check or act on
    (how much of a file is missing); below 1 KiB the count alone."""
    return f"{n:,} bytes" if abs(n) < 1024 else f"{binary_bytes(n)} ({n:,} bytes)"
