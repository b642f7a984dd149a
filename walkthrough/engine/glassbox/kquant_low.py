"""Q2_K and Q3_K matrix products computed as ggml's CPU backend computes them (x86 AVX2 + FMA).

The input row is quantized to Q8_K (`quantdot.quantize_q8_k`). Passes of under 8 tokens take
`ggml_vec_dot_q2_K_q8_K` / `ggml_vec_dot_q3_K_q8_K` (ggml-cpu/arch/x86/quants.c): per 256-value
block, 8 int32 lanes of integer sums (lane l: values 4l..4l+3 of every 32-value chunk, each times
its 16-value group's scale), then per lane in float32

    Q2_K:  acc = fma(-(dy * dmin_w), m_sums[lane], acc)     m_sums: mins[2l] bsums[2l] + mins[2l+1] bsums[2l+1]
           acc = fma(dy * d_w, isum[lane], acc)
    Q3_K:  acc = fma(dy * d_w, isum[lane], acc)

and `hsum_float_8` at the end. Passes of 8 tokens or more take llama.cpp's tiled kernel
(`kquant_tiled.combine`, the same steps as Q4_K's: Q2_K with its mins, Q3_K without).

Stored blocks (ggml-common.h): Q2_K is 16 scale bytes (low nibble scale, high nibble min of each
16 values), 64 bytes of 2-bit codes, fp16 d and dmin: value = d * sc * q - dmin * m. Q3_K is a
32-byte high-bit mask, 64 bytes of low 2 bits, 12 bytes of 6-bit scales (minus 32) and fp16 d:
value = d * sc * (low2 - 4 unless the high bit is set). Value e = 128 j + 32 k + l of a block takes
bits 2k..2k+1 of code byte 32 j + l, and Q3_K's high bit 4 j + k of mask byte l.

Example: a Q3_K block with every code 2 and the high bit set (value 2), every scale 33 (1 after
the -32), d_w = 1, and an input whose Q8_K codes are all 1 with dy = 0.5: each lane sums
8 chunks x 4 values x 2 = 64, acc = 0.5 * 64 = 32 per lane, y = 8 * 32 = 256.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox import ggml_math, kquant_tiled, quantdot

TYPES = frozenset({Q.Q2_K, Q.Q3_K})
GROUPS = 16  # scales per 256-value block, one per 16 values


def _f16(b: np.ndarray) -> np.ndarray:
    """[..., 2] uint8 -> [...] float32 (little-endian fp16)."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(np.float32)


def _two_bit(qs: np.ndarray) -> np.ndarray:
    """[..., 64] code bytes -> [..., 256] 2-bit codes, value 128 j + 32 k + l from bits 2k of byte 32 j + l."""
    q = qs.reshape(*qs.shape[:-1], 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]  # [.., j, k, l]
    return (q & 3).reshape(*qs.shape[:-1], 256)


