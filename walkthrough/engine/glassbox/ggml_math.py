"""ggml's CPU float kernels (x86, AVX2 + FMA) in numpy, rounding step for step as they do.

numpy's own float32 functions round differently from ggml's: `np.exp` is not ggml's
vectorized exp, `np.sum` sums pairwise where ggml sums in order (often in double), and numpy
has no fused multiply-add. The functions here follow ggml-cpu's code (vec.h, vec.cpp, ops.cpp)
operation by operation, so on the same inputs they give llama.cpp's bits:

- `fma32(a, b, c)`: one float32 fused multiply-add (a*b + c rounded once). a*b is exact in
  float64; the sum is taken in float64 rounding to odd, which then rounds to float32 correctly.
- `v_expf(x)`: `ggml_v_expf` (vec.h, the __m256 version): a polynomial in fmas, with its own
  handling of large |x|.
- `silu(x)`: `ggml_v_silu`, x / (1 + v_expf(-x)).
- `soft_max_rows(x)`: `ggml_vec_soft_max_f32` plus the scaling of `ggml_compute_forward_soft_max_f32`:
  exps of 8 values summed as one AVX register (hsum), those sums added in double.
- `rms_scale(x, eps)`: `ggml_compute_forward_rms_norm_f32`'s 1 / sqrt(mean + eps), the squares
  summed in double in index order.
- `libm`: the C library's cosf / sinf / powf, the very functions ggml calls for RoPE's cache.

`rounded_expf(x)` is the cheap stand-in the engine's default path takes for `v_expf` in SiLU and in attention's
softmax (numpy's float64 exp, rounded once): not ggml's bits, in about half the time. `silu`, `exp_sum` and
`soft_max_rows` take it when told `exact=False`.

Not handled: the AVX512 and ARM variants (other polynomials and register widths); a row whose
length is not a multiple of 8 takes ggml's scalar tail (libm's expf), which only `soft_max_rows`
follows.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import numpy as np

F32 = np.float32


def _fma32_exact(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 of p + c (float64, p exact), rounding once: the sum taken rounding to odd, then to float32."""
    with np.errstate(invalid="ignore"):  # infinities: err is NaN, and s stays as it is
        s = p + c
        back = s - p
        err = (p - (s - back)) + (c - back)  # s + err == p + c exactly (TwoSum)
    # round to odd: an inexact sum with an even last bit moves one step towards the lost part
    inexact_even = (np.abs(err) > 0) & ((s.view(np.int64) & 1) == 0)
    s = np.where(inexact_even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(F32)


_HALF_F32_STEP = np.int64(1 << 28)  # float64 bits below a float32's last: 1 then 28 zeros is halfway
_LOW_BITS = np.int64((1 << 29) - 1)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray, *, tiny: bool = True) -> np.ndarray:
    """float32 a*b + c with one rounding (`_mm256_fmadd_ps`).

    a*b is exact in float64 and the float64 sum rounds at most once more; rounding that to float32 is
    then right unless the float64 sum sits exactly halfway between two float32s (or among the
    subnormals, unless `tiny` is False: the caller knows no result is): those few are redone exactly
    (`_fma32_exact`).
    """
    p = np.multiply(a, b, dtype=np.float64)  # exact: 24-bit x 24-bit
    s = p + c
    out = s.astype(F32)
    doubtful = (s.view(np.int64) & _LOW_BITS) == _HALF_F32_STEP
    if tiny:
        doubtful |= (np.abs(out) < F32(2.0 ** -125)) & (out != 0)
    if np.logical_or.reduce(doubtful, axis=None):
        shape = np.broadcast_shapes(p.shape, np.shape(c))
        out = np.array(np.broadcast_to(out, shape), F32)
        cc = np.broadcast_to(np.asarray(c, np.float64), shape)
        pp = np.broadcast_to(p, shape)
        out[doubtful] = _fma32_exact(pp[doubtful], cc[doubtful])
    return out


