"""Gated DeltaNet, the "linear" attention of hybrid models (qwen35moe): its operations and its layer.

A linear-attention layer keeps no KV cache. It keeps a fixed-size state in the
session's cache object (`KVCache.states[layer]`, made by
`qwen35.HybridDims.new_state`): the last K - 1 inputs of a causal convolution
("conv") and one [head_v, head_k] matrix per value head ("recurrent"). Each
token updates that matrix with the gated delta rule and reads it with its query:

    S <- S * decay                       forget a little (decay in (0, 1], one per head and token)
    delta = (v - S k) * beta             what the memory gets wrong about v, scaled by beta in (0, 1)
    S <- S + outer(delta, k)             write the correction under key k
    out = S q / sqrt(head_k)

so a prompt of any length costs the same state, and a decode pass reads that
state instead of every cached position.

The layer follows llama.cpp (vendored 0.3.36: `build_layer_attn_linear` in
src/models/qwen35moe.cpp, the recurrence of `build_delta_net_autoregressive`
in src/models/delta-net-base.cpp and of `ggml_compute_forward_gated_delta_net`
in ggml-cpu/ops.cpp):
    qkv = x Wqkv -> causal depthwise conv over the last K inputs -> SiLU -> q | k | v
    q, k L2-normalised per head; value head h reads key head h mod n_k_heads (ggml_repeat tiles the key heads)
    beta = sigmoid(x Wbeta), decay = exp(softplus(x Walpha + dt) * a)   (a < 0)
    out = RMSNorm(delta rule) * ssm_norm * SiLU(x Wgate) per head -> Wout
A pass runs the projections for all its tokens at once and the recurrence
token by token, so the result does not depend on how a prompt is chunked.

Shapes: n tokens, d model width, C conv channels, Hk / Hv key / value heads,
dk / dv their sizes, K the conv kernel.
"""

from __future__ import annotations

import numpy as np

from walkthrough.engine.glassbox import ggml_math, ops
from walkthrough.engine.glassbox.config import Config
from walkthrough.engine.glassbox.layers import PassInput
from walkthrough.engine.glassbox.qwen35 import HybridDims
from walkthrough.engine.steps import LayerTrace

STATE_FLOPS_PER_VALUE = 7  # per token: decay (1) + S k (2) + outer update (2) + S q (2) per state value


