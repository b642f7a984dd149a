"""The two halves of a block, built from `ops` with the weights of one layer.

A mixer moves information between positions (full attention with the KV cache;
"linear" Gated DeltaNet layers with a fixed state live in `deltanet.py`); an FFN transforms each
position (dense SwiGLU, or routed experts plus an optional shared expert).
Each function takes the pass's `Meter` (weights, bytes read, FLOPs), the layer
index, the normed input [n, d], and fills the layer's `LayerTrace`.

`MIXERS` and `FFNS` map a layer kind to its function: a new kind is one more
entry, the block in `model.py` does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from walkthrough.engine import ops
from walkthrough.engine.cache import KVCache
from walkthrough.engine.config import Config
from walkthrough.engine.meter import Meter
from walkthrough.engine.steps import LayerTrace


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


def project_qkv(
    p: PassInput, pre: str, x: np.ndarray, q_dim: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[n, d] -> q [n, h, q_dim], k [n, h_kv, hd], v [n, h_kv, hd_v] (fused or separate projections, optional biases).

    q_dim is the query width per head: hd, or more when the query projection carries extra
    values per head (qwen35moe's output gate, `gated_attention`).
    """
    c, m, n = p.config, p.meter, x.shape[0]
    layer = int(pre.split(".")[1])
    h_kv = c.n_head_kv[layer]
    q_dim = q_dim or c.head_dim_k
    if m.weights.has(pre + "attn_qkv.weight"):
        qkv = ops.linear(x, m.matrix(pre + "attn_qkv.weight", n), m.optional(pre + "attn_qkv.bias"))
        nq, nk = c.n_head * q_dim, h_kv * c.head_dim_k
        q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
    else:
        q = ops.linear(x, m.matrix(pre + "attn_q.weight", n), m.optional(pre + "attn_q.bias"))
        k = ops.linear(x, m.matrix(pre + "attn_k.weight", n), m.optional(pre + "attn_k.bias"))
        v = ops.linear(x, m.matrix(pre + "attn_v.weight", n), m.optional(pre + "attn_v.bias"))
    return (
        q.reshape(n, c.n_head, q_dim),
        k.reshape(n, h_kv, c.head_dim_k),
        v.reshape(n, h_kv, c.head_dim_v),
    )


def full_attention(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: q/k/v (+ biases), q/k RMSNorm if present, RoPE, causal GQA attention over the cache."""
    c, m, n = p.config, p.meter, x.shape[0]
    pre = f"blk.{layer}."
    q, k, v = project_qkv(p, pre, x)
    q_norm, k_norm = m.optional(pre + "attn_q_norm.weight"), m.optional(pre + "attn_k_norm.weight")
    if q_norm is not None:
        q = ops.rmsnorm(q, q_norm, c.norm_eps)
    if k_norm is not None:
        k = ops.rmsnorm(k, k_norm, c.norm_eps)
    neox = c.spec.rope == "neox"
    q, k = ops.rope(q, p.cos, p.sin, neox), ops.rope(k, p.cos, p.sin, neox)
    out = attend(p, layer, q, k, v, trace)  # [n, h, hd_v]
    o = out.reshape(n, c.n_head * c.head_dim_v)
    return ops.linear(o, m.matrix(pre + "attn_output.weight", n), m.optional(pre + "attn_output.bias"))


def attend(p: PassInput, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """Write k [n, h_kv, hd], v [n, h_kv, hd_v] to the cache, attend q [n, h, hd] over it -> [n, h, hd_v].

    Counts the cached bytes read and the attention FLOPs, and fills the trace's KV length and bytes
    (and the last token's attention weights when the pass records them).
    """
    c = p.config
    start = int(p.positions[0])
    keys, values = p.cache.write(layer, start, k, v)  # [L, h_kv, hd], [L, h_kv, hd_v]
    out, weights = ops.attention(q, keys, values, p.positions, c.attention_scale)  # [n, h, hd_v], [h, n, L]
    visible = int(np.sum(p.positions + 1))  # query-key pairs the causal mask lets through
    p.meter.read_cache(
        p.cache.layer_bytes(layer, keys.shape[0]), 2 * c.n_head * (c.head_dim_k + c.head_dim_v) * visible
    )
    trace.kv_len = keys.shape[0]
    trace.kv_bytes = p.cache.layer_bytes(layer, keys.shape[0])
    if p.record_attention:
        trace.attention = weights[:, -1, :].copy()  # [h, L] the last token's row
    return out


def dense_ffn(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: SwiGLU with the layer's ffn_gate / ffn_up / ffn_down (optional biases)."""
    m, n, pre = p.meter, x.shape[0], f"blk.{layer}."
    gate = ops.linear(x, m.matrix(pre + "ffn_gate.weight", n), m.optional(pre + "ffn_gate.bias"))
    up = ops.linear(x, m.matrix(pre + "ffn_up.weight", n), m.optional(pre + "ffn_up.bias"))
    return ops.linear(ops.silu(gate) * up, m.matrix(pre + "ffn_down.weight", n), m.optional(pre + "ffn_down.bias"))


def moe_ffn(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: softmax router, top-k experts per token (only those dequantized), shared expert if any."""
    c, m, n, pre = p.config, p.meter, x.shape[0], f"blk.{layer}."
    router = m.matrix(pre + "ffn_gate_inp.weight", n)  # [E, d]
    chosen, weights = ops.route(x @ router.T, c.n_experts_used, c.spec.moe_norm_weights)  # [n, k], [n, k]
    trace.experts, trace.expert_weights = chosen, weights
    out = np.zeros_like(x)
    names = [pre + f"ffn_{w}_exps.weight" for w in ("gate", "up", "down")]
    for e in np.unique(chosen).tolist():
        tokens, slot = np.nonzero(chosen == e)  # which tokens chose e, and in which of their k slots
        wg, wu, wd = (m.expert(name, e, len(tokens)) for name in names)
        out[tokens] += weights[tokens, slot, None] * ops.swiglu_ffn(x[tokens], wg, wu, wd)
    if m.weights.has(pre + "ffn_up_shexp.weight"):
        shared = ops.swiglu_ffn(x, m.matrix(pre + "ffn_gate_shexp.weight", n), m.matrix(pre + "ffn_up_shexp.weight", n),
                                m.matrix(pre + "ffn_down_shexp.weight", n))
        if m.weights.has(pre + "ffn_gate_inp_shexp.weight"):
            gate_w = m.matrix(pre + "ffn_gate_inp_shexp.weight", n).reshape(-1, c.n_embd)  # [1, d]
            shared = shared * ops.sigmoid(x @ gate_w.T)  # [n, 1]: one gate per token
        out += shared
    return out


Mixer = Callable[[PassInput, int, np.ndarray, LayerTrace], np.ndarray]
MIXERS: dict[str, Mixer] = {"full": full_attention}  # + "linear" (deltanet.py), "gated_full" (gated_attention.py)
FFNS: dict[str, Mixer] = {"dense": dense_ffn, "moe": moe_ffn}
