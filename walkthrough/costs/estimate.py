"""What one request costs on one machine: memory, decode and prefill speed, several users at once.

Pure functions over the model card (`walkthrough.inspect.card.ModelCard`) and a
hardware profile (`walkthrough.costs.hardware.Profile`). Every result is a
`Figure`: a value, its unit, the formula that produced it and the figures that
went in, so the app and `walkthrough estimate` can show why, not just what.
Bytes are decimal (1 GB = 1e9 bytes), as in the worked examples below.

The realistic decode and prefill figures come from the timing model fitted on
measured runs (`walkthrough.costs.timing`, via `walkthrough.costs.fitted`) when
the profile names its backend family, each with its error band; otherwise, and for
the ceilings, offload and several users, the roofline below (max(bytes /
bandwidth, FLOPs / compute)). The memory budget and offload plan are in
`walkthrough.costs.budget`:
- Decode: bytes read per token = the card's weights read per token (only the
  routed experts used) + the whole KV cache at the current context + the
  recurrent state read and written. Ceiling = bandwidth / bytes; realistic
  divides by bandwidth x decode efficiency. Offloaded bytes are read from the
  host at its bandwidth: time = fast bytes / fast bw + slow bytes / slow bw.
- Prefill: 2 x active parameters FLOPs per token plus attention, 2 x (key + value
  size) per head per visible position; done in micro-batches of 512 tokens that
  each read the weights once (all experts a micro-batch routes to). Offloaded
  weights are counted at host-RAM bandwidth (llama.cpp may instead stream them
  over PCIe to the GPU for large batches; this estimate does not model that).
- Several users: one decode step serves B users; weights are read once per step,
  each user's KV cache once; experts touched = n x (1 - (1 - k/n)^B) per layer
  if routing were uniform (real routers are skewed, so this is an upper bound).

Worked examples (the tests check them): 1.84 GB read per token at 128 GB/s is a
ceiling near 70 tokens/s; 16 GB per token gives 8; a 6,500-token prompt at 93
tokens/s takes about 70 s; 35.5e9 parameters at 4.89 bits are 21.7 GB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from walkthrough.costs import fitted, sram, timing
from walkthrough.costs.budget import (
    MICRO_BATCH,
    NO_FIT,
    MemoryPlan,
    Placement,
    check_card,
    expert_bytes_per_layer,
    kv_cache_bytes,
    max_users,
    memory_plan,
    slow_cache_reads,
    slow_reads,
    slow_weight_reads,
    state_bytes,
)
from walkthrough.costs.figure import Figure, derived, given
from walkthrough.costs.fitted import Band
from walkthrough.costs.hardware import Profile, is_calibrated
from walkthrough.inspect.card import ModelCard
from walkthrough.units import fmt
from walkthrough.words import count

SRAM_PIPELINE = "one chip's bandwidth: the token passes every chip, each reading its slice; "
SRAM_FITTED = "pipeline of chips fitted on published single-user speeds: a x bytes / one chip's bw + c x layers"
USERS_SCALED = "roofline per-user speed x (fitted single-user speed / roofline single-user speed)"
OFFLOAD_NO_BAND = "no band: no measured run reads weights from system RAM; this is"
FITTED = "timing model fitted on measured runs: "
HELD = "; held to the ceiling (its terms, fitted on real machines, undercount this profile's reads)"


def fitted_formula(phase: str, moe: bool) -> str:
    """The fitted model's terms in words (expert terms only for a mixture-of-experts model)."""
    if phase == "decode":
        fixed = "per-layer and per-expert-call costs" if moe else "per-layer costs"
        return (f"{FITTED}weights / (eff x bw) + {fixed} + KV cache at context / bw + attention at context "
                "and linear-attention layers x width / compute")
    fixed = "layer, expert and weight-read costs" if moe else "layer and weight-read costs"
    return f"{FITTED}matmul and attention FLOPs / (eff x compute) + per-micro-batch {fixed}"
