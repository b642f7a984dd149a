"""The numeric operations of a transformer block, one plain numpy function each.

Every function takes and returns float32 arrays; none reads a file or keeps
state. Shapes are in the comments: n = tokens in this pass, d = model width,
h = heads, hd = head size, L = positions in the KV cache, E = experts.
Conventions follow llama.cpp's ggml kernels where the numbers depend on them
(RMSNorm without mean subtraction, RoPE pairings, GQA head sharing, causal
mask by position, top-k routing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType

from walkthrough.engine.glassbox import ggml_math, lane_products, quantdot
from walkthrough.engine.glassbox.activations import round_activations

# llama.cpp clamps the sum of the routed weights before dividing (smallest normal F16),
# see `build_moe_ffn` in src/llama-graph.cpp.
MOE_WEIGHT_SUM_MIN = 6.103515625e-5


ROW_SLAB = 64  # rows of a matrix `linear` takes at a time in a pass of several tokens
LANE_ROWS = 48  # passes of at least this many rows take `lane_products` where the machine allows (from about 48 to
# 64 rows they are the faster, measured here)


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
           lanes: lane_products.HeldLanes | None = None) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T (+ [d_out]) -> [n, d_out] float32, each row's result independent of n.

    BLAS picks its summation order by the shape of the product, so one product of n rows gives a
    row slightly different numbers for different n (and llama.cpp's 8-bit rounding of the next
    product's input turns such differences into whole steps). So a float32 matrix multiplies each
    row on its own (the matrix-vector product a decode pass makes anyway; prefill pays for it), and
    a float64 one (an F32 file's matrix, `Meter.product_dtype`) sums in float64, all but exactly,
    rounding once. Either way prefill logits are the same, bit for bit, for every chunk size.

    A pass of several rows takes the float32 matrix ROW_SLAB of its rows at a time, every input row
    against one slab before the next (the slab stays in the processor's cache instead of the whole
    matrix being reread per row): a matrix-vector product gives each output the same sum whatever
    rows of the matrix it is handed with (measured with OpenBLAS: identical bits, save the last
    rows of a matrix whose height is no multiple of its row group, which stay last), so only the
    speed changes. A pass of LANE_ROWS rows or more gets the same bits from matrix-matrix products
    where this machine's BLAS allows it (`lane_products`: about 40% faster here), with the lane copies of the
    matrix `lanes` keeps, if given (`lane_products.linear`'s `held`).
    """
    if w.dtype == np.float64:
        y = (x.astype(np.float64) @ w.T).astype(np.float32)
    elif x.shape[0] >= LANE_ROWS and w.shape[0] > ROW_SLAB:
        y = lane_products.linear(x, w, by_row_slabs, lanes)
    else:
        y = by_row_slabs(x, w)
    return y + b if b is not None else y