def _hex(text: str) -> np.float32:
    """A C hex float literal (vec.h writes ggml_v_expf's constants so) as float32; each is exact."""
    return F32(float.fromhex(text))


_LOG2E, _SHIFTER = _hex("0x1.715476p+0"), _hex("0x1.8p23")
_LN2_HI, _LN2_LO = _hex("0x1.62e4p-1"), _hex("0x1.7f7d1cp-20")
_P = [_hex(t) for t in ("0x1.0e4020p-7", "0x1.573e2ep-5", "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1")]


_LOG2E64, _LN2_HI64, _LN2_LO64 = (np.float64(c) for c in (_LOG2E, _LN2_HI, _LN2_LO))
_P64 = [np.float64(c) for c in _P]


def _rounds_right(s: np.ndarray) -> bool:
    """Whether every float64 value s rounds to the float32 its exact sum would: none sits halfway (see `fma32`)."""
    return not np.logical_or.reduce((s.view(np.int64) & _LOW_BITS) == _HALF_F32_STEP, axis=None)


# Values an elementwise chain takes at a time: its float64 temporaries (96 KiB) stay under glibc's default
# mmap threshold (128 KiB), so they are reused from the heap instead of mapped and faulted in afresh each time.
CHUNK = 12288


def elementwise_in_chunks(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """fn applied to x [...] float32, CHUNK values at a time ([...] float32, the same values: fn is elementwise).

    A chain of numpy operations over a large array makes each temporary as large, and the C library hands
    such blocks back to the system when freed, so every one costs page faults on its next use: on a
    prefill's 196,608 activations `silu` took 20 ms whole and 4 to 5 ms in chunks of 8,192 or 16,384 values
    (measured here; chunks of 32,768 were as slow as the whole array).
    """
    x = np.asarray(x, F32)
    if x.size <= CHUNK:
        return fn(x)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty_like(flat)
    for i in range(0, flat.size, CHUNK):
        out[i : i + CHUNK] = fn(flat[i : i + CHUNK])
    return out.reshape(x.shape)


def v_expf(x: np.ndarray) -> np.ndarray:
    """e^x as `ggml_v_expf` (vec.h, AVX2 + FMA) computes it: [...] float32 -> [...] float32 (see `v_expf_general`).

    The common case in fewer array passes: every 2^n normal (|n| <= 124) and no fma's float64 sum halfway between
    two float32s, checked once per step; anything else is `v_expf_general`'s. A large array goes a chunk at a time
    (`elementwise_in_chunks`).
    """
    return elementwise_in_chunks(_v_expf_chunk, x)


def _v_expf_chunk(x: np.ndarray) -> np.ndarray:
    """`v_expf` of one chunk."""
    x64 = x.astype(np.float64)
    n = x64 * _LOG2E64
    np.rint(n, out=n)  # [...] float64 integers
    if n.size == 0 or not (-124 <= np.minimum.reduce(n, axis=None) and np.maximum.reduce(n, axis=None) <= 124):
        # (also false for NaN and -inf)
        return v_expf_general(x)
    b = np.subtract(x64, n * _LN2_HI64, out=x64).astype(F32)  # exact before the rounding, as `v_expf_general`
    b64 = b.astype(np.float64)
    b = np.subtract(b64, n * _LN2_LO64, out=b64).astype(F32)
    b64 = b.astype(np.float64)
    u = (b * b).astype(np.float64)
    sums = np.empty((4, *x.shape))  # the float64 sum of each fma before its rounding, checked at once
    s1, s2, s3, s4 = sums
    np.multiply(b64, _P64[0], out=s1)
    s1 += _P64[1]  # t1 = fma(p0, b, p1)
    np.multiply(b64, _P64[2], out=s2)
    s2 += _P64[3]  # t2 = fma(p2, b, p3)
    np.multiply(s1.astype(F32), u, out=s3)
    s3 += s2.astype(F32)  # fma(t1, u, t2)
    np.multiply(s3.astype(F32), u, out=s4)
    s4 += (b * _P[4]).astype(np.float64)  # j = fma(that, u, p4 * b)
    if not _rounds_right(sums):
        return v_expf_general(x)
    k = ((n.astype(np.int32).view(np.uint32) << np.uint32(23)) + np.uint32(0x3F800000)).view(F32)  # 2^n
    j = s4.astype(F32)
    j += F32(1)
    j *= k
    return j


def v_expf_general(x: np.ndarray) -> np.ndarray:
    """e^x as `ggml_v_expf` (vec.h, AVX2 + FMA) computes it: [...] float32 -> [...] float32, every case.

    n = round(x / ln 2), b = x - n ln 2 (in two fmas, high and low parts of ln 2), e^x = 2^n (1 + j)
    with j a degree-5 polynomial in b evaluated in fmas. Three of ggml's fmas are taken here in
    float64, where they are exact before their one rounding: z = x log2(e) + 1.5 2^23 rounds
    x log2(e) to an integer, half to even (`np.rint` of the exact product); both steps of b are
    exact in float64 (|x| >= ln 2 / 2 when n != 0, so x's last bit is at least 2^-25, and ln 2's
    parts have 17 and 24 bits); and fma(j, 2^n, 2^n) is (1 + j) 2^n, a power of 2 scaling exactly
    while |n| <= 126.
    """
    x = np.asarray(x, F32)
    x64 = x.astype(np.float64)
    n = np.rint(x64 * np.float64(_LOG2E))  # [...] float64 integers (-inf for -inf: e^x is then 0)
    with np.errstate(invalid="ignore"):
        b = (x64 - n * np.float64(_LN2_HI)).astype(F32)
        b = (b - n * np.float64(_LN2_LO)).astype(F32)
        n = np.clip(n, -1000, 1000).astype(F32)  # beyond +-192 every result is 0 or inf
    u = b * b
    # |b| >= 2^-48 or b = 0, so no value of the polynomial is subnormal
    t1, t2 = fma32(_P[0], b, _P[1], tiny=False), fma32(_P[2], b, _P[3], tiny=False)
    j = fma32(fma32(t1, u, t2, tiny=False), u, _P[4] * b, tiny=False)
    e = (n.astype(np.int32).view(np.uint32) << np.uint32(23))  # the bits of z shifted, as ggml takes them
    k = (e + np.uint32(0x3F800000)).view(F32)  # 2^n
    out = (j + F32(1)) * k
    low = n < F32(-124)  # 2^n (1 + j) may fall among the subnormals: rounded once there, by the fma itself
    if low.any():
        out[low] = fma32(k[low], j[low], k[low])
    big = np.abs(n) > F32(126)
    if not big.any():
        return out
    g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0))
    s1 = (g + np.uint32(0x7F000000)).view(F32)
    s2 = (e - g).view(F32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        huge = s1 * s1  # |n| > 192: overflow to inf or underflow to 0
        scaled = fma32(s2, j, s2) * s1
    return np.where(np.abs(n) > F32(192), huge, np.where(big, scaled, out)).astype(F32)


def rounded_expf(x: np.ndarray) -> np.ndarray:
    """e^x [...] float32 -> [...] float32: numpy's float64 exp rounded once, so the nearest float32 all but always.

    Not `ggml_v_expf`'s bits: that polynomial is off the nearest float32 by 1 to 3 steps in about half the values.
    But about half the time of following it (`v_expf`: 17 to 21 against 10 to 12 ns a value over 12,288 values,
    measured here with the heap warm). A value's exp does not depend on the array's shape or layout, so passes of
    any size agree. A large array goes a chunk at a time (`elementwise_in_chunks`).
    """
    return elementwise_in_chunks(_rounded_expf_chunk, x)


def _rounded_expf_chunk(x: np.ndarray) -> np.ndarray:
    """`rounded_expf` of one chunk (beyond float32's range: inf, as ggml's exp gives, without numpy's warning)."""
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(F32)


def _v_silu(x: np.ndarray) -> np.ndarray:
    """`ggml_v_silu` (vec.h): x / (1 + v_expf(-x)) on float32 values."""
    return x / (F32(1) + _v_expf_chunk(F32(0) - x))


def _rounded_silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + e^-x) on float32 values, the exp `rounded_expf`'s."""
    return x / (F32(1) + _rounded_expf_chunk(F32(0) - x))


