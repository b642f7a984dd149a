"""llama.cpp's reference k-quant rounding, written for numpy: Q6_K so far (issue 31, item 1).

gguf-py can read k-quant blocks but not write them, so the block view could not round a block to Q6_K.
This module follows the rules of `quantize_row_q6_K_ref` and its helper `make_qx_quants` (ggml-quants.c,
llama.cpp as vendored in llama-cpp-python 0.3.36), keeping every operation in float32 in the same order,
so the bytes are the ones llama.cpp writes (tests/test_kquants.py compares them with ggml_quantize_chunk).

Q6_K: a super-block of 256 values is 16 sub-blocks of 16. Each sub-block gets its own best scale (a
search over 19 candidate scales, weighting each value by its square), the 16 scales are stored as int8
steps of one FP16 super-scale, and each value as a 6-bit level 0..63 (q - 32). 210 bytes per 256 values:
6.5625 bits per weight.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

__all__ = ["Q6_K_BYTES", "QK_K", "WRITERS", "quantize_q6_k"]

QK_K = 256
Q6_K_BYTES = QK_K // 2 + QK_K // 4 + QK_K // 16 + 2  # ql, qh, scales, d: 210
GROUP_MAX_EPS = np.float32(1e-15)
F32 = np.float32


def _nearest(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: round half to even of a float32 (|v| < 2^22)."""
    return np.rint(v).astype(np.int32)


def _make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's scale and levels (0..2*nmax-1), by make_qx_quants with rmse_type 1 (weights x^2), no imatrix.

    x: (rows, n) float32 -> scale (rows,) float32, levels (rows, n) int32.
    """
    rows, n = x.shape
    ax = np.abs(x)
    first = np.argmax(ax, axis=1)  # the first largest |x|, as the C loop's strict ">" keeps
    amax = ax[np.arange(rows), first]
    vmax = x[np.arange(rows), first]
    zero = amax < GROUP_MAX_EPS
    vmax = np.where(zero, F32(1), vmax).astype(F32)
    w = (x * x).astype(F32)  # (rows, n)

    def levels(iscale: np.ndarray) -> np.ndarray:
        return np.clip(_nearest((iscale[:, None] * x).astype(F32)), -nmax, nmax - 1)

    def sums(lv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lf = lv.astype(F32)
        sumlx = np.zeros(rows, F32)
        suml2 = np.zeros(rows, F32)
        for i in range(n):  # in order, as the C loop adds
            sumlx = (sumlx + (w[:, i] * x[:, i]) * lf[:, i]).astype(F32)
            suml2 = (suml2 + (w[:, i] * lf[:, i]) * lf[:, i]).astype(F32)
        return sumlx, suml2

    iscale = (F32(-nmax) / vmax).astype(F32)
    lv = levels(iscale)
    sumlx, suml2 = sums(lv)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(F32)
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = (-(F32(nmax) + F32(0.1) * F32(step)) / vmax).astype(F32)
        trial = levels(iscale)
        tx, t2 = sums(trial)
        better = (t2 > 0) & ((tx * tx).astype(F32) > (best * t2).astype(F32))
        lv = np.where(better[:, None], trial, lv)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(better, (tx / t2).astype(F32), scale).astype(F32)
        best = np.where(better, (scale * tx).astype(F32), best).astype(F32)
    scale = np.where(zero, F32(0), scale).astype(F32)
    lv = np.where(zero[:, None], 0, lv + nmax)
    return scale, lv.astype(np.int32)


def quantize_q6_k(values: np.ndarray) -> bytes:
    """The Q6_K bytes of `values` (float32, a multiple of 256 long), as llama.cpp's reference quantizer writes."""
    x = np.ascontiguousarray(values, dtype=F32).reshape(-1, QK_K)  # (blocks, 256)
    nb = x.shape[0]
    sub = x.reshape(nb * 16, 16)
    scales, lv = _make_qx_quants(sub, 32)
    scales = scales.reshape(nb, 16)
    lv = lv.reshape(nb, QK_K)
    first = np.argmax(np.abs(scales), axis=1)
    max_scale = scales[np.arange(nb), first]
    empty = np.abs(max_scale) < GROUP_MAX_EPS
    safe = np.where(empty, F32(1), max_scale).astype(F32)
    iscale = (F32(-128) / safe).astype(F32)
    d16 = (F32(1) / iscale).astype(F32).astype(np.float16)  # (nb,)
    q_scales = np.minimum(127, _nearest((iscale[:, None] * scales).astype(F32)))  # (nb, 16)
    d = (d16.astype(F32)[:, None] * q_scales.astype(F32)).astype(F32)  # (nb, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest((x.reshape(nb, 16, 16) / d[:, :, None]).astype(F32)), -32, 31) + 32
    lv = np.where((d != 0)[:, :, None], fresh, lv.reshape(nb, 16, 16)).reshape(nb, QK_K).astype(np.uint8)
    out = np.zeros((nb, Q6_K_BYTES), np.uint8)
    for half in range(2):  # two halves of 128 values: 64 bytes of low nibbles, 32 of high bits each
        part = lv[:, 128 * half: 128 * half + 128].reshape(nb, 4, 32)  # (nb, quarter, 32)
        low, high = part & 0xF, part >> 4
        out[:, 64 * half: 64 * half + 32] = low[:, 0] | (low[:, 2] << 4)
        out[:, 64 * half + 32: 64 * half + 64] = low[:, 1] | (low[:, 3] << 4)
        out[:, 128 + 32 * half: 128 + 32 * half + 32] = high[:, 0] | (high[:, 1] << 2) | (high[:, 2] << 4) | (
            high[:, 3] << 6)
    out[:, 192:208] = q_scales.astype(np.int8).view(np.uint8)
    out[:, 208:210] = d16.view(np.uint8).reshape(nb, 2)
    out[empty] = 0
    return out.tobytes()


WRITERS: dict[Q, Callable[[np.ndarray], bytes]] = {Q.Q6_K: quantize_q6_k}  # type -> its reference quantizer
