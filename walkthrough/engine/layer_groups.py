"""Many layers and many experts in few cells: layers grouped by what they keep, experts binned per cell.

A 30- or 64-layer model keeps the same KV cache in most of its layers, and a
256-expert router cannot get a cell per expert at 80 columns. Views that must
fit (the live panel, the Decode stage's KV table, the experts grids) ask this
module, which works from a pass's `LayerTrace` records only:

- `cache_groups(layers)`: layers keeping the same kind of cache with the same
  positions and bytes, as one group each, in order of their first layer. A
  hybrid model's sliding-window or linear layers form groups of their own.
- `ranges(indices)` and `ranges_text(indices)`: layer numbers as runs.
  Example: [0, 1, 2, 4, 6, 7] -> [(0, 2), (4, 4), (6, 7)] -> "0-2,4,6-7".
- `per_cell(n_experts, cells)` and `lit_per_cell(counts, k)`: how many experts
  share a cell when `cells` are free, and how many of each cell's experts were
  chosen. Example: counts [0, 2, 0, 0, 1, 1, 0, 0], k=4 -> [1, 2].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # screens import this module before any run: the engine loads with the first pass
    from walkthrough.engine.steps import LayerTrace

# One letter per kind of layer and what it keeps (shared by `trace` and the app).
KIND_LETTERS = {"linear": ("l", "linear attention, fixed state"),
                "sliding": ("s", "sliding-window attention, KV cache of the window"),
                "full": ("F", "full attention, KV cache")}


@dataclass(frozen=True)
class CacheGroup:
    """Layers of one kind that keep the same thing after a pass."""

    kind: str  # "full", "sliding" or "linear"
    layers: tuple[int, ...]  # layer indices, ascending
    kv_len: int  # positions each keeps (attention layers; 0 for linear ones)
    bytes_each: int  # KV cache bytes (attention) or fixed state bytes (linear) of one layer

    @property
    def total_bytes(self) -> int:
        return self.bytes_each * len(self.layers)

    @property
    def letter(self) -> str:
        return KIND_LETTERS[self.kind][0]


def cache_groups(layers: Sequence[LayerTrace]) -> list[CacheGroup]:
    """Layers grouped by (kind, positions kept, bytes kept), in order of each group's first layer."""
    groups: dict[tuple[str, int, int], list[int]] = {}
    for t in layers:
        key = (t.mixer, 0, t.state_bytes) if t.mixer == "linear" else (t.mixer, t.kv_len, t.kv_bytes)
        groups.setdefault(key, []).append(t.index)
    return [CacheGroup(kind, tuple(indices), kv_len, nbytes) for (kind, kv_len, nbytes), indices in groups.items()]


def ranges(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending integers as runs of consecutive ones, each (first, last)."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def ranges_text(indices: Sequence[int]) -> str:
    """Runs written short: "0-2,4,6-7"."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges(indices))


def per_cell(n_experts: int, cells: int) -> int:
    """Experts per cell so that `n_experts` fit in `cells` cells (at least 1)."""
    return max(1, -(-n_experts // max(cells, 1)))


def lit_per_cell(counts: np.ndarray, k: int) -> np.ndarray:
    """[ceil(n_experts / k)] how many experts of each run of `k` were chosen (`counts`: [n_experts] tokens each)."""
    lit = (np.asarray(counts) > 0).astype(np.int64)  # [n_experts]
    pad = -len(lit) % k
    return np.concatenate([lit, np.zeros(pad, np.int64)]).reshape(-1, k).sum(axis=1)  # [n_cells]
