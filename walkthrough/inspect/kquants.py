"""llama.cpp's reference k-quant rounding, written for numpy: Q6_K, Q5_K, Q4_K, Q3_K and Q2_K (issue 31, item 1).

gguf-py can read k-quant blocks but not write them, so the block view could not round a block to Q6_K.
This module follows the rules of `quantize_row_q{6,5,4}_K_ref` and their helpers `make_qx_quants` and
`make_qkx2_quants` (ggml-quants.c,
llama.cpp as vendored in llama-cpp-python 0.3.36), keeping every operation in float32 in the same order,
so the bytes are the ones llama.cpp writes (tests/test_kquants.py compares them with ggml_quantize_chunk).

Q6_K: a super-block of 256 values is 16 sub-blocks of 16. Each sub-block gets its own best scale (a
search over 19 candidate scales, weighting each value by its square), the 16 scales are stored as int8
steps of one FP16 super-scale, and each value as a 6-bit level 0..63 (q - 32). 210 bytes per 256 values:
6.5625 bits per weight.

Q5_K, Q4_K: a super-block of 256 is 8 sub-blocks of 32, each with a scale and a minimum found by a search
over candidate scales (weighted least squares, weights sqrt(mean x^2) + |x|), both stored as 6-bit steps
of two FP16 super-scales; levels are 5 or 4 bits (x ~ d*sc*q - dmin*m). 176 / 144 bytes per 256 values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

__all__ = ["Q6_K_BYTES", "QK_K", "WRITERS", "quantize_q2_k", "quantize_q3_k", "quantize_q4_k", "quantize_q5_k", "quantize_q6_k"]

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



def _rms_plus_abs(x: np.ndarray) -> np.ndarray:
    """Q4_K's and Q5_K's weights: sqrt(mean x^2) of the row + |x|; (rows, n) -> (rows, n)."""
    sum_x2 = np.zeros(x.shape[0], F32)
    for i in range(x.shape[1]):
        sum_x2 = (sum_x2 + x[:, i] * x[:, i]).astype(F32)
    av_x = np.sqrt((sum_x2 / F32(x.shape[1])).astype(F32)).astype(F32)
    return (av_x[:, None] + np.abs(x)).astype(F32)


def _make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
                      use_mad: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's scale, negated min and levels 0..nmax, by make_qkx2_quants (weighted squared error, or
    absolute with use_mad); x, w: (rows, n) float32."""
    rows, n = x.shape
    vmin = np.minimum(x.min(axis=1), F32(0)).astype(F32)
    vmax = x.max(axis=1).astype(F32)
    sum_w = w[:, 0].copy()
    sum_x = (sum_w * x[:, 0]).astype(F32)
    for i in range(1, n):
        sum_w = (sum_w + w[:, i]).astype(F32)
        sum_x = (sum_x + w[:, i] * x[:, i]).astype(F32)
    flat = vmax == vmin

    def levels(iscale: np.ndarray, low: np.ndarray) -> np.ndarray:
        shifted = (x - low[:, None]).astype(F32)
        return np.clip(_nearest((iscale[:, None] * shifted).astype(F32)), 0, nmax)

    def error(scale: np.ndarray, lv: np.ndarray, low: np.ndarray) -> np.ndarray:
        diff = ((scale[:, None] * lv.astype(F32)).astype(F32) + low[:, None] - x).astype(F32)
        diff = np.abs(diff) if use_mad else (diff * diff).astype(F32)
        total = np.zeros(rows, F32)
        for i in range(n):
            total = (total + w[:, i] * diff[:, i]).astype(F32)
        return total

    low = vmin.copy()
    iscale = (F32(nmax) / np.where(flat, F32(1), vmax - low)).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    lv = levels(iscale, low)
    best = error(scale, lv, low)
    for step in range(nstep + 1):
        # the C loop divides by max - min with min as last improved (a better step moves it)
        span = np.where(flat, F32(1), (vmax - low)).astype(F32)
        iscale = (((F32(rmin) + F32(rdelta) * F32(step)).astype(F32) + F32(nmax)) / span).astype(F32)
        trial = levels(iscale, low)
        tf = trial.astype(F32)
        sum_l = np.zeros(rows, F32)
        sum_l2 = np.zeros(rows, F32)
        sum_xl = np.zeros(rows, F32)
        for i in range(n):
            wl = (w[:, i] * tf[:, i]).astype(F32)
            sum_l = (sum_l + wl).astype(F32)
            sum_l2 = (sum_l2 + wl * tf[:, i]).astype(F32)
            sum_xl = (sum_xl + wl * x[:, i]).astype(F32)
        det = ((sum_w * sum_l2).astype(F32) - (sum_l * sum_l).astype(F32)).astype(F32)
        ok = det > 0
        safe = np.where(ok, det, F32(1)).astype(F32)
        t_scale = (((sum_w * sum_xl).astype(F32) - (sum_x * sum_l).astype(F32)) / safe).astype(F32)
        t_min = (((sum_l2 * sum_x).astype(F32) - (sum_l * sum_xl).astype(F32)) / safe).astype(F32)
        positive = t_min > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            t_scale = np.where(positive, (sum_xl / sum_l2).astype(F32), t_scale).astype(F32)
        t_min = np.where(positive, F32(0), t_min).astype(F32)
        cur = error(t_scale, trial, t_min)
        better = ok & (cur < best)
        lv = np.where(better[:, None], trial, lv)
        best = np.where(better, cur, best).astype(F32)
        scale = np.where(better, t_scale, scale).astype(F32)
        low = np.where(better, t_min, low).astype(F32)
    scale = np.where(flat, F32(0), scale).astype(F32)
    lv = np.where(flat[:, None], 0, lv)
    return scale, (-np.where(flat, vmin, low)).astype(F32), lv.astype(np.int32)