def silu(x: np.ndarray, *, exact: bool = True) -> np.ndarray:
    """x / (1 + e^-x) as `ggml_vec_silu_f32` (vec.cpp) computes each row (the last axis): [..., n] float32.

    8 values at a time through `ggml_v_silu` (vec.h, its own exp); a row's n % 8 last values through
    `ggml_silu_f32`, libm's expf. Not `exact`: every value's exp is `rounded_expf`'s.
    """
    x = np.asarray(x, F32)
    if not exact:
        return elementwise_in_chunks(_rounded_silu, x)
    n = x.shape[-1] if x.ndim else 1
    body = n - n % 8
    if body == n:
        return elementwise_in_chunks(_v_silu, x)
    out = np.empty_like(x)
    if body:
        out[..., :body] = elementwise_in_chunks(_v_silu, np.ascontiguousarray(x[..., :body]))
    tail = x[..., body:]
    out[..., body:] = tail / (F32(1) + libm.expf(-tail))
    return out


# Values from which a reduction takes the layout that suits many rows (`hsum8`, `sum_in_order`, `block_amax`,
# `code_sums`): a prefill's. Below it (a decode pass) the direct calls, which cost less there: in a paired A/B with
# a threshold of 1,024, a SmolLM2 decode pass took 2% longer.
MANY = 4096


