"""What the engine needs to know to run a file: the card's numbers plus the architecture's declaration.

The model card (`walkthrough.inspect.card`) is the single source of structural
numbers (widths, heads, experts, layer kinds: full, sliding-window or linear
attention, dense or MoE FFN). The architecture's declaration
(`walkthrough.architectures.declarations`) says how to run them. This module adds the few
run-time numbers neither carries: the RoPE frequency scale and the RoPE base of
sliding-window layers, the final logit soft-cap, and which token ids end a
generation. A layer kind's own hyperparameters are read by the function its
declaration names (`LayerKind.params`) and kept in `Config.params`, by kind:
nothing here names them.

Not handled (an `UnsupportedArchitecture` error says so): architectures without
a declaration, layer kinds their declaration does not list, and YaRN / LongRoPE
scaling (`{arch}.rope.scaling.type`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from walkthrough.architectures.declarations import ARCHITECTURES, Architecture, Router
from walkthrough.architectures.layer_kinds import LAYER_KINDS, resolve
from walkthrough.engine import numeric_checks
from walkthrough.engine.glassbox import ggml_math, ops
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.hparams import Hparams

# llama.cpp's default RoPE base of sliding-window layers when the file names none
# (`rope_freq_base_train_swa` in src/llama-hparams.h); some architectures default to the global base instead.
ROPE_BASE_SWA_DEFAULT = 10000.0
ROPE_BASE_DEFAULT = 10000.0  # llama.cpp's default rope_freq_base_train
# Keys that change the math when non-zero and that no declaration implements yet: llama 4 / Mistral 3
# attention temperature tuning (src/models/mistral3.cpp), a per-model attention scale (granite).
# Gemma 3n / 4 per-layer embeddings and KV caches shared between layers are not implemented either.
_UNHANDLED_KEYS = ("attention.temperature_scale", "attention.scale", "embedding_length_per_layer_input",
                   "attention.shared_kv_layers")

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
class Config:
    """Hyperparameters of one run, each field from the card, the file's metadata or the declaration."""

    arch: str
    spec: Architecture
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
    mixers: tuple[str, ...]  # per layer: "full", "sliding" (softmax attention with KV cache) or "linear"
    ffns: tuple[str, ...]  # per layer: "dense" or "moe"
    end_ids: frozenset[int]  # token ids that end a generation
    sliding_window: int = 0  # positions a "sliding" layer sees: the query's and the window - 1 before it
    rope_base_swa: float = ROPE_BASE_SWA_DEFAULT  # RoPE base of "sliding" layers
    final_softcap: float = 0.0  # logits = c tanh(logits / c) when c > 0
    router: Router = field(default_factory=Router)  # the declaration's router, with the file's settings where it reads them
    rope_yarn: ops.Yarn | None = None  # YaRN context extension (with rope_freq_scale = 1 / factor)
    rope_freq_scale_swa: float = 1.0  # freq scale of "sliding" layers (and YaRN on them when they share it)
    head_dim_k_swa: int = 0  # head sizes and rotated dims of "sliding" layers when they differ (0: as full layers)
    head_dim_v_swa: int = 0
    rope_dims_swa: int = 0
    # layer kind -> its own hyperparameters (what its declaration's `params` read), for the kinds run here;
    # e.g. "linear" -> HybridDims (Gated DeltaNet sizes), "shortconv" -> its kernel
    params: Mapping[str, Any] = field(default_factory=dict)

    def head_k(self, layer: int) -> int:
        """Key (and query) size per head of a layer: `attention.key_length`, or `key_length_swa` if it slides."""
        return (self.head_dim_k_swa or self.head_dim_k) if self.mixers[layer] == "sliding" else self.head_dim_k

    def head_v(self, layer: int) -> int:
        """Value size per head of a layer."""
        return (self.head_dim_v_swa or self.head_dim_v) if self.mixers[layer] == "sliding" else self.head_dim_v

    def n_rot(self, layer: int) -> int:
        """Rotated dims per head of a layer (`rope.dimension_count`, or `dimension_count_swa` if it slides)."""
        return (self.rope_dims_swa or self.rope_dims) if self.mixers[layer] == "sliding" else self.rope_dims

    def attention_scale(self, layer: int) -> float:
        """What q.k is multiplied by: the declaration's constant, else 1 / sqrt(key size) in float32 (as
        llama.cpp's `1.0f/sqrtf(float(n_embd_head))`), or 1 / sqrt(n_embd / n_head) (integer division) for a
        layer count the declaration names (`Architecture.width_scale_layers`: gemma3 27B)."""
        scale = self.spec.attention_scale
        if scale is not None:
            return scale
        width = self.n_embd // self.n_head if self.n_layers in self.spec.width_scale_layers else self.head_k(layer)
        return float(np.float32(1) / np.sqrt(np.float32(width)))

    @property
    def embed_scale(self) -> float:
        """What the embedding rows are multiplied by (sqrt(n_embd) for gemma, else 1)."""
        return float(self.n_embd) ** 0.5 if self.spec.embed_scale else 1.0

    def mixer_key(self, layer: int) -> str:
        """The layer kind running a layer (`architectures.layer_kinds`), as its architecture declares
        (`Architecture.mixer_kind`): "full", "gated_full", "linear", "shortconv", ..."""
        return self.spec.mixer_kind(self.mixers[layer])

    def window(self, layer: int) -> int:
        """Positions layer `layer` attends to back from each query (0: all)."""
        return self.sliding_window if self.mixers[layer] == "sliding" else 0


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
    if isinstance(scaling, str) and scaling not in ("none", "linear", "yarn"):
        raise UnsupportedArchitecture(
            f"RoPE scaling {scaling!r} ({arch}.rope.scaling.type) is not implemented by the engine; "
            "only none, linear and yarn are (inspect still works)"
        )
    factor = f.get(f"{arch}.rope.scaling.factor") or f.get(f"{arch}.rope.scale_linear") or 0.0
    return 1.0 if scaling == "none" or not factor else 1.0 / float(factor)