def _pack_scales_mins(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins in 12 bytes, as get_scale_min_k4 reads them; (nb, 8) each -> (nb, 12)."""
    out = np.zeros((ls.shape[0], 12), np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out


def _scale_min_k(values: np.ndarray, nmax: int, rmin: float, nstep: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's common part: (blocks, 256) -> fp16 d and dmin (nb,), packed scales (nb, 12), levels (nb, 256)."""
    x = np.ascontiguousarray(values, dtype=F32).reshape(-1, QK_K)
    nb = x.shape[0]
    with np.errstate(all="ignore"):  # an all-negative sub-block can make max - min vanish, as in C
        sub = x.reshape(nb * 8, 32)
        scales, mins, lv = _make_qkx2_quants(sub, _rms_plus_abs(sub), nmax, rmin, 0.1, nstep)
    scales, mins = scales.reshape(nb, 8), mins.reshape(nb, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0)).astype(F32)
    max_min = np.maximum(mins.max(axis=1), F32(0)).astype(F32)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
    ls = np.minimum(63, _nearest((inv_scale[:, None] * scales).astype(F32)) & 0xFF).astype(np.uint8)
    lm = np.minimum(63, _nearest((inv_min[:, None] * mins).astype(F32)) & 0xFF).astype(np.uint8)
    d16 = (max_scale / F32(63)).astype(F32).astype(np.float16)
    dmin16 = (max_min / F32(63)).astype(F32).astype(np.float16)
    d = (d16.astype(F32)[:, None] * ls.astype(F32)).astype(F32)  # (nb, 8)
    dm = (dmin16.astype(F32)[:, None] * lm.astype(F32)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = _nearest(((x.reshape(nb, 8, 32) + dm[:, :, None]).astype(F32) / d[:, :, None]).astype(F32))
    fresh = np.clip(fresh, 0, nmax)
    lv = np.where((d != 0)[:, :, None], fresh, lv.reshape(nb, 8, 32)).reshape(nb, QK_K).astype(np.uint8)
    head = np.concatenate([d16.view(np.uint8).reshape(nb, 2), dmin16.view(np.uint8).reshape(nb, 2),
                           _pack_scales_mins(ls, lm)], axis=1)
    return head, lv


def quantize_q4_k(values: np.ndarray) -> bytes:
    """The Q4_K bytes of `values` as quantize_row_q4_K_ref writes them: d, dmin, 12 bytes of 6-bit sub-block
    scales and mins, then 4-bit levels (x ~ d*sc*q - dmin*m), 144 bytes per 256 values."""
    head, lv = _scale_min_k(values, 15, -1.0, 20)
    nb = lv.shape[0]
    part = lv.reshape(nb, 4, 2, 32)  # (nb, 64-value chunk, low/high half, 32)
    qs = (part[:, :, 0] | (part[:, :, 1] << 4)).reshape(nb, 128)
    return np.concatenate([head, qs], axis=1).tobytes()


def quantize_q5_k(values: np.ndarray) -> bytes:
    """The Q5_K bytes of `values` as quantize_row_q5_K_ref writes them: as Q4_K with 5-bit levels, the fifth
    bits in 32 bytes of qh, 176 bytes per 256 values."""
    head, lv = _scale_min_k(values, 31, -0.5, 15)
    nb = lv.shape[0]
    part = lv.reshape(nb, 4, 2, 32)
    low = part & 0xF
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(nb, 128)
    high = (part >> 4).astype(np.uint8)  # (nb, 4, 2, 32): bit 2*chunk + half of qh[j]
    shifts = (2 * np.arange(4)[:, None] + np.arange(2)[None, :]).astype(np.uint8)  # (4, 2)
    qh = np.bitwise_or.reduce((high << shifts[None, :, :, None]).reshape(nb, 8, 32), axis=1).astype(np.uint8)
    return np.concatenate([head, qh, qs], axis=1).tobytes()


def quantize_q2_k(values: np.ndarray) -> bytes:
    """The Q2_K bytes of `values` as quantize_row_q2_K_ref writes them: 16 bytes of 4-bit sub-block scales
    and mins (16 sub-blocks of 16, fitted by absolute error weighted by |x|), 64 bytes of 2-bit levels, then
    d and dmin (x ~ d*sc*q - dmin*m), 84 bytes per 256 values."""
    x = np.ascontiguousarray(values, dtype=F32).reshape(-1, QK_K)
    nb = x.shape[0]
    sub = x.reshape(nb * 16, 16)
    with np.errstate(all="ignore"):
        scales, mins, lv = _make_qkx2_quants(sub, np.abs(sub).astype(F32), 3, -0.5, 0.1, 15, use_mad=True)
    scales, mins = scales.reshape(nb, 16), mins.reshape(nb, 16)
    max_scale = np.maximum(scales.max(axis=1), F32(0)).astype(F32)
    max_min = np.maximum(mins.max(axis=1), F32(0)).astype(F32)
    q4 = F32(15)
    with np.errstate(divide="ignore"):
        iscale = np.where(max_scale > 0, q4 / max_scale, F32(0)).astype(F32)
        imin = np.where(max_min > 0, q4 / max_min, F32(0)).astype(F32)
    sc = (_nearest((iscale[:, None] * scales).astype(F32)) & 0xFF).astype(np.uint8)
    sc = sc | ((_nearest((imin[:, None] * mins).astype(F32)) << 4) & 0xFF).astype(np.uint8)
    d16 = np.where(max_scale > 0, max_scale / q4, F32(0)).astype(F32).astype(np.float16)
    dmin16 = np.where(max_min > 0, max_min / q4, F32(0)).astype(F32).astype(np.float16)
    d = (d16.astype(F32)[:, None] * (sc & 0xF).astype(F32)).astype(F32)  # (nb, 16)
    dm = (dmin16.astype(F32)[:, None] * (sc >> 4).astype(F32)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = _nearest(((x.reshape(nb, 16, 16) + dm[:, :, None]).astype(F32) / d[:, :, None]).astype(F32))
    fresh = np.clip(fresh, 0, 3)
    lv = np.where((d != 0)[:, :, None], fresh, lv.reshape(nb, 16, 16)).reshape(nb, 2, 4, 32).astype(np.uint8)
    qs = (lv[:, :, 0] | (lv[:, :, 1] << 2) | (lv[:, :, 2] << 4) | (lv[:, :, 3] << 6)).reshape(nb, 64)
    return np.concatenate([sc, qs, d16.view(np.uint8).reshape(nb, 2), dmin16.view(np.uint8).reshape(nb, 2)],
                          axis=1).tobytes()


def _make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's scale and levels 0..2*nmax-1 by make_q3_quants with do_rmse: round at -nmax/max, then five
    passes moving one level at a time while the weighted (x^2) fit improves; x: (rows, n) float32."""
    rows, n = x.shape
    ax = np.abs(x)
    first = np.argmax(ax, axis=1)
    amax = ax[np.arange(rows), first]
    zero = amax < GROUP_MAX_EPS
    vmax = np.where(zero, F32(1), x[np.arange(rows), first]).astype(F32)
    iscale = (F32(-nmax) / vmax).astype(F32)
    lv = np.clip(_nearest((iscale[:, None] * x).astype(F32)), -nmax, nmax - 1)
    w = (x * x).astype(F32)
    wx = (w * x).astype(F32)
    sumlx = np.zeros(rows, F32)
    suml2 = np.zeros(rows, F32)
    for i in range(n):
        lf = lv[:, i].astype(F32)
        sumlx = (sumlx + wx[:, i] * lf).astype(F32)
        suml2 = (suml2 + (w[:, i] * lf).astype(F32) * lf).astype(F32)
    for _ in range(5):  # a pass that changes nothing leaves the state as it was, so no early stop is needed
        for i in range(n):
            old = lv[:, i].astype(F32)
            slx = (sumlx - (wx[:, i] * old).astype(F32)).astype(F32)
            sl2 = (suml2 - ((w[:, i] * old).astype(F32) * old).astype(F32)).astype(F32)
            with np.errstate(all="ignore"):
                new = np.clip(_nearest(((x[:, i] * sl2).astype(F32) / slx).astype(F32)), -nmax, nmax - 1)
            nf = new.astype(F32)
            slx2 = (slx + (wx[:, i] * nf).astype(F32)).astype(F32)
            sl22 = (sl2 + ((w[:, i] * nf).astype(F32) * nf).astype(F32)).astype(F32)
            gain = (((slx2 * slx2).astype(F32) * suml2).astype(F32)
                    > ((sumlx * sumlx).astype(F32) * sl22).astype(F32))
            take = (slx > 0) & (new != lv[:, i]) & (sl22 > 0) & gain
            lv[:, i] = np.where(take, new, lv[:, i])
            sumlx = np.where(take, slx2, sumlx).astype(F32)
            suml2 = np.where(take, sl22, suml2).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0)).astype(F32)
    scale = np.where(zero, F32(0), scale).astype(F32)
    return scale, np.where(zero[:, None], 0, lv + nmax).astype(np.int32)


def quantize_q3_k(values: np.ndarray) -> bytes:
    """The Q3_K bytes of `values` as quantize_row_q3_K_ref writes them: the high bit of each 3-bit level in
    32 bytes of hmask, the low two bits in 64 bytes, 16 signed 6-bit sub-block scales in 12 bytes, then d
    (x ~ d*sc*(q - 4)), 110 bytes per 256 values."""
    x = np.ascontiguousarray(values, dtype=F32).reshape(-1, QK_K)
    nb = x.shape[0]
    scales, lv = _make_q3_quants(x.reshape(nb * 16, 16), 4)
    scales = scales.reshape(nb, 16)
    first = np.argmax(np.abs(scales), axis=1)
    max_scale = scales[np.arange(nb), first]
    some = max_scale != 0
    iscale = (F32(-32) / np.where(some, max_scale, F32(1))).astype(F32)
    q = np.clip(_nearest((iscale[:, None] * scales).astype(F32)).astype(np.int8), -32, 31).astype(np.int32) + 32
    q = np.where(some[:, None], q, 0)  # (nb, 16) 0..63
    packed = np.zeros((nb, 12), np.uint8)
    packed[:, 0:8] = (q[:, 0:8] & 0xF) | ((q[:, 8:16] & 0xF) << 4)
    high = (q >> 4).reshape(nb, 4, 4)  # [j // 4, j % 4]
    packed[:, 8:12] = high[:, 0] | (high[:, 1] << 2) | (high[:, 2] << 4) | (high[:, 3] << 6)
    d16 = np.where(some, (F32(1) / iscale).astype(F32), F32(0)).astype(np.float16)
    d = (d16.astype(F32)[:, None] * (q - 32).astype(F32)).astype(F32)  # (nb, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest((x.reshape(nb, 16, 16) / d[:, :, None]).astype(F32)), -4, 3) + 4
    lv = np.where((d != 0)[:, :, None], fresh, lv.reshape(nb, 16, 16)).reshape(nb, QK_K)
    bits = (lv > 3).reshape(nb, 8, 32).astype(np.uint8)  # value j's high bit: byte j % 32, bit j // 32
    hmask = np.bitwise_or.reduce(bits << np.arange(8, dtype=np.uint8)[None, :, None], axis=1).astype(np.uint8)
    low = (lv & 3).astype(np.uint8).reshape(nb, 2, 4, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 2) | (low[:, :, 2] << 4) | (low[:, :, 3] << 6)).reshape(nb, 64)
    return np.concatenate([hmask, qs, packed, d16.view(np.uint8).reshape(nb, 2)], axis=1).tobytes()

WRITERS: dict[Q, Callable[[np.ndarray], bytes]] = {Q.Q6_K: quantize_q6_k, Q.Q5_K: quantize_q5_k, Q.Q4_K: quantize_q4_k, Q.Q3_K: quantize_q3_k, Q.Q2_K: quantize_q2_k}  # type -> its reference quantizer
