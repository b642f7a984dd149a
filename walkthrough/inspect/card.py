"""The model card: every structural number of a GGUF, in plain fields, computed from its header.

`build_card(f)` reads the architecture's hyperparameters (`{arch}.block_count`,
`{arch}.attention.head_count`, ...) and the tensor table, and derives what the
later stages need: parameters total and active per token, bytes by tensor group
and by ggml type (the quant mix), bits per weight, bytes read per decoded token,
KV cache bytes per token at F16/Q8_0/Q4_0, and the kind of every layer (full
attention, linear attention with a fixed state, MoE or dense FFN).

What is not known is left as None and its name listed in `card.unknown`, so an
unfamiliar architecture still gets every number its tensor table allows.

Counting rules (worked example, a qwen2moe layer with 8 experts, 2 used): the
routed expert tensors `blk.N.ffn_{gate,up,down}_exps.weight` count 2/8 of their
parameters and bytes as active; the token embedding counts one row (a lookup,
not a matmul); everything else (attention, norms, router, shared expert, output
head) counts fully. Layers that only serve multi-token prediction
(`{arch}.nextn_predict_layers`) are listed but not counted as read per token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.inspect.gguf import GGUFFile, TensorInfo

# Tensor groups, in display order. `tensor_group` maps a tensor name onto one.
GROUPS = (
    "embedding",
    "attention",
    "linear_attention",
    "norm",
    "router",
    "experts",
    "shared_expert",
    "ffn",
    "output",
    "other",
)
KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
RECURRENT_STATE_BYTES_PER_VALUE = 4  # llama.cpp keeps conv and delta-net states in F32

_LAYER_NAME = re.compile(r"^blk\.(\d+)\.(.+)$")


def tensor_group(name: str) -> str:
    """The group a tensor belongs to, from its llama.cpp name.

    Example: `blk.3.ffn_up_exps.weight` -> "experts", `blk.0.ssm_a` -> "linear_attention".
    """
    m = _LAYER_NAME.match(name)
    if m is None:
        if name.startswith("token_embd") and "norm" not in name:
            return "embedding"
        if name.startswith("output_norm") or name.endswith("_norm.weight"):
            return "norm"
        if name.startswith("output"):
            return "output"
        return "other"
    part = m.group(2)
    if part.startswith("ffn_gate_inp"):
        return "router"
    if "norm" in part:
        return "norm"
    if "_exps" in part:
        return "experts"
    if "_shexp" in part:
        return "shared_expert"
    if part.startswith("ssm_"):
        return "linear_attention"
    if part.startswith("attn_"):
        return "attention"
    if part.startswith("ffn_"):
        return "ffn"
    return "other"


def tensor_layer(name: str) -> int | None:
    """Layer index of a `blk.N.*` tensor, None for the others."""
    m = _LAYER_NAME.match(name)
    return int(m.group(1)) if m else None


def type_bytes_per_value(type_name: str) -> float:
    """Bytes per stored value of a ggml type (F16 -> 2, Q8_0 -> 34/32)."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return size / block


@dataclass(frozen=True)
class LayerInfo:
    """What one block does."""

    index: int
    attention: str  # "full", "linear" (fixed recurrent state), "sliding", "none", "unknown"
    ffn: str  # "moe", "dense", "none"
    n_head_kv: int | None
    keeps_kv: bool  # adds K and V rows per token
    state_bytes: int  # fixed recurrent state (conv + delta-net), 0 for attention layers
    sliding_window: int | None = None
    mtp: bool = False  # multi-token-prediction block, not run for ordinary decoding
    shared_expert: bool = False


