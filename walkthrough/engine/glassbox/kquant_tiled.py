"""K-quant matrix products of 8 tokens or more, as llama.cpp's tiled kernel computes them (x86 AVX2 + FMA).

For a pass of 8 or more tokens, ggml's CPU backend multiplies Q4_K, Q5_K and Q6_K weights with
`ggml_compute_forward_mul_mat_tiled` (ggml-cpu/tiled/tiled.cpp, kernel `tiled_run_microtile_avx2`
in tiled-kernel.cpp) instead of `ggml_vec_dot_*_q8_K` (`quantdot`, used below 8 tokens). The input
row is quantized to Q8_K as before (`quantdot.quantize_q8_k`: codes per 256 values, a float32
scale dy, sums per 16 codes); the integer sums are the same, but the float order is another:

    buf = 0                                               (one float32 per output and token)
    for each 256-value block b, in order:
        s1 = sum over sub-blocks s of sc[s] * (w codes . x codes)       (int32, exact)
        s2 = sum over sub-blocks s of mn[s] * (x codes summed)          (Q4_K/Q5_K only)
        res = d_w * float(s1)                             (float32, rounded; float(s1) rounds past 2^24)
        res = fma(-dmin_w, float(s2), res)                (Q4_K/Q5_K: `_mm256_fnmadd_ps`)
        buf = fma(res, dy, buf)                           (`_mm256_fmadd_ps`)

Q6_K's codes are 0..63 with 32 subtracted (`BIAS` 32: sc * 32 * the sums of 16 x codes taken off s1,
exactly as the kernel's integer correction does). The 16 x 16 micro-tiles and 256-row windows only
choose which outputs are computed together, so the result is the same for every token count of 8
or more: a pass's logits do not depend on its chunking as long as every chunk has 8+ tokens.

IQ4_XS goes the same way as Q6_K without its bias (the kernel's own +128 shift cancels in its integers), and
so do the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: `quantdot.GRID_TYPES`), their constant factor
taken into d as the kernel's unpacking does. The one-bit types (IQ1_S, IQ1_M: `quantdot.ONE_BIT`) too: the kernel
unpacks each value as 8 * grid value + offset sign (one integer code), its 1/8 taken into d.

Not handled here: Q2_K and Q3_K (`kquant_low` follows both their kernels); the AVX512-VNNI kernel
(another machine's build; same float order, not checked here).

Example: one Q6_K block with every code 33 (value 1) and every scale 1, d_w = 0.5, and an input
whose 256 Q8_K codes are all 2 with dy = 0.25: s1 = 256 * 2 = 512, res = 0.5 * 512 = 256,
buf = 256 * 0.25 = 64.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox import ggml_math, quantdot

MIN_ROWS = 8  # `ggml_tiled_min_batch`: the tiled kernel takes passes of this many tokens or more
# of `quantdot`'s types, those the tiled kernel takes (the grid types `quantdot.GRID_TYPES`, then `quantdot.ONE_BIT`)
TAKES = frozenset({Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
                   Q.IQ1_S, Q.IQ1_M})
SLAB_ELEMENTS = 1 << 22  # integer sums held at once (bounds memory: 32 MiB float64)


def applies(qtype: Q, n_tokens: int) -> bool:
    """Whether llama.cpp's CPU backend multiplies this weight type with the tiled kernel in a pass of n_tokens."""
    return qtype in TAKES and n_tokens >= MIN_ROWS


def block_major(lanes: np.ndarray, nb: int) -> np.ndarray:
    """`quantdot.Packed.lanes` [nb * 8, o, 32] -> [nb, o, 256] float64 (values in `x_block_major`'s order)."""
    o = lanes.shape[1]
    return lanes.reshape(nb, quantdot.LANES, o, 32).transpose(0, 2, 1, 3).reshape(nb, o, quantdot.QK_K)


def x_block_major(codes: np.ndarray) -> np.ndarray:
    """Q8_K codes [n, nb, 256] -> [nb, n, 256] float64, each block's values in the order `Packed.lanes` holds them."""
    n, nb, _ = codes.shape
    lanes = codes.reshape(n, nb, 8, quantdot.LANES, 4).transpose(1, 0, 3, 2, 4)  # [b, t, lane, sub-block, 4]
    return lanes.reshape(nb, n, quantdot.QK_K).astype(np.float64)


