"""The model card: every structural number of a GGUF, in plain fields, computed from its header.

`build_card(f)` reads the architecture's hyperparameters (`{arch}.block_count`,
`{arch}.attention.head_count`, ...) and the tensor table, and derives what the
later stages need: parameters total and active per token, bytes by tensor group
and by ggml type (the quant mix), bits per weight, bytes read per decoded token,
KV cache bytes per token at F16/Q8_0/Q4_0, and the kind of every layer (full,
sliding-window or linear attention with a fixed state; MoE or dense FFN).
No tensor data is read: a header-only file gives the same card.

For an architecture the engine runs, a layer's FFN kind is the one whose tensors its
declaration (`walkthrough.architectures.declarations`) lists and the layer holds: the engine and the card
classify a layer the same way.

What is not known is left as None and its name listed in `card.unknown`, so an
unfamiliar architecture still gets every number its tensor table allows: the
layer count from `blk.N.*` names, the width and vocabulary from the embedding's
shape, the expert count from the expert tensors' last dimension, and the KV
width of a layer from its `attn_k`/`attn_v` output sizes.

Counting rules (worked example, a qwen2moe layer with 8 experts, 2 used): the
routed expert tensors `blk.N.ffn_{gate,up,down}_exps.weight` count 2/8 of their
parameters and bytes as active; the token embedding counts one row (a lookup,
not a matmul) unless the output head reuses it (tied embeddings: the head reads
all of it, so it counts fully, once); everything else (attention, norms, router,
shared expert, output head) counts fully. Layers that only serve multi-token
prediction (`{arch}.nextn_predict_layers`) are listed but neither counted as
active nor given a KV cache.

Not handled: KV caches shared between layers (`attention.shared_kv_layers`),
MLA's compressed cache beyond what `key_length`/`value_length` declare, and the
recurrent states of layer types other than Mamba-style SSM / Gated DeltaNet,
RWKV and short convolutions (their state is listed as unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.architectures.declarations import Architecture, declared
from walkthrough.architectures.layer_kinds import LAYER_KINDS
from walkthrough.architectures.layer_kinds import state_values as kind_state_values
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.hparams import Hparams, recurrent_state_values, swa_flags
from walkthrough.inspect.tensors import (
    GROUPS,
    embedding_rows,
    layer_parts,
    tensor_group,
    tensor_layer,
    tensor_place,
)

__all__ = ["GROUPS", "KV_CACHE_TYPES", "GroupRow", "LayerInfo", "ModelCard", "build_card", "tensor_group", "tensor_layer",
           "type_bytes_per_value"]

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
RECURRENT_STATE_BYTES_PER_VALUE = 4  # llama.cpp keeps conv and recurrent states in F32 (llama-model.cpp, type_r/type_s)
NAME_BYTES = 256  # general.name is shown in a title line; a longer one is cut (and not read past this)
MAX_LAYERS = 16384  # far above any published model; a larger count is corrupt metadata


def type_bytes_per_value(type_name: str) -> float:
    """Bytes per stored value of a ggml type (F16 -> 2, Q8_0 -> 34/32)."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return size / block


@dataclass(frozen=True)
class LayerInfo:
    """What one block does, and what it costs."""

    index: int
    attention: str  # "full", "sliding", "linear" (fixed recurrent state), "none", "unknown"
    ffn: str  # "moe", "dense", "none"
    n_head_kv: int | None
    keeps_kv: bool  # adds K and V rows per token
    state_bytes: int | None  # fixed recurrent state (conv + recurrent), 0 for other layers, None if unknown
    sliding_window: int | None = None  # positions kept by a sliding-window layer
    mtp: bool = False  # multi-token-prediction block, not run for ordinary decoding
    shared_expert: bool = False
    n_ff: int | None = None  # dense FFN width of this layer (per-layer arrays differ); None for MoE layers
    kv_values_per_token: int | None = 0  # K plus V values added per token; None if unknown
    n_params: int = 0  # parameters in this layer's tensors
    nbytes: int = 0  # bytes of this layer's tensors in the file


