"""Machines that hold the weights in on-chip SRAM: how many chips a file needs, and what that machine is.

An SRAM machine (Groq's LPU, Cerebras's wafer-scale engine; `memory_kind:
"sram"` in `hardware.json`) has no memory beside its chips: each chip holds a
slice of the model in its own SRAM, so a model is served by as many chips as
its weights, KV cache, state and buffers need. A profile of this kind gives one
chip's figures; `chips_needed` counts the chips and `as_machine` turns the
profile into the machine of that many chips for the rest of the estimate.

The decode ceiling that follows uses one chip's bandwidth: the layers are laid
out across the chips in turn, so a token passes through every chip and each
reads its own slice (time = sum of slice / chip bandwidth = bytes per token /
chip bandwidth). Splitting every layer across all chips at once could divide
that time by the chip count; the chip-to-chip links decide how much of that is
reached, and they are not modelled. Prefill is counted at one chip's compute
for the same reason (a stated upper bound on time).

Example: 21.7 GB of weights on 0.23 GB chips -> ceil(21.7 / 0.23) = 95 chips.
"""

from __future__ import annotations

import math
from dataclasses import replace

from walkthrough.costs.budget import memory_plan
from walkthrough.costs.figure import Figure, derived, given
from walkthrough.costs.hardware import GIB, Profile
from walkthrough.inspect.card import ModelCard
from walkthrough.words import count

SRAM = "sram"


def is_sram(hw: Profile) -> bool:
    return hw.memory_kind == SRAM


def chips_needed(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16", users: int = 1) -> Figure:
    """Chips whose SRAM holds everything the request needs (weights, KV cache, state, buffers)."""
    needed = memory_plan(card, hw, context, cache_type, users).needed
    per_chip = given((hw.memory_gib - hw.reserved_gib) * GIB, "B",
                     hw.sources.get("memory_gib", hw.origin) + " (one chip's SRAM)")
    return derived(max(math.ceil(needed.value / per_chip.value), 1), "chips", "ceil(memory needed / SRAM per chip)",
                   needed=needed, sram_per_chip=per_chip)


def as_machine(hw: Profile, chips: int) -> Profile:
    """The profile as a machine of `chips` chips: their SRAM added up; bandwidth and compute stay one chip's."""
    return replace(hw, memory_gib=hw.memory_gib * chips, reserved_gib=hw.reserved_gib * chips,
                   name=f"{hw.name}, {count(chips, 'chip')}")
