"""How many visitors `walkthrough serve` admits at once, and the weight budget each visitor's app gets.

Each visitor's app holds Python, Textual, numpy, a run's activations and KV cache (APP_ALLOWANCE) and
the weights the numpy engine dequantizes (`costs.memory.dequantized_bytes`: float32, float64 for an F32
file's matrices). By default serve admits as many visitors as the free memory
(`engine.memory.free_memory`: MemAvailable within the cgroup's limit) holds at that cost, at least one.
Every app then gets an equal share of the free memory, less APP_ALLOWANCE, as its `--max-memory` weight
budget (no more than its weights need), so however large the model, the apps together stay within what
was free: weights beyond a budget are decoded again on use, not held.

Example: 8 GiB free, SmolLM2-135M Q4_1 (526 MiB dequantized) -> 782 MiB a visitor -> 10 visitors,
each app's weights within 526 MiB; `--max-visitors 40` -> each within 64 MiB (the engine's minimum).
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.costs.memory import MIN_BUDGET
from walkthrough.engine.glassbox.weights import DEFAULT_CACHE_BYTES

# Python + Textual + numpy + a run's activations and KV cache, beside the weights. Measured with
# tests/bench/serve_visitor_memory.py (2 cores, this project's machine): a visitor's app on the bundled
# tiny model 76 MiB resident at its first screen, peak 100 MiB after a prefill chunk and a clamped
# 100000x100000 resize; on SmolLM2-135M Q4_1 111 MiB at its first screen. The rest is headroom.
APP_ALLOWANCE = 256 << 20


@dataclass(frozen=True)
class Plan:
    """Visitors admitted at once and each app's weight budget (bytes), from the free memory."""

    visitors: int
    weight_budget: int
    free: int | None  # bytes free when serve started (None: unknown)


def plan(dequantized: int, max_visitors: int | None, free: int | None) -> Plan:
    """Visitors (`max_visitors`, or what `free` holds at APP_ALLOWANCE + `dequantized` each, at least 1)
    and each app's weight budget (its share of `free` less APP_ALLOWANCE, at most `dequantized`, at
    least the engine's MIN_BUDGET; the engine's own bound where the free memory is unknown).

    Args:
        dequantized: bytes of the model's weights as the numpy engine holds them.
        max_visitors: `--max-visitors`, or None for the default.
        free: free bytes (`engine.memory.free_memory()`), None if unknown.
    """
    if max_visitors is None:
        max_visitors = max(1, free // (APP_ALLOWANCE + dequantized)) if free is not None else 1
    if free is None:
        return Plan(max_visitors, min(dequantized, DEFAULT_CACHE_BYTES) or MIN_BUDGET, None)
    share = free // max_visitors - APP_ALLOWANCE
    return Plan(max_visitors, max(MIN_BUDGET, min(dequantized, share)), free)