SATURATION = 0.10  # stop the users table when doubling the users adds less than 10% throughput
MAX_USERS_SHOWN = 1 << 12

# --- the worked-example building blocks ------------------------------------------------------


def weights_bytes(n_params: Figure, bits_per_weight: Figure) -> Figure:
    """Stored size of n parameters at a mean bits per weight. Example: 35.5e9 x 4.89 / 8 = 21.7e9."""
    return derived(n_params.value * bits_per_weight.value / 8, "B", "params x bits per weight / 8",
                   params=n_params, bits_per_weight=bits_per_weight)


def decode_ceiling(bytes_per_token: Figure, bandwidth: Figure) -> Figure:
    """Tokens/s if every byte moved at full bandwidth. Example: 128e9 B/s / 1.84e9 B = 69.6."""
    return derived(bandwidth.value / bytes_per_token.value, "tokens/s", "bandwidth / bytes per token",
                   bandwidth=bandwidth, bytes_per_token=bytes_per_token)


def prompt_seconds(n_tokens: Figure, tokens_per_s: Figure) -> Figure:
    """Time to process a prompt. Example: 6,500 tokens / 93 tokens/s = 69.9 s."""
    return derived(n_tokens.value / tokens_per_s.value, "s", "prompt tokens / prefill tokens per second",
                   prompt_tokens=n_tokens, prefill_rate=tokens_per_s)


def balance_point(hw: Profile) -> float:
    """FLOPs per byte at which the machine's compute and bandwidth limits meet (the roofline's knee).

    Example: 50e12 FLOP/s / 500e9 B/s = 100 FLOPs per byte.
    """
    return hw.compute / hw.bandwidth


def limit(intensity: float, hw: Profile) -> str:
    """Which limit a pass doing `intensity` FLOPs per byte read hits on the machine."""
    return "compute" if intensity >= balance_point(hw) else "memory bandwidth"


def attention_flops(card: ModelCard, positions: float, window_sum: bool = False) -> float:
    """Attention FLOPs of one token at `positions` visible positions (or, with window_sum, summed
    over the prompt's positions 1..positions): 2 x heads x (k + v dims) per position."""
    n = positions
    total = 0.0
    heads = (card.n_head or 0) * ((card.head_dim_k or 0) + (card.head_dim_v or 0))
    for layer in card.layers:
        if not layer.keeps_kv:
            continue
        window = layer.sliding_window
        dims = heads or (layer.kv_values_per_token or 0)  # without head sizes: K+V values (a lower bound)
        if window_sum:
            w = window or n
            seen = n * (n + 1) / 2 if n <= w else w * (w + 1) / 2 + (n - w) * w
        else:
            seen = min(n, window) if window else n
        total += 2 * dims * seen
    return total


def decode_flops(card: ModelCard, context: int) -> Figure:
    """FLOPs to decode one token at `context` cached positions."""
    attention = attention_flops(card, context)
    return derived(2 * card.n_params_active + attention, "FLOP",
                   "2 x active params + attention (2 x heads x (k + v dims) x context per KV layer)",
                   active_params=given(card.n_params_active, "params", "model card"),
                   attention=given(attention, "FLOP", "context x KV layers"))


def experts_touched(card: ModelCard, tokens: int) -> float:
    """Expected share of one layer's experts routed to by `tokens` tokens, if routing were uniform."""
    if not card.is_moe or not card.n_experts:
        return 1.0
    return 1.0 - (1.0 - min(card.n_experts_used or 0, card.n_experts) / card.n_experts) ** tokens


