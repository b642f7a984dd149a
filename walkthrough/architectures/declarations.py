"""Each architecture the engine runs, declared once: the tensors it has and the recipe of its block.

A declaration (`Architecture`) names, with gguf-py's `MODEL_TENSOR` / `TENSOR_NAMES`:
- the tensors outside the blocks (`tensors`) and those of every block (`block`: its norms);
- per kind of mixer ("full", "sliding", "linear") and of FFN ("dense", "moe"), the tensors that kind reads;
and the block recipe: which norm sits where (pre-norm, or gemma's sandwich with post-norms), the FFN's
gate activation, the embedding scale, q/k norms, the attention output gate, attention sinks, the router.
Which kind each layer is comes from the model card (`walkthrough.inspect.card`), which reads the same
declaration to classify a layer's FFN; the engine runs the layer with the kind's function
(declared in `architectures.layer_kinds`), and `validate.check_tensors` refuses a file holding a tensor the
declaration does not list: a tensor the recipe would skip would give wrong logits without a word.

This module is plain data (no numpy, no file access), so the card can read it for any file.
Adding an architecture is one more entry in `ARCHITECTURES` (plus, for a genuinely new operation,
one function in `ops.py`). Facts come from llama.cpp (vendored in llama-cpp-python 0.3.36):
`src/models/ARCH.cpp` for the tensors and the graph, `llama_model_rope_type` in `src/llama-model.cpp`
for the RoPE pairing.

Example: ARCHITECTURES["qwen3"].layer_tensors("full", "dense").required ->
("attn_norm.weight", "ffn_norm.weight", "attn_q.weight", ..., "attn_q_norm.weight", ..., "ffn_down.weight")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gguf.constants import MODEL_TENSOR as T
from gguf.constants import TENSOR_NAMES

_BLOCK_PREFIX = "blk.{bid}."


def stem(t: T) -> str:
    """gguf-py's name of a tensor without the `blk.{bid}.` prefix (ATTN_Q -> "attn_q")."""
    return TENSOR_NAMES[t].removeprefix(_BLOCK_PREFIX)


def w(*tensors: T) -> tuple[str, ...]:
    """File names of weights: (ATTN_Q, ATTN_K) -> ("attn_q.weight", "attn_k.weight")."""
    return tuple(f"{stem(t)}.weight" for t in tensors)


def b(*tensors: T) -> tuple[str, ...]:
    """File names of biases: (ATTN_Q,) -> ("attn_q.bias",)."""
    return tuple(f"{stem(t)}.bias" for t in tensors)


@dataclass(frozen=True)
class Tensors:
    """Tensor names (after `blk.N.` inside a block): all of `required`, any of `optional`,
    and for each group in `one_of` exactly one of its alternatives, whole (fused or separate q/k/v)."""

    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    one_of: tuple[tuple[tuple[str, ...], ...], ...] = ()

    def __add__(self, other: Tensors) -> Tensors:
        return Tensors(self.required + other.required, self.optional + other.optional, self.one_of + other.one_of)

    @property
    def names(self) -> frozenset[str]:
        """Every name this declares."""
        alternatives = (name for group in self.one_of for alt in group for name in alt)
        return frozenset((*self.required, *self.optional, *alternatives))

    def seen_in(self, names: set[str] | frozenset[str]) -> bool:
        """Whether a layer with these tensor names has this part: any of its required tensors
        (a part missing some is still that part, and the engine's check names what is missing)."""
        return any(n in names for n in self.required) or any(
            n in names for group in self.one_of for alt in group for n in alt)


@dataclass(frozen=True)
class Router:
    """How an MoE layer weighs its experts (`build_moe_ffn` in src/llama-graph.cpp).

    gating "softmax": softmax over all experts, take the top k; "sigmoid": a sigmoid per expert (glm4moe);
    "softmax_weight" (gpt-oss): take the top k logits, softmax over those k. normalize: divide the k weights
    by their sum. groups / groups_used: expert groups (`expert_group_count` / `expert_group_used_count`).
    scale: multiplies the weights (0: none). With `from_metadata`, the file's `expert_weights_norm`,
    `expert_weights_scale`, `expert_gating_func` and group counts replace these where present.
    shared_gate: how a gated shared expert's gate is squashed: "sigmoid" (`ggml_sigmoid`), or "silu_ratio",
    silu(x) / x, the same function as qwen2moe's graph computes it (src/models/qwen2moe.cpp).
    """

    gating: str = "softmax"
    normalize: bool = False
    groups: int = 1
    groups_used: int = 1
    scale: float = 0.0
    from_metadata: bool = False
    shared_gate: str = "sigmoid"