@dataclass(frozen=True)
class ModelCard:
    """Structural numbers of one model file. None means "not known from this file"."""

    architecture: str
    name: str | None
    file_size: int
    n_tensors: int
    n_layers: int | None  # trunk layers (without multi-token-prediction blocks)
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    context_length: int | None
    rope_base: float | None
    rope_dims: int | None
    vocab_size: int | None
    n_ff: int | None
    n_experts: int
    n_experts_used: int
    n_shared_experts: int
    expert_ff: int | None
    shared_expert_ff: int | None
    norm_eps: float | None
    layers: tuple[LayerInfo, ...]
    n_params: int
    n_params_active: int
    params_by_group: dict[str, int]
    bytes_by_group: dict[str, int]
    bytes_by_type: dict[str, int]  # the quant mix: ggml type name -> bytes
    params_by_type: dict[str, int]
    bytes_per_token: int  # weight bytes read to decode one token, in stored formats
    bytes_per_token_by_group: dict[str, int]
    kv_bytes_per_token: dict[str, int]  # cache type -> bytes per token over layers that keep KV
    state_bytes: int  # fixed recurrent state over all linear-attention layers
    unknown: tuple[str, ...] = field(default=())

    @property
    def bits_per_weight(self) -> float:
        return 8 * sum(self.bytes_by_type.values()) / self.n_params if self.n_params else 0.0

    def bits_per_weight_by_group(self) -> dict[str, float]:
        return {g: 8 * self.bytes_by_group[g] / p for g, p in self.params_by_group.items() if p}

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def kv_layers(self) -> list[int]:
        return [layer.index for layer in self.layers if layer.keeps_kv]

    @property
    def linear_layers(self) -> list[int]:
        return [layer.index for layer in self.layers if layer.attention == "linear"]

    def kv_bytes(self, n_tokens: int, cache_type: str = "f16") -> int:
        """KV cache bytes for n_tokens positions at a cache type."""
        return self.kv_bytes_per_token[cache_type] * n_tokens


class _Hparams:
    """Typed access to `{arch}.*` keys, remembering which were missing."""

    def __init__(self, f: GGUFFile, arch: str):
        self.f, self.arch, self.missing = f, arch, []

    def raw(self, suffix: str) -> Any:
        return self.f.get(f"{self.arch}.{suffix}")

    def int(self, suffix: str, *, note: bool = True) -> int | None:
        value = self.raw(suffix)
        if value is None:
            if note:
                self.missing.append(suffix)
            return None
        if hasattr(value, "__len__"):  # a per-layer array: report the largest
            return int(max(value)) if len(value) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        return None

    def per_layer(self, suffix: str, n_layers: int) -> list[int | None]:
        """A key that may be one number or one per layer."""
        value = self.raw(suffix)
        if value is None:
            return [None] * n_layers
        if hasattr(value, "__len__") and not isinstance(value, str):
            values = [int(v) for v in value]
            return (values + [None] * n_layers)[:n_layers]
        return [int(value)] * n_layers

    def float(self, suffix: str) -> float | None:
        value = self.raw(suffix)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _layer_parts(tensors: dict[str, TensorInfo]) -> dict[int, set[str]]:
    parts: dict[int, set[str]] = {}
    for name in tensors:
        m = _LAYER_NAME.match(name)
        if m:
            parts.setdefault(int(m.group(1)), set()).add(m.group(2).rsplit(".", 1)[0])
    return parts


def _recurrent_flags(hp: _Hparams, n_all: int, n_trunk: int, parts: dict[int, set[str]]) -> list[bool]:
    """Which layers are linear attention: an explicit per-layer array, the interval, or the tensors."""
    explicit = hp.raw("attention.recurrent_layers")
    if explicit is not None and hasattr(explicit, "__len__") and len(explicit) >= n_all:
        return [bool(explicit[i]) for i in range(n_all)]
    interval = hp.int("full_attention_interval", note=False)
    if interval:
        return [i < n_trunk and (i + 1) % interval != 0 for i in range(n_all)]
    return [any(p.startswith("ssm_") for p in parts.get(i, ())) for i in range(n_all)]


def _state_bytes(hp: _Hparams) -> int:
    """Conv state plus delta-net/SSM state of one linear-attention layer (F32), as llama.cpp sizes them."""
    d_conv = hp.int("ssm.conv_kernel", note=False) or 0
    d_inner = hp.int("ssm.inner_size", note=False) or 0
    d_state = hp.int("ssm.state_size", note=False) or 0
    n_group = hp.int("ssm.group_count", note=False) or 0
    conv = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    ssm = d_state * d_inner
    return (conv + ssm) * RECURRENT_STATE_BYTES_PER_VALUE