def hsum8(v: np.ndarray) -> np.ndarray:
    """[..., 8] -> [...]: one AVX register summed as ggml does, ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)).

    Many registers (a prefill's attention rows) are summed lane by lane, each lane one long strided row, where
    numpy's loops run long: over 1,536 registers 10 against 29 us, measured here. A few take fewer calls."""
    if v.size < MANY or not v.flags.c_contiguous:
        h = v[..., :4] + v[..., 4:]
        return (h[..., 0] + h[..., 2]) + (h[..., 1] + h[..., 3])
    lane = v.reshape(-1, 8).T  # [8, registers]
    return (((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]))).reshape(v.shape[:-1])


def sum_in_order(a: np.ndarray) -> np.ndarray:
    """[..., k] float64 -> [...]: each row summed from its first value to its last, one rounding per addition, as
    ggml's loops add into a double (`np.sum` sums pairwise instead).

    One row is `np.add.accumulate`'s last value. Many rows are reduced down the first axis of a transposed copy:
    numpy then adds whole rows of values at a time, still in order (each output adds its inputs one after another),
    where accumulating along the rows runs one short loop per row (128 rows of 576: 25 against 283 us, measured
    here). A transposed array with a single column would be reduced along its contiguous axis, pairwise, so one row
    never takes that way; nor do fewer than MANY values."""
    if a.size < MANY or a.size == a.shape[-1] or a.shape[-1] <= 1:
        return np.add.accumulate(a, axis=-1)[..., -1] if a.shape[-1] else np.zeros(a.shape[:-1])
    down = np.ascontiguousarray(a.reshape(-1, a.shape[-1]).T)  # [k, rows]
    return np.add.reduce(down, axis=0).reshape(a.shape[:-1])


