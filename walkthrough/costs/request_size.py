"""The request's size as the Costs stage's knobs: context, prompt and output tokens, KV cache type, users.

A plain frozen record the screen keeps; each knob doubles or halves (bounded),
the cache type cycles, and `None` context means "prompt + output", so the
defaults are the request on screen. `estimate_for` hands it to
`walkthrough.costs.estimate.estimate`.

Example: RequestSize(None, 40, 128).scaled("prompt_tokens", 2) -> prompt 80,
context 208 (80 + 128).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from walkthrough.costs.curves import CACHE_TYPES
from walkthrough.costs.estimate import Estimate, estimate
from walkthrough.costs.hardware import Profile
from walkthrough.inspect.card import ModelCard
from walkthrough.words import count

MAX_TOKENS = 1 << 24  # 16M tokens: beyond any context a GGUF declares today
MAX_USERS = 1 << 12
KNOBS = ("context", "prompt_tokens", "output_tokens", "users")


@dataclass(frozen=True)
class RequestSize:
    """What the estimate is for; `context` None follows prompt + output."""

    context_override: int | None
    prompt_tokens: int
    output_tokens: int
    cache_type: str = "f16"
    users: int = 1

    @property
    def context(self) -> int:
        return self.context_override or self.prompt_tokens + self.output_tokens

    def scaled(self, knob: str, factor: float) -> RequestSize:
        """The knob times `factor` (2 or 0.5), kept within 1 and its maximum."""
        if knob not in KNOBS:
            raise ValueError(f"unknown knob {knob!r}; one of {', '.join(KNOBS)}")
        top = MAX_USERS if knob == "users" else MAX_TOKENS
        now = self.context if knob == "context" else getattr(self, knob)
        new = int(min(max(round(now * factor), 1), top))
        if knob == "context":
            return replace(self, context_override=new)
        return replace(self, **{knob: new})

    def next_cache_type(self) -> RequestSize:
        """f16 -> q8_0 -> q4_0 -> f16."""
        i = CACHE_TYPES.index(self.cache_type) if self.cache_type in CACHE_TYPES else -1
        return replace(self, cache_type=CACHE_TYPES[(i + 1) % len(CACHE_TYPES)])

    def describe(self) -> str:
        return (f"{self.prompt_tokens:,} prompt + {self.output_tokens:,} answer tokens, context {self.context:,}, "
                f"{self.cache_type} KV cache, {count(self.users, 'user')}")


def estimate_for(card: ModelCard, hw: Profile, size: RequestSize) -> Estimate:
    """The cost estimate of this request size on one machine."""
    return estimate(card, hw, size.context, size.prompt_tokens, size.output_tokens, size.cache_type, size.users)