def _layers(hp: _Hparams, f: GGUFFile, n_all: int, n_trunk: int, head_k: int | None, head_v: int | None):
    parts = _layer_parts(f.tensors)
    recurrent = _recurrent_flags(hp, n_all, n_trunk, parts)
    kv_heads = hp.per_layer("attention.head_count_kv", n_all)
    windows = hp.per_layer("attention.sliding_window", n_all)
    swa_pattern = hp.raw("attention.sliding_window_pattern")
    state = _state_bytes(hp)
    layers = []
    for i in range(n_all):
        p = parts.get(i, set())
        mtp = i >= n_trunk
        has_attn = any(x.startswith(("attn_q", "attn_k", "attn_v", "attn_qkv")) for x in p)
        if recurrent[i]:
            attention = "linear"
        elif kv_heads[i] == 0:
            attention = "none"
        elif has_attn or (not p and hp.raw("attention.head_count") is not None):
            attention = "full"  # a header without this layer's tensors: the metadata describes attention
        else:
            attention = "unknown" if not p else "none"
        window = None
        if attention == "full" and windows[i]:
            sliding = True
            if hasattr(swa_pattern, "__len__"):
                sliding = i < len(swa_pattern) and bool(swa_pattern[i])
            elif isinstance(swa_pattern, int) and swa_pattern > 0:
                sliding = (i + 1) % swa_pattern != 0  # llama.cpp: every n-th layer is dense
            if sliding:
                attention, window = "sliding", windows[i]
        ffn = "moe" if any("_exps" in x for x in p) else "dense" if any(x.startswith("ffn_up") for x in p) else "none"
        keeps_kv = attention in ("full", "sliding") and not mtp and head_k is not None
        layers.append(
            LayerInfo(
                index=i,
                attention=attention,
                ffn=ffn,
                n_head_kv=kv_heads[i],
                keeps_kv=keeps_kv,
                state_bytes=state if attention == "linear" else 0,
                sliding_window=window,
                mtp=mtp,
                shared_expert=any("_shexp" in x and not x.startswith("ffn_gate_inp") for x in p),
            )
        )
    return tuple(layers)


def _group_of(t: TensorInfo, layers: tuple[LayerInfo, ...]) -> str:
    group = tensor_group(t.name)
    layer = tensor_layer(t.name)
    if group == "attention" and layer is not None and layer < len(layers) and layers[layer].attention == "linear":
        return "linear_attention"
    return group


def _active_fraction(t: TensorInfo, group: str, layers, n_experts: int, n_used: int) -> float:
    """Share of a tensor's weights read to decode one token."""
    layer = tensor_layer(t.name)
    if layer is not None and layer < len(layers) and layers[layer].mtp:
        return 0.0
    if group == "experts" and n_experts:
        return min(n_used, n_experts) / n_experts
    if group == "embedding":
        rows = t.n_elements // t.shape[0] if t.shape and t.shape[0] else 1
        return 1 / rows if rows else 0.0
    return 1.0