def _yarn_mscale(factor: np.float32, mscale: float) -> np.float32:
    """llama.cpp's get_mscale (src/llama-context.cpp): 0.1 mscale ln(factor) + 1 above a factor of 1, in float32
    one rounding per step (libllama is built without fused multiply-adds), libm's logf."""
    f32 = np.float32
    if factor <= 1:
        return f32(1)
    return f32(f32(f32(0.1) * f32(mscale)) * ggml_math.libm.logf(factor)) + f32(1)


def _yarn(hp: Hparams, spec: Architecture, card: ModelCard, freq_scale: float) -> ops.Yarn | None:
    """YaRN settings as `llama_context` derives them; None unless `rope.scaling.type` is yarn.

    The attention factor in float32, step by step as llama.cpp takes it: get_mscale(factor) (or the ratio
    `yarn_log_multiplier` sets), times 1 / (1 + 0.1 logf(factor)) to cancel the growth `rope_yarn` applies,
    times `rope.scaling.attn_factor`.
    """
    if hp.raw("rope.scaling.type") != "yarn":
        return None
    f32 = np.float32
    factor = f32(1) / f32(freq_scale)
    log_mul = (hp.float("rope.scaling.yarn_log_multiplier") or 0.0) if spec.yarn_keys else 0.0
    if log_mul:  # mscale taken as 1 (llama.cpp's note; deepseek2 aside)
        attn = _yarn_mscale(factor, 1.0) / _yarn_mscale(factor, log_mul)
    else:
        attn = _yarn_mscale(factor, 1.0)
    attn = attn * (f32(1) / (f32(1) + f32(f32(0.1) * ggml_math.libm.logf(factor))))
    betas = {"beta_fast": 32.0, "beta_slow": 1.0}
    if spec.yarn_keys:
        betas = {k: hp.float(f"rope.scaling.yarn_{k}") or v for k, v in betas.items()}
    return ops.Yarn(
        n_ctx_orig=hp.int("rope.scaling.original_context_length") or card.context_length or 0,
        attn_factor=float(attn * f32(hp.float("rope.scaling.attn_factor") or 1.0)),
        **betas,
    )


