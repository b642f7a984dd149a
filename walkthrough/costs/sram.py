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

The realistic decode speed is that pipeline held to the single-user speeds the
vendors published (`published` in hardware.json, each with its source): time per
token = a x bytes / one chip's bandwidth + c x layers, fitted by non-negative least
squares on relative error (`pipeline_fit`). The fixed cost per layer is what sets
the pace on these machines (moving a token's activations from chip to chip), so a
small MoE is not hundreds of times faster than a dense 70B. The band is the
largest error on a published run left out of the fit.

Example: 21.7 GB of weights on 0.23 GB chips -> ceil(21.7 / 0.23) = 95 chips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from walkthrough.costs.budget import memory_plan
from walkthrough.costs.figure import Figure, derived, given
from walkthrough.costs.hardware import GIB, Profile
from walkthrough.costs.timing import nnls
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


@dataclass(frozen=True)
class PipelineFit:
    """The pipeline's costs fitted on an SRAM machine's published single-user speeds."""

    coefficients: tuple[float, float]  # a (x bytes / chip bandwidth), c (seconds per layer)
    runs: int
    errors: tuple[float, ...]  # each published run predicted by a fit on the others: predicted / published - 1

    @property
    def band(self) -> float | None:
        """The largest leave-one-out error (few runs: the worst, not a percentile); None below three runs."""
        return max(abs(e) for e in self.errors) if self.runs >= 3 else None


def _terms(hw: Profile, bytes_per_token: float, layers: int) -> np.ndarray:
    return np.array([bytes_per_token / hw.bandwidth, layers])  # [2]


def _coefficients(hw: Profile, runs: list[dict]) -> np.ndarray:
    a = np.array([_terms(hw, r["bytes_per_token"], r["layers"]) * r["tokens_per_s"] for r in runs])
    return nnls(a, np.ones(len(runs)))  # each row: terms / (1 / rate) = 1


def pipeline_fit(hw: Profile) -> PipelineFit | None:
    """The fit on the profile's published runs, or None for a profile without any."""
    runs = list(hw.published)
    if not is_sram(hw) or not runs:
        return None
    coef = _coefficients(hw, runs)
    errors = []
    for i, r in enumerate(runs):
        rest = runs[:i] + runs[i + 1:]
        if not rest:
            continue
        c = _coefficients(hw, rest)
        seconds = float(_terms(hw, r["bytes_per_token"], r["layers"]) @ c)
        errors.append((1 / seconds if seconds > 0 else math.inf) / r["tokens_per_s"] - 1)
    return PipelineFit(tuple(float(v) for v in coef), len(runs), tuple(errors))


def pipeline_rate(fit: PipelineFit, hw: Profile, bytes_per_token: float, layers: int) -> float:
    """Single-user tokens/s of the fitted pipeline."""
    seconds = float(_terms(hw, bytes_per_token, layers) @ np.array(fit.coefficients))
    return 1 / seconds if seconds > 0 else math.inf
