"""Decode the fields of one stored block: scales, mins, sub-block scales, and the code of every value.

`decode(qtype, raw)` reads the bytes of one block (laid out as
`block_layout.LAYOUTS` declares) into a `Decoded`: each field's values
(a F16 scale as a float, 6-bit sub-block scales as integers, ...) and, per
value, the stored `code`, the number it stands for (`level`: code - 8 for
Q4_0, the table entry for IQ4_NL), the multiplier (`step`: d, or d x sc for a
k-quant sub-block) and the added `offset` (m, or -dmin x min), so that

    value = step x level + offset            (float32, in that order)

which is how gguf.quants dequantizes; tests check the two agree bit for bit
for every type decoded here.

Not decoded: the codebook ("grid") types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
IQ3_S, IQ1_S and IQ1_M, whose codes index tables of 4 or 8 values at once;
for them only the F16 scale is read (`Decoded.codes` is None) and the values
come from gguf.quants alone.

Example: a Q4_0 block whose first two bytes are F16 0.01 and whose first code
byte is 0x3A holds value 0 = 0.01 x (0xA - 8) = 0.02 and value 16 = 0.01 x (0x3 - 8) = -0.05.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.inspect.block_layout import field_offsets

GRID_TYPES = frozenset({Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M})
FLOAT_BITS = {Q.F32: (8, 23), Q.F16: (5, 10), Q.BF16: (8, 7)}  # exponent bits, mantissa bits


@dataclass
class Decoded:
    """One block's fields and, per value, code, level, step and offset (None for grid types)."""

    fields: dict[str, np.ndarray] = field(default_factory=dict)  # field name -> decoded values
    codes: np.ndarray | None = None  # [block] stored integer per value
    levels: np.ndarray | None = None  # [block] the number the code stands for
    steps: np.ndarray | None = None  # [block] float32 multiplier of the level
    offsets: np.ndarray | None = None  # [block] float32 added after

    def values(self) -> np.ndarray | None:
        """[block] float32 step x level + offset, or None when the codes were not decoded."""
        if self.codes is None:
            return None
        return (self.steps * self.levels.astype(np.float32) + self.offsets).astype(np.float32)


def _f16(b: np.ndarray) -> np.ndarray:
    return b.view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """Bytes -> 4-bit codes: each run of `group` bytes gives its low nibbles, then its high nibbles."""
    runs = qs.reshape(-1, 1, group)  # [runs, 1, group]
    return ((runs >> np.array([0, 4], np.uint8)[None, :, None]) & 0x0F).reshape(-1)


def _crumbs(qs: np.ndarray, group: int) -> np.ndarray:
    """Bytes -> 2-bit codes: each run of `group` bytes gives bits 0-1 of every byte, then 2-3, 4-5, 6-7."""
    runs = qs.reshape(-1, 1, group)
    return ((runs >> np.array([0, 2, 4, 6], np.uint8)[None, :, None]) & 0x03).reshape(-1)


def _bits(qh: np.ndarray, n: int) -> np.ndarray:
    """Little-endian bit i of the bytes, for i < n."""
    return np.unpackbits(qh, bitorder="little")[:n]


def _planes(qh: np.ndarray) -> np.ndarray:
    """32 bytes -> 256 bits ordered bit-plane first: value j x 32 + l is bit j of byte l (k-quants' qh/hmask)."""
    return ((qh[None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1).reshape(-1)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes -> 8 six-bit scales and 8 six-bit mins (ggml's get_scale_min_k4)."""
    d, m, md = s[0:4], s[4:8], s[8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)])
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)])
    return sc, mn


def _fp4_doubled() -> np.ndarray:
    """The 16 E2M1 (FP4) values times 2, from the format: sign bit 3, exponent bits 1-2, mantissa bit 0."""
    code = np.arange(16)
    sign = np.where(code & 8, -1, 1)
    exp, man = (code >> 1) & 3, code & 1
    magnitude = np.where(exp == 0, man * 0.5, 2.0 ** (exp - 1) * (1 + man * 0.5))
    return (sign * magnitude * 2).astype(np.int8)


