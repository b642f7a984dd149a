"""Cost curves: the Costs stage's figures as series over context or prompt length, for plots and tables.

Pure functions over the model card and a hardware profile; every point is a
figure `walkthrough.costs.estimate` or `budget` already computes (nothing here has
a formula of its own beyond choosing the x values):
- KV cache bytes vs context, per cache type (`budget.kv_cache_bytes`), with the
  memory left for it on the machine: usable - weights - compute buffers - state
  (the numerator of `budget.max_users`). For hybrid files (some layers keep a
  fixed state instead of K and V) also the cache if every trunk layer kept K
  and V at the widest KV layer's width.
- Time to first token vs prompt length (`costs.prefill`, micro-batches).
- Decode tokens/s, ceiling and realistic, vs context (`costs.decode`).
- Tokens/s each and in all vs users, until compute or memory runs out
  (`costs.users_table`'s rows; x is users, not tokens).
The modelled curves carry their band (`Curve.band`): the fitted figures' band at the
last point that fits, or why they have none.

Example: contexts(4096) = [256, 512, 1024, 2048, 4096].
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.costs.budget import NO_FIT, compute_buffer_bytes, memory_plan
from walkthrough.costs.estimate import band_words, decode, prefill, profile_no_band, users_table
from walkthrough.costs.hardware import Profile
from walkthrough.costs.measured import modelled_for
from walkthrough.inspect.card import ModelCard, type_bytes_per_value

CACHE_TYPES = ("f16", "q8_0", "q4_0")
FIRST_POINT = 256  # smallest context or prompt on a curve


@dataclass(frozen=True)
class Series:
    """One curve: a label, its unit and y values at the shared x values."""

    label: str
    unit: str
    ys: tuple[float, ...]


@dataclass(frozen=True)
class Curve:
    """Several series over the same x values (tokens), with what x and y are."""

    title: str
    x_label: str
    y_unit: str
    xs: tuple[int, ...]
    series: tuple[Series, ...]
    band: str = ""  # the modelled figures' band as a line ('±19%: backend CUDA, ...'), or why they have none


def contexts(last: int, first: int = FIRST_POINT) -> tuple[int, ...]:
    """Powers of two from `first` up to `last`, and `last` itself. Example: 3000 -> 256, 512, 1024, 2048, 3000."""
    xs = []
    x = first
    while x < last:
        xs.append(x)
        x *= 2
    xs.append(max(last, 1))
    return tuple(xs)


def kv_free_bytes(card: ModelCard, hw: Profile, cache_type: str = "f16") -> float:
    """Fast memory left for KV caches once weights, compute buffers and one state are in (may be negative)."""
    plan = memory_plan(card, hw, 1, cache_type)
    return plan.usable.value - plan.weights.value - compute_buffer_bytes(card).value - plan.state.value


def all_kv_bytes(card: ModelCard, positions: int, cache_type: str = "f16") -> float:
    """KV cache if every trunk layer kept K and V (at the widest KV layer's width) for `positions` tokens."""
    trunk = [layer for layer in card.layers if not layer.mtp]
    widest = max((layer.kv_values_per_token or 0 for layer in trunk if layer.keeps_kv), default=0)
    return len(trunk) * widest * type_bytes_per_value(cache_type) * positions


def is_hybrid(card: ModelCard) -> bool:
    """Some trunk layers keep a fixed state (or nothing) instead of K and V."""
    trunk = [layer for layer in card.layers if not layer.mtp]
    return any(layer.keeps_kv for layer in trunk) and not all(layer.keeps_kv for layer in trunk)


def kv_curve(card: ModelCard, hw: Profile, xs: tuple[int, ...]) -> Curve:
    """KV cache bytes vs context at each cache type, the machine's free memory, and (hybrid) every-layer KV."""
    series = [Series(f"KV {t}", "B", tuple(float(card.kv_bytes(x, t) or 0) for x in xs)) for t in CACHE_TYPES]
    if is_hybrid(card):
        series.append(Series("every layer K+V f16", "B", tuple(all_kv_bytes(card, x) for x in xs)))
    free = kv_free_bytes(card, hw)
    series.append(Series(f"free on {hw.id}", "B", tuple(free for _ in xs)))
    return Curve("KV cache vs context", "context (tokens)", "B", xs, tuple(series))


def ttft_curve(card: ModelCard, hw: Profile, xs: tuple[int, ...], cache_type: str = "f16") -> Curve:
    """Time to first token vs prompt length (0 where the request does not fit); the title says the band of
    the longest prompt that fits, or why it has none."""
    ys = []
    band = profile_no_band(hw)
    for x in xs:
        plan = memory_plan(card, hw, x, cache_type)
        if plan.verdict == NO_FIT:
            ys.append(0.0)
            continue
        p = prefill(card, hw, x, plan.placement)
        ys.append(p.seconds.value)
        band = band_words(p.band, p.no_band or profile_no_band(hw))
    return Curve(f"time to first token vs prompt, {modelled_for(hw)}", "prompt (tokens)", "s", xs,
                 (Series(f"first token on {hw.id}", "s", tuple(ys)),), f"first token {band}")


def decode_curve(card: ModelCard, hw: Profile, xs: tuple[int, ...], cache_type: str = "f16") -> Curve:
    """Decode tokens/s (ceiling and realistic) vs context (0 where the request does not fit); the title says
    the realistic figure's band at the longest context that fits, or why it has none."""
    ceiling, real = [], []
    band = profile_no_band(hw)
    for x in xs:
        plan = memory_plan(card, hw, x, cache_type)
        if plan.verdict == NO_FIT:
            ceiling.append(0.0)
            real.append(0.0)
            continue
        d = decode(card, hw, x, cache_type, plan.placement)
        ceiling.append(d.ceiling.value)
        real.append(d.tokens_per_s.value)
        band = band_words(d.band, d.no_band or profile_no_band(hw))
    return Curve(f"decode vs context ({cache_type} cache), {modelled_for(hw)}", "context (tokens)", "tokens/s", xs,
                 (Series("ceiling", "tokens/s", tuple(ceiling)), Series("realistic", "tokens/s", tuple(real))),
                 f"realistic {band}")


def users_curve(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16") -> Curve:
    """Tokens/s each user sees and in all vs users sharing the machine (0 where the model does not fit)."""
    plan = memory_plan(card, hw, context, cache_type)
    rows = [] if plan.verdict == NO_FIT else users_table(card, hw, context, cache_type, plan.placement)[0]
    xs = tuple(r.users for r in rows) or (1,)
    each = tuple(r.per_user.value for r in rows) or (0.0,)
    total = tuple(r.total.value for r in rows) or (0.0,)
    band = band_words(rows[0].band, rows[0].no_band or profile_no_band(hw)) if rows else "does not fit"
    return Curve(f"users at {context:,} tokens each, {modelled_for(hw)}", "users", "tokens/s", xs,
                 (Series("each", "tokens/s", each), Series("in all", "tokens/s", total)),
                 f"the single-user speed's band, {band}; users share a step as the roofline shares it")