@dataclass(frozen=True)
class Architecture:
    """One architecture: its tensors and its block recipe."""

    name: str
    rope: str  # "norm": rotate adjacent pairs (x0, x1); "neox": rotate (x_i, x_{i + n_rot/2})
    block: Tensors  # in every block (its norms)
    mixers: Mapping[str, Tensors]  # layer kind ("full", "sliding", "linear") -> the tensors it reads
    ffns: Mapping[str, Tensors]  # FFN kind ("dense", "moe") -> the tensors it reads
    tensors: Tensors = field(default_factory=lambda: GLOBALS)  # outside the blocks
    output_norm: str = "output_norm.weight"  # the norm before the output head (lfm2 names it token_embd_norm)
    # the layer kind running a "linear" layer (`layer_kinds`): Gated DeltaNet, "shortconv" (lfm2), ...
    linear_kind: str = "deltanet"
    attn_norm: str = "attn_norm.weight"  # RMSNorm before the mixer
    ffn_norm: str = "ffn_norm.weight"  # RMSNorm before the FFN
    attn_post_norm: str | None = None  # RMSNorm of the mixer's output before the residual add (gemma)
    ffn_post_norm: str | None = None  # RMSNorm of the FFN's output before the residual add (gemma)
    activation: str = "silu"  # gate activation of the FFN: "silu" (SwiGLU), "gelu" (GeGLU, tanh approximation)
    fused_up: bool = False  # ffn_up holds gate then up ([2 x ff] outputs) and there is no ffn_gate (phi3)
    embed_scale: bool = False  # embeddings times sqrt(n_embd) (gemma)
    qk_norm: bool = False  # RMSNorm of q and k per head, before RoPE
    attention_gate: bool = False  # the query projection carries an output gate per head (qwen35)
    router: Router | None = None
    no_rope_every: int = 0  # if n > 0, layers i with (i + 1) % n == 0 skip RoPE (smollm3's NoPE layers)
    swa_rope_global: bool = False  # sliding layers default to the global RoPE base and scaling (gpt-oss)
    attention_scale: float | None = None  # q.k multiplier when not 1/sqrt(key size) (gemma4: 1)
    # with this many layers, q.k is multiplied by 1/sqrt(n_embd / n_head) instead (the model size llama.cpp
    # infers from the layer count: gemma3's 27B, 62 layers, src/models/gemma3.cpp `load_arch_hparams`)
    width_scale_layers: tuple[int, ...] = ()
    scale_q: bool = False  # the scale multiplies q (after RoPE), not q.k: llama.cpp's order (gemma3, phi3)
    v_from_k: bool = False  # a layer without `attn_v` uses the key projection as values (gemma4)
    v_norm: bool = False  # values RMS-normalised per head without a weight (gemma4)
    swa_rope_factors: bool = True  # sliding layers use `rope_freqs` too (gemma4: full layers only)
    yarn_keys: bool = False  # reads `rope.scaling.yarn_beta_fast/slow` and `yarn_log_multiplier` (mistral3)
    sinks: bool = False  # one learned logit per head joins every softmax (`attn_sinks`, gpt-oss)
    softcap: bool = False  # logits = c tanh(logits / c) with c = `{arch}.final_logit_softcapping` when present
    notes: str = ""  # how the recipe differs from llama's, one line, for docs/architectures.md and the card

    @property
    def names(self) -> frozenset[str]:
        """Every tensor name (inside a block, after `blk.N.`) any layer kind may have."""
        out = self.block.names
        for part in (*self.mixers.values(), *self.ffns.values()):
            out |= part.names
        return out

    def layer_tensors(self, mixer: str, ffn: str) -> Tensors:
        """The tensors of one layer of these kinds."""
        return self.block + self.mixers[mixer] + self.ffns[ffn]

    def mixer_kind(self, card_kind: str) -> str:
        """The layer kind (`layer_kinds.LAYER_KINDS`) running a layer the card calls `card_kind`.

        Example: qwen35's "full" -> "gated_full" and "linear" -> "linear" (Gated DeltaNet); lfm2's
        "linear" -> "shortconv"; llama's "full" -> "full".
        """
        if card_kind == "linear":
            return "linear" if self.linear_kind == "deltanet" else self.linear_kind
        return "gated_full" if card_kind == "full" and self.attention_gate else card_kind

    def ffn_kind(self, names: set[str] | frozenset[str]) -> str | None:
        """The declared FFN kind whose tensors a layer holds, or None."""
        return next((kind for kind, part in self.ffns.items() if part.seen_in(names)), None)