def card_shape(card: ModelCard, cache_type: str = "f16") -> timing.Shape:
    """The card in the timing model's terms (what a token reads and computes)."""
    trunk = [layer for layer in card.layers if not layer.mtp]
    n_moe = sum(1 for layer in trunk if layer.ffn == "moe")
    float_bytes = sum(card.bytes_by_type.get(t, 0) for t in timing.FLOAT_QUANTS)
    return timing.Shape(
        weight_bytes=card.bytes_per_token,
        batch_bytes=batch_reads(card, MICRO_BATCH, Placement())[0],
        layers=len(trunk),
        expert_calls=n_moe * ((card.n_experts_used or 0) + card.n_shared_experts),
        experts=n_moe * (card.n_experts + card.n_shared_experts),
        kv_bytes_per_position=card.kv_bytes(1, cache_type) or 0,
        attn_flops_per_pair=attention_flops(card, 1),
        params_active=card.n_params_active,
        float_weights=float_bytes > sum(card.bytes_by_type.values()) / 2,
        recurrent_layers=len(card.linear_layers), width=card.n_embd or 0,
    )


# --- decode ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decode:
    bytes_per_token: Figure  # everything read to produce one token
    ceiling: Figure  # tokens/s at full bandwidth
    tokens_per_s: Figure  # tokens/s from the fitted timing model (else at the profile's decode efficiency)
    slow_share: Figure  # share of the time spent reading from host RAM (0 without offload)
    band: Band | None = None  # how far tokens_per_s may be off; None: the roofline alone, no band
    no_band: str = ""  # why there is no band, when the reason is this figure's own (offload)


def _split_reads(card: ModelCard, context: int, cache_type: str, placement: Placement) -> tuple[Figure, float]:
    """Bytes read per decoded token, and how many of them come from host RAM."""
    weights = given(card.bytes_per_token, "B", "model card: weights read per token (routed experts used only)")
    kv = kv_cache_bytes(card, context, cache_type)
    state = derived(2 * (card.state_bytes or 0), "B", "recurrent state read and written", state=state_bytes(card))
    total = derived(weights.value + kv.value + state.value, "B", "weights read + KV cache at context + state",
                    weights=weights, kv_cache=kv, state=state)
    return total, slow_reads(card, placement, context, cache_type)


def measured_split(total: Figure, layers: int, hw: Profile) -> Figure:
    """Tokens/s from what `walkthrough calibrate` measured with two model sizes: the bytes at the bandwidth
    reached without fixed costs, plus the fixed cost per layer. Example: 1 GB at 10 GB/s + 30 x 200 us -> 9.43."""
    assert hw.decode_split is not None
    bandwidth, per_layer = hw.decode_split
    where = hw.sources.get("bandwidth_gbs", hw.origin)
    return derived(1 / (total.value / bandwidth + layers * per_layer), "tokens/s",
                   "1 / (bytes per token / bandwidth without fixed costs + layers x fixed cost per layer)",
                   bytes_per_token=total, layers=given(layers, "layers", "model card: trunk layers"),
                   bandwidth=given(bandwidth, "B/s", f"calibrate's two sizes; {where}"),
                   per_layer=given(per_layer, "s", "calibrate's two sizes: fixed cost per layer per token"))


def read_seconds(fast: float, slow: float, hw: Profile, efficient: bool) -> tuple[float, float]:
    """(fast seconds, slow seconds) to move these bytes."""
    eff = hw.decode_efficiency if efficient else 1.0
    t_fast = fast / (hw.bandwidth * eff)
    t_slow = 0.0
    if slow:
        host = hw.host or hw
        t_slow = slow / (host.bandwidth * (host.decode_efficiency if efficient else 1.0))
    return t_fast, t_slow


