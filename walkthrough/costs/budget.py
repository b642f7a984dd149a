"""The memory budget: weights, KV cache, recurrent state and compute buffers against a machine's memory.

`memory_plan` says whether a model fits at a context, cache type and number of
users; if it does not and the profile is a discrete GPU with a `host`, it moves
routed experts to system RAM layer by layer first (llama.cpp `--n-cpu-moe`),
then whole layers with their KV cache (`-ngl`), and reports what moved. Layer
sizes are the card's per-layer bytes; a MoE layer's routed experts are the
card's expert bytes split evenly over its MoE layers. Bytes are decimal.

Not modelled: llama.cpp keeping the token embedding in host memory, and the
page cache of a memory-mapped file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from walkthrough.costs.figure import Figure, derived, given
from walkthrough.costs.hardware import GIB, Profile
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import LayerInfo, ModelCard, type_bytes_per_value

MICRO_BATCH = 512  # llama.cpp's default n_ubatch: prompt tokens per forward pass
ACTIVATION_BYTES = 4  # llama.cpp keeps activations in F32
FITS, OFFLOAD, NO_FIT = "fits", "fits with offload", "does not fit"
_NEEDED = ("n_params_active", "bytes_per_token", "state_bytes")


class CostsError(WalkthroughError):
    """The card lacks a number the estimate needs."""


def check_card(card: ModelCard, cache_type: str = "f16") -> None:
    """Raise CostsError naming what the file does not determine (the estimate needs all of it).

    Raises:
        CostsError: a needed card field is None.
    """
    missing = [name for name in _NEEDED if getattr(card, name) is None]
    if card.kv_bytes_per_token.get(cache_type) is None:
        missing.append(f"kv_bytes_per_token[{cache_type}]")
    if missing:
        raise CostsError(f"{card.name or card.architecture}: the file does not determine {', '.join(missing)}; "
                         "costs cannot be estimated for it")


# --- pieces of the budget --------------------------------------------------------------------


def kv_cache_bytes(card: ModelCard, positions: int, cache_type: str = "f16") -> Figure:
    """KV cache for `positions` tokens (the card's per-layer K+V values; sliding layers keep their window)."""
    return derived(card.kv_bytes(positions, cache_type) or 0, "B",
                   "sum over KV layers of (K + V values per token) x bytes per value x positions kept",
                   positions=given(positions, "tokens", "context"),
                   kv_per_token=given(card.kv_bytes_per_token.get(cache_type) or 0, "B/token",
                                      f"model card ({cache_type}, all KV layers)"))


def layer_kv_bytes(layer: LayerInfo, positions: int, cache_type: str = "f16") -> float:
    """One layer's KV cache for `positions` tokens (0 for layers without one)."""
    if not layer.keeps_kv:
        return 0.0
    kept = min(positions, layer.sliding_window) if layer.sliding_window else positions
    return (layer.kv_values_per_token or 0) * type_bytes_per_value(cache_type) * kept


def state_bytes(card: ModelCard) -> Figure:
    """Fixed recurrent state of one sequence (linear-attention layers), from the card."""
    return given(card.state_bytes or 0, "B", "model card: recurrent state of linear-attention layers, F32")


def compute_buffer_bytes(card: ModelCard, micro_batch: int = MICRO_BATCH) -> Figure:
    """Estimate of llama.cpp's compute buffer: F32 activations of one micro-batch, namely the logits
    (vocabulary), the widest FFN intermediate twice (gate and up) and 4 copies of the hidden state.
    Attention scores are not counted (flash attention works on tiles). llama.cpp prints the real
    figure at load ("compute buffer size"); this is the same order of magnitude, not that number."""
    width = ffn_width(card)
    values = (card.vocab_size or 0) + 2 * width + 4 * (card.n_embd or 0)
    return derived(ACTIVATION_BYTES * micro_batch * values, "B",
                   "4 B x micro-batch x (vocab + 2 x FFN width + 4 x hidden size)",
                   micro_batch=given(micro_batch, "tokens", "llama.cpp default n_ubatch"),
                   ffn_width=given(width, "values", "model card"))


def ffn_width(card: ModelCard) -> int:
    """FFN intermediate values per token: routed experts used plus shared experts, or the dense width."""
    if card.is_moe:
        return (card.n_experts_used or 0) * (card.expert_ff or 0) + card.n_shared_experts * (card.shared_expert_ff or 0)
    return card.n_ff or 0


def expert_bytes_per_layer(card: ModelCard) -> float:
    """Routed-expert bytes of one MoE layer: the card's expert bytes over its MoE layers."""
    n_moe = sum(1 for layer in card.layers if layer.ffn == "moe")
    return card.bytes_by_group.get("experts", 0) / n_moe if n_moe else 0.0


def layer_read_bytes(card: ModelCard, layer: LayerInfo, experts: bool = True) -> float:
    """Weight bytes one decoded token reads in a layer: all of it but the unused experts.
    With experts=False, only the part outside the routed experts."""
    e = expert_bytes_per_layer(card) if layer.ffn == "moe" else 0.0
    used = min(card.n_experts_used or 0, card.n_experts) / card.n_experts if card.n_experts else 0.0
    return layer.nbytes - e + (e * used if experts else 0.0)


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """What sits in host RAM: the routed experts of some layers and some whole layers (first ones)."""

    expert_layers: tuple[int, ...] = ()
    whole_layers: tuple[int, ...] = ()
    n_moe_layers: int = 0
    n_layers: int = 0

    def describe(self) -> str:
        parts = []
        if self.expert_layers:
            k = len(self.expert_layers)
            parts.append(f"routed experts of the first {k} of {self.n_moe_layers} MoE layers in system RAM "
                         f"(llama.cpp --n-cpu-moe {k})")
        if self.whole_layers:
            m = len(self.whole_layers)
            parts.append(f"the first {m} of {self.n_layers} layers in system RAM (llama.cpp -ngl {self.n_layers - m})")
        return "; ".join(parts) or "no offload: everything in one memory"


def slow_cache_reads(card: ModelCard, placement: Placement, context: int, cache_type: str = "f16") -> float:
    """KV cache and recurrent state bytes one sequence reads (state: and writes) per token in host RAM."""
    return sum(layer_kv_bytes(card.layers[i], context, cache_type) + 2 * (card.layers[i].state_bytes or 0)
               for i in placement.whole_layers)


def slow_weight_reads(card: ModelCard, placement: Placement, experts_share: float | None = None) -> float:
    """Weight bytes read from host RAM per pass: the offloaded experts in use (`experts_share` of each
    layer's experts; by default the routed share of one token) and the rest of whole offloaded layers."""
    if experts_share is None:
        experts_share = min(card.n_experts_used or 0, card.n_experts) / card.n_experts if card.n_experts else 0.0
    total = len(placement.expert_layers) * expert_bytes_per_layer(card) * experts_share
    return total + sum(layer_read_bytes(card, card.layers[i], experts=False) for i in placement.whole_layers)


def slow_reads(card: ModelCard, placement: Placement, context: int, cache_type: str = "f16") -> float:
    """Bytes per decoded token read from host RAM: offloaded experts used, whole layers, their KV and state."""
    return slow_weight_reads(card, placement) + slow_cache_reads(card, placement, context, cache_type)


@dataclass(frozen=True)
class MemoryPlan:
    weights: Figure
    kv_cache: Figure
    state: Figure
    compute_buffer: Figure
    needed: Figure
    usable: Figure
    verdict: str  # FITS, OFFLOAD or NO_FIT
    placement: Placement = field(default_factory=Placement)
    host_needed: Figure | None = None
    host_usable: Figure | None = None
    shortfall: Figure | None = None  # bytes that fit nowhere


def usable_bytes(hw: Profile) -> Figure:
    """Memory left for the model after the profile's stated allowance."""
    # The profile gives both in GiB (memory is sold in binary units); written in bytes, the cost model's unit.
    return derived(hw.usable_bytes, "B", "memory - reserved allowance",
                   memory=given(hw.memory_bytes, "B", hw.sources.get("memory_gib", hw.origin)),
                   reserved=given(round(hw.reserved_gib * GIB), "B", hw.sources.get("reserved_gib", hw.origin)))


def memory_plan(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16", users: int = 1) -> MemoryPlan:
    """Does the model fit at this context, cache type and number of users, and if not, what moves out?"""
    check_card(card, cache_type)
    weights = given(sum(card.bytes_by_type.values()), "B", "model card: every tensor in the file")
    one_kv = kv_cache_bytes(card, context, cache_type)
    kv = derived(users * one_kv.value, "B", "users x KV cache per user",
                 users=given(users, "users", "--users"), kv_per_user=one_kv)
    state = derived(users * (card.state_bytes or 0), "B", "users x recurrent state per sequence",
                    users=given(users, "users", "--users"), state_per_user=state_bytes(card))
    buffers = compute_buffer_bytes(card)
    needed = derived(weights.value + kv.value + state.value + buffers.value, "B",
                     "weights + KV cache + recurrent state + compute buffers",
                     weights=weights, kv_cache=kv, state=state, compute_buffers=buffers)
    usable = usable_bytes(hw)
    common = {"weights": weights, "kv_cache": kv, "state": state, "compute_buffer": buffers,
              "needed": needed, "usable": usable}
    deficit = needed.value - usable.value
    if deficit <= 0:
        return MemoryPlan(verdict=FITS, **common)
    if hw.host is None:
        shortfall = derived(deficit, "B", "needed - usable", needed=needed, usable=usable)
        return MemoryPlan(verdict=NO_FIT, shortfall=shortfall, **common)
    placement, moved = _offload(card, deficit, context, cache_type, users)
    host_usable = usable_bytes(hw.host)
    host_needed = derived(moved, "B", "weights, KV cache and state moved to system RAM")
    missing = deficit - moved if placement is None else max(moved - host_usable.value, 0.0)
    if placement is None or missing > 0:
        shortfall = derived(missing, "B", "bytes that fit in neither memory")
        return MemoryPlan(verdict=NO_FIT, placement=placement or Placement(), host_needed=host_needed,
                          host_usable=host_usable, shortfall=shortfall, **common)
    return MemoryPlan(verdict=OFFLOAD, placement=placement, host_needed=host_needed, host_usable=host_usable,
                      **common)


def _offload(card: ModelCard, deficit: float, context: int, cache_type: str,
             users: int) -> tuple[Placement | None, float]:
    """Move experts layer by layer, then whole layers, until `deficit` bytes are freed.
    Returns (None, bytes movable) when even moving every layer is not enough."""
    trunk = [layer for layer in card.layers if not layer.mtp]
    moe = [layer.index for layer in trunk if layer.ffn == "moe"]
    e = expert_bytes_per_layer(card)
    expert_layers: list[int] = []
    moved = 0.0
    for i in moe:
        if moved >= deficit or e <= 0:
            break
        expert_layers.append(i)
        moved += e
    whole: list[int] = []
    for layer in trunk:
        if moved >= deficit:
            break
        rest = layer.nbytes - (e if layer.index in expert_layers else 0.0)
        moved += rest + users * (layer_kv_bytes(layer, context, cache_type) + (layer.state_bytes or 0))
        whole.append(layer.index)
    if moved < deficit:
        return None, moved
    return Placement(tuple(expert_layers), tuple(whole), len(moe), len(trunk)), moved


def max_users(card: ModelCard, hw: Profile, context: int, cache_type: str = "f16") -> Figure:
    """How many sequences' KV caches and states fit in fast memory beside the weights (0 if none does)."""
    plan = memory_plan(card, hw, context, cache_type, users=1)
    per_user = plan.kv_cache.value + plan.state.value
    if plan.verdict == NO_FIT:
        return derived(0, "users", "the model does not fit with one user", needed=plan.needed, usable=plan.usable)
    resident = plan.needed.value - per_user
    if plan.verdict == OFFLOAD:
        resident -= plan.host_needed.value - _moved_per_user(card, plan.placement, context, cache_type)
    n = int((plan.usable.value - resident) // per_user) if per_user > 0 else 1 << 20
    return derived(max(n, 1), "users", "(usable - weights - compute buffers) / (KV cache + state per user)",
                   usable=plan.usable, per_user=given(per_user, "B", "KV cache + state at the context"))


def _moved_per_user(card: ModelCard, placement: Placement, context: int, cache_type: str) -> float:
    """KV cache and state bytes of one user that live in the offloaded whole layers."""
    return sum(layer_kv_bytes(card.layers[i], context, cache_type) + (card.layers[i].state_bytes or 0)
               for i in placement.whole_layers)