GLOBALS = Tensors(required=w(T.TOKEN_EMBD, T.OUTPUT_NORM), optional=w(T.OUTPUT))  # no output: tied embeddings
GLOBALS_ROPE = GLOBALS + Tensors(optional=w(T.ROPE_FREQS))  # llama 3 long-context frequency factors

PRE_NORMS = Tensors(required=w(T.ATTN_NORM, T.FFN_NORM))
ATTENTION = Tensors(required=w(T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT))
ATTENTION_FUSED_OR_NOT = Tensors(  # q, k, v as one projection or three (phi3)
    required=w(T.ATTN_OUT), one_of=((w(T.ATTN_Q, T.ATTN_K, T.ATTN_V), w(T.ATTN_QKV)),))
ATTENTION_BIASES = Tensors(optional=b(T.ATTN_Q, T.ATTN_K, T.ATTN_V, T.ATTN_OUT))
QK_NORM = Tensors(required=w(T.ATTN_Q_NORM, T.ATTN_K_NORM))
DENSE = Tensors(required=w(T.FFN_GATE, T.FFN_UP, T.FFN_DOWN))
DENSE_BIASES = Tensors(optional=b(T.FFN_GATE, T.FFN_UP, T.FFN_DOWN))
EXPERTS = Tensors(required=w(T.FFN_GATE_INP, T.FFN_GATE_EXP, T.FFN_UP_EXP, T.FFN_DOWN_EXP))
SHARED_EXPERT = Tensors(optional=w(T.FFN_GATE_SHEXP, T.FFN_UP_SHEXP, T.FFN_DOWN_SHEXP, T.FFN_GATE_INP_SHEXP))
GATED_DELTANET = Tensors(  # qwen35 linear-attention layers (walkthrough.engine.glassbox.deltanet)
    required=(*w(T.ATTN_QKV, T.ATTN_GATE, T.SSM_CONV1D, T.SSM_BETA, T.SSM_ALPHA, T.SSM_NORM, T.SSM_OUT),
              *b(T.SSM_DT), stem(T.SSM_A)),
)
QWEN35_BLOCK = Tensors(required=w(T.ATTN_NORM, T.ATTN_POST_NORM))  # post_attention_norm: the norm before the FFN

EXPERT_BIASES = Tensors(required=b(T.FFN_GATE_INP, T.FFN_GATE_EXP, T.FFN_UP_EXP, T.FFN_DOWN_EXP))
SINKS = Tensors(required=(*w(T.ATTN_SINKS), *b(T.ATTN_OUT)), optional=b(T.ATTN_Q, T.ATTN_K, T.ATTN_V))
GLM_EXPERTS = EXPERTS + Tensors(required=b(T.FFN_EXP_PROBS_B)) + Tensors(optional=w(T.FFN_GATE_SHEXP, T.FFN_UP_SHEXP,
                                                                             T.FFN_DOWN_SHEXP))