def decode(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16",
           placement: Placement | None = None) -> Decode:
    """Decode speed at `context` cached positions: ceiling and realistic tokens per second."""
    check_card(card, cache_type)
    placement = placement or Placement()
    total, slow = _split_reads(card, context, cache_type, placement)
    bw = given(hw.bandwidth_gbs * 1e9, "B/s", hw.sources.get("bandwidth_gbs", hw.origin))
    eff = given(hw.decode_efficiency, "", hw.sources.get("decode_efficiency", hw.origin))
    fast = total.value - slow
    if not slow:
        ceiling = decode_ceiling(total, bw)
        pipe = sram.pipeline_fit(hw)
        if pipe is not None:
            shape = card_shape(card, cache_type)
            rate = sram.pipeline_rate(pipe, hw, total.value, shape.layers)
            band = Band(hw.id, "decode", pipe.band, pipe.runs, 1, basis=f"{hw.id} published single-user speeds")
            real = derived(rate, "tokens/s", SRAM_FITTED, ceiling=ceiling)
            return Decode(total, ceiling, real, given(0.0, "", "no offload"), band)
        fit = fitted.decode_rate(card_shape(card, cache_type), hw, context)
        if fit is not None:
            held = fit[0] > ceiling.value
            real = derived(min(fit[0], ceiling.value), "tokens/s",
                           fitted_formula("decode", card.is_moe) + (HELD if held else ""), ceiling=ceiling)
            return Decode(total, ceiling, real, given(0.0, "", "no offload"), fit[1])
        if hw.decode_split is not None:
            real = measured_split(total, card_shape(card, cache_type).layers, hw)
            return Decode(total, ceiling, real, given(0.0, "", "no offload"), no_band=profile_no_band(hw))
        real = derived(ceiling.value * eff.value, "tokens/s", "ceiling x decode efficiency",
                       ceiling=ceiling, efficiency=eff)
        return Decode(total, ceiling, real, given(0.0, "", "no offload"))
    host = hw.host or hw
    host_bw = given(host.bandwidth_gbs * 1e9, "B/s", f"host {host.id}: " + host.sources.get("bandwidth_gbs", ""))
    parts = {"fast_bytes": given(fast, "B", "device memory"), "slow_bytes": given(slow, "B", "system RAM"),
             "fast_bandwidth": bw, "slow_bandwidth": host_bw}
    c_fast, c_slow = read_seconds(fast, slow, hw, efficient=False)
    ceiling = derived(1 / (c_fast + c_slow), "tokens/s", "1 / (fast bytes / fast bw + slow bytes / slow bw)", **parts)
    r_fast, r_slow = read_seconds(fast, slow, hw, efficient=True)
    real = derived(1 / (r_fast + r_slow), "tokens/s",
                   "1 / (fast bytes / (fast bw x eff) + slow bytes / (slow bw x host eff))",
                   efficiency=eff, host_efficiency=given(host.decode_efficiency, "", f"host {host.id}"), **parts)
    share = derived(r_slow / (r_fast + r_slow), "", "time reading system RAM / time per token")
    fit = fitted.decode_rate(card_shape(card, cache_type), hw, context)
    why = f"{OFFLOAD_NO_BAND} the roofline at the profile's decode efficiency"
    if fit is not None:  # the fitted speed in fast memory, slowed as much as the roofline slows with this offload
        r_all, _ = read_seconds(total.value, 0.0, hw, efficient=True)
        slowed = fit[0] * r_all / (r_fast + r_slow)
        real = derived(min(slowed, ceiling.value), "tokens/s",
                       "fitted speed x (roofline time in fast memory / roofline time with this offload)"
                       + (HELD if slowed > ceiling.value else ""), roofline_with_offload=real, ceiling=ceiling)
        why = f"{OFFLOAD_NO_BAND} the fitted speed in fast memory ({fit[1].describe()}), slowed as the roofline slows"
    return Decode(total, ceiling, real, share, no_band=why)


# --- prefill ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prefill:
    flops_per_token: Figure  # mean over the prompt
    tokens_per_s: Figure
    seconds: Figure  # time to first token
    bound: str  # "compute" or "memory": which side of the roofline set most of the time
    band: Band | None = None  # how far the fitted figures may be off; None: the roofline alone
    no_band: str = ""  # why there is no band, when the reason is this figure's own (offload)


def batch_reads(card: ModelCard, tokens: int, placement: Placement) -> tuple[float, float]:
    """Weights one pass over `tokens` tokens reads (all experts they route to), and the part in host RAM."""
    e = expert_bytes_per_layer(card)
    n_moe = sum(1 for layer in card.layers if layer.ffn == "moe" and not layer.mtp)
    experts_read = card.bytes_per_token_by_group.get("experts", 0)
    touched = experts_touched(card, tokens)
    total = card.bytes_per_token - experts_read + n_moe * e * touched
    return total, slow_weight_reads(card, placement, touched)