@dataclass(frozen=True)
class ModelCard:
    """Structural numbers of one model file. None means "not known from this file"."""

    architecture: str
    name: str | None
    file_size: int
    n_tensors: int
    n_layers: int | None  # trunk layers (without multi-token-prediction blocks)
    n_embd: int | None
    n_head: int | None  # largest over layers when given per layer
    n_head_kv: int | None  # largest over layers when given per layer (see LayerInfo.n_head_kv)
    head_dim_k: int | None
    head_dim_v: int | None
    context_length: int | None
    rope_base: float | None
    rope_dims: int | None
    vocab_size: int | None
    n_ff: int | None  # largest over layers when given per layer (see LayerInfo.n_ff)
    n_experts: int
    n_experts_used: int | None
    n_shared_experts: int
    expert_ff: int | None
    shared_expert_ff: int | None
    norm_eps: float | None
    layers: tuple[LayerInfo, ...]
    n_params: int
    n_params_active: int | None
    params_by_group: dict[str, int]
    bytes_by_group: dict[str, int]
    bytes_by_type: dict[str, int]  # the quant mix: ggml type name -> bytes
    params_by_type: dict[str, int]
    bytes_per_token: int | None  # weight bytes read to decode one token, in stored formats
    bytes_per_token_by_group: dict[str, int]
    kv_bytes_per_token: dict[str, int | None]  # cache type -> bytes per token over layers that keep KV
    state_bytes: int | None  # fixed recurrent state over all linear-attention layers
    n_mtp_layers: int = 0
    tied_embeddings: bool = False  # no output.weight: the head reuses the token embedding
    unknown: tuple[str, ...] = field(default=())

    @property
    def bits_per_weight(self) -> float:
        return 8 * sum(self.bytes_by_type.values()) / self.n_params if self.n_params else 0.0

    @property
    def active_share(self) -> float | None:
        """Parameters active per token as a share of all parameters; None when either is unknown."""
        return self.n_params_active / self.n_params if self.n_params and self.n_params_active is not None else None

    def bits_per_weight_by_group(self) -> dict[str, float]:
        return {g: 8 * self.bytes_by_group[g] / p for g, p in self.params_by_group.items() if p}

    def group_rows(self) -> list[GroupRow]:
        """Every group that stores or reads bytes, in `GROUPS` order; params, bytes and reads each sum to the
        card's totals (`n_params`, the tensors' bytes, `bytes_per_token` when known).

        Example (SmolLM2-135M, tied): embedding stores 28.7 MiB and its lookup reads 612 B; "output" stores
        nothing and reads the other 28.7 MiB of the same matrix (reads="token_embd.weight").
        """
        rows = []
        for group in GROUPS:
            params, nbytes = self.params_by_group.get(group, 0), self.bytes_by_group.get(group, 0)
            read = self.bytes_per_token_by_group.get(group, 0)
            if params or nbytes or read:
                tied_head = group == "output" and self.tied_embeddings and not nbytes
                rows.append(GroupRow(group, params, nbytes, read, "token_embd.weight" if tied_head else None))
        return rows

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def kv_layers(self) -> list[int]:
        return [layer.index for layer in self.layers if layer.keeps_kv]

    @property
    def linear_layers(self) -> list[int]:
        return [layer.index for layer in self.layers if layer.attention == "linear" and not layer.mtp]

    def kv_bytes(self, n_tokens: int, cache_type: str = "f16") -> int | None:
        """KV cache bytes for n_tokens positions at a cache type (sliding layers keep at most their window)."""
        per_value = type_bytes_per_value(cache_type)
        total = 0.0
        for layer in self.layers:
            if not layer.keeps_kv:
                continue
            if layer.kv_values_per_token is None:
                return None
            kept = min(n_tokens, layer.sliding_window) if layer.sliding_window else n_tokens
            total += layer.kv_values_per_token * per_value * kept
        return round(total)


@dataclass(frozen=True)
class GroupRow:
    """One tensor group's line of the card: what it stores and what decoding one token reads of it.

    A tied output head is a row of its own that stores nothing (its bytes are the token embedding's) but
    reads the whole embedding matrix per token, so the rows' reads add up to `ModelCard.bytes_per_token`.
    """

    group: str
    params: int  # parameters stored in this group (0 for a tied head: they are counted under "embedding")
    nbytes: int  # bytes stored in this group
    read_per_token: int  # stored bytes read to decode one token
    reads: str | None = None  # the tensor another group stores that this row reads (a tied head: token_embd.weight)


class CardError(WalkthroughError):
    """The metadata describes a model no file could hold (a corrupt or hostile header)."""