SHORTCONV = Tensors(required=w(T.SHORTCONV_CONV, T.SHORTCONV_INPROJ, T.SHORTCONV_OUTPROJ))
SANDWICH = Tensors(required=w(T.ATTN_NORM, T.ATTN_POST_NORM, T.FFN_NORM, T.FFN_POST_NORM))  # gemma
GEMMA4_ATTENTION = Tensors(required=w(T.ATTN_Q, T.ATTN_K, T.ATTN_OUT, T.ATTN_Q_NORM, T.ATTN_K_NORM),
                           optional=w(T.ATTN_V))
FUSED_UP = Tensors(required=w(T.FFN_UP, T.FFN_DOWN))  # ffn_up yields gate | up (phi3)


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture(
            "llama", rope="norm", tensors=GLOBALS_ROPE, block=PRE_NORMS,
            mixers={"full": ATTENTION + ATTENTION_BIASES},
            ffns={"dense": DENSE + DENSE_BIASES, "moe": EXPERTS},
            router=Router(normalize=True),
        ),
        Architecture(
            "qwen2", rope="neox", tensors=GLOBALS_ROPE, block=PRE_NORMS,
            mixers={"full": ATTENTION + ATTENTION_BIASES}, ffns={"dense": DENSE},
        ),
        Architecture(
            "qwen2moe", rope="neox", block=PRE_NORMS,
            mixers={"full": ATTENTION + ATTENTION_BIASES}, ffns={"moe": EXPERTS + SHARED_EXPERT},
            router=Router(normalize=False, shared_gate="silu_ratio"),
        ),
        Architecture(
            "qwen3", rope="neox", tensors=GLOBALS_ROPE, block=PRE_NORMS,
            mixers={"full": ATTENTION + QK_NORM}, ffns={"dense": DENSE}, qk_norm=True,
        ),
        Architecture(
            "qwen3moe", rope="neox", block=PRE_NORMS,
            mixers={"full": ATTENTION + QK_NORM}, ffns={"moe": EXPERTS}, qk_norm=True,
            router=Router(normalize=True),
        ),
        # Gated DeltaNet + gated full attention; build_moe_ffn(..., norm_w = true) (src/models/qwen35moe.cpp).
        Architecture(
            "qwen35moe", rope="neox", block=QWEN35_BLOCK, ffn_norm="post_attention_norm.weight",
            mixers={"full": ATTENTION + QK_NORM, "linear": GATED_DELTANET},
            ffns={"moe": EXPERTS + SHARED_EXPERT}, qk_norm=True, attention_gate=True,
            router=Router(normalize=True),
        ),
        # qwen35moe's block with a dense SwiGLU FFN (src/models/qwen35.cpp).
        Architecture(
            "qwen35", rope="neox", block=QWEN35_BLOCK, ffn_norm="post_attention_norm.weight",
            mixers={"full": ATTENTION + QK_NORM, "linear": GATED_DELTANET},
            ffns={"dense": DENSE}, qk_norm=True, attention_gate=True,
        ),
        # src/models/gemma3.cpp: embeddings x sqrt(n_embd); q/k norms; post-norms after attention and FFN;
        # GeGLU; five sliding-window layers (own RoPE base, `rope.freq_base_swa`, default 10000) per global
        # one; optional final logit soft-capping.
        Architecture(
            "gemma3", rope="neox", block=SANDWICH,
            mixers={"full": ATTENTION + QK_NORM, "sliding": ATTENTION + QK_NORM}, ffns={"dense": DENSE},
            attn_post_norm="post_attention_norm.weight", ffn_post_norm="post_ffw_norm.weight",
            activation="gelu", embed_scale=True, qk_norm=True, softcap=True, scale_q=True,
            width_scale_layers=(62,),
        ),
        # src/models/gemma4.cpp (text, without per-layer embeddings or shared KV caches): gemma3's sandwich,
        # GeGLU, embedding scale and soft-cap; attention scale 1 with q/k norms and values RMS-normalised
        # without a weight; values from the key projection where a layer has no attn_v; sliding layers with
        # their own head size, rotated dims and RoPE base (the pattern is a per-layer array in the file);
        # `rope_freqs` (proportional RoPE) on full layers only; an optional output scale per layer.
        Architecture(
            "gemma4", rope="neox", tensors=GLOBALS_ROPE, block=SANDWICH + Tensors(optional=w(T.LAYER_OUT_SCALE)),
            mixers={"full": GEMMA4_ATTENTION, "sliding": GEMMA4_ATTENTION}, ffns={"dense": DENSE},
            attn_post_norm="post_attention_norm.weight", ffn_post_norm="post_ffw_norm.weight",
            activation="gelu", embed_scale=True, qk_norm=True, softcap=True, attention_scale=1.0,
            v_from_k=True, v_norm=True, swa_rope_factors=False,
        ),
        # src/models/phi3.cpp: q/k/v fused or not, gate and up in one projection; llama.cpp runs phi3's
        # sliding window as full attention ("Phi SWA is currently disabled"), so the card shows full layers.
        Architecture(
            "phi3", rope="neox", block=PRE_NORMS, mixers={"full": ATTENTION_FUSED_OR_NOT + ATTENTION_BIASES},
            ffns={"dense": FUSED_UP}, fused_up=True, scale_q=True,
        ),
        # src/models/mistral3.cpp: llama's block (dense or routed experts, optional biases).
        Architecture(
            "mistral3", rope="norm", tensors=GLOBALS_ROPE, block=PRE_NORMS,
            mixers={"full": ATTENTION + Tensors(optional=b(T.ATTN_OUT))},
            ffns={"dense": DENSE + DENSE_BIASES, "moe": EXPERTS}, router=Router(normalize=True), yarn_keys=True,
        ),
        # src/models/glm4-moe.cpp: optional q/k norms, q/k/v biases, partial rotary; leading dense layers, then
        # sigmoid-gated experts chosen with a bias (`exp_probs_b`), weights renormalised and scaled as the file
        # says (`expert_weights_norm`, `expert_weights_scale`), plus an ungated shared expert.
        Architecture(
            "glm4moe", rope="neox", block=QWEN35_BLOCK, ffn_norm="post_attention_norm.weight",
            mixers={"full": ATTENTION + ATTENTION_BIASES + Tensors(optional=w(T.ATTN_Q_NORM, T.ATTN_K_NORM))},
            ffns={"dense": DENSE, "moe": GLM_EXPERTS}, router=Router(gating="sigmoid", from_metadata=True),
        ),
        # src/models/lfm2.cpp: layers without KV heads are gated short convolutions (walkthrough.engine.glassbox.shortconv),
        # the others attention with q/k norms; the final norm is stored as token_embd_norm.
        Architecture(
            "lfm2", rope="neox", tensors=Tensors(required=w(T.TOKEN_EMBD, T.TOKEN_EMBD_NORM), optional=w(T.OUTPUT)),
            block=PRE_NORMS, mixers={"full": ATTENTION + QK_NORM, "linear": SHORTCONV}, ffns={"dense": DENSE},
            qk_norm=True, output_norm="token_embd_norm.weight", linear_kind="shortconv",
        ),
        # src/models/smollm3.cpp: llama's block; every 4th layer has no RoPE (n_no_rope_layer_step = 4).
        Architecture(
            "smollm3", rope="norm", tensors=GLOBALS_ROPE, block=PRE_NORMS, mixers={"full": ATTENTION},
            ffns={"dense": DENSE}, no_rope_every=4,
        ),
        # src/models/openai-moe.cpp: alternating sliding-window (even layers) and full attention, both with
        # attention sinks and biases; the sliding layers' RoPE base defaults to the global one; routed experts
        # only (MXFP4 in published files), router with a bias, top-k logits then softmax, clamped SwiGLU with
        # biases; post_attention_norm is the norm before the FFN.
        Architecture(
            "gpt-oss", rope="neox", block=QWEN35_BLOCK, ffn_norm="post_attention_norm.weight",
            mixers={"full": ATTENTION + SINKS, "sliding": ATTENTION + SINKS},
            ffns={"moe": EXPERTS + EXPERT_BIASES}, activation="swiglu_oai", sinks=True, swa_rope_global=True,
            router=Router(gating="softmax_weight"),
        ),
    )
}


def declared(arch: str) -> Architecture | None:
    """The declaration of an architecture, None when the engine does not run it."""
    return ARCHITECTURES.get(arch)