def _ue4m3_half(x: np.ndarray) -> np.ndarray:
    """Unsigned E4M3 (bias 7) scales, halved to pair with doubled FP4 values; 0 and 0x7F (NaN) read as 0."""
    exp, man = (x >> 3).astype(np.int32) & 0xF, (x & 7).astype(np.float64)
    value = np.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * 2.0 ** (exp - 7))
    return np.where((x == 0) | (x == 0x7F), 0.0, value * 0.5).astype(np.float32)


def _per(values: np.ndarray, size: int) -> np.ndarray:
    """One number per sub-block of `size` values -> one per value."""
    return np.repeat(values.astype(np.float32), size)


def _linear(out: Decoded, codes, levels, step, offset=0.0) -> Decoded:
    n = len(codes)
    out.codes, out.levels = codes.astype(np.int64), np.asarray(levels, np.int64)
    out.steps = np.broadcast_to(np.asarray(step, np.float32), (n,)).copy()
    out.offsets = np.broadcast_to(np.asarray(offset, np.float32), (n,)).copy()
    return out


def _float(qtype: Q, raw: np.ndarray, out: Decoded) -> Decoded:
    e_bits, m_bits = FLOAT_BITS[qtype]
    width = 1 + e_bits + m_bits
    word = raw.view({32: np.uint32, 16: np.uint16}[width]).astype(np.int64)
    sign, exp, man = word >> (width - 1), (word >> m_bits) & ((1 << e_bits) - 1), word & ((1 << m_bits) - 1)
    out.fields = {"sign": sign, "exponent": exp, "mantissa": man}
    return out