def _layer_count(f: GGUFFile, hp: Hparams) -> int | None:
    """`block_count`, or one more than the largest `blk.N` index; refused when implausibly large."""
    n = hp.int("block_count")
    source = f"{hp.arch}.block_count = {n}"
    if n is None:
        n = 1 + max((i for i in map(tensor_layer, f.tensors) if i is not None), default=-1)
        source = f"tensor blk.{n - 1}.*"
        n = n or None
    if n is not None and n > MAX_LAYERS:
        raise CardError(f"{f.path.name}: {source} means {n} layers, more than any model has "
                        f"(limit {MAX_LAYERS}); the file's metadata is corrupt")
    return n


def _kv_from_tensors(parts: dict[str, TensorInfo]) -> int | None:
    """K plus V output width of a layer from its projection shapes (ggml order: out is shape[1])."""
    k, v = parts.get("attn_k.weight"), parts.get("attn_v.weight")
    if k is None or v is None or len(k.shape) < 2 or len(v.shape) < 2:
        return None
    return k.shape[1] + v.shape[1]


def _state_values(hp: Hparams, decl: Architecture | None, n_embd: int | None) -> int | None:
    """Values in one linear layer's state: sized by the layer kind its architecture declares for
    linear layers (`LayerKind.state_values`, from the keys that kind reads), else by the keys the file
    has (`recurrent_state_values`: architectures the engine does not run)."""
    kind = decl.mixer_kind("linear") if decl is not None else None
    if kind is not None and LAYER_KINDS.get(kind) is not None and LAYER_KINDS[kind].state_values:
        return kind_state_values(kind, hp.int, n_embd)
    return recurrent_state_values(hp, n_embd)


def _layers(f: GGUFFile, hp: Hparams, n_all: int, n_trunk: int, dims: dict) -> tuple[LayerInfo, ...]:
    parts = layer_parts(f.tensors, n_all)
    kv_heads = hp.per_layer("attention.head_count_kv", n_all)
    n_ff = hp.per_layer("feed_forward_length", n_all)
    recurrent = hp.recurrent_flags(n_all, n_trunk, parts, kv_heads)
    sliding = swa_flags(hp, n_all, n_trunk)
    windows = hp.per_layer("attention.sliding_window", n_all)
    leading_dense = hp.int("leading_dense_block_count") or 0
    decl = declared(hp.arch)
    state_values = _state_values(hp, decl, dims["n_embd"])
    layers = []
    for i in range(n_all):
        p = parts[i]
        names = {n.rsplit(".", 1)[0] for n in p}
        mtp = i >= n_trunk
        heads = kv_heads[i] if kv_heads[i] is not None else dims["n_head_kv"]
        has_attn = any(x.startswith(("attn_q", "attn_k", "attn_v", "attn_qkv")) for x in names)
        if recurrent[i]:
            attention = "linear"
        elif kv_heads[i] == 0:
            attention = "none"
        elif has_attn or (not p and hp.raw("attention.head_count") is not None):
            attention = "full"  # a layer without tensors in the file: the metadata describes attention
        else:
            attention = "none" if p else "unknown"
        window = None
        if attention == "full" and sliding[i] and windows[i]:
            attention, window = "sliding", windows[i]
        if decl is not None and p:  # the architecture's declaration names each FFN kind's tensors
            ffn = decl.ffn_kind({n for n in p}) or "none"
        elif any("_exps" in x for x in names):
            ffn = "moe"
        elif any(x.startswith(("ffn_up", "ffn_gate", "ffn_down", "channel_mix")) and "_shexp" not in x
                 and not x.startswith("ffn_gate_inp") for x in names):
            ffn = "dense"
        elif not p and dims["n_experts"] and i >= leading_dense:
            ffn = "moe"
        elif not p and n_ff[i]:
            ffn = "dense"
        else:
            ffn = "none"
        keeps_kv = attention in ("full", "sliding") and not mtp
        kv_values = 0
        if keeps_kv:
            kv_values = None
            head_k, head_v = (dims[f"{x}_swa"] or dims[x] for x in ("head_k", "head_v")) if window else (
                dims["head_k"], dims["head_v"])
            if heads is not None and head_k is not None and head_v is not None:
                kv_values = heads * (head_k + head_v)
            else:
                kv_values = _kv_from_tensors(p)
        state = 0
        if attention == "linear":
            state = None if state_values is None else state_values * RECURRENT_STATE_BYTES_PER_VALUE
        layers.append(
            LayerInfo(
                index=i,
                attention=attention,
                ffn=ffn,
                n_head_kv=heads if attention in ("full", "sliding") else None,
                keeps_kv=keeps_kv,
                state_bytes=state,
                sliding_window=window,
                mtp=mtp,
                shared_expert=any("_shexp" in x and not x.startswith("ffn_gate_inp") for x in names),
                n_ff=n_ff[i] if ffn == "dense" else None,
                kv_values_per_token=kv_values,
                n_params=sum(t.n_elements for t in p.values()),
                nbytes=sum(t.nbytes for t in p.values()),
            )
        )
    return tuple(layers)


