"""Turning logits into one token: top-k, top-p, min-p, temperature, a seeded draw; every stage kept.

Order of the stages, as llama.cpp's default sampler chain runs them
(`common_params_sampling::samplers` in common/common.h and the samplers in
src/llama-sampler.cpp; penalties, DRY, typical-p and XTC are off by default
there and not implemented here):

1. top-k: keep the k highest logits (k <= 0 keeps all), sorted best first.
2. top-p: softmax of the kept logits at temperature 1; keep the shortest prefix
   whose probabilities sum to at least p (p >= 1 keeps all).
3. min-p: keep tokens whose logit is at least max logit + log(min_p), i.e. whose
   probability is at least min_p times the best one's (min_p <= 0 keeps all; the
   best token always stays, so min_p > 1 keeps only it).
4. temperature: divide the kept logits by T. T <= 0 means greedy: only the
   highest logit survives (llama.cpp's `llama_sampler_temp_impl`).
5. draw: softmax over the kept tokens, then u ~ U[0, 1) from the seeded
   generator picks the first token (best first) at which the running sum
   reaches u (llama.cpp's `llama_sampler_dist_apply`).

So temperature does not change which tokens top-p and min-p keep, only how
probability is spread over them. Each draw consumes exactly one u, greedy too,
so the same seed gives the same tokens. `SampleResult.resample(settings)`
recomputes every stage for the same logits and the same u, which is what the
sampling screen shows when a knob moves.

Example: logits [2, 1, 0, -3], top_k=3, top_p=0.95, min_p=0.2, T=0.7:
top-k keeps ids [0, 1, 2]; top-p (p = .67, .24, .09, running sum .67, .91, 1.0) keeps [0, 1, 2];
min-p keeps logits >= 2 + ln 0.2 = 0.39: [0, 1]; T=0.7 spreads them as .81, .19 (.73, .27 at T=1);
u=0.5 picks id 0.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from walkthrough.engine.knobs import LLAMA_CPP_DEFAULTS
from walkthrough.engine.numeric_checks import check_logits
from walkthrough.errors import WalkthroughError


@dataclass(frozen=True)
class SamplerSettings:
    """The knobs. Defaults are llama.cpp's; seed 0 so a run can be replayed."""

    temperature: float = LLAMA_CPP_DEFAULTS["temperature"]
    top_k: int = LLAMA_CPP_DEFAULTS["top_k"]
    top_p: float = LLAMA_CPP_DEFAULTS["top_p"]
    min_p: float = LLAMA_CPP_DEFAULTS["min_p"]
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not np.isfinite(value):
                raise WalkthroughError(f"sampler setting {name} = {value!r}: give a finite number")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise WalkthroughError(f"seed {self.seed!r}: give a whole number of at least 0")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def with_(self, **changes: Any) -> SamplerSettings:
        return replace(self, **changes)

    def describe(self) -> str:
        """The knobs in words, e.g. "temperature 0 (greedy), top-k 40, top-p 0.95, min-p 0.05, seed 0"."""
        greedy = " (greedy)" if self.greedy else ""
        top_k = "all" if self.top_k <= 0 else str(self.top_k)
        return (f"temperature {self.temperature:g}{greedy}, top-k {top_k}, top-p {self.top_p:g}, "
                f"min-p {self.min_p:g}, seed {self.seed}")