def causal_conv(x: np.ndarray, state: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal convolution continuing from a rolling state.

    Args:
        x: [n, C] new inputs.
        state: [K-1, C] the K-1 inputs before them (zeros before the first token).
        w: [C, K] one kernel per channel; w[:, K-1] weighs the current input.

    Returns:
        y [n, C] with y[t] = sum_j window[t + j] * w[:, j] over window = state then x, and the new
        state [K-1, C]: the last K-1 rows of that window.

    The sum in ggml's order (`ggml_compute_forward_ssm_conv_f32`, one term after another) and rounding as
    its compiled loop rounds: whole groups of 4 terms with each product rounded, the K % 4 left over as
    fused multiply-adds (measured against llama.cpp: lfm2's kernel of 3 matches fused products only,
    qwen35's of 4 separate ones only).
    """
    n, kernel = x.shape[0], w.shape[1]
    window = np.concatenate([state, x])  # [K-1+n, C]
    y = np.zeros_like(x)
    vector = kernel - kernel % 4  # terms the compiled loop takes 4 at a time (the docstring says why)
    for j in range(kernel):
        if j < vector:
            y = y + window[j : j + n] * w[:, j]
        else:
            y = ggml_math.fma32(window[j : j + n], w[:, j], y)
    return y, window[n:].copy()


def l2_normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """[..., dk] -> [..., dk]: x / sqrt(sum(x^2) + eps) as llama.cpp's `build_gdn_l2_norm` (src/models/models.h)
    computes it: RMS norm with eps / dk (`ggml_math.rms_scale`), then times 1 / sqrtf(dk)."""
    dk = np.float32(x.shape[-1])
    return x * ggml_math.rms_scale(x, np.float32(eps) / dk) * (np.float32(1) / np.sqrt(dk))


def softplus(x: np.ndarray, exact: bool = False) -> np.ndarray:
    """log(1 + e^x), without overflow for large x; with `exact` as ggml's `op_softplus`: x above 20, else
    logf(1 + expf(x)) (libm, one call per value)."""
    if not exact:
        return np.logaddexp(np.float32(0.0), x)
    libm = ggml_math.libm
    return np.where(x > np.float32(20), x, libm.logf(np.float32(1) + libm.expf(x)))


def delta_rule(
    state: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, decay: np.ndarray, beta: np.ndarray,
    exact: bool = False,
) -> np.ndarray:
    """Run the gated delta rule over n tokens, updating `state` in place.

    Args:
        state: [Hv, dv, dk] one memory matrix per value head (row i: value dim i).
        q: [n, Hv, dk] queries (L2-normalised, key head already chosen per value head).
        k: [n, Hv, dk] keys, likewise.
        v: [n, Hv, dv] values.
        decay: [n, Hv] factor each head's memory is multiplied by before the token writes.
        beta: [n, Hv] how much of the correction each head writes.

    Returns:
        [n, Hv, dv]: each token's read of the memory, S q / sqrt(dk), after its own write.

    With `exact`, in the order of ggml's fused kernel (`ggml_compute_forward_gated_delta_net_one_chunk`):
    S k and S q are `ggml_vec_dot_f32` per row, the write one fma per value (`ggml_vec_mad_f32`),
    the read scaled after its sum.
    """
    if exact:
        return _delta_rule_ggml(state, q, k, v, decay, beta)
    n, _, dk = q.shape
    scale = np.float32(1.0 / np.sqrt(dk))
    out = np.empty(v.shape, np.float32)
    for t in range(n):
        state *= decay[t][:, None, None]
        recalled = np.einsum("hij,hj->hi", state, k[t])  # [Hv, dv]: what the memory holds under k
        delta = (v[t] - recalled) * beta[t][:, None]  # [Hv, dv]
        state += delta[:, :, None] * k[t][:, None, :]  # outer(delta, k) per head
        out[t] = np.einsum("hij,hj->hi", state, q[t] * scale)
    return out


def _delta_rule_ggml(
    state: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, decay: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    """`delta_rule` in ggml's order of operations (see there); the same arguments and result."""
    n, _, dk = q.shape
    scale = np.float32(1) / np.sqrt(np.float32(dk))
    out = np.empty(v.shape, np.float32)
    for t in range(n):
        state *= decay[t][:, None, None]
        recalled = ggml_math.vec_dot_f32(state, k[t][:, None, :])  # [Hv, dv]
        delta = (v[t] - recalled) * beta[t][:, None]  # [Hv, dv]
        state[...] = ggml_math.fma32(k[t][:, None, :], delta[:, :, None], state)
        out[t] = ggml_math.vec_dot_f32(state, q[t][:, None, :]) * scale
    return out


def gated_deltanet(p: PassInput, layer: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """[n, d] -> [n, d]: one Gated DeltaNet layer, reading and advancing the layer's fixed state."""
    c, m, n, pre = p.config, p.meter, x.shape[0], f"blk.{layer}."
    dims: HybridDims = c.params["linear"]
    hk, hv, dk, dv = dims.n_k_heads, dims.n_v_heads, dims.head_k, dims.head_v
    state = p.cache.states[layer]
    qkv = m.look("linear_attn_qkv_mixed", layer, m.linear(pre + "attn_qkv.weight", x))  # [n, C]
    z = m.look("z", layer, m.linear(pre + "attn_gate.weight", x)).reshape(n, hv, dv)  # [n, Hv, dv] output gate
    exact = m.exact_products
    beta = m.look("beta_sigmoid", layer, ops.sigmoid(m.linear(pre + "ssm_beta.weight", x), exact))  # [n, Hv]
    alpha = m.linear(pre + "ssm_alpha.weight", x) + m.tensor(pre + "ssm_dt.bias")  # [n, Hv]
    gate = m.look("a_softplus", layer, softplus(alpha, exact)) * m.tensor(pre + "ssm_a")  # [n, Hv]
    m.look("gate", layer, gate)
    decay = ggml_math.libm.expf(gate) if exact else np.exp(gate)  # [n, Hv], ssm_a < 0 so decay in (0, 1]
    conv, state["conv"] = causal_conv(qkv, state["conv"], m.tensor(pre + "ssm_conv1d.weight"))
    mixed = m.look("conv_output_silu", layer, ops.silu(m.look("conv_output_raw", layer, conv), exact))  # [n, C]
    q = l2_normalize(mixed[:, : hk * dk].reshape(n, hk, dk), c.norm_eps)  # [n, Hk, dk]
    k = l2_normalize(mixed[:, hk * dk : 2 * hk * dk].reshape(n, hk, dk), c.norm_eps)  # [n, Hk, dk]
    v = mixed[:, 2 * hk * dk :].reshape(n, hv, dv)  # [n, Hv, dv]
    key_head = np.arange(hv) % hk  # value head h reads key head h mod Hk
    out = delta_rule(state["recurrent"], q[:, key_head], k[:, key_head], v, decay, beta, exact)  # [n, Hv, dv]
    out = ops.rmsnorm(out, m.tensor(pre + "ssm_norm.weight"), c.norm_eps)
    out = m.look("final_output", layer, out * ops.silu(z, exact))  # [n, Hv, dv]
    nbytes = p.cache.state_bytes_by_layer[layer]
    m.read_state(nbytes, n * (2 * dims.conv_kernel * dims.conv_channels + STATE_FLOPS_PER_VALUE * hv * dv * dk))
    trace.state_bytes = nbytes
    return m.look("linear_attn_out", layer, m.linear(pre + "ssm_out.weight", out.reshape(n, hv * dv)))


def new_state(config: Config, layer: int) -> dict[str, np.ndarray]:
    """A zero state for one Gated DeltaNet layer: "conv" [K - 1, C], "recurrent" [Hv, dv, dk] (`HybridDims`)."""
    return config.params["linear"].new_state()


def layer_shapes(config: Config, layer: int) -> dict[str, tuple[int, ...]]:
    """The Gated DeltaNet tensors of one layer (name after `blk.N.`) and their ggml shapes (`HybridDims`)."""
    return config.params["linear"].tensor_shapes(config.n_embd)
