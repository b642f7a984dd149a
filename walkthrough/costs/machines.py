"""Every hardware profile side by side for one request: fits or not, decode speed, time to first token.

One `costs.estimate` per profile (SRAM profiles as the chips the request needs),
reduced to a row; `sort_rows` orders them by one of `SORT_KEYS`. Rows of
machines the request does not fit carry None speeds and sort last.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from walkthrough.costs.budget import NO_FIT
from walkthrough.costs.estimate import Estimate, no_band_reason
from walkthrough.costs.hardware import Profile
from walkthrough.costs.request_size import RequestSize, estimate_for
from walkthrough.inspect.card import ModelCard

SORT_KEYS = ("decode", "first token", "bandwidth", "memory", "name")


@dataclass(frozen=True)
class MachineRow:
    """One profile's answer to the request."""

    id: str
    name: str
    memory_bytes: float  # usable fast memory (all chips' SRAM for SRAM profiles)
    bandwidth: float  # B/s
    verdict: str  # budget.FITS, OFFLOAD or NO_FIT
    placement: str  # what is offloaded, or what is short
    ceiling: float | None  # decode tokens/s at full bandwidth, mid-answer
    realistic: float | None  # at the profile's decode efficiency
    first_token: float | None  # seconds
    chips: int | None  # SRAM profiles: chips the request needs
    band: float | None = None  # the decode figure's band (+/- fraction); None: no band
    band_text: str = ""  # where the band comes from, or why there is none


def machine_rows(card: ModelCard, profiles: Iterable[Profile], size: RequestSize) -> list[MachineRow]:
    """One row per profile, in the profiles' order."""
    out = []
    for hw in profiles:
        e = estimate_for(card, hw, size)
        m = e.memory
        if m.verdict == NO_FIT:
            where = f"short by {m.shortfall.value / 1e9:,.1f} GB" if m.shortfall else ""
        else:
            where = m.placement.describe()
        out.append(MachineRow(
            hw.id, e.hardware.name, m.usable.value, e.hardware.bandwidth, m.verdict, where,
            e.decode.ceiling.value if e.decode else None, e.decode.tokens_per_s.value if e.decode else None,
            e.prefill.seconds.value if e.prefill else None, int(e.chips.value) if e.chips is not None else None,
            *_band(e)))
    return out


def _band(e: Estimate) -> tuple[float | None, str]:
    if e.decode is None:
        return None, "does not fit"
    if e.decode.band is None:
        return None, e.decode.no_band or no_band_reason(e)
    return e.decode.band.fraction, e.decode.band.describe()


def sort_rows(rows: list[MachineRow], key: str) -> list[MachineRow]:
    """Fastest decode / first token, most bandwidth / memory first, or by name; unfit machines last."""
    if key == "name":
        return sorted(rows, key=lambda r: r.name.lower())
    if key == "bandwidth":
        return sorted(rows, key=lambda r: -r.bandwidth)
    if key == "memory":
        return sorted(rows, key=lambda r: -r.memory_bytes)
    if key == "decode":
        return sorted(rows, key=lambda r: (r.realistic is None, -(r.realistic or 0.0)))
    if key == "first token":
        return sorted(rows, key=lambda r: (r.first_token is None, r.first_token or 0.0))
    raise ValueError(f"unknown sort key {key!r}; one of {', '.join(SORT_KEYS)}")