def build_card(f: GGUFFile) -> ModelCard:
    """Compute the card of an opened GGUF (metadata and tensor table only; no tensor data is read)."""
    arch = str(f.get("general.architecture") or "unknown")
    hp = _Hparams(f, arch)
    n_all = hp.int("block_count")
    n_nextn = hp.int("nextn_predict_layers", note=False) or 0
    n_all = n_all if n_all is not None else 1 + max((tensor_layer(n) for n in f.tensors if tensor_layer(n) is not None), default=-1)
    n_trunk = max(n_all - n_nextn, 0)
    n_embd = hp.int("embedding_length")
    n_head = hp.int("attention.head_count")
    n_head_kv = hp.int("attention.head_count_kv", note=False) or n_head
    head_k = hp.int("attention.key_length", note=False)
    head_v = hp.int("attention.value_length", note=False)
    if head_k is None and n_embd and n_head:
        head_k = n_embd // n_head
    head_v = head_v if head_v is not None else head_k
    n_experts = hp.int("expert_count", note=False) or 0
    n_used = hp.int("expert_used_count", note=False) or 0
    layers = _layers(hp, f, n_all, n_trunk, head_k, head_v) if n_all else ()

    params_by_group = dict.fromkeys(GROUPS, 0)
    bytes_by_group = dict.fromkeys(GROUPS, 0)
    read_by_group = dict.fromkeys(GROUPS, 0)
    bytes_by_type: dict[str, int] = {}
    params_by_type: dict[str, int] = {}
    n_params = 0
    active = 0.0
    for t in f.tensors.values():
        group = _group_of(t, layers)
        n = t.n_elements
        n_params += n
        params_by_group[group] += n
        bytes_by_group[group] += t.nbytes
        bytes_by_type[t.type_name] = bytes_by_type.get(t.type_name, 0) + t.nbytes
        params_by_type[t.type_name] = params_by_type.get(t.type_name, 0) + n
        share = _active_fraction(t, group, layers, n_experts, n_used)
        active += n * share
        read_by_group[group] += round(t.nbytes * share)
    if "output.weight" not in f.tensors and "token_embd.weight" in f.tensors:
        # Tied embeddings: the output head reads the whole embedding matrix each token.
        emb = f.tensors["token_embd.weight"]
        read_by_group["output"] += emb.nbytes
        active += emb.n_elements

    kv_per_value = sum(
        (layer.n_head_kv or n_head_kv or 0) * ((head_k or 0) + (head_v or 0)) for layer in layers if layer.keeps_kv
    )
    kv_bytes_per_token = {t: round(kv_per_value * type_bytes_per_value(t)) for t in KV_CACHE_TYPES}
    vocab = _vocab_size(f, hp)
    unknown = tuple(dict.fromkeys(hp.missing + ([] if vocab else ["vocab_size"])))
    return ModelCard(
        architecture=arch,
        name=f.get("general.name") if isinstance(f.get("general.name"), str) else None,
        file_size=f.file_size,
        n_tensors=len(f.tensors),
        n_layers=n_trunk,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_k,
        head_dim_v=head_v,
        context_length=hp.int("context_length"),
        rope_base=hp.float("rope.freq_base"),
        rope_dims=hp.int("rope.dimension_count", note=False) or head_k,
        vocab_size=vocab,
        n_ff=hp.int("feed_forward_length", note=False),
        n_experts=n_experts,
        n_experts_used=n_used,
        n_shared_experts=hp.int("expert_shared_count", note=False) or int(any(layer.shared_expert for layer in layers)),
        expert_ff=hp.int("expert_feed_forward_length", note=False),
        shared_expert_ff=hp.int("expert_shared_feed_forward_length", note=False),
        norm_eps=hp.float("attention.layer_norm_rms_epsilon") or hp.float("attention.layer_norm_epsilon"),
        layers=layers,
        n_params=n_params,
        n_params_active=round(active),
        params_by_group={g: v for g, v in params_by_group.items() if v},
        bytes_by_group={g: v for g, v in bytes_by_group.items() if v},
        bytes_by_type=bytes_by_type,
        params_by_type=params_by_type,
        bytes_per_token=sum(read_by_group.values()),
        bytes_per_token_by_group={g: v for g, v in read_by_group.items() if v},
        kv_bytes_per_token=kv_bytes_per_token,
        state_bytes=sum(layer.state_bytes for layer in layers if not layer.mtp),
        unknown=unknown,
    )


def _vocab_size(f: GGUFFile, hp: _Hparams) -> int | None:
    field = f.fields.get("tokenizer.ggml.tokens")
    if field is not None and field.is_array:
        return field.count
    v = hp.int("vocab_size", note=False)
    if v:
        return v
    emb = f.tensors.get("token_embd.weight")
    return emb.shape[1] if emb is not None and len(emb.shape) > 1 else None