def counted_group(name: str, card: ModelCard) -> str:
    """The group of `card` a tensor of this name is counted in (`ModelCard.bytes_by_group`'s keys)."""
    layer, group = tensor_place(name)
    return _group_of(group, layer, card.layers)


def _group_of(group: str, layer: int | None, layers: tuple[LayerInfo, ...]) -> str:
    """The group a tensor is counted in: attention in a linear-attention layer is linear attention."""
    if group == "attention" and layer is not None and layer < len(layers) and layers[layer].attention == "linear":
        return "linear_attention"
    return group


def _active_share(t: TensorInfo, layer: int | None, group: str, layers, n_experts: int, n_used: int | None,
                  tied: bool):
    """Share of a tensor's weights read to decode one token; None when it cannot be known."""
    if layer is not None and layer < len(layers) and layers[layer].mtp:
        return 0.0
    if group == "experts":
        if not n_experts or n_used is None:
            return None
        return min(n_used, n_experts) / n_experts
    if group == "embedding" and not (tied and t.name == "token_embd.weight"):
        rows = embedding_rows(t)
        return 1 / rows if rows else 0.0
    return 1.0


def _n_experts(f: GGUFFile, hp: Hparams) -> int:
    """`expert_count`, else the last dimension of the routed expert tensors."""
    n = hp.int("expert_count")
    if n:
        return n
    shapes = [t.shape for t in f.tensors.values() if tensor_group(t.name) == "experts" and len(t.shape) >= 2]
    return max((s[-1] for s in shapes), default=0)


def _dims(f: GGUFFile, hp: Hparams) -> dict:
    emb = f.tensors.get("token_embd.weight")
    n_embd = hp.int("embedding_length") or (emb.shape[0] if emb is not None else None)
    n_head = hp.int("attention.head_count")
    head_k = hp.int("attention.key_length")
    head_v = hp.int("attention.value_length")
    if head_k is None and n_embd and n_head:
        head_k = n_embd // n_head
    return {
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": hp.int("attention.head_count_kv") or n_head,
        "head_k": head_k,
        "head_v": head_v if head_v is not None else head_k,
        # sliding-window layers' own head sizes (llama.cpp reads them for every architecture)
        "head_k_swa": hp.int("attention.key_length_swa"),
        "head_v_swa": hp.int("attention.value_length_swa"),
        "n_experts": _n_experts(f, hp),
    }


