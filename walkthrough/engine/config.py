"""What the engine needs to know to run a file: the card's numbers plus per-architecture rules.

The model card (`walkthrough.inspect.card`) is the single source of structural
numbers (widths, heads, experts, layer kinds). This module adds only what the
card does not carry and the forward pass needs: which RoPE pairing the
architecture uses, whether routed-expert weights are renormalised, the RoPE
frequency scale, and which token ids end a generation.

Per-architecture rules follow llama.cpp (llama-cpp-python 0.3.36's vendored
source): RoPE type from `llama_model_rope_type` in `src/llama-model.cpp` (llama:
adjacent pairs, "normal"; the qwen family: halves, "NEOX"); the `norm_w`
argument each `src/models/ARCH.cpp` passes to `build_moe_ffn` (llama and
qwen3moe renormalise the top-k router weights, qwen2moe does not). Biases and
q/k norms are not listed here: a layer uses them when the file has the tensor.

Not handled (an `UnsupportedArchitecture` error says so): architectures outside
`ARCHITECTURES`, and YaRN / LongRoPE scaling (`{arch}.rope.scaling.type`).
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.engine.qwen35 import HybridDims, hybrid_dims
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard
from walkthrough.inspect.gguf import GGUFFile

# Token texts llama.cpp treats as end of generation whatever their id
# (source: `llama_vocab::impl::load`, the `special_eog_ids` list in src/llama-vocab.cpp).
END_OF_GENERATION_TEXTS = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
)
_EOG_ID_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


class UnsupportedArchitecture(WalkthroughError):
    """The engine cannot run this file (the file can still be inspected)."""


@dataclass(frozen=True)
class ArchSpec:
    """How one architecture differs from the plain llama block."""

    rope: str  # "norm": rotate adjacent pairs (x0, x1); "neox": rotate (x_i, x_{i + n_rot/2})
    moe_norm_weights: bool = False  # renormalise the top-k router weights to sum to 1
    hybrid: bool = False  # per-layer mixer kind from the card ("full" or "linear")
    attention_gate: bool = False  # full attention gates its output by sigmoid of a second query half (qwen35moe)


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": ArchSpec(rope="norm", moe_norm_weights=True),
    "qwen2": ArchSpec(rope="neox"),
    "qwen2moe": ArchSpec(rope="neox", moe_norm_weights=False),
    "qwen3": ArchSpec(rope="neox"),
    "qwen3moe": ArchSpec(rope="neox", moe_norm_weights=True),
    # Gated DeltaNet + gated full attention (walkthrough.engine.deltanet / gated_attention); its build_moe_ffn
    # call passes norm_w = true (src/models/qwen35moe.cpp).
    "qwen35moe": ArchSpec(rope="neox", moe_norm_weights=True, hybrid=True, attention_gate=True),
}


@dataclass(frozen=True)
class Config:
    """Hyperparameters of one run, each field from the card or the file's metadata."""

    arch: str
    spec: ArchSpec
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]  # per layer
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    norm_eps: float
    rope_dims: int  # n_rot: leading dims of each head that are rotated
    rope_base: float
    rope_freq_scale: float  # positions are multiplied by this (linear scaling: 1 / factor)
    n_experts: int
    n_experts_used: int
    mixers: tuple[str, ...]  # per layer: "full" (softmax attention with KV cache) or "linear"
    ffns: tuple[str, ...]  # per layer: "dense" or "moe"
    end_ids: frozenset[int]  # token ids that end a generation
    hybrid: HybridDims | None = None  # Gated DeltaNet sizes and rope sections (hybrid architectures)

    @property
    def attention_scale(self) -> float:
        return 1.0 / float(self.head_dim_k) ** 0.5

    def mixer_key(self, layer: int) -> str:
        """The `layers.MIXERS` entry that runs a layer: its kind, or "gated_full" for gated full attention."""
        kind = self.mixers[layer]
        return "gated_full" if kind == "full" and self.spec.attention_gate else kind


def end_of_generation_ids(f: GGUFFile) -> frozenset[int]:
    """Token ids that end a generation, decided as llama.cpp does.

    The EOS, EOT and EOM ids named in the metadata, plus every token whose text
    is one of `END_OF_GENERATION_TEXTS` (`<|im_end|>`, `<|endoftext|>`, ...).
    Example: the reference fixtures (eos 267 `<|im_end|>`, 265 `<|endoftext|>`) -> {265, 267}.
    """
    ids: set[int] = set()
    for key in _EOG_ID_KEYS:
        value = f.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            ids.add(value)
    tokens = f.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list):
        wanted = set(END_OF_GENERATION_TEXTS)
        ids.update(i for i, text in enumerate(tokens) if text in wanted)
    return frozenset(ids)


def _required(card: ModelCard, name: str):
    value = getattr(card, name)
    if not value:
        raise UnsupportedArchitecture(
            f"{card.architecture} file lacks {name} in its metadata; the engine cannot run it (inspect still works)"
        )
    return value


def _rope_freq_scale(f: GGUFFile, arch: str) -> float:
    scaling = f.get(f"{arch}.rope.scaling.type")
    if isinstance(scaling, str) and scaling not in ("none", "linear"):
        raise UnsupportedArchitecture(
            f"RoPE scaling {scaling!r} ({arch}.rope.scaling.type) is not implemented by the engine; "
            "only none and linear are (inspect still works)"
        )
    factor = f.get(f"{arch}.rope.scaling.factor") or f.get(f"{arch}.rope.scale_linear") or 0.0
    return 1.0 / float(factor) if factor else 1.0


def build_config(f: GGUFFile, card: ModelCard) -> Config:
    """The run configuration of an opened file.

    Raises:
        UnsupportedArchitecture: the architecture (or one of its features) is not implemented.
    """
    arch = card.architecture
    spec = ARCHITECTURES.get(arch)
    if spec is None:
        known = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedArchitecture(
            f"the engine cannot run architecture {arch!r} (it runs {known}); the file can still be inspected"
        )
    n_layers = _required(card, "n_layers")
    layers = card.layers[:n_layers]
    if spec.hybrid:
        mixers = tuple(layer.attention for layer in layers)
    else:
        mixers = ("full",) * n_layers  # llama.cpp builds every layer of these as full attention
    n_head = _required(card, "n_head")
    return Config(
        arch=arch,
        spec=spec,
        n_layers=n_layers,
        n_embd=_required(card, "n_embd"),
        n_head=n_head,
        n_head_kv=tuple(layer.n_head_kv or card.n_head_kv or n_head for layer in layers),
        head_dim_k=_required(card, "head_dim_k"),
        head_dim_v=_required(card, "head_dim_v"),
        n_vocab=_required(card, "vocab_size"),
        norm_eps=_required(card, "norm_eps"),
        rope_dims=card.rope_dims or card.head_dim_k,
        rope_base=card.rope_base or 10000.0,  # llama.cpp's default rope_freq_base_train
        rope_freq_scale=_rope_freq_scale(f, arch),
        n_experts=card.n_experts,
        n_experts_used=card.n_experts_used or 0,
        mixers=mixers,
        ffns=tuple(layer.ffn for layer in layers),
        end_ids=end_of_generation_ids(f),
        hybrid=hybrid_dims(f, card) if spec.hybrid else None,
    )
