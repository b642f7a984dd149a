"""Quantized matrix products computed the way ggml's CPU backend computes them on x86 (AVX2).

llama.cpp never multiplies a quantized weight by a float activation. It first
quantizes the activation row to the weight's partner format (Q8_0 for Q4_0,
Q5_0 and Q8_0; Q8_1 for Q4_1 and Q5_1; Q8_K for the k-quants; see
`activations`), then, per output, sums integer products block by block and
only then applies the block scales in float32 (ggml-cpu/arch/x86/quants.c,
`ggml_vec_dot_*`; llamafile's `tinyBLAS_Q0_AVX` gives the same numbers for
Q4_0/Q5_0/Q8_0). The order of those float operations is part of the result:

    acc[lane] = 0 for 8 lanes                 (one AVX register)
    for each block b:                          (32 values; 256 for k-quants)
        acc[lane] = fma(d_w[b] * d_x[b], isum[b, lane], acc[lane])
    y = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))   (hsum_float_8)
        + the type's offset term (Q4_1/Q5_1: sum of m_w * s_x; Q4_K/Q5_K: the sub-block mins)

where lane l of a block holds the integer sum over the values whose index
within their 32-value chunk is 4l..4l+3 (`_mm256_maddubs_epi16` then
`_mm256_madd_epi16`). Integer sums are exact in float32 (float64 for Q6_K,
whose lane sums can pass 2^24), and each fma is exact in float64 before its
one rounding to float32, so this module reproduces llama.cpp's products bit
for bit, whatever the number of tokens in the pass: logits do not depend on
the chunk size.

IQ4_NL (Q4_0's blocks, codes through `KVALUES_IQ4NL`; a single token's `ggml_vec_dot_iq4_nl_q8_0` keeps
two chains, even and odd blocks, and an odd last block added alone) and IQ4_XS (Q4_K's blocks, signed
6-bit sub-block scales, no mins) follow the same scheme, and MXFP4 (gpt-oss) as IQ4_NL with its own table and
a power-of-two block scale (E8M0, halved), two chains for every pass (no tinyBLAS or tiled kernel takes it).
The grid types (`GRID_TYPES`: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) go as IQ4_XS, their codes the signed grid
values, their sub-block scales 2 ls + 1, and the float sum times the type's constant at the end. The one-bit types
(`ONE_BIT`: IQ1_S, IQ1_M) store each value as a ternary grid value plus a signed offset of 1/8 (one sign per 32
values, or per 8): their grid values go as a grid type's, and the offsets' sums, input codes times sign times
sub-block scale, take a second float chain (`_one_bit_offsets`). The ternary types (`TERNARY`: TQ1_0, TQ2_0) store
codes 0, 1, 2 for -1, 0, 1; ggml's lanes sum codes times input and take off, in lane l, the sum of the block's
input codes 32 l .. 32 l + 31 (its `bsums`), then chain the lanes block by block as the others do: the code writes
`_mm256_mul_ps` then `_mm256_add_ps`, which the compiler fuses into one fma (measured: unfused, 107 of 192 outputs
differ in their last bit).

(Q2_K and Q3_K: `kquant_low`.) Q4_K/Q5_K/Q6_K, IQ4_XS and grid-type products of passes of
8 tokens or more follow llama.cpp's tiled kernel instead (`kquant_tiled`: same integer sums,
another float order).

Example (one Q8_0 block of a weight row, one of the input): w codes 1..32 with
d_w = 0.5, x codes all 2 with d_x = 0.25: lane 0 sums 2*(1+2+3+4) = 20, ...,
lane 7 sums 2*(29+30+31+32) = 244; y = 0.125 * (20 + 52 + ... + 244) = 132.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox import kquant_low, kquant_tiled
from walkthrough.engine.glassbox.activations import block_amax, code_sums, q8_inverse

LANES = 8  # float32 lanes of one AVX register
QK_K = 256
SLAB_ELEMENTS = 1 << 22  # lane sums held at once (bounds memory: 16 MiB float32)

# The grid types: each weight a signed grid value times a sub-block scale 2 ls + 1 (per 32 or 16 values) times
# the block's fp16 d; ggml's AVX2 dot multiplies the float sum by a constant at the end (0.125: `*s = 0.125f *
# hsum_float_8(accumf)`). Per type: (values per sub-block scale, that constant, where the scales are stored).
GRID_TYPES: dict[Q, tuple[int, float]] = {Q.IQ2_XXS: (32, 0.125), Q.IQ2_XS: (16, 0.125), Q.IQ2_S: (16, 0.125),
                                          Q.IQ3_XXS: (32, 0.25), Q.IQ3_S: (32, 1.0)}
# The one-bit types: each weight d * (2 ls + 1) * (grid value + sign / 8), the grid values -1, 0, 1 (`iq1s_grid`);
# per type: values per sub-block scale, values per offset sign (ggml-common.h `block_iq1_s`, `block_iq1_m`).
ONE_BIT: dict[Q, tuple[int, int]] = {Q.IQ1_S: (32, 32), Q.IQ1_M: (16, 8)}
ONE_BIT_DELTA = np.float32(0.125)  # IQ1S_DELTA, IQ1M_DELTA
# The ternary types: each weight d * (code - 1), codes 0, 1, 2; the byte offset of each block's fp16 d, its last field
# (ggml-common.h `block_tq1_0`: 48 bytes of 5 codes each, 4 of 4; `block_tq2_0`: 64 bytes of 4 codes each).
TERNARY: dict[Q, int] = {Q.TQ1_0: 52, Q.TQ2_0: 64}
SUPPORTED = frozenset({Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K,
                       Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4, *GRID_TYPES, *ONE_BIT, *TERNARY})
K_QUANTS = frozenset({Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS, *GRID_TYPES, *ONE_BIT, *TERNARY})  # 256-value blocks against Q8_K
# IQ4_NL / IQ4_XS codes index this table (`kvalues_iq4nl`, ggml-common.h)
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int32)
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int32)  # `kvalues_fp4`: 2 x E2M1
TWO_CHAINS = frozenset({Q.IQ4_NL, Q.MXFP4})  # whose AVX2 kernel keeps even and odd blocks in two chains
WITH_OFFSET = frozenset({Q.Q4_1, Q.Q5_1})  # their activations are Q8_1 (codes, scale, and fp16(d * sum of codes))


@dataclass(frozen=True)
class Packed:
    """A quantized weight matrix [n_out, n_in], split into what ggml's dot products read.

    `lanes` holds the integer codes (times the sub-block scale for k-quants) grouped by
    lane: [groups, n_out, per_lane], groups = n_in / 4 (32-value blocks: 8 lanes of 4
    values) or n_in / 32 (k-quants: 8 lanes of 32 values per 256-value block).
    """

    qtype: Q
    n_out: int
    n_in: int
    lanes: np.ndarray  # [G, n_out, kk] float32 (float64 for Q6_K): exact integers
    d: np.ndarray  # [n_out, nb] float32 block scales
    m: np.ndarray | None = None  # [n_out, nb] float32: Q4_1/Q5_1 offsets, k-quants' dmin; [n_out, nb, 8, lane]: IQ1 sign x scale
    sub: np.ndarray | None = None  # [n_out, nb, 8|16] float32: Q4_K/Q5_K sub-block mins, Q6_K sub-block scales

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.lanes, self.d, self.m, self.sub) if a is not None)


# ---- unpacking the stored blocks --------------------------------------------------

def _f16(b: np.ndarray) -> np.ndarray:
    """[..., 2] uint8 -> [...] float32 (little-endian fp16)."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[..., 16] bytes -> [..., 32] values: low nibbles are values 0..15, high nibbles 16..31."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _bits(qh: np.ndarray, n: int) -> np.ndarray:
    """[..., n/8] little-endian bytes -> [..., n] bits, bit i of the little-endian word first."""
    return np.unpackbits(qh, axis=-1, bitorder="little")[..., :n]