def _q3_scales(s: np.ndarray) -> np.ndarray:
    """[..., 12] packed 6-bit Q3_K scales -> [..., 16] signed (minus 32), as `ggml_vec_dot_q3_K_q8_K` decodes them."""
    i = np.arange(GROUPS)
    low = (s[..., i % 8] >> (4 * (i // 8)).astype(np.uint8)) & 15
    high = (s[..., 8 + i % 4] >> (2 * (i // 4)).astype(np.uint8)) & 3
    return (low | (high << 4)).astype(np.int32) - 32


def unpack(raw: np.ndarray, qtype: Q, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Stored rows -> (codes [n_out, n_in] int32, d [n_out, nb], dmin [n_out, nb] or None, scales).

    Q2_K: codes 0..3, scales (sc, mn) stacked [n_out, nb, 2, 16]; Q3_K: codes -4..3, sc [n_out, nb, 16].
    """
    block, size = GGML_QUANT_SIZES[qtype]
    b = raw.reshape(-1, n_in // block, size)  # [n_out, nb, bytes]
    if qtype == Q.Q2_K:
        codes = _two_bit(b[..., 16:80]).astype(np.int32)
        sub = np.stack([b[..., 0:16] & 15, b[..., 0:16] >> 4], axis=-2).astype(np.int32)
        d, dmin = _f16(b[..., 80:82]), _f16(b[..., 82:84])
    elif qtype == Q.Q3_K:
        high = np.unpackbits(b[..., 0:32, None], axis=-1, bitorder="little")  # [.., l, bit 4j + k]
        high = np.moveaxis(high, -2, -1).reshape(*b.shape[:-1], 256)  # value 128 j + 32 k + l
        codes = _two_bit(b[..., 32:96]).astype(np.int32) - 4 * (1 - high.astype(np.int32))
        sub, d, dmin = _q3_scales(b[..., 96:108]), _f16(b[..., 108:110]), None
    else:
        raise ValueError(f"{qtype.name} is not Q2_K or Q3_K")
    return codes.reshape(b.shape[0], n_in), d, dmin, sub


def pack(raw: np.ndarray, qtype: Q, n_in: int) -> quantdot.Packed:
    """Stored rows -> `quantdot.Packed`: lanes [nb * 8, n_out, 32] of codes times their group's scale
    (as `quantdot.pack` lays out the k-quants), d, dmin (Q2_K) and the mins [n_out, nb, 16] (Q2_K)."""
    codes, d, dmin, sub = unpack(raw, qtype, n_in)
    n_out, nb = codes.shape[0], n_in // quantdot.QK_K
    scales, mins = (sub[:, :, 0], sub[:, :, 1]) if qtype == Q.Q2_K else (sub, None)
    c = codes.reshape(n_out, nb, GROUPS, 16) * scales[..., None]  # [o, b, group, 16]
    lanes = c.reshape(n_out, nb, 8, quantdot.LANES, 4).transpose(1, 3, 0, 2, 4)  # [b, lane, o, chunk, 4]
    lanes = lanes.reshape(nb * quantdot.LANES, n_out, 32).astype(np.float32)
    return quantdot.Packed(qtype, n_out, n_in, np.ascontiguousarray(lanes), d, dmin,
                           None if mins is None else mins.astype(np.float32))


def matmul(x: np.ndarray, w: quantdot.Packed) -> np.ndarray:
    """[n, n_in] float32 @ w.T -> [n, n_out] float32 for a Q2_K or Q3_K weight, as ggml's CPU backend computes it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    codes, dy = quantdot.quantize_q8_k(x)  # [n, nb, 256], [n, nb]
    nb = codes.shape[1]
    bsums = codes.reshape(n, nb, GROUPS, 16).sum(axis=-1, dtype=np.float64)  # [n, nb, 16]
    tiled = n >= kquant_tiled.MIN_ROWS
    xb = kquant_tiled.x_block_major(codes) if tiled else None  # [nb, n, 256]
    xl = codes.reshape(n, nb, 8, quantdot.LANES, 4).transpose(1, 3, 0, 2, 4).reshape(-1, n, 32)  # [G, n, 32]
    out = np.empty((n, w.n_out), dtype=np.float32)
    step = max(1, quantdot.SLAB_ELEMENTS // max(1, nb * max(n, quantdot.QK_K)))
    for o0 in range(0, w.n_out, step):
        o = slice(o0, min(o0 + step, w.n_out))
        s2 = None if w.sub is None else np.einsum("tbg,obg->bto", bsums, w.sub[o].astype(np.float64))
        if tiled:  # exact integer sums per block, then the tiled kernel's float steps
            wb = kquant_tiled.block_major(w.lanes[:, o], nb).astype(np.float64)  # [nb, slab, 256]
            s1 = np.matmul(xb, wb.transpose(0, 2, 1))  # [nb, n, slab]
            out[:, o] = kquant_tiled.combine(s1, s2, w.d[o], w.m[o] if w.m is not None else None, dy)
            continue
        isum = np.matmul(xl.astype(np.float64), w.lanes[:, o].astype(np.float64).transpose(0, 2, 1))  # [G, n, slab]
        isum = isum.reshape(nb, quantdot.LANES, n, -1).astype(np.float32)  # exact: under 2^24
        scale = dy.T[:, :, None] * w.d[o].T[:, None, :]  # [nb, n, slab]: y.d * fp16 d, rounded
        acc = np.zeros(isum.shape[1:], dtype=np.float32)  # [lane, n, slab]
        if w.sub is not None:  # Q2_K: the mins of two 16-value groups per lane, first in each block
            m_sums = np.einsum("tblk,oblk->blto", bsums.reshape(n, nb, quantdot.LANES, 2),
                               w.sub[o].astype(np.float64).reshape(-1, nb, quantdot.LANES, 2)).astype(np.float32)
            dmin = -(dy.T[:, :, None] * w.m[o].T[:, None, :])  # [nb, n, slab]
        for b in range(nb):
            if w.sub is not None:
                acc = ggml_math.fma32(dmin[b], m_sums[b], acc)
            acc = ggml_math.fma32(scale[b], isum[b], acc)
        out[:, o] = ggml_math.hsum8(np.moveaxis(acc, 0, -1))
    return out
