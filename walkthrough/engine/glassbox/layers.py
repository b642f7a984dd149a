"""The two halves of a block, built from `ops` with the weights of one layer.

A mixer moves information between positions (full or sliding-window attention with the KV cache;
"linear" Gated DeltaNet layers with a fixed state live in `deltanet.py`); an FFN transforms each
position (a gated FFN, or routed experts plus an optional shared expert). What varies between
architectures (q/k norms, the gate activation, the router) is read from the declaration,
`Config.spec` (`walkthrough.architectures.declarations`); which optional tensors (biases) a layer has, from the file.
Each function takes the pass's `Meter` (weights, bytes read, FLOPs), the layer
index, the normed input [n, d], and fills the layer's `LayerTrace`.

`runner(kind)` is the function of a layer kind, as `architectures.layer_kinds` declares it: a new
kind is its module and one declaration line there; the block in `model.py` does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from walkthrough.architectures.layer_kinds import LAYER_KINDS, resolve
from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.config import Config
from walkthrough.engine.glassbox.meter import Meter
from walkthrough.engine.steps import LayerTrace

GATED_NAMES = {"silu": "ffn_swiglu", "gelu": "ffn_geglu", "swiglu_oai": "ffn_swiglu_oai"}  # llama.cpp's names


@dataclass
class PassInput:
    """What every layer of one pass shares."""

    config: Config
    meter: Meter
    cache: KVCache
    positions: np.ndarray  # [n] absolute positions of this pass's tokens
    cos: np.ndarray  # [n, n_rot/2] RoPE angles of those positions
    sin: np.ndarray
    record_attention: bool
    cos_swa: np.ndarray | None = None  # [n, n_rot/2] the angles at the sliding layers' RoPE base
    sin_swa: np.ndarray | None = None
    attention_rows: bool = False  # keep every row of the attention weights, not only the last token's

    def angles(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) [n, n_rot/2] of one layer: sliding-window layers may turn at their own base."""
        if self.config.mixers[layer] == "sliding" and self.cos_swa is not None:
            return self.cos_swa, self.sin_swa
        return self.cos, self.sin