def matmul(x: np.ndarray, w: quantdot.Packed) -> np.ndarray:
    """[n, n_in] float32 @ w.T -> [n, n_out] float32, as `ggml_compute_forward_mul_mat_tiled` computes it."""
    if w.qtype not in TAKES:
        raise ValueError(f"{w.qtype.name} is not a type this module follows the tiled kernel for")
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    codes, dy = quantdot.quantize_q8_k(x)  # [n, nb, 256], [n, nb]
    nb = codes.shape[1]
    xb = x_block_major(codes)  # [nb, n, 256]
    sums16 = codes.reshape(n, nb, 16, 16).sum(axis=-1, dtype=np.float64)  # bsums [n, nb, 16]
    out = np.empty((n, w.n_out), dtype=np.float32)
    step = max(1, SLAB_ELEMENTS // max(1, nb * quantdot.QK_K))
    for o0 in range(0, w.n_out, step):
        o = slice(o0, min(o0 + step, w.n_out))
        wb = block_major(_tiled_codes(w, o), nb).astype(np.float64)  # [nb, slab, 256]: codes times sub-block scales
        s1 = np.matmul(xb, wb.transpose(0, 2, 1))  # [nb, n, slab]: exact integer sums
        if w.qtype == Q.Q6_K:  # the codes are stored unsigned: take off 32 * sc * (16 x codes summed)
            s1 = s1 - 32 * np.einsum("tbk,obk->bto", sums16, w.sub[o].astype(np.float64))
            out[:, o] = combine(s1, None, w.d[o], None, dy)
        elif w.qtype == Q.IQ4_XS:  # signed codes times their sub-block scale, no mins
            out[:, o] = combine(s1, None, w.d[o], None, dy)
        elif w.qtype in quantdot.GRID_TYPES:  # likewise, the type's constant taken into d (`tiled_unpack_src0`)
            out[:, o] = combine(s1, None, w.d[o] * np.float32(quantdot.GRID_TYPES[w.qtype][1]), None, dy)
        elif w.qtype in quantdot.ONE_BIT:  # codes 8 * grid + sign, the 1/8 taken into d
            out[:, o] = combine(s1, None, w.d[o] * quantdot.ONE_BIT_DELTA, None, dy)
        else:  # mins per 32-value sub-block, times the sum of that sub-block's 32 x codes
            q8s = sums16.reshape(n, nb, 8, 2).sum(axis=-1)  # [n, nb, 8]
            s2 = np.einsum("tbs,obs->bto", q8s, w.sub[o].astype(np.float64))
            out[:, o] = combine(s1, s2, w.d[o], w.m[o], dy)
    return out


def _tiled_codes(w: quantdot.Packed, o: slice) -> np.ndarray:
    """`Packed.lanes` [nb * 8, slab, 32] of outputs o as the tiled kernel holds them: the same, but for the one-bit types
    8 * (grid value times scale) + sign times scale, each lane's 4 values sharing that lane's sign and scale."""
    if w.qtype not in quantdot.ONE_BIT:
        return w.lanes[:, o]
    signed = w.m[o]  # [slab, nb, sub-block, lane]
    offsets = np.repeat(signed.transpose(1, 3, 0, 2), 4, axis=-1)  # [nb, lane, slab, sub-block * 4]
    return 8 * w.lanes[:, o] + offsets.reshape(w.lanes[:, o].shape)


def combine(s1: np.ndarray, s2: np.ndarray | None, d: np.ndarray, dmin: np.ndarray | None,
            dy: np.ndarray) -> np.ndarray:
    """The tiled kernel's float steps over a pass's exact integer sums (the module docstring's loop).

    s1 [nb, n, o] (and s2 for types with mins) exact integers as float64, d and dmin [o, nb] the
    weight's block scales, dy [n, nb] Q8_K's scales -> [n, o] float32.
    """
    res = d.T[:, None, :] * s1.astype(np.float32)  # [nb, n, o]: float(s1) rounded past 2^24, then the product
    if s2 is not None:
        res = ggml_math.fma32(-dmin.T[:, None, :], s2.astype(np.float32), res)
    acc = np.zeros(res.shape[1:], dtype=np.float32)  # [n, o]
    for b in range(res.shape[0]):
        acc = ggml_math.fma32(res[b], dy[:, b, None], acc)
    return acc