def prefill(card: ModelCard, hw: Profile, prompt_tokens: int, placement: Placement | None = None,
            micro_batch: int = MICRO_BATCH) -> Prefill:
    """Prompt processing: per micro-batch max(weights read / bandwidth, FLOPs / compute), summed."""
    check_card(card)
    placement = placement or Placement()
    seconds = 0.0
    compute_time = memory_time = 0.0
    done = 0
    while done < prompt_tokens:
        n = min(micro_batch, prompt_tokens - done)
        flops = 2 * card.n_params_active * n + (attention_flops(card, done + n, window_sum=True)
                                                - attention_flops(card, done, window_sum=True))
        weights, slow = batch_reads(card, n, placement)
        t_fast, t_slow = read_seconds(weights - slow, slow, hw, efficient=True)
        t_compute = flops / hw.compute
        seconds += max(t_fast + t_slow, t_compute)
        compute_time += t_compute
        memory_time += t_fast + t_slow
        done += n
    total_flops = 2 * card.n_params_active * prompt_tokens + attention_flops(card, prompt_tokens, window_sum=True)
    per_token = derived(total_flops / max(prompt_tokens, 1), "FLOP",
                        "2 x active params + attention over the prompt's positions, averaged",
                        active_params=given(card.n_params_active, "params", "model card"))
    compute = given(hw.compute_tflops * 1e12, "FLOP/s",
                    f"{hw.compute_basis}: " + hw.sources.get("compute_tflops", hw.origin))
    rate = derived(prompt_tokens / seconds if seconds else 0.0, "tokens/s",
                   f"prompt tokens / sum over {micro_batch}-token micro-batches of "
                   "max(weights read / (bw x eff), FLOPs / compute)",
                   flops_per_token=per_token, compute=compute,
                   bandwidth=given(hw.bandwidth_gbs * 1e9, "B/s", hw.sources.get("bandwidth_gbs", hw.origin)))
    bound = "compute" if compute_time >= memory_time else "memory"
    fit = None if slow_any(card, placement) else fitted.prefill_seconds(card_shape(card), hw, prompt_tokens,
                                                                         micro_batch)
    if fit is not None:
        spec = fitted.hardware(hw)
        where = f"corpus machine {hw.machine}" if hw.machine else f"profile {hw.id}"
        peak = given(spec.compute or 0.0, "FLOP/s", f"spec peak at the backend's precision ({where})")
        rate = derived(prompt_tokens / fit[0], "tokens/s", fitted_formula("prefill", card.is_moe),
                       flops_per_token=per_token,
                       spec_compute=peak)
        ttft = prompt_seconds(given(prompt_tokens, "tokens", "--prompt-tokens"), rate)
        return Prefill(per_token, rate, ttft, bound, fit[1])
    ttft = prompt_seconds(given(prompt_tokens, "tokens", "--prompt-tokens"), rate)
    why = ""
    if slow_any(card, placement):
        why = f"{OFFLOAD_NO_BAND} the roofline, micro-batch by micro-batch"
    elif fitted.family(hw) and fitted.hardware(hw).compute is None:
        why = (f"no band: the profile's compute is {hw.compute_basis}, not the spec-sheet peak the fit divides "
               "by (roofline)")
    return Prefill(per_token, rate, ttft, bound, no_band=why)


def slow_any(card: ModelCard, placement: Placement) -> bool:
    """Whether anything of one micro-batch is read from host RAM (offload: the fitted model does not cover it)."""
    return bool(batch_reads(card, MICRO_BATCH, placement)[1])


# --- several users ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UsersRow:
    users: int
    per_user: Figure  # tokens/s each user sees
    total: Figure  # tokens/s over all users
    limit: str  # "bandwidth", "compute" or "memory" (this many users' KV caches do not fit)
    band: Band | None = None  # the single-user decode's band, when the row is scaled to the fitted speed
    no_band: str = ""  # why there is no band, when the reason is the row's own


