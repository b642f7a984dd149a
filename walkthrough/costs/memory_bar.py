"""The memory budget as one stacked bar: weights, KV cache, state, compute buffers and the system's reserve,
against the machine's memory (the article's figure), from `budget.memory_plan`.

The parts are the plan's figures (the card's bytes, the request's cache, the
compute buffer estimate) and the profile's reserved allowance for the OS and
other programs; what is left of the memory is free, or, when the parts exceed
it, the excess is over (on a GPU profile with a host, the plan moves that much
to system RAM). `cells` splits a bar's width among the parts in proportion,
each part that holds bytes at least one cell.

Example: 8 GiB of memory, 4 GiB of weights, 1 GiB of cache, 0.5 GiB of buffers, 1 GiB reserved ->
parts 4, 1, 0.5, 1 GiB and 1.5 GiB free; nothing over.
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.costs.budget import MemoryPlan
from walkthrough.costs.hardware import GIB, Profile


@dataclass(frozen=True)
class Part:
    """One piece of the bar."""

    key: str  # "weights", "kv", "state", "buffers", "reserve"
    label: str
    nbytes: float


@dataclass(frozen=True)
class MemoryBar:
    """What fills the machine's memory for one request."""

    parts: tuple[Part, ...]  # in stacking order; parts without bytes are left out
    memory: float  # the machine's memory, bytes

    @property
    def used(self) -> float:
        return sum(p.nbytes for p in self.parts)

    @property
    def free(self) -> float:
        return max(self.memory - self.used, 0.0)

    @property
    def over(self) -> float:
        """Bytes beyond the memory (0 when it all fits)."""
        return max(self.used - self.memory, 0.0)

    @property
    def scale(self) -> float:
        """The bar's full length in bytes: the memory, or the parts when they exceed it."""
        return max(self.memory, self.used)


def memory_bar(plan: MemoryPlan, hw: Profile) -> MemoryBar:
    """The plan's parts and the profile's reserve, against the profile's memory."""
    parts = (
        Part("weights", "weights", plan.weights.value),
        Part("kv", "KV cache", plan.kv_cache.value),
        Part("state", "recurrent state", plan.state.value),
        Part("buffers", "compute buffers", plan.compute_buffer.value),
        Part("reserve", "system reserve", hw.reserved_gib * GIB),
    )
    return MemoryBar(tuple(p for p in parts if p.nbytes > 0), float(hw.memory_bytes))


def cells(sizes: list[float], scale: float, width: int) -> list[int]:
    """Cells of a `width`-cell bar for each size (bytes of `scale` fill the bar): in proportion, the
    remainders to the largest fractions, every size above 0 at least one cell (taken from the largest).

    Example: cells([6, 3, 0.01], 10, 10) -> [5, 3, 1] (the small part's cell comes from the largest: 9 of 10
    cells stay filled, as 9.01 of 10 bytes are).
    """
    if width <= 0 or scale <= 0:
        return [0] * len(sizes)
    exact = [s / scale * width for s in sizes]
    out = [int(x) for x in exact]
    room = min(width, round(sum(exact))) - sum(out)
    for i in sorted(range(len(sizes)), key=lambda i: exact[i] - out[i], reverse=True)[: max(room, 0)]:
        out[i] += 1
    for i, s in enumerate(sizes):
        if s > 0 and out[i] == 0:
            j = max(range(len(out)), key=lambda j: out[j])
            if out[j] > 1:
                out[j] -= 1
                out[i] = 1
    return out