def project_qkv(
    p: PassInput, pre: str, x: np.ndarray, q_dim: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[n, d] -> q [n, h, q_dim], k [n, h_kv, hd], v [n, h_kv, hd_v] (fused or separate projections, optional biases).

    q_dim is the query width per head: hd, or more when the query projection carries extra
    values per head (qwen35moe's output gate, `gated_attention`). Where the declaration allows it and the
    layer has no `attn_v`, the values are the keys' projection (gemma4).
    """
    c, m, n = p.config, p.meter, x.shape[0]
    layer = int(pre.split(".")[1])
    h_kv, hd, hd_v = c.n_head_kv[layer], c.head_k(layer), c.head_v(layer)
    q_dim = q_dim or hd
    if m.weights.has(pre + "attn_qkv.weight"):
        qkv = m.linear(pre + "attn_qkv.weight", x, pre + "attn_qkv.bias")
        nq, nk = c.n_head * q_dim, h_kv * hd
        q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
    else:
        has_v = not c.spec.v_from_k or m.weights.has(pre + "attn_v.weight")
        parts = "qkv" if has_v else "qk"
        q, k, *rest = m.linears([pre + f"attn_{part}.weight" for part in parts], x,
                                [pre + f"attn_{part}.bias" for part in parts])
        v = rest[0] if has_v else k
    return q.reshape(n, c.n_head, q_dim), k.reshape(n, h_kv, hd), v.reshape(n, h_kv, hd_v)


def full_attention(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: q/k/v (+ biases), q/k RMSNorm if declared, RoPE, causal GQA attention over the cache.

    Sliding-window layers run the same way, seeing only the last `Config.sliding_window` positions
    and turning at their own RoPE base (`PassInput.angles`).
    """
    c, m, n = p.config, p.meter, x.shape[0]
    pre = f"blk.{layer}."
    q, k, v = (m.look(name, layer, a) for name, a in zip(("Qcur", "Kcur", "Vcur"), project_qkv(p, pre, x)))
    q_norm, k_norm = ((m.tensor if c.spec.qk_norm else m.optional)(f"{pre}attn_{x}_norm.weight") for x in "qk")
    if q_norm is not None:  # required where the declaration says so, else used when the file has them (glm4moe)
        q = ops.rmsnorm(q, q_norm, c.norm_eps)
    if k_norm is not None:
        k = ops.rmsnorm(k, k_norm, c.norm_eps)
    if c.spec.v_norm:
        v = ops.rmsnorm(v, np.float32(1), c.norm_eps)  # no weight (gemma4)
    every = c.spec.no_rope_every
    if not (every and (layer + 1) % every == 0):  # NoPE layers see positions only through the causal mask
        neox = c.spec.rope == "neox"
        cos, sin = p.angles(layer)
        q, k = ops.rope_qk(q, k, cos, sin, neox, exact=m.exact_elementwise)
        q, k = m.look("Qcur", layer, q), m.look("Kcur", layer, k)
    if c.spec.scale_q:
        q = q * np.float32(c.attention_scale(layer))
    out = attend(p, layer, q, k, v, trace).reshape(n, -1)  # [n, h * hd_v]
    return m.linear(pre + "attn_output.weight", out, pre + "attn_output.bias")


def attend(p: PassInput, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """Write k [n, h_kv, hd], v [n, h_kv, hd_v] to the cache, attend q [n, h, hd] over it -> [n, h, hd_v].

    Counts the cached bytes read and the attention FLOPs, and fills the trace's KV length and bytes
    (and the last token's attention weights, or every row of them, when the pass records them). With a
    quantized cache q, k and v turn as llama.cpp turns them before the cache stores them, and the output turns
    back (`KVCache.rotation`); the probe sees "kqv_out" before that, as llama.cpp's graph names it.
    """
    c = p.config
    start = int(p.positions[0])
    turn_k, turn_v = p.cache.rotation(layer)  # llama.cpp's rotations for a quantized cache
    if turn_k:
        q, k = ops.hadamard_rows(q, turn_k), ops.hadamard_rows(k, turn_k)
    if turn_v:
        v = ops.hadamard_rows(v, turn_v)
    keys, values = p.cache.write(layer, start, k, v)  # [L, h_kv, hd], [L, h_kv, hd_v]
    # llama.cpp's CPU backend rounds q and the attention weights to F16 against an F16 cache.
    fmt = "f16" if p.cache.cache_type == "f16" and p.meter.match_llama_cpp else "f32"
    window = c.window(layer)
    sinks = p.meter.tensor(f"blk.{layer}.attn_sinks.weight") if c.spec.sinks else None  # [h]
    probe = None if p.meter.probe is None else lambda name, a: p.meter.look(name, layer, a)
    out, weights = ops.attention(
        q, keys, values, p.positions, 1.0 if c.spec.scale_q else c.attention_scale(layer), fmt, window=window,
        sinks=sinks, probe=probe,
        exact=p.meter.exact_products, exact_softmax=p.meter.exact_elementwise, flash=p.cache.flash_attention,
        cache_type=p.cache.cache_type,
    )  # [n, h, hd_v], [h, n, L]
    p.meter.wrote(weights, out)  # scores and weights are the same size; the weights are what attention keeps
    seen = p.positions + 1 if not window else np.minimum(p.positions + 1, window)
    visible = int(np.add.reduce(seen))  # query-key pairs the causal (and window) mask lets through
    p.meter.read_cache(
        p.cache.layer_bytes(layer, keys.shape[0]), 2 * c.n_head * (c.head_k(layer) + c.head_v(layer)) * visible
    )
    trace.kv_len = keys.shape[0]
    trace.kv_bytes = p.cache.layer_bytes(layer, keys.shape[0])
    if p.record_attention:
        trace.attention = weights[:, -1, :].copy()  # [h, L] the last token's row
    if p.attention_rows:
        trace.attention_rows = weights.copy()  # [h, n, L] every query of the pass over every cached key
        trace.queries = ops.round_activations(q, fmt).astype(np.float32)  # [n, h, hd] as the products saw them
        trace.keys = keys[start:].copy()  # [n, h_kv, hd] as the cache stores them
        trace.score_scale = 1.0 if c.spec.scale_q else c.attention_scale(layer)
    p.meter.look("kqv_out", layer, out.reshape(out.shape[0], -1))  # (as llama.cpp names it: before the turn back)
    return ops.hadamard_rows(out, turn_v) if turn_v else out  # the values' rotation undone


def dense_ffn(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: down(act(gate(x)) * up(x)) with the declared activation (optional biases).

    With a fused up projection (phi3) `ffn_up` yields [gate | up] and there is no `ffn_gate`.
    """
    c, m, pre = p.config, p.meter, f"blk.{layer}."
    if c.spec.fused_up:
        gate_up = m.linear(pre + "ffn_up.weight", x, pre + "ffn_up.bias")  # [n, 2 ff]
        gate, up = np.split(gate_up, 2, axis=-1)
    else:
        gate, up = m.linears([pre + "ffn_gate.weight", pre + "ffn_up.weight"], x, [pre + "ffn_gate.bias", pre + "ffn_up.bias"])
        gate, up = m.look("ffn_gate", layer, gate), m.look("ffn_up", layer, up)
    act = m.look(GATED_NAMES[c.spec.activation], layer, ops.gated_unit(c.spec.activation, m.exact_products)(gate, up))  # [n, ff]
    return m.linear(pre + "ffn_down.weight", act, pre + "ffn_down.bias")


def moe_ffn(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: router, top-k experts per token (only those dequantized), shared expert if any."""
    c, m, pre = p.config, p.meter, f"blk.{layer}."
    router_logits = m.linear(pre + "ffn_gate_inp.weight", x, pre + "ffn_gate_inp.bias")  # [n, E]
    biased = m.weights.has(pre + "ffn_gate_inp.bias")  # llama.cpp names the sum apart (gpt-oss)
    m.look("ffn_moe_logits_biased" if biased else "ffn_moe_logits", layer, router_logits)
    act = ops.gated_unit(c.spec.activation, m.exact_products)
    r = c.router
    chosen, weights = ops.route(
        router_logits, c.n_experts_used, r.normalize, r.gating, bias=m.optional(pre + "exp_probs_b.bias"),
        groups=r.groups, groups_used=r.groups_used, scale=r.scale, exact=m.exact_products,
    )  # [n, k], [n, k]
    trace.experts, trace.expert_weights = chosen, weights
    by_slot = np.zeros((*chosen.shape, x.shape[1]), np.float32)  # [n, k, d]: each token's weighted experts
    gate, up, down = (pre + f"ffn_{w}_exps" for w in ("gate", "up", "down"))

    def expert(name: str, e: int, xe: np.ndarray) -> np.ndarray:  # [t, d_in] -> [t, d_out], + bias if any
        y = m.expert_linear(name + ".weight", e, xe)
        return y + m.expert_bias(name + ".bias", e) if m.weights.has(name + ".bias") else y

    for e in np.unique(chosen).tolist():
        tokens, slot = np.nonzero(chosen == e)  # which tokens chose e, and in which of their k slots
        xe = x[tokens]  # [t, d]
        h = act(expert(gate, e, xe), expert(up, e, xe))  # [t, ff_exp]
        by_slot[tokens, slot] = expert(down, e, h) * weights[tokens, slot, None]
    out = by_slot[:, 0].copy()  # [n, d]: added slot by slot, best first, as llama.cpp's graph adds them
    for j in range(1, chosen.shape[1]):
        out += by_slot[:, j]
    m.look("ffn_moe_out", layer, out)
    if m.weights.has(pre + "ffn_up_shexp.weight"):
        h = act(m.linear(pre + "ffn_gate_shexp.weight", x), m.linear(pre + "ffn_up_shexp.weight", x))
        shared = m.look("ffn_shexp", layer, m.linear(pre + "ffn_down_shexp.weight", h))  # [n, d]
        if m.weights.has(pre + "ffn_gate_inp_shexp.weight"):
            logit = m.linear(pre + "ffn_gate_inp_shexp.weight", x)  # [n, 1]: a gate per token
            if r.shared_gate == "silu_ratio":
                gate = ops.silu(logit, m.exact_products) / logit
            else:
                gate = ops.sigmoid(logit, m.exact_products)
            shared = shared * gate
        out += shared
    return out


Mixer = Callable[[PassInput, int, np.ndarray, LayerTrace], np.ndarray]


@cache
def runner(kind: str) -> Mixer:
    """The function running a layer kind (a mixer's `Config.mixer_key`, or an FFN kind), imported once."""
    return resolve(LAYER_KINDS[kind].forward)
