"""Dequantization of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) in a few whole-array numpy operations.

A k-quant super-block holds 256 values in sub-blocks of 16 or 32, each with its own small integer
scale (and, for Q2_K, Q4_K and Q5_K, a minimum) times the block's F16 super-scale(s). The layouts are
the ones `inspect/kquants.py` writes and `dequantize_row_q*_K` in llama.cpp's ggml-quants.c reads:

    Q2_K  84 B: scales[16] (scale | min << 4), qs[64] (2-bit), d, dmin     x = d*sc*q - dmin*m
    Q3_K 110 B: hmask[32], qs[64] (2-bit), scales[12] (6-bit, signed), d   x = d*(sc-32)*(q - 4*(1-h))
    Q4_K 144 B: d, dmin, scales[12] (6-bit scale and min), qs[128]         x = d*sc*q - dmin*m
    Q5_K 176 B: as Q4_K with qh[32] (the fifth bits) before qs
    Q6_K 210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d   x = d*sc*(q - 32)

The arithmetic and its order are gguf.quants' (the sub-block factor d*sc in float32, then times the level,
then minus dmin*m), so the float32 values are the same bit for bit (tests/test_kquants.py, tests/test_memory_budget.py); the levels
are unpacked into one uint8 array and converted once, which is where the time goes
(tests/bench/bench_dequant_k.py measures both).

Example (Q6_K): a super-block with d = 0.5, scales[0] = 3 and its first level 35 starts with
0.5 * 3 * (35 - 32) = 4.5.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.inspect.kquants import QK_K

F32 = np.float32
K_SCALE_SIZE = 12  # bytes of Q3_K's, Q4_K's and Q5_K's packed 6-bit scales (and mins)
_SHIFT2 = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)  # four 2-bit fields of a byte
_SHIFT4 = np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)  # two nibbles of a byte
_BITS = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)  # eight bits of a byte


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """[N, bytes] -> [N, 1] float32: the F16 value at byte `at` of each block."""
    return np.ascontiguousarray(blocks[:, at: at + 2]).view(np.float16).astype(F32)


def _scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, 12] uint8 -> scales [N, 8], mins [N, 8] (uint8, 0..63), as get_scale_min_k4 unpacks them."""
    d, m, md = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc, mn


def _levels_to(q: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """uint8/int8 levels -> float32 array of `shape` (one conversion)."""
    out = np.empty(shape, F32)
    np.copyto(out, q.reshape(shape), casting="unsafe")
    return out


def q2_k(blocks: np.ndarray) -> np.ndarray:
    """[N, 84] uint8 -> [N, 256] float32"""
    n = blocks.shape[0]
    scales = blocks[:, 0:16]
    q = (blocks[:, 16:80].reshape(n, 2, 1, 32) >> _SHIFT2) & np.uint8(3)  # [N, 2 halves, 4 shifts, 32]
    out = _levels_to(q, (n, 16, 16))
    out *= (_f16(blocks, 80) * (scales & 0xF).astype(F32))[:, :, None]  # [N, 16, 1]
    out -= (_f16(blocks, 82) * (scales >> 4).astype(F32))[:, :, None]
    return out.reshape(n, QK_K)


def q3_k(blocks: np.ndarray) -> np.ndarray:
    """[N, 110] uint8 -> [N, 256] float32"""
    n = blocks.shape[0]
    packed = blocks[:, 96:108]
    low = (packed[:, 0:8].reshape(n, 1, 8) >> _SHIFT4.reshape(1, 2, 1)) & np.uint8(0x0F)  # [N, 2, 8]
    high = (packed[:, 8:12].reshape(n, 1, 4) >> _SHIFT2.reshape(1, 4, 1)) & np.uint8(3)  # [N, 4, 4]
    sc = (low.reshape(n, 16) | (high.reshape(n, 16) << np.uint8(4))).astype(np.int8) - np.int8(32)
    ql = (blocks[:, 32:96].reshape(n, 2, 1, 32) >> _SHIFT2) & np.uint8(3)  # [N, 2, 4, 32]
    h = (blocks[:, 0:32].reshape(n, 1, 32) >> _BITS) & np.uint8(1)  # [N, 8, 32]: group g's bit g
    q = ql.reshape(n, 8, 32).view(np.int8) - ((h ^ np.uint8(1)) << np.uint8(2)).view(np.int8)
    out = _levels_to(q, (n, 16, 16))
    out *= (_f16(blocks, 108) * sc.astype(F32))[:, :, None]
    return out.reshape(n, QK_K)


def _q45_k(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K's and Q5_K's common part: levels q [N, 8, 32] -> [N, 256] float32, x = d*sc*q - dmin*m."""
    n = blocks.shape[0]
    sc, mn = _scale_min(blocks[:, 4:16])
    out = _levels_to(q, (n, 8, 32))
    out *= (_f16(blocks, 0) * sc.astype(F32))[:, :, None]  # [N, 8, 1]
    out -= (_f16(blocks, 2) * mn.astype(F32))[:, :, None]
    return out.reshape(n, QK_K)


def q4_k(blocks: np.ndarray) -> np.ndarray:
    """[N, 144] uint8 -> [N, 256] float32"""
    n = blocks.shape[0]
    q = (blocks[:, 16:144].reshape(n, 4, 1, 32) >> _SHIFT4) & np.uint8(0x0F)  # [N, 4, 2 nibbles, 32]
    return _q45_k(blocks, q.reshape(n, 8, 32))


def q5_k(blocks: np.ndarray) -> np.ndarray:
    """[N, 176] uint8 -> [N, 256] float32"""
    n = blocks.shape[0]
    q = (blocks[:, 48:176].reshape(n, 4, 1, 32) >> _SHIFT4) & np.uint8(0x0F)
    h = (blocks[:, 16:48].reshape(n, 1, 32) >> _BITS) & np.uint8(1)  # [N, 8, 32]: sub-block s's bit s
    return _q45_k(blocks, q.reshape(n, 8, 32) | (h << np.uint8(4)))


def q6_k(blocks: np.ndarray) -> np.ndarray:
    """[N, 210] uint8 -> [N, 256] float32"""
    n = blocks.shape[0]
    ql = (blocks[:, 0:128].reshape(n, 2, 1, 64) >> _SHIFT4) & np.uint8(0x0F)  # [N, 2 halves, 2 nibbles, 64]
    qh = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> _SHIFT2) & np.uint8(3)  # [N, 2 halves, 4, 32]
    q = (ql.reshape(n, 8, 32) | (qh.reshape(n, 8, 32) << np.uint8(4))).view(np.int8) - np.int8(32)
    out = _levels_to(q, (n, 16, 16))
    out *= (_f16(blocks, 208) * blocks[:, 192:208].view(np.int8).astype(F32))[:, :, None]  # [N, 16, 1]
    return out.reshape(n, QK_K)


K_FAST: dict[Q, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {  # type -> (bytes per block, decoder)
    Q.Q2_K: (84, q2_k),
    Q.Q3_K: (110, q3_k),
    Q.Q4_K: (144, q4_k),
    Q.Q5_K: (176, q5_k),
    Q.Q6_K: (210, q6_k),
}