# llama.cpp's `llama_expert_gating_func_type` values (src/llama-hparams.h); 0 (none) keeps the declaration's.
_GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


def _router(hp: Hparams, router: Router) -> Router:
    """The declared router, with the file's keys where the declaration reads them."""
    if not router.from_metadata:
        return router
    norm = hp.raw("expert_weights_norm")
    return replace(
        router,
        gating=_GATING.get(hp.int("expert_gating_func") or 0, router.gating),
        normalize=bool(norm) if isinstance(norm, (bool, int)) else router.normalize,
        groups=hp.int("expert_group_count") or router.groups,
        groups_used=hp.int("expert_group_used_count") or router.groups_used,
        scale=hp.float("expert_weights_scale") or router.scale,
    )


def _kind_params(f: GGUFFile, card: ModelCard, kinds: set[str]) -> dict[str, Any]:
    """Each run kind's own hyperparameters, read by the function its declaration names (`params`)."""
    return {name: resolve(LAYER_KINDS[name].params)(f, card)
            for name in sorted(kinds) if name in LAYER_KINDS and LAYER_KINDS[name].params}


def _layer_kinds(card: ModelCard, spec: Architecture, n_layers: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Per layer, the card's mixer and FFN kinds, refused unless the declaration lists them."""
    mixers = tuple(layer.attention for layer in card.layers[:n_layers])
    ffns = tuple(layer.ffn for layer in card.layers[:n_layers])
    for i, (mixer, ffn) in enumerate(zip(mixers, ffns)):
        if mixer not in spec.mixers or ffn not in spec.ffns:
            raise UnsupportedArchitecture(
                f"layer {i} of this {spec.name} file is {mixer} attention with a {ffn} FFN, which the "
                f"{spec.name} declaration does not list ({', '.join(spec.mixers)} attention; "
                f"{', '.join(spec.ffns)} FFN); the engine cannot run it (inspect still works)"
            )
    return mixers, ffns


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
    numeric_checks.check_metadata(f, arch)  # NaN, negative or non-numeric floats: one line before anything runs
    for key in _UNHANDLED_KEYS:
        if Hparams(f, arch).float(key):
            raise UnsupportedArchitecture(f"{arch}.{key} is set in this file and the engine does not implement it "
                                          "(inspect still works)")
    n_layers = _required(card, "n_layers")
    layers = card.layers[:n_layers]
    mixers, ffns = _layer_kinds(card, spec, n_layers)
    n_head = _required(card, "n_head")
    hp = Hparams(f, arch)
    rope_base = card.rope_base or ROPE_BASE_DEFAULT
    freq_scale = _rope_freq_scale(f, arch)
    windows = [layer.sliding_window for layer in layers if layer.sliding_window]
    config = Config(
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
        rope_base=rope_base,
        rope_freq_scale=freq_scale,
        n_experts=card.n_experts,
        n_experts_used=card.n_experts_used or 0,
        mixers=mixers,
        ffns=ffns,
        end_ids=end_of_generation_ids(f),
        sliding_window=max(windows, default=0),
        rope_base_swa=hp.float("rope.freq_base_swa") or (rope_base if spec.swa_rope_global else ROPE_BASE_SWA_DEFAULT),
        final_softcap=(hp.float("final_logit_softcapping") or 0.0) if spec.softcap else 0.0,
        rope_yarn=_yarn(hp, spec, card, freq_scale),
        router=_router(hp, spec.router or Router()),
        rope_freq_scale_swa=freq_scale if spec.swa_rope_global else 1.0,
        head_dim_k_swa=hp.int("attention.key_length_swa") or 0,
        head_dim_v_swa=hp.int("attention.value_length_swa") or 0,  # llama.cpp: the full layers' sizes by default
        rope_dims_swa=hp.int("rope.dimension_count_swa") or 0,
        params=_kind_params(f, card, {spec.mixer_kind(m) for m in mixers} | set(ffns)),
    )
    numeric_checks.check_config(config, f.path.name)
    return config