def users_row(card: ModelCard, hw: Profile, users: int, context: int, cache_type: str = "f16",
              placement: Placement | None = None, fit: int | None = None) -> UsersRow:
    """One decode step for `users` sequences at `context` positions each."""
    placement = placement or Placement()
    weights, slow_weights = batch_reads(card, users, placement)
    kv = kv_cache_bytes(card, context, cache_type).value + 2 * (card.state_bytes or 0)
    slow = slow_weights + users * slow_cache_reads(card, placement, context, cache_type)
    t_fast, t_slow = read_seconds(weights + users * kv - slow, slow, hw, efficient=True)
    t_compute = users * decode_flops(card, context).value / hw.compute
    step = max(t_fast + t_slow, t_compute)
    limit = "compute" if t_compute > t_fast + t_slow else "bandwidth"
    if fit is not None and users > fit:
        limit = "memory"
    formula = "1 / max(bytes read per step / (bw x eff), users x FLOPs per token / compute)"
    per_user = derived(1 / step, "tokens/s", formula, users=given(users, "users", "--users"),
                       weights_per_step=given(weights, "B", "weights once per step, experts touched by any user"),
                       kv_per_user=given(kv, "B", "KV cache at context + state"))
    total = derived(users / step, "tokens/s", "users x per-user tokens/s", per_user=per_user)
    return UsersRow(users, per_user, total, limit)