def _scales_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[..., 12] packed 6-bit scales and mins of Q4_K/Q5_K -> ([..., 8], [..., 8]) (`get_scale_min_k4`)."""
    s = s.astype(np.int32)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    return sc, mn


def _kquant_halves(qs: np.ndarray) -> np.ndarray:
    """[..., 128] Q4_K/Q5_K nibbles -> [..., 4, 2, 32]: chunk j of 64 values is 32 low nibbles then 32 high."""
    q = qs.reshape(*qs.shape[:-1], 4, 32)
    return np.stack([q & 15, q >> 4], axis=-2)


def unpack(raw: np.ndarray, qtype: Q, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Stored rows -> (codes [n_out, n_in] int32, d [n_out, nb], m or dmin [n_out, nb], sub-block scales/mins).

    Values are d*code (Q8_0, Q4_0, Q5_0: codes signed), d*code + m (Q4_1, Q5_1), d*sc*code - dmin*mn
    (Q4_K, Q5_K: sub is (sc, mn) stacked [n_out, nb, 2, 8]), d*sc*(code - 32) (Q6_K: sub is sc [n_out, nb, 16]),
    d*sub*(code + m/8) (IQ1_S, IQ1_M: codes the grid values -1, 0, 1, m each value's offset sign [n_out, nb, 256],
    sub 2 ls + 1 per 32 or 16 values), d*(code - 1) (TQ1_0, TQ2_0: codes 0, 1, 2).
    """
    if qtype in kquant_low.TYPES:
        return kquant_low.unpack(raw, qtype, n_in)
    block, size = GGML_QUANT_SIZES[qtype]
    b = raw.reshape(-1, n_in // block, size)  # [n_out, nb, bytes]
    m = sub = None
    if qtype == Q.Q8_0:
        d, codes = _f16(b[..., 0:2]), b[..., 2:34].view(np.int8).astype(np.int32)
    elif qtype == Q.Q4_0:
        d, codes = _f16(b[..., 0:2]), _nibbles(b[..., 2:18]).astype(np.int32) - 8
    elif qtype == Q.Q4_1:
        d, m, codes = _f16(b[..., 0:2]), _f16(b[..., 2:4]), _nibbles(b[..., 4:20]).astype(np.int32)
    elif qtype == Q.Q5_0:
        d = _f16(b[..., 0:2])
        codes = (_nibbles(b[..., 6:22]) | (_bits(b[..., 2:6], 32) << 4)).astype(np.int32) - 16
    elif qtype == Q.Q5_1:
        d, m = _f16(b[..., 0:2]), _f16(b[..., 2:4])
        codes = (_nibbles(b[..., 8:24]) | (_bits(b[..., 4:8], 32) << 4)).astype(np.int32)
    elif qtype in (Q.Q4_K, Q.Q5_K):
        d, m = _f16(b[..., 0:2]), _f16(b[..., 2:4])
        sc, mn = _scales_k4(b[..., 4:16])
        sub = np.stack([sc, mn], axis=-2)
        if qtype == Q.Q4_K:
            codes = _kquant_halves(b[..., 16:144]).astype(np.int32)
        else:  # bit 2j (low half) / 2j+1 (high half) of qh[l] adds 16 to value l of chunk j
            high = np.unpackbits(b[..., 16:48, None], axis=-1, bitorder="little")  # [.., 32, 8]
            high = np.moveaxis(high, -2, -1).reshape(*b.shape[:-1], 4, 2, 32)
            codes = (_kquant_halves(b[..., 48:176]) | (high << 4)).astype(np.int32)
    elif qtype == Q.IQ4_NL:
        d, codes = _f16(b[..., 0:2]), KVALUES_IQ4NL[_nibbles(b[..., 2:18])]
    elif qtype == Q.MXFP4:  # e (E8M0: 2^(e - 128) as `ggml_e8m0_to_fp32_half` gives it), 16 bytes of nibbles
        e = b[..., 0].astype(np.uint32)
        d = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32).view(np.float32)
        codes = KVALUES_MXFP4[_nibbles(b[..., 1:17])]
    elif qtype == Q.IQ4_XS:  # d, scales_h (uint16), scales_l (4 bytes), then 8 sub-blocks of 16 bytes of nibbles
        d = _f16(b[..., 0:2])
        high = b[..., 2:4].copy().view(np.uint16)[..., 0].astype(np.int32)  # [.., nb]
        low = b[..., 4:8].astype(np.int32)
        ib = np.arange(8)
        ls = ((low[..., ib // 2] >> (4 * (ib % 2))) & 15) | (((high[..., None] >> (2 * ib)) & 3) << 4)
        sub = (ls - 32).astype(np.float32)  # [.., nb, 8]: signed sub-block scales
        codes = KVALUES_IQ4NL[_nibbles(b[..., 8:136].reshape(*b.shape[:-1], 8, 16))]
    elif qtype in GRID_TYPES:
        d, sub = _f16(b[..., 0:2]), _grid_scales(b, qtype)
        codes = _grid_codes(raw, qtype, n_in, d, sub)
    elif qtype in ONE_BIT:  # m: each value's offset sign, +1 or -1 [n_out, nb, 256]
        d, sub = _one_bit_scales(b, qtype)
        codes, m = _one_bit_codes(raw, qtype, n_in, d, sub)
    elif qtype in TERNARY:  # codes 0, 1, 2 (value code - 1), as ggml's AVX2 dot reads them
        d = _f16(b[..., TERNARY[qtype] : TERNARY[qtype] + 2])
        codes = _ternary_codes(raw, qtype, n_in, d)
    elif qtype == Q.Q6_K:
        ql = b[..., 0:128].reshape(*b.shape[:-1], 2, 2, 32)  # [.., half, ql 0:32 | 32:64, l]
        qh = b[..., 128:192].reshape(*b.shape[:-1], 2, 1, 32)
        low = np.stack([ql[..., 0, :] & 15, ql[..., 1, :] & 15, ql[..., 0, :] >> 4, ql[..., 1, :] >> 4], axis=-2)
        high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3  # [.., half, 4, 32]
        codes = (low | (high << 4)).astype(np.int32)  # unsigned 0..63, as ggml's AVX2 kernel reads them
        sub = b[..., 192:208].view(np.int8).astype(np.float32)
        d = _f16(b[..., 208:210])
    else:
        raise ValueError(f"{qtype.name} has no integer product here")
    return codes.reshape(b.shape[0], n_in), d, m, sub


def _grid_scales(b: np.ndarray, qtype: Q) -> np.ndarray:
    """Stored blocks [n_out, nb, bytes] of a grid type -> its sub-block scales 2 ls + 1 [n_out, nb, 8 or 16] float32,
    read where ggml's AVX2 dot reads them: the top 4 bits of the second uint32 of each 32-value sub-block's 8 bytes
    (IQ2_XXS), of each sub-block's uint32 after the grid indices (IQ3_XXS), or nibbles of a scales array, low first
    (IQ3_S: one per 32 values; IQ2_XS and IQ2_S: one per 16)."""
    if qtype == Q.IQ2_XXS:
        ls = np.ascontiguousarray(b[..., 2:66]).view(np.uint32)[..., 1::2] >> 28  # [.., 8]
    elif qtype == Q.IQ3_XXS:
        ls = np.ascontiguousarray(b[..., 66:98]).view(np.uint32) >> 28  # [.., 8]
    else:
        at = {Q.IQ3_S: 106, Q.IQ2_XS: 66, Q.IQ2_S: 74}[qtype]
        count = 4 if qtype == Q.IQ3_S else 8
        scales = b[..., at : at + count]
        ls = np.stack([scales & 15, scales >> 4], axis=-1).reshape(*b.shape[:-1], 2 * count)
    return (2 * ls.astype(np.int32) + 1).astype(np.float32)


def _gguf_values(raw: np.ndarray, qtype: Q, n_out: int) -> np.ndarray:
    """Stored rows -> gguf's dequantized values [n_out, nb, 256] float32 (quietly: a hostile file's NaN or infinite
    scale makes numpy warn inside gguf, and a warning printed would cut into the app's screen)."""
    from gguf import quants

    with np.errstate(invalid="ignore", over="ignore"):
        return quants.dequantize(np.ascontiguousarray(raw).reshape(n_out, -1), qtype).reshape(n_out, -1, QK_K)


def _whole_steps(values: np.ndarray, step: np.ndarray, what: str) -> np.ndarray:
    """values / step [...] as int32, each an exact whole number of its step (ValueError naming `what` if not).

    Where a step is 0, infinite or NaN (a hostile file's scale) the values hold no codes, and 0 stands in: the
    block's products are then 0, or not finite as ggml's are (which infinity, or NaN, may differ)."""
    readable = np.isfinite(step) & (step != 0)
    with np.errstate(invalid="ignore", over="ignore"):
        steps = np.where(readable, np.rint(values / np.where(readable, step, np.float32(1))), 0)
        whole = np.array_equal(np.where(readable, steps * step, 0), np.where(readable, values, 0))
    if not (np.abs(steps) < 2 ** 24).all() or not whole:
        raise ValueError(f"{what}: gguf's values are not whole steps of the block scales")
    return steps.astype(np.int32)


def _grid_codes(raw: np.ndarray, qtype: Q, n_in: int, d: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """A grid type's signed grid values [n_out, n_in] int32, from gguf's dequantization: each value is d times the
    sub-block scale times the type's constant times the grid value, every factor exact in float32."""
    per, constant = GRID_TYPES[qtype]
    n_out = d.shape[0]
    values = _gguf_values(raw, qtype, n_out)  # [o, nb, 256]
    with np.errstate(invalid="ignore", over="ignore"):
        step = (d[..., None] * np.repeat(sub, per, axis=-1) * np.float32(constant)).astype(np.float32)  # [o, nb, 256]
    return _whole_steps(values, step, qtype.name).reshape(n_out, n_in)


def _one_bit_scales(b: np.ndarray, qtype: Q) -> tuple[np.ndarray, np.ndarray]:
    """Stored blocks [n_out, nb, bytes] of IQ1_S or IQ1_M -> (d [n_out, nb], sub-block scales 2 ls + 1 [n_out, nb, 8 or
    16] float32). IQ1_S: d in the first two bytes, ls in bits 12-14 of each 32 values' uint16 `qh`. IQ1_M: no d field;
    its fp16 bits are the top nibbles of the four uint16 scale words, each word holding four 3-bit ls, low first."""
    if qtype == Q.IQ1_S:
        qh = np.ascontiguousarray(b[..., 34:50]).view(np.uint16)  # [.., 8]
        return _f16(b[..., 0:2]), (2 * ((qh >> 12) & 7).astype(np.int32) + 1).astype(np.float32)
    sc = np.ascontiguousarray(b[..., 48:56]).view(np.uint16)  # [.., 4]
    top = (sc >> 12).astype(np.uint16)
    d = (top[..., 0] | (top[..., 1] << 4) | (top[..., 2] << 8) | (top[..., 3] << 12)).astype(np.uint16)
    ls = (sc[..., :, None] >> np.array([0, 3, 6, 9], np.uint16)) & 7  # [.., 4 words, 4]: per 16 values in order
    return d.view(np.float16).astype(np.float32), (2 * ls.reshape(*sc.shape[:-1], 16).astype(np.int32) + 1).astype(np.float32)


def _one_bit_codes(raw: np.ndarray, qtype: Q, n_in: int, d: np.ndarray, sub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_S or IQ1_M rows -> (grid values [n_out, n_in] int32, offset signs [n_out, nb, 256] float32), from gguf's
    dequantization: each value is d * (2 ls + 1) / 8 times 8 * grid + sign, every factor exact in float32."""
    per, _ = ONE_BIT[qtype]
    n_out = d.shape[0]
    values = _gguf_values(raw, qtype, n_out)  # [o, nb, 256]
    with np.errstate(invalid="ignore", over="ignore"):
        step = (d[..., None] * np.repeat(sub, per, axis=-1) * ONE_BIT_DELTA).astype(np.float32)  # [o, nb, 256]
    eights = _whole_steps(values, step, qtype.name)  # 8 * grid + sign (0 where the scale holds no codes)
    grid = np.rint(eights / 8).astype(np.int32)
    sign = np.where(eights == 0, 1, eights - 8 * grid)
    if not np.isin(sign, (-1, 1)).all():
        raise ValueError(f"{qtype.name}: gguf's values are not grid values and offsets times their scales")
    return grid.reshape(n_out, n_in), sign.astype(np.float32)


def _ternary_codes(raw: np.ndarray, qtype: Q, n_in: int, d: np.ndarray) -> np.ndarray:
    """TQ1_0 or TQ2_0 rows -> codes [n_out, n_in] int32, from gguf's dequantization (each value d * (code - 1))."""
    n_out = d.shape[0]
    values = _gguf_values(raw, qtype, n_out)  # [o, nb, 256]
    return (_whole_steps(values, np.broadcast_to(d[..., None], values.shape), qtype.name) + 1).reshape(n_out, n_in)


def block_offsets(raw: np.ndarray, qtype: Q, n_in: int) -> np.ndarray:
    """Stored Q4_1/Q5_1 rows -> their block offsets m [n_out, n_in / 32] (float32)."""
    block, size = GGML_QUANT_SIZES[qtype]
    return _f16(raw.reshape(-1, n_in // block, size)[..., 2:4])


def pack(raw: np.ndarray, qtype: Q, n_in: int) -> Packed:
    """Stored rows (uint8, whole rows) of a weight with n_in values per row -> `Packed`."""
    if qtype in kquant_low.TYPES:
        return kquant_low.pack(raw, qtype, n_in)
    codes, d, m, sub = unpack(raw, qtype, n_in)
    n_out = codes.shape[0]
    if qtype in K_QUANTS:
        nb = n_in // QK_K
        c = codes.reshape(n_out, nb, 8, LANES, 4).astype(np.float32)  # [o, b, sub-block of 32, lane, 4]
        if qtype == Q.Q6_K:  # scale of 16 values: index 2 * sub-block + lane // 4
            scale = sub.reshape(n_out, nb, 8, 2)[..., np.arange(LANES) // 4][..., None]  # [o, b, 8, lane, 1]
            c = c.astype(np.float64) * scale
        elif qtype == Q.IQ4_XS or {**GRID_TYPES, **ONE_BIT}.get(qtype, (0,))[0] == 32:  # a scale per 32, no mins
            scale = np.broadcast_to(sub[:, :, :, None, None], (n_out, nb, 8, LANES, 1))  # [o, b, 8, lane, 1]
            c = c * scale
            sub = None
        elif qtype in GRID_TYPES or qtype in ONE_BIT:  # one scale per 16 values: index 2 * sub-block + lane // 4
            scale = sub.reshape(n_out, nb, 8, 2)[..., np.arange(LANES) // 4][..., None]  # [o, b, 8, lane, 1]
            c = c * scale
            sub = None
        elif qtype not in TERNARY:  # Q4_K, Q5_K: scales and mins per 32 values
            c = c * sub[:, :, 0, :, None, None].astype(np.float32)
            sub = sub[:, :, 1, :].astype(np.float32)  # keep the mins
        if qtype in ONE_BIT:  # m: sign times scale per (sub-block, lane), each lane's 4 values sharing both
            m = m.reshape(n_out, nb, 8, LANES, 4)[..., 0] * scale[..., 0]  # [o, b, 8, lane]
        lanes = c.transpose(1, 3, 0, 2, 4).reshape(nb * LANES, n_out, 32)
    else:
        lanes = codes.astype(np.float32).reshape(n_out, n_in // 4, 4).transpose(1, 0, 2)
    return Packed(qtype, n_out, n_in, np.ascontiguousarray(lanes), d, m, sub)


# ---- the activation side --------------------------------------------------------

def quantize_q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[n, k] float32 -> Q8_0/Q8_1 codes [n, k/32, 32], d [n, k/32] (fp16 value), s [n, k/32] (fp16(d * sum)).

    As `quantize_row_q8_0` / `quantize_row_q8_1` (x86): d = max|x| / 127, codes = rint(x * 127 / max|x|).
    """
    b = x.reshape(x.shape[0], -1, 32)
    amax = block_amax(b)
    d = amax / np.float32(127)
    codes = np.rint(b * q8_inverse(amax)[..., None])
    s = (d * code_sums(codes)).astype(np.float16).astype(np.float32)
    return codes, d.astype(np.float16).astype(np.float32), s


def rounded_q8_1(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n, k] float32 -> (x through Q8_1 [n, k], the error of its stored block sums [n, k/32]).

    The rounded values are `activations.round_activations(x, "q8_0")` (the same codes and scale, as
    `quantize_q8` makes them). Q4_1/Q5_1 weights add m_w * s to each block's product, with s = fp16(d * sum of
    codes) rounded to half precision: a float product with the rounded input is off by m_w times the error
    s - d * sum of codes, so the engine adds that error's product with the offsets.
    """
    b = x.reshape(x.shape[0], -1, 32)
    amax = block_amax(b)  # [n, k/32]
    codes = b * q8_inverse(amax)[..., None]
    np.rint(codes, out=codes)  # [n, k/32, 32]
    sums = code_sums(codes)
    d = amax / np.float32(127)
    stored = (d * sums).astype(np.float16).astype(np.float32)  # s as Q8_1 keeps it
    d = d.astype(np.float16).astype(np.float32)
    codes *= d[..., None]
    return codes.reshape(x.shape), stored - d * sums


def quantize_q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n, k] float32 -> Q8_K codes [n, k/256, 256] and d [n, k/256] (`quantize_row_q8_K_ref`)."""
    b = x.reshape(x.shape[0], -1, QK_K)
    peak = np.take_along_axis(b, np.argmax(np.abs(b), axis=-1)[..., None], axis=-1)[..., 0]
    iscale = np.divide(np.float32(-127), peak, out=np.zeros_like(peak), where=peak != 0)
    codes = np.minimum(np.rint(b * iscale[..., None]), 127)
    d = np.divide(np.float32(1), iscale, out=np.zeros_like(iscale), where=iscale != 0)
    return codes, d


# ---- the product ------------------------------------------------------------------

def _hsum8(acc: np.ndarray) -> np.ndarray:
    """[8, ...] lanes -> [...] as `hsum_float_8`: ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))."""
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))


def _fma_chain(lanes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """acc = fma(scale[b], lanes[b], acc) for b in order, in float32 with one rounding per step.

    lanes [nb, L, n, o] float32 integers, scale [nb, n, o] float32 -> acc [L, n, o] float32.
    """
    acc = np.zeros(lanes.shape[1:], dtype=np.float32)
    for b in range(lanes.shape[0]):
        step = np.multiply(lanes[b], scale[b].astype(np.float64))  # exact: 24-bit x 24-bit products
        acc = (step + acc).astype(np.float32)
    return acc


def _two_chains(lanes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The AVX2 `ggml_vec_dot_iq4_nl_q8_0` and `ggml_vec_dot_mxfp4_q8_0`: even blocks in one chain, odd in another, the two added lane by
    lane and summed (`hsum_float_8`); an odd last block's whole integer sum then joins, times its scale.

    lanes [nb, 8, n, o] float32 integers, scale [nb, n, o] -> [n, o] float32.
    """
    pairs = lanes.shape[0] - lanes.shape[0] % 2
    y = _hsum8(_fma_chain(lanes[0:pairs:2], scale[0:pairs:2]) + _fma_chain(lanes[1:pairs:2], scale[1:pairs:2]))
    if pairs < lanes.shape[0]:  # sumf += d * (sumi1 + sumi2): the product rounded, then the sum (no fma in
        y = scale[-1] * lanes[-1].sum(axis=0) + y  # quants.c, measured with rows of 9 and 17 blocks)
    return y


def _one_bit_offsets(qtype: Q, codes: np.ndarray, signed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The offsets' sum of an IQ1_S / IQ1_M product before its 1/8, as `ggml_vec_dot_iq1_*_q8_K` (AVX2) takes it.

    codes [n, nb, 256] Q8_K input codes, signed [o, nb, 8, lane] sign times sub-block scale (`pack`), scale [nb, n, o]
    -> [n, o] float32. IQ1_M keeps 8 lanes of the offsets' integer sums, chained as the grid values' are and summed
    (`hsum_float_8`); IQ1_S sums them into one integer per block, `accum1 += d * sumi1`, which the compiler fuses.
    """
    n, nb = codes.shape[:2]
    fours = codes.reshape(n, nb, 8, LANES, 4).sum(axis=-1)  # [n, b, sub-block, lane]: input codes per lane
    sums = np.einsum("tbil,obil->blto", fours, signed.astype(np.float32))  # [b, lane, n, o] exact integers
    if qtype == Q.IQ1_M:
        return _hsum8(_fma_chain(sums, scale))
    return _fma_chain(sums.sum(axis=1)[:, None], scale)[0]


def _serial_sum(terms: np.ndarray) -> np.ndarray:
    """[nb, n, o] float32 -> [n, o]: a float32 sum in block order (`summs += ...`)."""
    total = np.zeros(terms.shape[1:], dtype=np.float32)
    for t in terms:
        total = total + t
    return total


def matmul(x: np.ndarray, w: Packed) -> np.ndarray:
    """[n, n_in] float32 @ w.T -> [n, n_out] float32, as ggml's CPU backend computes it.

    A hostile file's infinite or NaN block scale gives infinities and NaNs as ggml's kernels give them, without
    numpy's warnings (printed, they would cut into the app's screen)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _matmul(x, w)


def _matmul(x: np.ndarray, w: Packed) -> np.ndarray:
    """`matmul`."""
    if w.qtype in kquant_low.TYPES:  # Q2_K, Q3_K (both kernels)
        return kquant_low.matmul(x, w)
    if kquant_tiled.applies(w.qtype, x.shape[0]):  # k-quants in passes of 8+ tokens: the tiled kernel
        return kquant_tiled.matmul(x, w)
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = x.shape[0]
    out = np.empty((n, w.n_out), dtype=np.float32)
    groups, _, kk = w.lanes.shape
    if w.qtype in K_QUANTS:
        codes, dx = quantize_q8_k(x)  # [n, nb, 256], [n, nb]
        nb = codes.shape[1]
        xl = codes.reshape(n, nb, 8, LANES, 4).transpose(1, 3, 0, 2, 4).reshape(groups, n, kk)
        sums16 = codes.reshape(n, nb, 16, 16).sum(axis=-1)  # bsums: [n, nb, 16]
    else:
        codes, dx, sx = quantize_q8(x)  # [n, nb, 32], [n, nb], [n, nb]
        nb = codes.shape[1]
        xl = codes.reshape(n, groups, 4).transpose(1, 0, 2)
    xl = np.ascontiguousarray(xl, dtype=w.lanes.dtype)
    step = max(1, SLAB_ELEMENTS // max(1, groups * n))
    for o0 in range(0, w.n_out, step):
        o = slice(o0, min(o0 + step, w.n_out))
        lanes = np.matmul(xl, w.lanes[:, o].transpose(0, 2, 1))  # [G, n, slab] exact integer sums
        lanes = lanes.reshape(nb, LANES, n, -1)
        dw = w.d[o].T  # [nb, slab]
        if w.qtype == Q.Q6_K:  # ggml subtracts 32 * sum(scale * bsum) per lane of 2 scales (q8sclsub)
            sc = w.sub[o].reshape(-1, nb, LANES, 2)  # [slab, nb, lane, 2]
            bs = sums16.reshape(n, nb, LANES, 2)
            lanes = lanes - 32 * np.einsum("tblk,oblk->blto", bs, sc)
        scale = dx.T[:, :, None] * dw[:, None, :]  # [nb, n, slab]: fp16 x fp16 (exact), or Q8_K's y.d x fp16 (rounded)
        if w.qtype in TERNARY:  # lane l takes off the block's input codes 32 l .. 32 l + 31 (`bsums`, as int16 pairs)
            sums32 = codes.reshape(n, nb, LANES, 32).sum(axis=-1)  # [n, nb, lane]
            y = _hsum8(_fma_chain((lanes - sums32.transpose(1, 2, 0)[..., None]).astype(np.float32), scale))
        elif w.qtype in TWO_CHAINS and (n == 1 or w.qtype == Q.MXFP4):  # 2+ tokens of IQ4_NL: tinyBLAS, one chain
            y = _two_chains(lanes.astype(np.float32), scale)
        else:
            y = _hsum8(_fma_chain(lanes.astype(np.float32), scale))
        if w.qtype in GRID_TYPES:
            y = np.float32(GRID_TYPES[w.qtype][1]) * y
        elif w.qtype in ONE_BIT:
            y = y + ONE_BIT_DELTA * _one_bit_offsets(w.qtype, codes, w.m[o], scale)
        if w.qtype in WITH_OFFSET:
            y = y + _serial_sum(sx.T[:, :, None] * w.m[o].T[:, None, :])
        elif w.qtype in (Q.Q4_K, Q.Q5_K):
            q8s = codes.reshape(n, nb, 8, 32).sum(axis=-1)  # sums of the input codes per sub-block of 32
            dmin = -(dx.T[:, :, None] * w.m[o].T[:, None, :])  # [nb, n, slab]
            prod = np.einsum("tbik,obik->bito", q8s.reshape(n, nb, 4, 2), w.sub[o].reshape(-1, nb, 4, 2))
            if w.qtype == Q.Q4_K:  # 4 lanes of fma, then ((a0 + a2) + (a1 + a3))
                acc = _fma_chain(prod, dmin)
                y = y + ((acc[0] + acc[2]) + (acc[1] + acc[3]))
            else:  # summs += dmin * ((p0 + p1) + (p2 + p3)), which the compiler contracts to one fma
                y = y + _fma_chain(prod.sum(axis=1)[:, None], dmin)[0]
        out[:, o] = y
    return out