def exp_sum(x: np.ndarray, top: np.ndarray, *, padded: bool = False,
            exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """[..., n] float32 rows, their maxima [..., 1] -> (e^(x - top) [..., n], the sum of each row [...] float64).

    `ggml_vec_soft_max_f32` (vec.cpp): y = v_expf(x - max) 8 at a time, each 8 summed in float32 (hsum)
    and added to a double sum; a tail of n % 8 takes libm's expf, each added alone. `padded`: each row goes on
    with masked cells up to a whole number of 8 (llama.cpp pads attention rows to 256 cells, `ops.cache_softmax`),
    so every value takes v_expf and the last 8 sum zeros past the row. Not `exact`: `rounded_expf` stands in for
    v_expf (the sums in ggml's order all the same).
    """
    exp = v_expf if exact else rounded_expf
    x = np.asarray(x, F32)
    n = x.shape[-1]
    body = n if padded else n - n % 8
    width = -(-body // 8) * 8  # values the sums of 8 cover: the body, or the row and its masked padding
    shifted = x[..., :body] - top
    seen = shifted > -np.inf  # masked cells give 0: only the others go through v_expf
    if np.logical_and.reduce(seen, axis=None):  # nothing masked (a decode row at the cache's end)
        y = np.empty((*x.shape[:-1], max(n, width)), F32)
        y[..., :body] = exp(shifted)
        if width > body:
            y[..., body:] = 0
    else:
        y = np.zeros((*x.shape[:-1], max(n, width)), F32)
        y[..., :body][seen] = exp(shifted[seen])
    groups = hsum8(y[..., :width].reshape(*x.shape[:-1], -1, 8)).astype(np.float64)  # [..., width/8]
    total = sum_in_order(groups)
    if body < n:
        y[..., body:] = libm.expf(x[..., body:] - top)
        total = total + sum_in_order(y[..., body:].astype(np.float64))
    return y[..., :n], total


def soft_max_rows(x: np.ndarray, sinks: np.ndarray | None = None, *, padded: bool = False,
                  exact: bool = True) -> np.ndarray:
    """[..., n] float32 rows (scaled and masked logits, -inf where masked) -> softmax rows, as ggml's CPU backend.

    `ggml_compute_forward_soft_max_f32`: the exps and their double sum (`exp_sum`, which says what `padded`
    and `exact` mean), then y * (float)(1 / sum). sinks [...] (gpt-oss), one logit per row: the maximum is at
    least the sink and libm's expf(sink - max) joins the double sum.
    """
    x = np.asarray(x, F32)
    top = np.maximum.reduce(x, axis=-1, keepdims=True)  # [..., 1]
    if sinks is not None:
        sinks = np.asarray(sinks, F32)[..., None]
        top = np.maximum(top, sinks)
    y, total = exp_sum(x, top, padded=padded, exact=exact)
    if sinks is not None:
        total = total + libm.expf(sinks - top)[..., 0].astype(np.float64)
    return y * (1.0 / total).astype(F32)[..., None]


def fma_chain(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """acc + sum over k of a[..., k] * b[..., k], one fma per k in order: [..., K], [..., K], [...] -> [...].

    As `simd_gemm` (simd-gemm.h) sums every value of its C += A B: a chain of `_mm256_fmadd_ps` over k.
    """
    for i in range(a.shape[-1]):
        acc = fma32(a[..., i], b[..., i], acc)
    return acc


def rms_scale(x: np.ndarray, eps: float) -> np.ndarray:
    """[..., d] float32 -> [..., 1]: 1 / sqrt(mean(x^2) + eps) as `ggml_compute_forward_rms_norm_f32`.

    Each square is rounded to float32, the squares are summed in double in index order (`sum_in_order`), the
    mean rounded to float32, the rest in float32.
    """
    squares = np.square(x, dtype=F32).astype(np.float64)
    mean = (sum_in_order(squares)[..., None] / x.shape[-1]).astype(F32)
    return F32(1) / np.sqrt(mean + F32(eps))


def _vec_dot_lanes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [..., 8] float32: the lanes of `ggml_vec_dot_f32`'s sum of the first k - k % 32 products.

    Four registers of 8 lanes take them in steps of 32, one fma per lane per step; then registers
    0+2 and 1+3, those two added.
    """
    body = x.shape[-1] - x.shape[-1] % 32
    shape = np.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    acc = np.zeros((*shape, 4, 8), F32)
    for i in range(0, body, 32):
        acc = fma32(x[..., i : i + 32].reshape(*x.shape[:-1], 4, 8), y[..., i : i + 32].reshape(*y.shape[:-1], 4, 8),
                    acc)
    pair = acc[..., :2, :] + acc[..., 2:, :]
    return pair[..., 0, :] + pair[..., 1, :]  # [..., 8]


def _vec_dot_body(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [...] float32: `ggml_vec_dot_f32`'s sum of the first k - k % 32 products, its 8 lanes
    summed as `GGML_F32x8_REDUCE` does (high half onto low, then two `_mm_hadd_ps`)."""
    lanes = _vec_dot_lanes(x, y)
    half = lanes[..., :4] + lanes[..., 4:]
    return (half[..., 0] + half[..., 1]) + (half[..., 2] + half[..., 3])


def vec_dot_f32(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [...] float32 as `ggml_vec_dot_f32` (vec.cpp, AVX2): the order of its sums.

    `_vec_dot_body`, then the k % 32 values left over added one by one, each product rounded first
    (`sumf += x[i]*y[i]`, not fused: measured against llama.cpp with head size 16, op_diff).
    """
    k = x.shape[-1]
    total = _vec_dot_body(x, y)
    for i in range(k - k % 32, k):
        total = total + x[..., i] * y[..., i]
    return total


def vec_dot_f16(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [...] float32 as `ggml_vec_dot_f16` (vec.cpp, AVX2 + F16C) of F16-valued rows.

    The F16 values are widened to float32 (`_mm256_cvtph_ps`, exact) and summed as `_vec_dot_body`;
    that sum goes to a double, the k % 32 products left over (exact in float32) are added to it in
    double, and the double is rounded to float32 once.
    """
    k = x.shape[-1]
    total = _vec_dot_body(x, y).astype(np.float64)
    for i in range(k - k % 32, k):
        total = total + (x[..., i] * y[..., i]).astype(np.float64)
    return total.astype(F32)


def vec_dot_bf16(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [...] float32 as `ggml_vec_dot_bf16` (vec.cpp, AVX2) of BF16-valued rows.

    The same four registers as `ggml_vec_dot_f32` (a BF16 product is exact in float32, so its unfused multiply and
    add round as one fma), but the 8 lanes are summed with `_mm_movehl_ps` then `_mm_movehdup_ps`:
    (h0 + h2) + (h1 + h3) of the halves' sums h, where `GGML_F32x8_REDUCE` takes (h0 + h1) + (h2 + h3). That
    sum goes to a double, the k % 32 products left over join it in double, and it is rounded once, as
    `ggml_vec_dot_f16`'s.
    """
    k = x.shape[-1]
    lanes = _vec_dot_lanes(x, y)
    half = lanes[..., :4] + lanes[..., 4:]
    total = ((half[..., 0] + half[..., 2]) + (half[..., 1] + half[..., 3])).astype(np.float64)
    for i in range(k - k % 32, k):
        total = total + (x[..., i] * y[..., i]).astype(np.float64)
    return total.astype(F32)


def tinyblas_dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[..., k] . [..., k] -> [...] float32 as llamafile's `tinyBLAS` (sgemm.cpp, AVX2) sums an F32 product.

    One register of 8 lanes per output: lane l takes the values l, l + 8, l + 16, ... in order, one fma
    each (`madd`); then the 8 lanes are added as `hsum`. k must be a multiple of 8 (tinyBLAS declines
    other products).
    """
    k = x.shape[-1]
    shape = np.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    acc = np.zeros((*shape, 8), F32)
    for i in range(0, k, 8):
        acc = fma32(x[..., i : i + 8], y[..., i : i + 8], acc)
    return hsum8(acc)


F32_SLAB = 1 << 20  # output values per step of `f32_matmul` (bounds its memory)


ROW_DOTS = {"f32": vec_dot_f32, "f16": vec_dot_f16, "bf16": vec_dot_bf16}  # a float weight's type -> its row kernel


def f32_matmul(x: np.ndarray, w: np.ndarray, *, per_row: bool = False, kind: str = "f32") -> np.ndarray:
    """[n, k] float32 @ [o, k].T -> [n, o] as ggml's CPU backend multiplies an F32 weight (F16, BF16: `kind`).

    A pass of 2 tokens or more goes to llamafile's tinyBLAS when it takes the shape (k a multiple
    of 8, o of 4: `tinyblas_dot`), anything else to `ggml_vec_dot_f32` row by row; `per_row`: always
    the latter, as `ggml_compute_forward_mul_mat_id` (an expert's product) takes it. With "f16" or "bf16",
    x and w hold values of that type (x rounded to it as `mul_mat` converts it) and the row-by-row kernel is
    `ggml_vec_dot_f16` / `ggml_vec_dot_bf16`; tinyBLAS sums them widened to float32 in the same 8-lane order.
    """
    n, k = x.shape
    o = w.shape[0]
    row_dot = ROW_DOTS[kind]
    dot = tinyblas_dot if n >= 2 and k % 8 == 0 and o % 4 == 0 and not per_row else row_dot
    step = max(1, F32_SLAB // max(1, n * 8))
    parts = [dot(w[None, o0 : o0 + step], x[:, None]) for o0 in range(0, o, step)]  # [n, slab] each
    return np.concatenate(parts, axis=1)


_GELU_TABLE: list[np.ndarray] = []  # built on first use


def gelu_table() -> np.ndarray:
    """[65536] float32: GELU of every F16 value, rounded to F16, as ggml_cpu_init fills `ggml_table_gelu_f16`.

    `ggml_gelu_f32` in float32: 0.5 x (1 + tanhf(sqrt(2/pi) x (1 + 0.044715 x^2))), the compiler fusing
    1 + (0.044715 x) x into one fma; tanhf is the C library's.
    """
    if not _GELU_TABLE:
        x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(F32)
        with np.errstate(invalid="ignore", over="ignore"):  # the table holds F16's infinities and NaNs too
            inner = fma32(F32(0.044715) * x, x, F32(1))
            y = F32(0.5) * x * (F32(1) + libm.tanhf(F32(0.79788456080286535587989211986876) * x * inner))
            _GELU_TABLE.append(y.astype(np.float16).astype(F32))
    return _GELU_TABLE[0]


class _Libm:
    """The C library's float functions, elementwise over numpy arrays (ggml calls these, scalar, in C).

    Without a loadable C math library, numpy's float64 functions rounded to float32 stand in
    (the correctly rounded result, which the C library gives for all but rare arguments).
    """

    def __init__(self):
        name = ctypes.util.find_library("m")
        lib = ctypes.CDLL(name) if name else None
        self._fns = {}
        for fn in ("cosf", "sinf", "expf", "tanhf", "logf"):
            f = getattr(lib, fn, None) if lib is not None else None
            if f is not None:
                f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
            self._fns[fn] = f
        f = getattr(lib, "powf", None) if lib is not None else None
        if f is not None:
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
        self._pow = f

    def _map(self, fn: str, fallback, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, F32)
        f = self._fns[fn]
        if f is None:
            return fallback(x.astype(np.float64)).astype(F32)
        # one C call per value (a 128-token prefill's RoPE angles: 8,192 calls on SmolLM2, 65,536 on Gemma 3 with its
        # two bases), so the results go straight from `map` into the array: 16,384 cosf 7.7 against 10.5 ms
        return np.fromiter(map(f, x.ravel().tolist()), F32, count=x.size).reshape(x.shape)

    def cosf(self, x: np.ndarray) -> np.ndarray:
        return self._map("cosf", np.cos, x)

    def sinf(self, x: np.ndarray) -> np.ndarray:
        return self._map("sinf", np.sin, x)

    def expf(self, x: np.ndarray) -> np.ndarray:
        return self._map("expf", np.exp, x)

    def tanhf(self, x: np.ndarray) -> np.ndarray:
        return self._map("tanhf", np.tanh, x)

    def logf(self, x: np.ndarray) -> np.ndarray:
        return self._map("logf", np.log, x)

    def powf(self, a: float, b: float) -> np.float32:
        if self._pow is None:
            return F32(np.float64(F32(a)) ** np.float64(F32(b)))
        return F32(self._pow(a, b))


libm = _Libm()