def users_table(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16",
                placement: Placement | None = None, also: int = 1) -> tuple[list[UsersRow], Figure]:
    """Rows for 1, 2, 4, ... users until compute or memory runs out, or doubling the users adds
    less than SATURATION to the total (the KV cache reads dominate); plus a row for `also` users."""
    fit = int(max_users(card, hw, context, cache_type).value)
    rows = {}
    n = 1
    while n <= MAX_USERS_SHOWN:
        rows[n] = users_row(card, hw, n, context, cache_type, placement, fit)
        previous = rows.get(n // 2)
        if rows[n].limit != "bandwidth" or (
            previous is not None and rows[n].total.value < previous.total.value * (1 + SATURATION)
        ):
            break
        if n < fit < 2 * n:
            rows[fit] = users_row(card, hw, fit, context, cache_type, placement, fit)
        n *= 2
    if also not in rows:
        rows[also] = users_row(card, hw, also, context, cache_type, placement, fit)
    out = [rows[k] for k in sorted(rows)]
    if fitted.family(hw) or sram.pipeline_fit(hw) is not None or hw.decode_split is not None:
        one = rows.get(1) or users_row(card, hw, 1, context, cache_type, placement, fit)
        single = decode(card, hw, context, cache_type, placement)
        out = [_scaled(r, single, one.per_user) for r in out]
    return out, max_users(card, hw, context, cache_type)


def _scaled(row: UsersRow, single: Decode, roofline_single: Figure) -> UsersRow:
    """A roofline users row brought to the fitted single-user speed (same ratio for every row), with that
    speed's band."""
    k = single.tokens_per_s.value / roofline_single.value
    per_user = derived(row.per_user.value * k, "tokens/s", USERS_SCALED, roofline=row.per_user,
                       fitted_single_user=single.tokens_per_s, roofline_single_user=roofline_single)
    total = derived(row.users * per_user.value, "tokens/s", "users x per-user tokens/s", per_user=per_user)
    return UsersRow(row.users, per_user, total, row.limit, single.band, single.no_band)


# --- the whole request -----------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """Every figure of one request on one profile."""

    hardware: Profile
    context: int
    prompt_tokens: int
    output_tokens: int
    cache_type: str
    users: int
    memory: MemoryPlan
    decode: Decode | None  # None when the model does not fit
    prefill: Prefill | None
    answer: Figure | None  # seconds from sending the prompt to the last output token
    users_rows: list[UsersRow]
    max_users: Figure
    chips: Figure | None = None  # SRAM machines: chips the request needs (engine.sram)

    @property
    def fits(self) -> bool:
        return self.memory.verdict != NO_FIT


def estimate(card: ModelCard, hw: Profile, context: int, prompt_tokens: int, output_tokens: int,
             cache_type: str = "f16", users: int = 1) -> Estimate:
    """Memory, time to first token, decode speed (at the middle of the answer) and answer time.

    On an SRAM profile (one chip's figures) the machine is as many chips as the request needs.
    """
    chips = None
    if sram.is_sram(hw):
        chips = sram.chips_needed(card, hw, context, cache_type, users)
        hw = sram.as_machine(hw, int(chips.value))
    plan = memory_plan(card, hw, context, cache_type, users)
    if plan.verdict == NO_FIT:
        return Estimate(hw, context, prompt_tokens, output_tokens, cache_type, users, plan, None, None, None,
                        [], max_users(card, hw, context, cache_type), chips)
    middle = prompt_tokens + output_tokens // 2
    dec = decode(card, hw, middle, cache_type, plan.placement)
    pre = prefill(card, hw, prompt_tokens, plan.placement)
    answer = derived(pre.seconds.value + output_tokens / dec.tokens_per_s.value, "s",
                     "time to first token + output tokens / decode tokens per second (at the answer's middle)",
                     ttft=pre.seconds, output_tokens=given(output_tokens, "tokens", "--output-tokens"),
                     decode_rate=dec.tokens_per_s)
    rows, fit = users_table(card, hw, context, cache_type, plan.placement, also=users)
    return Estimate(hw, context, prompt_tokens, output_tokens, cache_type, users, plan, dec, pre, answer, rows, fit,
                    chips)


# --- the rows `walkthrough estimate` and the app's Costs stage show --------------------------


class Row(NamedTuple):
    """One line of an estimate as text: what, how much, and why (the formula with its inputs' values)."""

    label: str
    value: str
    why: str


def _show(fig: Figure) -> str:
    return fmt(fig.value, fig.unit)


def _why(fig: Figure) -> str:
    """The formula with the values of its direct inputs."""
    values = ", ".join(f"{name.replace('_', ' ')} {_show(f)}" for name, f in fig.inputs)
    return f"{fig.formula} ({values})" if values else fig.formula or fig.source


def no_band_reason(e: Estimate) -> str:
    """Why an estimate's speeds carry no error band (the roofline alone)."""
    if e.chips is not None:
        return "no band: an SRAM machine without published single-user speeds (roofline of a pipeline of chips)"
    if e.memory.placement.describe() and e.decode is not None and e.decode.slow_share.value:
        return e.decode.no_band or f"{OFFLOAD_NO_BAND} the roofline"
    return profile_no_band(e.hardware)


def profile_no_band(hw: Profile) -> str:
    """Why a profile's fitted figures carry no band, whatever the request."""
    if hw.decode_split is not None:
        return ("no band: this machine as walkthrough calibrate measured it (its bandwidth without fixed costs and "
                "its fixed cost per layer, from two model sizes)")
    if is_calibrated(hw):
        return "no band: this machine as walkthrough calibrate measured it (roofline at the bandwidth it reached)"
    if not fitted.family(hw):
        return "no band: the profile names no backend family, so its typed decode efficiency is used (roofline)"
    return "no band: the profile's family has no measured runs of this phase (roofline)"


def band_words(band: Band | None, reason: str) -> str:
    """The band as a line ('±19%: backend CUDA, 79 decode runs (12 machines)'), or why there is none."""
    return band.describe() if band is not None else reason


def banded(fig: Figure, band: Band | None, e: Estimate, reason: str = "") -> tuple[str, str]:
    """A figure's value with its band ('11.7 tokens/s, ±20%') and why (the band's runs, then the formula);
    without a band, the figure's own `reason` or the estimate's."""
    if band is None:
        return _show(fig), f"{reason or no_band_reason(e)}; {_why(fig)}"
    value = _show(fig) if band.fraction is None else f"{_show(fig)}, ±{band.fraction * 100:.0f}%"
    return value, f"{band.describe()}; {_why(fig)}"


def answer_text(e: Estimate) -> tuple[str, str]:
    """The answer time with its band: the first-token and decode bands weighted by their share of the time
    (each part off by at most its band, so the sum is off by at most that mean), or why it has none."""
    d, p, answer = e.decode, e.prefill, e.answer
    bands = (p.band.fraction if p.band else None, d.band.fraction if d.band else None)
    if None in bands:
        return _show(answer), "no band: its first token or decode has none (see their rows); " + _why(answer)
    ttft = p.seconds.value
    band = (ttft * bands[0] + (answer.value - ttft) * bands[1]) / answer.value
    return (f"{_show(answer)}, ±{band * 100:.0f}%",
            "±: the first-token and decode bands, weighted by their share of the time; " + _why(answer))


def users_text(r: UsersRow, e: Estimate) -> tuple[str, str]:
    """A users row's value ('3.18 tokens/s each, ±23%') and why: the single-user band it carries, or why
    it has none."""
    each = f"{_show(r.per_user)} each"
    head = f"{_show(r.total)} in all; {r.limit}-bound; "
    if r.per_user.formula != USERS_SCALED:
        return each, head + f"{r.no_band or no_band_reason(e)}; roofline at the profile's decode efficiency"
    shared = "; the fitted single-user speed, shared among users as the roofline shares it"
    if r.band is None:
        return each, head + (r.no_band or no_band_reason(e)) + shared
    if r.band.fraction is not None:
        each += f", ±{r.band.fraction * 100:.0f}%"
    return each, head + f"the single-user band, {r.band.describe()}" + shared + " (no measured run has several users)"


def rows(e: Estimate) -> list[Row]:
    """An estimate's figures as labelled rows: memory and verdict, then (if it fits) decode, prefill, users."""
    m = e.memory
    out = [Row("chips (SRAM)", f"{int(e.chips.value):,}", _why(e.chips))] if e.chips is not None else []
    out += [
        Row("memory needed", _show(m.needed), _why(m.needed)),
        Row("memory usable", _show(m.usable), _why(m.usable)),
        Row("verdict", m.verdict, m.placement.describe() if m.verdict != NO_FIT else
            f"short by {_show(m.shortfall)}" if m.shortfall else ""),
    ]
    if m.host_needed is not None:
        out.append(Row("in system RAM", _show(m.host_needed), f"of {_show(m.host_usable)} usable on the host"))
    if not e.fits:
        return out
    d, p = e.decode, e.prefill
    out += [
        Row("read per token", _show(d.bytes_per_token), _why(d.bytes_per_token)),
        Row("decode ceiling", _show(d.ceiling), (SRAM_PIPELINE if e.chips is not None else "") + _why(d.ceiling)),
        Row("decode", *banded(d.tokens_per_s, d.band, e, d.no_band)),
    ]
    if d.slow_share.value:
        out.append(Row("time in system RAM", _show(d.slow_share),
                       f"{d.slow_share.formula}; no band: the roofline's share, as no measured run offloads"))
    prefill_value, prefill_why = banded(p.tokens_per_s, p.band, e, p.no_band)
    out += [
        Row("prefill", prefill_value, f"{p.bound}-bound; {_show(p.flops_per_token)} per prompt token; {prefill_why}"),
        Row(f"first token ({e.prompt_tokens} prompt)", *banded(p.seconds, p.band, e, p.no_band)),
        Row(f"answer ({count(e.output_tokens, 'token')})", *answer_text(e)),
    ]
    fit = int(e.max_users.value)
    for r in e.users_rows:
        label = f"{count(r.users, 'user')}, {e.context} tokens each"
        if r.limit == "memory":
            out.append(Row(label, f"does not fit ({count(fit, 'user')} fit)",
                           "their KV caches exceed the memory left after the weights"))
            continue
        out.append(Row(label, *users_text(r, e)))
    out.append(Row("users that fit", f"{int(e.max_users.value):,}", e.max_users.formula))
    return out