def decode(qtype: Q, raw: np.ndarray) -> Decoded:
    """The fields and per-value codes of one block of `qtype` stored in `raw` (uint8, one block's bytes)."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    out = Decoded()
    if qtype in FLOAT_BITS:
        return _float(qtype, raw, out)
    f = {name: raw[a:b] for name, (a, b) in field_offsets(qtype).items()}
    if "d" in f and f["d"].size == 2:
        out.fields["d"] = _f16(f["d"])
    if qtype in GRID_TYPES:
        return out
    d = out.fields.get("d")
    if qtype in (Q.Q4_0, Q.Q4_1, Q.IQ4_NL):
        codes = _nibbles(f["qs"], 16)
        if qtype == Q.Q4_0:
            return _linear(out, codes, codes.astype(np.int64) - 8, d)
        if qtype == Q.IQ4_NL:
            return _linear(out, codes, np.asarray(quants.IQ4_NL.kvalues)[codes], d)  # the format's 16-entry table
        out.fields["m"] = _f16(f["m"])
        return _linear(out, codes, codes, d, out.fields["m"])
    if qtype in (Q.Q5_0, Q.Q5_1):
        codes = _nibbles(f["qs"], 16) | (_bits(f["qh"], 32) << 4)
        if qtype == Q.Q5_0:
            return _linear(out, codes, codes.astype(np.int64) - 16, d)
        out.fields["m"] = _f16(f["m"])
        return _linear(out, codes, codes, d, out.fields["m"])
    if qtype == Q.Q8_0:
        codes = f["qs"].view(np.int8)
        return _linear(out, codes, codes, d)
    if qtype in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return _kquant(qtype, f, out)
    if qtype in (Q.TQ1_0, Q.TQ2_0):
        return _ternary(qtype, f, out)
    if qtype == Q.MXFP4:
        e = int(f["e"][0])
        out.fields["e"] = np.array([e])
        codes = _nibbles(f["qs"], 16)
        return _linear(out, codes, _fp4_doubled()[codes], np.ldexp(np.float32(1), e - 128))  # 2^(e-127) / 2
    if qtype == Q.NVFP4:
        out.fields["d"] = _ue4m3_half(f["d"]) * 2  # the sub-block scales as they are
        codes = _nibbles(f["qs"], 8)
        return _linear(out, codes, _fp4_doubled()[codes], _per(_ue4m3_half(f["d"]), 16))
    if qtype == Q.IQ4_XS:
        scales_h = int(f["scales_h"].view(np.uint16)[0])
        high = (scales_h >> (2 * np.arange(8))) & 3
        sc = (_nibbles(f["scales_l"], 1) | (high << 4)).astype(np.int64) - 32
        out.fields["scales"] = sc
        codes = _nibbles(f["qs"], 16)
        step = _per((d * sc.astype(np.float32)).astype(np.float32), 32)
        return _linear(out, codes, np.asarray(quants.IQ4_NL.kvalues)[codes], step)
    raise KeyError(qtype)


def _kquant(qtype: Q, f: dict[str, np.ndarray], out: Decoded) -> Decoded:
    """Q2_K..Q6_K: 256 values in sub-blocks of 16 or 32, each with its own scale (and min)."""
    d = out.fields["d"]
    if qtype == Q.Q2_K:
        sc, mn = f["scales"] & 0x0F, f["scales"] >> 4
        out.fields.update(dmin=_f16(f["dmin"]), scales=sc, mins=mn)
        codes = _crumbs(f["qs"], 32)
        step, offset = _per(d * sc.astype(np.float32), 16), -_per(out.fields["dmin"] * mn.astype(np.float32), 16)
        return _linear(out, codes, codes, step, offset)
    if qtype == Q.Q3_K:
        s = f["scales"]
        low = _nibbles(s[:8], 8)
        high = _crumbs(s[8:12], 4)
        sc = (low | (high << 4)).astype(np.int64) - 32
        out.fields["scales"] = sc
        low2, hbit = _crumbs(f["qs"], 32), _planes(f["hmask"])
        codes = low2 | (hbit << 2)
        levels = low2.astype(np.int64) - 4 * (1 - hbit.astype(np.int64))  # the high bit set means no -4
        return _linear(out, codes, levels, _per(d * sc.astype(np.float32), 16))
    if qtype in (Q.Q4_K, Q.Q5_K):
        sc, mn = _k_scales(f["scales"])
        out.fields.update(dmin=_f16(f["dmin"]), scales=sc, mins=mn)
        codes = _nibbles(f["qs"], 32)
        if qtype == Q.Q5_K:
            codes = codes | (_planes(f["qh"]) << 4)
        step, offset = _per(d * sc.astype(np.float32), 32), -_per(out.fields["dmin"] * mn.astype(np.float32), 32)
        return _linear(out, codes, codes, step, offset)
    # Q6_K
    sc = f["scales"].view(np.int8).astype(np.int64)
    out.fields["scales"] = sc
    codes = _nibbles(f["ql"], 64) | (_crumbs(f["qh"], 32) << 4)
    return _linear(out, codes, codes.astype(np.int64) - 32, _per(d * sc.astype(np.float32), 16))


def _ternary(qtype: Q, f: dict[str, np.ndarray], out: Decoded) -> Decoded:
    """TQ1_0 / TQ2_0: codes 0, 1, 2 standing for -1, 0, +1."""
    d = out.fields["d"]
    if qtype == Q.TQ2_0:
        codes = _crumbs(f["qs"], 32)
    else:
        # Base-3 digits packed as a fraction of 256: digit k of byte b is (b x 3^k mod 256) x 3 >> 8.
        def digits(b: np.ndarray, n: int) -> np.ndarray:
            powers = (3 ** np.arange(n)).astype(np.uint8)
            shifted = (b[None, :] * powers[:, None]).astype(np.uint8)  # [n, bytes], wrapping as uint8
            return ((shifted.astype(np.uint16) * 3) >> 8).reshape(-1)

        qs = f["qs"]
        codes = np.concatenate([digits(qs[:32], 5), digits(qs[32:48], 5), digits(f["qh"], 4)])
    return _linear(out, codes, codes.astype(np.int64) - 1, d)