def by_row_slabs(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[n, d_in] @ [d_out, d_in].T -> [n, d_out] float32, every row its own matrix-vector product, ROW_SLAB rows of
    the matrix at a time (see `linear`)."""
    if x.shape[0] == 1 or w.shape[0] <= ROW_SLAB:
        return np.matmul(x[:, None, :], w.T)[:, 0]  # [n, d_out]
    return np.concatenate([np.matmul(x[:, None, :], w[o : o + ROW_SLAB].T)[:, 0]
                           for o in range(0, w.shape[0], ROW_SLAB)], axis=1)  # [n, d_out]


# The widest group of outputs BLAS's "N" matrix-vector kernel takes at once: a column count no multiple of it leaves
# a partial group at the matrix's start, whose outputs sum differently (measured with OpenBLAS's Haswell kernel),
# so every matrix held by columns is padded with zero columns to a whole number of groups (`Weights.columns`).
COLUMN_GROUP = 16
COLUMNS_RATIO = 4  # a matrix with this many times more outputs than inputs is held by columns (`tall`)
COLUMN_SLAB_BYTES = 1 << 18  # about the bytes of a matrix held by columns `linear_columns` takes at a time


def column_slab(d_in: int) -> int:
    """Columns of a matrix of d_in inputs held by columns that `linear_columns` takes at a time in a pass of several
    rows: whole groups filling COLUMN_SLAB_BYTES, 48 to 128 of them. Any whole number of groups gives the same bits;
    the size is speed alone. Measured over 128 rows (one thread): 594 x 3,072 took 15.1 ms in slabs of 96, 17.5 in
    256, 25.5 in 16; 2,048 x 8,192 146.8 in 48, 199 in 256; 4,096 x 16,384 (64 rows) 390 to 400 from 32 up, 510 in
    16. On SmolLM2, slabs of 96 took 3 to 7% off a 128-token prefill against 256, in one process over 8 and 12
    rounds."""
    return min(128, max(48, COLUMN_SLAB_BYTES // (4 * d_in) // COLUMN_GROUP * COLUMN_GROUP))


def padded_columns(d_out: int) -> int:
    """The columns a matrix of d_out outputs takes held by columns: d_out up to a whole number of COLUMN_GROUP."""
    return -(-d_out // COLUMN_GROUP) * COLUMN_GROUP


def tall(d_out: int, d_in: int) -> bool:
    """Whether a float32 product is held by columns (`linear_columns`): one with at least COLUMNS_RATIO times more
    outputs than inputs (an FFN's stacked gate and up, an output head). The rule depends on the shape alone, so
    every pass of a model multiplies a matrix the same way.

    Row by row (`linear`) a product reads rows as long as its input: 594 values for SmolLM2, where OpenBLAS's
    "T" matrix-vector kernel streams at 6 to 7 GB/s; by columns its "N" kernel streams rows as long as the
    output, 8 to 15 GB/s (one thread, OpenBLAS 0.3.31's Haswell kernels, measured here). A pass of many rows
    runs the other way round: by rows each 64-row slab stays in cache and its kernel is the faster (SmolLM2's
    3,072 x 594 gate and up over 128 tokens, caches cold: 19.5 against 24.7 ms). On SmolLM2, both ways in one
    process, 8 rounds (`docs/op-diff.md`): a decode pass takes 18% less time with the rule, a 128-token prefill
    14% more; a request decoding more than about a tenth as many tokens as its prompt holds finishes sooner.
    A ratio of 1.5 (q/k/v, 960 x 594, too) took 4% off decode and put 5% on prefill against this one, and the
    FFN down (576 x 1,584) loses both ways, so the rule stops at 4. Since `column_slab`, 1.5 measured about even on
    prefill and 2 to 5% off decode, but moves the default products' mean top-1 against llama.cpp from 96.85% to
    96.16% (`real_weights.py`): not taken yet."""
    return d_out >= COLUMNS_RATIO * d_in


def linear_columns(x: np.ndarray, wt: np.ndarray, d_out: int, b: np.ndarray | None = None) -> np.ndarray:
    """[n, d_in] @ [d_in, d_pad] (+ [d_out]) -> [n, d_out] float32: a matrix held by columns, each row's result
    independent of n.

    The matrix is held transposed, zero columns padding it to a whole number of COLUMN_GROUP (`Weights.columns`).
    One row against it is BLAS's "N" matrix-vector product, which streams long rows: on SmolLM2's 49,152-row
    output head it took 7 to 9 ms against 14 to 15 for `linear`'s kernel (measured here, one thread). That
    kernel gives each output the same sum whatever columns it is handed with, as long as none sits in a partial
    group at an edge (the padding sees to it), so a pass of several rows takes `column_slab` columns at a time
    (the last slab what is left: whole groups), copied together (the slab stays in cache; strided, it was
    slower), every row against each slab in turn: the same bits as one row against the whole matrix, for every n.
    """
    if x.shape[0] == 1:
        y = x @ wt  # [1, d_pad]
    else:
        y = np.empty((x.shape[0], wt.shape[1]), np.float32)  # [n, d_pad]
        width = column_slab(wt.shape[0])
        buffer = np.empty((wt.shape[0], width), np.float32)  # [d_in, width]
        for o in range(0, wt.shape[1], width):
            slab = buffer[:, : min(width, wt.shape[1] - o)]
            np.copyto(slab, wt[:, o : o + slab.shape[1]])
            y[:, o : o + slab.shape[1]] = np.matmul(x[:, None, :], slab)[:, 0]
    y = np.ascontiguousarray(y[:, :d_out])
    return y + b if b is not None else y


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """[..., d] -> [..., d]: x * (1 / sqrt(mean(x^2) + eps)) * w, rounded as `ggml_compute_forward_rms_norm_f32`
    (the squares summed in double, `ggml_math.rms_scale`)."""
    return x * ggml_math.rms_scale(x, eps) * w


def silu(x: np.ndarray, exact: bool = True) -> np.ndarray:
    """[...] -> [...]: x / (1 + e^-x) as ggml's vectorized `ggml_v_silu` (its own exp, `ggml_math.v_expf`); not
    `exact`, the exp rounded from float64 (`ggml_math.rounded_expf`: not ggml's bits, half the time)."""
    return ggml_math.silu(x, exact=exact)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation, as ggml's CPU backend computes it (`ggml_vec_gelu_f32`, GGML_GELU_FP16).

    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), read from a table indexed by x rounded to F16 and
    holding F16 results (`ggml_math.gelu_table`); x <= -10 gives 0 and x >= 10 gives x.
    """
    y = ggml_math.gelu_table()[x.astype(np.float16).view(np.uint16)]
    return np.where(x <= -10, np.float32(0), np.where(x >= 10, x, y))


def sigmoid(x: np.ndarray, exact: bool = False) -> np.ndarray:
    """[...] -> [...]: 1 / (1 + e^-x); with `exact` as `ggml_vec_sigmoid_f32` (libm's expf, one call per value)."""
    e = ggml_math.libm.expf(-x) if exact else np.exp(-x)
    return np.float32(1) / (np.float32(1) + e)


def softcap(x: np.ndarray, cap: float, exact: bool = False) -> np.ndarray:
    """[...] -> [...]: cap * tanh(x / cap), squashing values into (-cap, cap) (gemma's logit soft-capping).

    As llama.cpp's graph: x times the float32 1 / cap, `ggml_tanh` (the C library's `tanhf`, which is
    not correctly rounded: taken only when `exact`, one call per value; else numpy's tanh), times cap.
    """
    y = x * (np.float32(1) / np.float32(cap))
    t = ggml_math.libm.tanhf(y) if exact else np.tanh(y.astype(np.float64)).astype(np.float32)
    return t * np.float32(cap)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum, the sum taken in float64 and applied as a float32 reciprocal (ggml's `soft_max`).

    A float64 sum does not depend on how many masked (zero) entries a row carries, so attention
    weights are the same whatever the cache length of the pass.
    """
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    inv = (1.0 / np.sum(e, axis=axis, keepdims=True, dtype=np.float64)).astype(e.dtype)
    return e * inv


def cache_softmax(scores: np.ndarray, sinks: np.ndarray | None = None, *, exact: bool = True) -> np.ndarray:
    """[..., L] scaled and masked (-inf) attention logits -> weights, as llama.cpp's CPU backend computes them.

    `ggml_compute_forward_soft_max_f32` over rows that llama.cpp pads (masked) to a multiple of 256
    cache cells: ggml sums their exps 8 at a time (`ggml_math.soft_max_rows`), the last 8 of a row with masked
    cells past it, which add nothing (`padded`). A block of rows at a time: a prefill's
    scores whole took 10.3 ms a layer, in blocks 2.4 (measured here, SmolLM2's 9 heads x 128 x 128).
    sinks [...] (one logit per row, broadcast over the rows' leading axes) join as ggml adds them: the
    maximum is at least the sink, and expf(sink - max) joins the double sum. Not `exact`: each exp is
    `ggml_math.rounded_expf`'s, not ggml's own (`ggml_math.exp_sum`).
    """
    big_l = scores.shape[-1]
    rows = scores.reshape(-1, big_l)  # [rows, L]
    sink_rows = None if sinks is None else np.broadcast_to(sinks, scores.shape[:-1]).reshape(-1)  # [rows]
    step = max(1, ggml_math.CHUNK // (big_l + -big_l % 8))  # rows at a time (`ggml_math.elementwise_in_chunks`)
    if len(rows) <= step:
        return ggml_math.soft_max_rows(rows, sink_rows, padded=True, exact=exact).reshape(scores.shape)
    weights = np.concatenate([ggml_math.soft_max_rows(rows[i : i + step],
                                                      None if sink_rows is None else sink_rows[i : i + step],
                                                      padded=True, exact=exact)
                              for i in range(0, len(rows), step)])
    return weights.reshape(scores.shape)


@dataclass(frozen=True)
class Yarn:
    """YaRN context extension (ggml's `rope_yarn`, ggml-cpu/ops.cpp; llama.cpp sets it up in `llama_context`).

    Pairs turning faster than `beta_fast` turns over the original context keep their angle (extrapolate),
    pairs slower than `beta_slow` turns take the scaled one (interpolate), a ramp mixes those between;
    cos and sin are multiplied by `attn_factor` times 1 + 0.1 ln(1 / freq_scale) (`rope_yarn`).
    """

    n_ctx_orig: int  # context the model was trained on (`rope.scaling.original_context_length`)
    beta_fast: float = 32.0  # llama.cpp's defaults (src/llama-hparams.h)
    beta_slow: float = 1.0
    attn_factor: float = 1.0  # float32 as `llama_context` leaves it (`config._yarn`): rope_yarn's growth cancelled


def yarn_magnitude(attn_factor: float, freq_scale: float) -> np.float32:
    """The factor on cos and sin: attn_factor * (1 + 0.1 logf(1 / freq_scale)) in float32, the sum one fma
    (`rope_yarn`, ggml-cpu/ops.cpp; libm's logf)."""
    log = ggml_math.libm.logf(np.float32(1) / np.float32(freq_scale))
    growth = ggml_math.fma32(np.float32(0.1), log, np.float32(1))
    return np.float32(attn_factor) * np.float32(growth)


def _yarn_corr_dim(n_rot: int, n_ctx_orig: int, turns: float, base: float) -> float:
    """The pair index whose angle makes `turns` full turns over n_ctx_orig positions (ggml_rope_yarn_corr_dim)."""
    return n_rot * math.log(n_ctx_orig / (turns * 2 * math.pi)) / (2 * math.log(base))


def rope_angles(
    positions: np.ndarray,
    n_rot: int,
    base: float,
    freq_scale: float = 1.0,
    freq_factors: np.ndarray | None = None,
    yarn: Yarn | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """[n] positions -> (cos, sin), each [n, n_rot/2], as `ggml_rope_cache_init` (ggml-cpu/ops.cpp) makes them.

    theta_0 = position and theta_{i+1} = theta_i * powf(base, -2 / n_rot), a running float32 product
    (not a power), divided by freq_factors[i] when the file carries `rope_freqs.weight` (llama 3 long
    context), times freq_scale; cos and sin are the C library's `cosf` and `sinf`, as ggml calls them.
    With YaRN (`rope_yarn`), pair i mixes the scaled angle with the unscaled one by
    ramp_i = 1 - clip((i - low) / max(0.001, high - low), 0, 1), low and high the pairs that turn
    beta_fast and beta_slow times over the original context (in float32, the mix one fma), and cos and
    sin are multiplied by `yarn_magnitude`.
    """
    libm = ggml_math.libm
    step = libm.powf(base, np.float32(-2.0) / np.float32(n_rot))
    theta = np.empty((len(positions), n_rot // 2), np.float32)  # [n, n_rot/2]
    t = positions.astype(np.float32)
    for i in range(n_rot // 2):
        theta[:, i] = t
        t = t * step
    if freq_factors is not None:
        theta = theta / freq_factors.astype(np.float32)
    scaled = np.float32(freq_scale) * theta
    if yarn is None:
        return libm.cosf(scaled), libm.sinf(scaled)
    low = max(0.0, math.floor(_yarn_corr_dim(n_rot, yarn.n_ctx_orig, yarn.beta_fast, base)))
    high = min(n_rot - 1.0, math.ceil(_yarn_corr_dim(n_rot, yarn.n_ctx_orig, yarn.beta_slow, base)))
    f32 = np.float32
    y = (np.arange(n_rot // 2, dtype=f32) - f32(low)) / f32(max(0.001, high - low))  # [n_rot/2] float32
    ramp = f32(1) - np.minimum(f32(1), np.maximum(f32(0), y))  # times ext_factor, 1 for YaRN
    mixed = ggml_math.fma32(scaled, f32(1) - ramp, theta * ramp)  # [n, n_rot/2]
    magnitude = yarn_magnitude(yarn.attn_factor, freq_scale)
    return libm.cosf(mixed) * magnitude, libm.sinf(mixed) * magnitude


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, neox: bool, *, exact: bool = True) -> np.ndarray:
    """[n, h, hd] -> [n, h, hd]: rotate the first n_rot dims of every head, leave the rest.

    neox=False ("normal", llama): pairs are adjacent dims (x0, x1), (x2, x3), ...
    neox=True (qwen family): pairs are (x_i, x_{i + n_rot/2}).
    As ggml's `rotate_pairs` (ggml-cpu/ops.cpp) once the compiler has fused its products:
    x0 cos - x1 sin is fma(x0, cos, -(x1 sin)), x0 sin + x1 cos is fma(x0, sin, x1 cos). Not `exact`: each
    product and sum rounded in float32 (at most a step off the fused result, in a third of the time).
    """
    half = cos.shape[-1]
    n_rot = 2 * half
    c, s = cos[:, None, :], sin[:, None, :]  # [n, 1, n_rot/2]
    out = x.copy()
    pairs = (slice(0, half), slice(half, n_rot)) if neox else (slice(0, n_rot, 2), slice(1, n_rot, 2))
    a, b = x[..., pairs[0]], x[..., pairs[1]]
    if exact:
        out[..., pairs[0]] = ggml_math.fma32(a, c, -(b * s))
        out[..., pairs[1]] = ggml_math.fma32(a, s, b * c)
    else:
        out[..., pairs[0]] = a * c - b * s
        out[..., pairs[1]] = a * s + b * c
    return out


def hadamard_rows(x: np.ndarray, n: int) -> np.ndarray:
    """[..., d] float32 (d a multiple of n, n a power of 2) -> each run of n values through the orthonormal
    Walsh-Hadamard transform, as `ggml_compute_forward_fwht` (ggml-cpu/ops.cpp) computes it: times
    1 / sqrtf(n) first, then butterflies (u + v, u - v) over pairs 1, 2, 4, ... apart, each rounded to float32.
    The transform is its own inverse (up to rounding). llama.cpp turns q, k and v with it before a quantized
    cache stores them, and the attention output back (`KVCache.rotation`)."""
    rows = np.ascontiguousarray(x, np.float32).reshape(-1, n) * (np.float32(1) / np.sqrt(np.float32(n)))  # [r, n]
    half = 1
    while half < n:
        pairs = rows.reshape(rows.shape[0], n // (2 * half), 2, half)  # [r, groups, 2, half]
        u, v = pairs[:, :, 0], pairs[:, :, 1]
        rows = np.stack([u + v, u - v], axis=2).reshape(-1, n)
        half *= 2
    return rows.reshape(x.shape)


def rope_qk(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray, neox: bool, *,
            exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """`rope` of q [n, h, hd] and k [n, h_kv, hd] -> (q, k) rotated: one call when their heads are the same size
    (rope is elementwise, so the same numbers in half the numpy calls a decode pass makes)."""
    if q.shape[-1] != k.shape[-1]:
        return rope(q, cos, sin, neox, exact=exact), rope(k, cos, sin, neox, exact=exact)
    both = rope(np.concatenate([q, k], axis=1), cos, sin, neox, exact=exact)  # [n, h + h_kv, hd]
    return both[:, : q.shape[1]], both[:, q.shape[1] :]


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_pos: np.ndarray,
    scale: float,
    kv_format: str = "f32",
    *,
    window: int = 0,
    sinks: np.ndarray | None = None,
    probe: Callable[[str, np.ndarray], object] | None = None,
    exact: bool = False,
    exact_softmax: bool = True,
    flash: bool = False,
    cache_type: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """Causal softmax attention over the cache, with grouped KV heads.

    Args:
        q: [n, h, hd] queries of this pass at positions q_pos [n].
        k: [L, h_kv, hd] every cached key (position j at row j).
        v: [L, h_kv, hd_v] every cached value.
        q_pos: [n] absolute positions of the queries; query i sees keys 0..q_pos[i].
        scale: multiplies q.k before the softmax (1/sqrt(hd)).
        kv_format: "f16" rounds q and the weights to F16 before their products with the cache, as
            llama.cpp's CPU backend does against an F16 cache; "f32" leaves them.
        window: if > 0, query i sees only keys q_pos[i] - window + 1 .. q_pos[i] (sliding window:
            llama.cpp masks p1 - p0 >= n_swa, `is_masked_swa` in src/llama-hparams.h).
        sinks: [h] one extra logit per head that joins the softmax's denominator and reads no value
            (gpt-oss's attention sinks, `ggml_soft_max_add_sinks`).
        probe: if given, sees q.k before the scale ("kq", [h, n, L]) and the weights ("kq_soft_max").
        exact: with an F32 or F16 cache, sum q.k and weights.v in the order llama.cpp's CPU backend
            does (`exact_scores`, `exact_values`; slow for long prefills); otherwise in float64, rounded once.
        exact_softmax: the softmax takes ggml's own exp (`cache_softmax`); else `ggml_math.rounded_expf`'s.
            Always with `exact`.
        flash: with `exact`, compute the output as llama.cpp's flash attention does
            (`flash_attention`); the weights returned are still the plain softmax's, for display.
        cache_type: the cache's type; with `exact` and `flash`, a Q8_0 or Q4_0 cache (k and v its blocks'
            values) is read as ggml reads it (`flash_attention_quantized`).

    Returns:
        out [n, h, hd_v] and the attention weights [h, n, L] (0 for masked positions).
        Query head i reads KV head i // (h / h_kv), as ggml's broadcast does.
    """
    n, h, _ = q.shape
    big_l, h_kv, _ = k.shape
    group = h // h_kv
    exact_softmax = exact_softmax or exact  # ggml's own exp with exact sums, whatever the cache
    exact = exact and kv_format in ("f32", "f16")
    q_in = q.reshape(n, h_kv, group, -1).transpose(1, 2, 0, 3)  # [h_kv, group, n, hd], as the pass made them
    q = round_activations(q, kv_format)
    qg = q.reshape(n, h_kv, group, -1).transpose(1, 2, 0, 3)  # [h_kv, group, n, hd]
    if not exact and sinks is None and probe is None and n > ATTENTION_ROW_BLOCK:
        out, weights = _attention_by_row_blocks(qg, k, v, q_pos, np.float32(scale), kv_format, window, exact_softmax)
        out = out.reshape(h, n, -1).transpose(1, 0, 2)  # [n, h, hd_v]
        return np.ascontiguousarray(out), weights.reshape(h, n, big_l)
    if exact:
        scores = exact_scores(qg, k, kv_format)
    else:  # products in float64 are (all but always) exact sums, rounded once: the same whatever n and L
        kt = k.astype(np.float64).transpose(1, 2, 0)[:, None]  # [h_kv, 1, hd, L], widened once (not per group)
        scores = (qg.astype(np.float64) @ kt).astype(np.float32)  # [h_kv, group, n, L]
    if probe is not None:
        probe("kq", scores.reshape(h, n, big_l))
    scores = scores * np.float32(scale)
    masked = attention_mask(q_pos, big_l, window)  # [n, L]
    if np.logical_or.reduce(masked, axis=None):  # (a decode pass at the cache's end sees every cell)
        scores = np.where(masked, -np.inf, scores)
    if sinks is None:
        weights = cache_softmax(scores, exact=exact_softmax)  # [h_kv, group, n, L]
    elif exact:
        weights = cache_softmax(scores, sinks.reshape(h_kv, group, 1).astype(np.float32))  # [h_kv, group, n, L]
    else:
        sink = sinks.reshape(h_kv, group, 1, 1).astype(np.float32)  # [h_kv, group, 1, 1]
        top = np.maximum(np.max(scores, axis=-1, keepdims=True), sink)
        e = np.exp(scores - top)
        total = np.sum(e, axis=-1, keepdims=True, dtype=np.float64) + np.exp(sink - top)
        weights = e * (1.0 / total).astype(np.float32)
    if probe is not None:
        probe("kq_soft_max", weights.reshape(h, n, big_l))
    if exact and flash and cache_type in ("q8_0", "q4_0"):
        head_sinks = None if sinks is None else sinks.reshape(h_kv, group)
        out = flash_attention_quantized(q_in, k, v, ~masked, np.float32(scale), cache_type, head_sinks)
    elif exact and flash:  # llama.cpp casts an F32 cache to F16 for flash attention
        k16, v16 = round_activations(k, "f16"), round_activations(v, "f16")
        head_sinks = None if sinks is None else sinks.reshape(h_kv, group)
        if n >= FA_TILE:  # the tiled kernel reads q as float32
            out = flash_attention_tiled(q_in, k16, v16, ~masked, np.float32(scale), head_sinks)  # [h_kv, group, n, hd_v]
        else:
            out = flash_attention(round_activations(q_in, "f16"), k16, v16, ~masked, np.float32(scale), head_sinks)
    elif exact:
        out = exact_values(round_activations(weights, kv_format), v, kv_format)
    else:
        vt = v.astype(np.float64).transpose(1, 0, 2)[:, None]  # [h_kv, 1, L, hd_v]
        out = (round_activations(weights, kv_format).astype(np.float64) @ vt).astype(np.float32)  # [h_kv, group, n, hd_v]
    out = out.reshape(h, n, -1).transpose(1, 0, 2)  # [n, h, hd_v]
    return np.ascontiguousarray(out), weights.reshape(h, n, big_l)


def attention_mask(q_pos: np.ndarray, n_cells: int, window: int = 0) -> np.ndarray:
    """[n] query positions -> [n, n_cells] bool, True where a query may not see a cache cell: a later position, or
    with a sliding `window` one window or more back (llama.cpp's `is_masked_swa`: p1 - p0 >= n_swa)."""
    cells = np.arange(n_cells)[None, :]
    masked = cells > q_pos[:, None]
    if window:
        masked |= q_pos[:, None] - cells >= window
    return masked


EXACT_ROWS = 16  # query rows per step of the exact attention products (bounds their memory)
ATTENTION_ROW_BLOCK = 32  # query rows of a long pass that `_attention_by_row_blocks` takes at a time


def _attention_by_row_blocks(qg: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, scale: np.float32,
                             kv_format: str, window: int, exact_softmax: bool) -> tuple[np.ndarray, np.ndarray]:
    """`attention`'s float64 path over a pass of many queries, ATTENTION_ROW_BLOCK of them at a time, each block
    over the cache cells up to the last one its queries see: qg [h_kv, group, n, hd] (rounded as the cache format
    wants), k [L, h_kv, hd], v [L, h_kv, hd_v] -> (out [h_kv, group, n, hd_v], weights [h_kv, group, n, L]).

    The same numbers as the whole pass at once: the cells past a block's last visible one are masked for all its
    rows, so they would only add -inf to a row's scores (no part of its maximum), zeros to its softmax's last sums
    of 8 and to the double sum (no change to a sum that starts at +0), and zeros to the products with the values,
    whose float64 sums run in order (numpy's own loop on these strided operands) and end where the cells left
    out would begin. A causal prefill of n tokens computes about half the scores it would whole."""
    h_kv, group, n, _ = qg.shape
    big_l = k.shape[0]
    kt = k.astype(np.float64).transpose(1, 2, 0)[:, None]  # [h_kv, 1, hd, L], widened once (not per group)
    vt = v.astype(np.float64).transpose(1, 0, 2)[:, None]  # [h_kv, 1, L, hd_v]
    out = np.empty((h_kv, group, n, v.shape[2]), np.float32)
    weights = np.zeros((h_kv, group, n, big_l), np.float32)
    for r0 in range(0, n, ATTENTION_ROW_BLOCK):
        rows = q_pos[r0 : r0 + ATTENTION_ROW_BLOCK]  # [b]
        end = min(big_l, int(np.maximum.reduce(rows)) + 1)  # cells 0..end-1: any this block sees
        scores = (qg[:, :, r0 : r0 + len(rows)].astype(np.float64) @ kt[..., :end]).astype(np.float32) * scale
        masked = attention_mask(rows, end, window)  # [b, end]
        if np.logical_or.reduce(masked, axis=None):
            scores = np.where(masked, -np.inf, scores)
        w = cache_softmax(scores, exact=exact_softmax)  # [h_kv, group, b, end]
        weights[:, :, r0 : r0 + len(rows), :end] = w
        out[:, :, r0 : r0 + len(rows)] = (round_activations(w, kv_format).astype(np.float64) @ vt[:, :, :end])
    return out, weights


def _kernel(kv_format: str, n: int, depth: int, rows: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The dot product ggml's `mul_mat` takes for a product with the cache: n query rows, sums of `depth`
    products, `rows` rows of the cache operand.

    llamafile's tinyBLAS (`ggml_math.tinyblas_dot`) when the second operand is contiguous and of the
    cache's type, the pass has 2+ rows and tinyBLAS takes the shape (depth a multiple of 8, rows of 4);
    else `ggml_vec_dot_f32` / `ggml_vec_dot_f16` row by row.
    """
    if n >= 2 and depth % 8 == 0 and rows % 4 == 0:
        return ggml_math.tinyblas_dot
    return ggml_math.vec_dot_f16 if kv_format == "f16" else ggml_math.vec_dot_f32


def exact_scores(qg: np.ndarray, k: np.ndarray, kv_format: str = "f32") -> np.ndarray:
    """[h_kv, group, n, hd] queries . [L, h_kv, hd] keys -> [h_kv, group, n, L], as ggml's `mul_mat(k, q)`.

    Against an F32 cache the queries (a permuted view) reach `ggml_vec_dot_f32` one key at a time,
    whatever the number of tokens. Against an F16 cache they are first converted to F16 (the caller
    rounds them) into a contiguous buffer, which tinyBLAS takes for 2+ tokens (`_kernel`).
    """
    # llama.cpp's cache holds a multiple of 256 cells: tinyBLAS takes it whenever the head size suits
    dot = _kernel(kv_format, qg.shape[2], qg.shape[3], 256) if kv_format == "f16" else ggml_math.vec_dot_f32
    kk = k.transpose(1, 0, 2)[:, None, None]  # [h_kv, 1, 1, L, hd]
    rows = [dot(kk, qg[:, :, i : i + EXACT_ROWS, None, :]) for i in range(0, qg.shape[2], EXACT_ROWS)]
    return np.concatenate(rows, axis=2)


def exact_values(weights: np.ndarray, v: np.ndarray, kv_format: str = "f32") -> np.ndarray:
    """[h_kv, group, n, L] weights . [L, h_kv, hd_v] values -> [h_kv, group, n, hd_v], as ggml's `mul_mat(v, kq)`.

    The weights are contiguous (F16-rounded by the caller against an F16 cache), so a pass of 2 tokens
    or more goes to llamafile's tinyBLAS (over the cache padded to 8 cells) and a single token to
    `ggml_vec_dot_f32` / `ggml_vec_dot_f16` (padded to 32 cells: llama.cpp's cache holds 256 or more,
    zeros beyond the positions written, each weighted 0).
    """
    n, big_l = weights.shape[2], weights.shape[3]
    dot = _kernel(kv_format, n, 256, v.shape[2])
    pad = -big_l % (8 if dot is ggml_math.tinyblas_dot else 32)
    w = np.pad(weights, ((0, 0), (0, 0), (0, 0), (0, pad)))[:, :, :, None, :]  # [h_kv, group, n, 1, L']
    vt = np.pad(v.transpose(1, 2, 0), ((0, 0), (0, 0), (0, pad)))[:, None, None]  # [h_kv, 1, 1, hd_v, L']
    rows = [dot(vt, w[:, :, i : i + EXACT_ROWS]) for i in range(0, n, EXACT_ROWS)]
    return np.concatenate(rows, axis=2)


def flash_attention(qg: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray,
                    scale: np.float32, sinks: np.ndarray | None = None) -> np.ndarray:
    """Attention as `ggml_compute_forward_flash_attn_ext_f16_one_chunk` (ggml-cpu/ops.cpp) computes it.

    qg [h_kv, group, n, hd], k [L, h_kv, hd], v [L, h_kv, hd_v], all F16-valued (llama.cpp casts an
    F32 cache to F16 for flash attention, `build_attn_mha`, and converts q to F16 for the F16 dot),
    visible [n, L] -> [h_kv, group, n, hd_v]. Each query row walks the cache cell by cell, skipping
    masked ones, with an online softmax: s = (q.k) * scale (`ggml_vec_dot_f16`); a new maximum M
    rescales the running sum S and output by expf(M_old - M) (libm's expf), any other cell weighs
    expf(s - M); the output gathers v * weight with one fma per value, held in F16
    (`ggml_vec_scale_f16`, `ggml_vec_mad_f16`: every step rounded to F16); S = fma(S, ms, weight);
    at the end the output (in float32 from there) meets the sinks if any (`_join_sinks`) and is multiplied
    by 1 / S.

    Passes of 64 tokens or more take the tiled kernel instead (`flash_attention_tiled`).
    """
    kk = k.transpose(1, 0, 2)[:, None, None]  # [h_kv, 1, 1, L, hd]
    scores = np.concatenate([ggml_math.vec_dot_f16(kk, qg[:, :, i : i + EXACT_ROWS, None, :])
                             for i in range(0, qg.shape[2], EXACT_ROWS)], axis=2) * scale  # [h_kv, group, n, L]

    def gather_f16(out: np.ndarray, ms: np.ndarray, vs: np.ndarray, row: np.ndarray) -> np.ndarray:
        scaled = (out * ms[..., None]).astype(np.float16).astype(np.float32)  # (by 1 where the maximum held)
        return ggml_math.fma32(row, vs[..., None], scaled).astype(np.float16).astype(np.float32)

    return _online_softmax(scores, v, visible, sinks, gather_f16)


def flash_attention_quantized(q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray,
                              scale: np.float32, cache_type: str, sinks: np.ndarray | None = None) -> np.ndarray:
    """Flash attention over a Q8_0 or Q4_0 cache, as `ggml_compute_forward_flash_attn_ext_f16_one_chunk` takes it
    (the tiled kernel wants an F32 or F16 cache, so this one serves every pass).

    q [h_kv, group, n, hd] float32, k [L, h_kv, hd] and v [L, h_kv, hd_v] as the cache holds them (its blocks'
    values), visible [n, L] -> [h_kv, group, n, hd_v]. Each q row is converted to Q8_0 (`quantize_row_q8_0`)
    and meets each cell's key through the cache type's own dot (`ggml_vec_dot_q8_0_q8_0`,
    `ggml_vec_dot_q4_0_q8_0`: `quantdot`, one row at a time as ggml takes it); the online softmax is
    `flash_attention`'s, but the output is held in float32: each cell's value row is dequantized and added
    with `ggml_vec_mad_f32` (`_mad_f32`), and a new maximum scales it with `ggml_vec_scale_f32`.
    """
    qtype = GGMLQuantizationType[cache_type.upper()]
    h_kv, group, n, hd = q.shape
    scores = np.empty((h_kv, group, n, k.shape[0]), np.float32)  # [h_kv, group, n, L]
    for h in range(h_kv):
        cells = quants.quantize(np.ascontiguousarray(k[:, h]), qtype)  # the cells' stored blocks (the same again)
        scores[h] = quantdot.matmul(q[h].reshape(group * n, hd), quantdot.pack(cells, qtype, hd)).reshape(group, n, -1)
    scores *= scale

    def gather_f32(out: np.ndarray, ms: np.ndarray, vs: np.ndarray, row: np.ndarray) -> np.ndarray:
        return _mad_f32(out * ms[..., None], row, vs[..., None])

    return _online_softmax(scores, v, visible, sinks, gather_f32)


def _mad_f32(y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """y + x * v as `ggml_vec_mad_f32` (vec.h, AVX2) computes it: one fma per value (registers of 8, four at a
    time). Its scalar leftovers (n % 32 values) never arise here: llama.cpp wants a quantized cache's heads in
    whole 32-value blocks."""
    return ggml_math.fma32(x, v, y)


def _online_softmax(scores: np.ndarray, v: np.ndarray, visible: np.ndarray, sinks: np.ndarray | None,
                    gather: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """The per-cell kernel's walk over the cache (`flash_attention`): scores [h_kv, group, n, L] (scaled),
    v [L, h_kv, hd_v], visible [n, L] -> [h_kv, group, n, hd_v]; `gather(out, ms, vs, v_row)` is the output's
    step at one cell, in the output's own precision."""
    shape = scores.shape[:3]
    top = np.full(shape, -np.inf, np.float32)  # M
    total = np.zeros(shape, np.float32)  # S
    out = np.zeros((*shape, v.shape[2]), np.float32)  # [h_kv, group, n, hd_v]
    expf = ggml_math.libm.expf
    for cell in range(v.shape[0]):
        seen = np.broadcast_to(visible[:, cell], shape)  # [h_kv, group, n]
        if not seen.any():
            continue
        s = scores[..., cell]
        up = seen & (s > top)
        ms = np.ones(shape, np.float32)
        ms[up] = expf(top[up] - s[up])
        vs = np.ones(shape, np.float32)
        rest = seen & ~up
        vs[rest] = expf(s[rest] - top[rest])
        top = np.where(up, s, top)
        added = gather(out, ms, vs, v[cell][:, None, None, :])  # v row [h_kv, 1, 1, hd_v]
        out = np.where(seen[..., None], added, out)
        total = np.where(seen, ggml_math.fma32(total, ms, vs), total)
    if sinks is not None:
        out, total = _join_sinks(out, top, total, sinks, fused=False)
    inv = np.where(total == 0, np.float32(0), np.float32(1) / np.where(total == 0, np.float32(1), total))
    return out * inv[..., None]


def _join_sinks(out: np.ndarray, top: np.ndarray, total: np.ndarray, sinks: np.ndarray,
                fused: bool) -> tuple[np.ndarray, np.ndarray]:
    """Flash attention's sinks, after the cells (both kernels of ops.cpp): one more logit per head that joins the
    sum and reads no value. A sink above the row's maximum M rescales the output and S by expf(M - sink);
    otherwise it adds expf(sink - M) to S: S = S ms + vs, one fma in the tiled kernel, a rounded product then a
    sum in the per-cell one (measured against llama.cpp, gpt-oss's references at 70 and 24 tokens).

    out [h_kv, group, n, hd_v], top (M) and total (S) [h_kv, group, n], sinks [h_kv, group] float32.
    """
    s = np.broadcast_to(sinks.astype(np.float32)[..., None], top.shape)
    above = s > top
    ms, vs = np.ones(top.shape, np.float32), np.ones(top.shape, np.float32)
    ms[above] = ggml_math.libm.expf(top[above] - s[above])
    vs[~above] = ggml_math.libm.expf(s[~above] - top[~above])
    return out * ms[..., None], ggml_math.fma32(total, ms, vs) if fused else total * ms + vs


FA_TILE = 64  # query rows and cache cells of one tile of ggml's tiled flash attention (GGML_FA_TILE_Q/_KV)


def flash_attention_tiled(q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray,
                          scale: np.float32, sinks: np.ndarray | None = None) -> np.ndarray:
    """Attention as `ggml_compute_forward_flash_attn_ext_tiled` (ggml-cpu/ops.cpp), llama.cpp's flash attention
    for passes of 64 tokens or more.

    q [h_kv, group, n, hd] float32 (not rounded: this kernel copies q as it is), k [L, h_kv, hd] and
    v [L, h_kv, hd_v] F16-valued, visible [n, L] -> [h_kv, group, n, hd_v]. The cache is taken 64 cells at
    a time (a tile past the last cell is masked): q.k as `simd_gemm` sums it (one fma chain over hd),
    times scale, masked cells -inf; a row whose tile is all masked is left as it was; otherwise its
    maximum M grows to the tile's (rescaling S and the output by libm's expf(M_old - M)), S adds the
    tile's exps in double (`ggml_vec_soft_max_f32`, `ggml_math.exp_sum`) and the output gathers
    exps times v as `simd_gemm` does (one fma chain over the tile's cells). At the end the sinks if any
    (`_join_sinks`), then times 1 / S.
    """
    shape = q.shape[:3]
    top = np.full(shape, -np.inf, np.float32)  # M
    total = np.zeros(shape, np.float32)  # S
    out = np.zeros((*shape, v.shape[2]), np.float32)  # [h_kv, group, n, hd_v]
    for c0 in range(0, k.shape[0], FA_TILE):
        cells = min(FA_TILE, k.shape[0] - c0)
        seen = np.zeros((shape[2], FA_TILE), bool)  # [n, 64]
        seen[:, :cells] = visible[:, c0 : c0 + cells]
        if not seen.any():
            continue
        kt = np.zeros((FA_TILE, *k.shape[1:]), np.float32)  # [64, h_kv, hd]
        kt[:cells] = k[c0 : c0 + cells]
        vt = np.zeros((FA_TILE, *v.shape[1:]), np.float32)  # [64, h_kv, hd_v]
        vt[:cells] = v[c0 : c0 + cells]
        zero = np.zeros((*shape, FA_TILE), np.float32)
        kq = ggml_math.fma_chain(kt.transpose(1, 0, 2)[:, None, None], q[..., None, :], zero) * scale
        kq = np.where(seen, kq, np.float32(-np.inf))  # [h_kv, group, n, 64]
        tile_max = kq.max(axis=-1)
        live = tile_max > -np.inf  # rows this tile moves
        new_top = np.maximum(top, tile_max)
        up = live & (new_top > top)
        ms = np.ones(shape, np.float32)
        ms[up] = ggml_math.libm.expf(top[up] - new_top[up])
        out = out * ms[..., None]
        total = total * ms
        top = np.where(live, new_top, top)
        e, tile_sum = ggml_math.exp_sum(kq, np.where(live, top, np.float32(0))[..., None])  # (dead rows: all -inf)
        total = np.where(live, (total.astype(np.float64) + tile_sum).astype(np.float32), total)
        e = np.where(live[..., None], e, np.float32(0))
        vv = vt.transpose(1, 2, 0)[:, None, None]  # [h_kv, 1, 1, hd_v, 64]
        out = ggml_math.fma_chain(vv, e[..., None, :], out)
    if sinks is not None:
        out, total = _join_sinks(out, top, total, sinks, fused=True)
    inv = np.where(total == 0, np.float32(0), np.float32(1) / np.where(total == 0, np.float32(1), total))
    return out * inv[..., None]


def swiglu(gate: np.ndarray, up: np.ndarray, *, exact: bool = True) -> np.ndarray:
    """[n, ff], [n, ff] -> [n, ff]: silu(gate) * up, the gated unit of a SwiGLU FFN (down(swiglu(...)));
    `exact` as `silu`'s."""
    return silu(gate, exact) * up


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """[n, ff], [n, ff] -> [n, ff]: gelu(gate) * up, the gated unit of a GeGLU FFN (gemma)"""
    return gelu(gate) * up


def swiglu_oai(gate: np.ndarray, up: np.ndarray, alpha: float = 1.702, limit: float = 7.0, *,
               exact: bool = False) -> np.ndarray:
    """[n, ff], [n, ff] -> [n, ff]: gpt-oss's clamped SwiGLU (`ggml_swiglu_oai`, ggml-cpu/ops.cpp).

    x = min(gate, limit), y = clip(up, -limit, limit): x * sigmoid(alpha x) * (y + 1).
    alpha and limit are the constants llama.cpp passes (src/llama-graph.cpp, LLM_FFN_SWIGLU_OAI_MOE);
    with `exact` the exponential is libm's expf, as ggml's loop calls it (one call per value).
    """
    x = np.minimum(gate, np.float32(limit))
    y = np.clip(up, np.float32(-limit), np.float32(limit))
    t = np.float32(alpha) * -x
    e = ggml_math.libm.expf(t) if exact else np.exp(t)
    return x / (np.float32(1) + e) * (y + np.float32(1))


GATED = {"silu": swiglu, "gelu": geglu, "swiglu_oai": swiglu_oai}  # the declarations' `activation` -> gated unit


def gated_unit(activation: str, exact: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The gated unit for an activation, following ggml's own exponential when `exact` (SiLU's `ggml_v_expf`,
    gpt-oss's libm `expf`), else a cheaper one; GELU reads ggml's table either way."""
    unit = GATED[activation]
    return unit if activation == "gelu" else partial(unit, exact=exact)


def route(
    logits: np.ndarray,
    k: int,
    normalize: bool,
    gating: str = "softmax",
    *,
    bias: np.ndarray | None = None,
    groups: int = 1,
    groups_used: int = 1,
    scale: float = 0.0,
    exact: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Router: [n, E] logits -> the top-k experts [n, k] (best first) and their weights [n, k].

    As llama.cpp's `build_moe_ffn` (src/llama-graph.cpp) does:
    gating "softmax": the weights are the softmax probabilities of the chosen experts; "sigmoid"
    (glm4moe): each expert's sigmoid; both renormalised to sum to 1 when `normalize` (qwen3moe, llama) and
    left as they are otherwise (qwen2moe). gating "softmax_weight" (gpt-oss): the top-k logits, then a
    softmax over those k only. `bias` [E] moves which experts are chosen but not their weights
    (`exp_probs_b`); with `groups` > 1 only experts in the `groups_used` groups whose two best scores sum
    highest can be chosen. `scale` (if not 0 or 1) multiplies the weights. With `exact`, each step as ggml's
    CPU ops compute it: `soft_max` (`ggml_math.soft_max_rows`), `sigmoid` with libm's expf, the weights' sum
    in double (`ggml_vec_sum_f32`) rounded to float32.
    """
    soft = ggml_math.soft_max_rows if exact else softmax
    if gating == "softmax_weight":
        top = np.argsort(-logits, axis=-1, kind="stable")[:, :k]  # [n, k]
        return top, soft(np.take_along_axis(logits, top, axis=-1))
    probs = soft(logits) if gating == "softmax" else sigmoid(logits, exact)  # [n, E]
    select = probs if bias is None else probs + bias  # [n, E]
    if groups > 1:
        n, n_exp = select.shape
        by_group = select.reshape(n, groups, n_exp // groups)  # [n, G, E/G]
        score = np.sort(by_group, axis=-1)[..., -2:].sum(axis=-1)  # [n, G]: the two best of each group
        kept = np.argsort(-score, axis=-1, kind="stable")[:, :groups_used]  # [n, used]
        allowed = np.zeros((n, groups), bool)
        np.put_along_axis(allowed, kept, True, axis=-1)
        select = np.where(np.repeat(allowed, n_exp // groups, axis=-1), select, -np.inf)
    top = np.argsort(-select, axis=-1, kind="stable")[:, :k]  # [n, k]
    weights = np.take_along_axis(probs, top, axis=-1)  # [n, k]
    if normalize:
        if exact:  # in index order in double, rounded once
            total = np.cumsum(weights.astype(np.float64), axis=-1)[:, -1:].astype(np.float32)  # [n, 1]
        else:
            total = weights.sum(axis=-1, keepdims=True)  # [n, 1]
        weights = weights / np.maximum(total, np.float32(MOE_WEIGHT_SUM_MIN))
    if scale and scale != 1.0:
        weights = weights * np.float32(scale)
    return top, weights