def build_card(f: GGUFFile) -> ModelCard:
    """Compute the card of an opened GGUF (metadata and tensor table only; no tensor data is read).

    Raises:
        CardError: the metadata claims an implausible number of layers.
    """
    arch = str(f.get("general.architecture") or "unknown")
    hp = Hparams(f, arch)
    n_all = _layer_count(f, hp)
    n_nextn = min(hp.int("nextn_predict_layers") or 0, n_all or 0)
    n_trunk = n_all - n_nextn if n_all is not None else None
    dims = _dims(f, hp)
    n_experts = dims["n_experts"]
    n_used = hp.int("expert_used_count") if n_experts else 0
    layers = _layers(f, hp, n_all, n_trunk, dims) if n_all else ()
    tied = "output.weight" not in f.tensors and "token_embd.weight" in f.tensors

    params_by_group = dict.fromkeys(GROUPS, 0)
    bytes_by_group = dict.fromkeys(GROUPS, 0)
    read_by_group = dict.fromkeys(GROUPS, 0)
    bytes_by_type: dict[str, int] = {}
    params_by_type: dict[str, int] = {}
    n_params = 0
    active: float | None = 0.0
    for t in f.tensors.values():
        layer, group = tensor_place(t.name)
        group = _group_of(group, layer, layers)
        n = t.n_elements
        n_params += n
        params_by_group[group] += n
        bytes_by_group[group] += t.nbytes
        type_name = t.type_name
        bytes_by_type[type_name] = bytes_by_type.get(type_name, 0) + t.nbytes
        params_by_type[type_name] = params_by_type.get(type_name, 0) + n
        share = _active_share(t, layer, group, layers, n_experts, n_used, tied)
        if share is None:
            active = None
            continue
        if active is not None:
            active += n * share
        if tied and t.name == "token_embd.weight":
            # The lookup reads one row; the output head reads the whole matrix (the same bytes).
            row = t.nbytes // (embedding_rows(t) or 1)
            read_by_group["embedding"] += row
            read_by_group["output"] += t.nbytes - row
        else:
            read_by_group[group] += round(t.nbytes * share)

    kv_layers = [layer for layer in layers if layer.keeps_kv]
    kv_values = None if any(x.kv_values_per_token is None for x in kv_layers) else sum(
        x.kv_values_per_token for x in kv_layers)
    kv_bytes_per_token = {
        c: None if kv_values is None else round(kv_values * type_bytes_per_value(c)) for c in KV_CACHE_TYPES
    }
    trunk_states = [layer.state_bytes for layer in layers if layer.attention == "linear" and not layer.mtp]
    state_bytes = None if None in trunk_states else sum(trunk_states)
    vocab = _vocab_size(f, hp)
    card = ModelCard(
        architecture=arch,
        name=f.short_text("general.name", NAME_BYTES),
        file_size=f.file_size,
        n_tensors=len(f.tensors),
        n_layers=n_trunk,
        n_embd=dims["n_embd"],
        n_head=dims["n_head"],
        n_head_kv=dims["n_head_kv"],
        head_dim_k=dims["head_k"],
        head_dim_v=dims["head_v"],
        context_length=hp.int("context_length"),
        rope_base=hp.float("rope.freq_base"),
        rope_dims=hp.int("rope.dimension_count") or dims["head_k"],
        vocab_size=vocab,
        n_ff=hp.int("feed_forward_length"),
        n_experts=n_experts,
        n_experts_used=n_used,
        n_shared_experts=hp.int("expert_shared_count") or int(any(x.shared_expert for x in layers)),
        expert_ff=hp.int("expert_feed_forward_length"),
        shared_expert_ff=hp.int("expert_shared_feed_forward_length"),
        norm_eps=hp.float("attention.layer_norm_rms_epsilon") or hp.float("attention.layer_norm_epsilon"),
        layers=layers,
        n_params=n_params,
        n_params_active=None if active is None else round(active),
        params_by_group={g: v for g, v in params_by_group.items() if v},
        bytes_by_group={g: v for g, v in bytes_by_group.items() if v},
        bytes_by_type=bytes_by_type,
        params_by_type=params_by_type,
        bytes_per_token=None if active is None else sum(read_by_group.values()),
        bytes_per_token_by_group={g: v for g, v in read_by_group.items() if v},
        kv_bytes_per_token=kv_bytes_per_token,
        state_bytes=state_bytes,
        n_mtp_layers=n_nextn,
        tied_embeddings=tied,
        unknown=(),
    )
    return _with_unknowns(card, hp)


# Card fields every language model has; None for one of these means the file does not say.
# (rope_base is not among them: llama.cpp assumes 10000 when it is absent, and some models have no RoPE.)
_EXPECTED = ("n_layers", "n_embd", "n_head", "head_dim_k", "context_length", "vocab_size")


def _with_unknowns(card: ModelCard, hp: Hparams) -> ModelCard:
    """The card with `unknown` listing each number the file does not determine."""
    names = [name for name in _EXPECTED if getattr(card, name) is None]
    if card.is_moe and card.n_experts_used is None:
        names += ["n_experts_used", "n_params_active", "bytes_per_token"]
    if card.kv_bytes_per_token["f16"] is None:
        names.append("kv_bytes_per_token")
    if card.state_bytes is None:
        names.append("state_bytes")
    if any(layer.attention == "unknown" for layer in card.layers):
        names.append("layer_kinds")
    names += hp.notes
    return ModelCard(**{**card.__dict__, "unknown": tuple(dict.fromkeys(names))})


def _vocab_size(f: GGUFFile, hp: Hparams) -> int | None:
    field_ = f.fields.get("tokenizer.ggml.tokens")
    if field_ is not None and field_.is_array:
        return field_.count
    v = hp.int("vocab_size")
    if v:
        return v
    emb = f.tensors.get("token_embd.weight")
    return emb.shape[1] if emb is not None and len(emb.shape) > 1 else None