@dataclass(frozen=True)
class SampleResult:
    """Every stage of one sampling decision. Id arrays are best first (highest logit first)."""

    settings: SamplerSettings
    logits: np.ndarray  # [n_vocab] raw logits
    after_top_k: np.ndarray  # ids kept by top-k
    after_top_p: np.ndarray  # ids kept by top-p (a prefix of after_top_k)
    after_min_p: np.ndarray  # ids kept by min-p (a prefix of after_top_p)
    scaled: np.ndarray  # logits of after_min_p divided by the temperature (greedy: -inf but the best)
    probs: np.ndarray  # final renormalised probabilities over after_min_p
    u: float  # the uniform draw in [0, 1)
    chosen: int

    @property
    def candidates(self) -> np.ndarray:
        """The ids the draw chose among (same order as `probs`)."""
        return self.after_min_p

    def best(self, n: int) -> np.ndarray:
        """The n ids with the highest raw logits, best first, chosen as the top-k stage chooses them."""
        return _top_k(self.logits, n)

    def probs_at_temperature(self) -> np.ndarray:
        """[n_vocab] softmax(logits / T) over the whole vocabulary, for showing the temperature alone."""
        t = self.settings.temperature
        if t <= 0:
            out = np.zeros(self.logits.shape, np.float64)
            out[int(np.argmax(self.logits))] = 1.0
            return out
        z = self.logits.astype(np.float64) / t
        e = np.exp(z - z.max())
        return e / e.sum()

    def resample(self, settings: SamplerSettings) -> SampleResult:
        """The same logits and the same draw u, under other settings."""
        return sample_stages(self.logits, settings, self.u)

    def summary(self) -> dict[str, Any]:
        """Compact JSON form: the settings, how many tokens each stage kept, u and the choice."""
        s = self.settings
        return {
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "seed": s.seed,
            "kept": {"top_k": len(self.after_top_k), "top_p": len(self.after_top_p), "min_p": len(self.after_min_p)},
            "u": round(self.u, 9),
            "p_chosen": round(float(self.probs[list(self.after_min_p).index(self.chosen)]), 6),
        }


def _top_k(logits: np.ndarray, k: int) -> np.ndarray:
    n = logits.shape[0]
    if 0 < k < n:
        part = np.argpartition(-logits, k - 1)[:k]
        return part[np.argsort(-logits[part], kind="stable")]
    return np.argsort(-logits, kind="stable")


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def sample_stages(logits: np.ndarray, settings: SamplerSettings, u: float) -> SampleResult:
    """Run every stage on one row of logits with a given draw u (no randomness inside).

    Args:
        logits: [n_vocab] raw logits of the position being sampled.
        settings: the knobs.
        u: a number in [0, 1) (the sampler's seeded draw).
    """
    check_logits(logits, "sampling")
    kept_k = _top_k(logits, settings.top_k)
    kept_p = kept_k
    if settings.top_p < 1.0:
        cum = np.cumsum(_softmax64(logits[kept_k]))
        n = int(np.searchsorted(cum, settings.top_p, side="left")) + 1
        kept_p = kept_k[: min(n, len(kept_k))]
    kept_m = kept_p
    if settings.min_p > 0.0:
        # The best token always stays, even for min_p > 1 (llama_sampler_min_p_apply: "first token always matches").
        floor = logits[kept_p[0]] + np.log(settings.min_p)
        kept_m = kept_p[: max(1, int(np.count_nonzero(logits[kept_p] >= floor)))]
    if settings.greedy:
        scaled = np.full(len(kept_m), -np.inf)
        scaled[0] = logits[kept_m[0]]
        probs = np.zeros(len(kept_m))
        probs[0] = 1.0
    else:
        kept_logits = logits[kept_m].astype(np.float64)
        with np.errstate(over="ignore"):  # a tiny T sends logits to +-inf; the shifted form stays finite at 0
            scaled = kept_logits / settings.temperature
            shifted = (kept_logits - kept_logits[0]) / settings.temperature  # <= 0
        probs = np.exp(shifted) / np.exp(shifted).sum()
    index = int(np.searchsorted(np.cumsum(probs), u * probs.sum(), side="left"))
    chosen = int(kept_m[min(index, len(kept_m) - 1)])
    return SampleResult(settings, logits, kept_k, kept_p, kept_m, scaled, probs, float(u), chosen)


class Sampler:
    """Seeded sampler: one uniform draw per token from a numpy Generator seeded with `settings.seed`."""

    def __init__(self, settings: SamplerSettings | None = None):
        self.settings = settings or SamplerSettings()
        self.rng = np.random.default_rng(self.settings.seed)

    @classmethod
    def greedy(cls) -> Sampler:
        return cls(SamplerSettings(temperature=0.0))

    def sample(self, logits: np.ndarray) -> SampleResult:
        """Pick the next token from [n_vocab] logits; the result keeps every stage."""
        return sample_stages(logits, self.settings, float(self.rng.random()))
