"""The byte layout of one block of every ggml storage type, as declared fields, and bits per weight from it.

A quantized tensor is a sequence of blocks; each block stores `block_size`
values in `type_size` bytes (`gguf.constants.GGML_QUANT_SIZES`). This module
says what those bytes are: for each type, its fields in storage order with
their byte counts and meaning (from ggml's `block_*` structs in
ggml/src/ggml-common.h, as gguf.quants reads them). The fields of a type add
up to its `type_size` (tests check it), so the bits-per-weight arithmetic is
read from the layout, not typed in:

    Q4_K: d 2 B + dmin 2 B + scales 12 B + qs 128 B = 144 B for 256 values
          -> 144 x 8 / 256 = 4.5 bits per weight (4 for the codes, 0.5 for scales)

F32, F16 and BF16 store each value alone (a "block" of 1); they have one
field, the value itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.words import count


@dataclass(frozen=True)
class FieldSpec:
    """One field of a block: its name in ggml's struct, its bytes, what it holds."""

    name: str
    nbytes: int
    meaning: str


# ggml-common.h block structs; "qs" are the codes, "qh" their high bits, "d"/"dmin" scales in F16.
LAYOUTS: dict[Q, tuple[FieldSpec, ...]] = {
    Q.F32: (FieldSpec("value", 4, "IEEE float32: sign, 8 exponent bits, 23 mantissa bits"),),
    Q.F16: (FieldSpec("value", 2, "IEEE float16: sign, 5 exponent bits, 10 mantissa bits"),),
    Q.BF16: (FieldSpec("value", 2, "bfloat16: sign, 8 exponent bits, 7 mantissa bits"),),
    Q.Q4_0: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qs", 16, "32 codes of 4 bits; value = d x (code - 8)")),
    Q.Q4_1: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("m", 2, "minimum (F16)"),
             FieldSpec("qs", 16, "32 codes of 4 bits; value = d x code + m")),
    Q.Q5_0: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qh", 4, "the 5th bit of each of the 32 codes"),
             FieldSpec("qs", 16, "low 4 bits of the 32 codes; value = d x (code - 16)")),
    Q.Q5_1: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("m", 2, "minimum (F16)"),
             FieldSpec("qh", 4, "the 5th bit of each of the 32 codes"),
             FieldSpec("qs", 16, "low 4 bits of the 32 codes; value = d x code + m")),
    Q.Q8_0: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qs", 32, "32 signed 8-bit codes; value = d x code")),
    Q.Q2_K: (FieldSpec("scales", 16, "16 sub-blocks of 16: 4-bit scale (low) and 4-bit min (high)"),
             FieldSpec("qs", 64, "256 codes of 2 bits"),
             FieldSpec("d", 2, "super-block scale of the scales (F16)"),
             FieldSpec("dmin", 2, "super-block scale of the mins (F16); value = d x sc x code - dmin x min")),
    Q.Q3_K: (FieldSpec("hmask", 32, "the high bit of each of the 256 codes"),
             FieldSpec("qs", 64, "low 2 bits of the 256 codes"),
             FieldSpec("scales", 12, "16 sub-block scales of 6 bits (stored + 32)"),
             FieldSpec("d", 2, "super-block scale (F16); value = d x sc x (code - 4)")),
    Q.Q4_K: (FieldSpec("d", 2, "super-block scale of the scales (F16)"),
             FieldSpec("dmin", 2, "super-block scale of the mins (F16)"),
             FieldSpec("scales", 12, "8 sub-blocks of 32: 6-bit scale and 6-bit min each"),
             FieldSpec("qs", 128, "256 codes of 4 bits; value = d x sc x code - dmin x min")),
    Q.Q5_K: (FieldSpec("d", 2, "super-block scale of the scales (F16)"),
             FieldSpec("dmin", 2, "super-block scale of the mins (F16)"),
             FieldSpec("scales", 12, "8 sub-blocks of 32: 6-bit scale and 6-bit min each"),
             FieldSpec("qh", 32, "the 5th bit of each of the 256 codes"),
             FieldSpec("qs", 128, "low 4 bits of the 256 codes; value = d x sc x code - dmin x min")),
    Q.Q6_K: (FieldSpec("ql", 128, "low 4 bits of the 256 codes"),
             FieldSpec("qh", 64, "high 2 bits of the 256 codes"),
             FieldSpec("scales", 16, "16 sub-blocks of 16: signed 8-bit scale each"),
             FieldSpec("d", 2, "super-block scale (F16); value = d x sc x (code - 32)")),
    Q.TQ1_0: (FieldSpec("qs", 48, "240 ternary codes, 5 per byte (base 3)"),
              FieldSpec("qh", 4, "16 more ternary codes, 4 per byte"),
              FieldSpec("d", 2, "scale (F16); value = d x (code - 1)")),
    Q.TQ2_0: (FieldSpec("qs", 64, "256 ternary codes of 2 bits"), FieldSpec("d", 2, "scale (F16); value = d x (code - 1)")),
    Q.MXFP4: (FieldSpec("e", 1, "shared scale, a power of two (E8M0)"),
              FieldSpec("qs", 16, "32 FP4 (E2M1) codes; value = 2^(e-127) x fp4(code)")),
    Q.NVFP4: (FieldSpec("d", 4, "4 sub-block scales of 16 values, unsigned FP8 (E4M3)"),
              FieldSpec("qs", 32, "64 FP4 (E2M1) codes; value = d[sub-block] x fp4(code)")),
    Q.IQ4_NL: (FieldSpec("d", 2, "scale (F16)"),
               FieldSpec("qs", 16, "32 codes of 4 bits indexing a non-linear table; value = d x table[code]")),
    Q.IQ4_XS: (FieldSpec("d", 2, "super-block scale (F16)"),
               FieldSpec("scales_h", 2, "high 2 bits of the 8 sub-block scales"),
               FieldSpec("scales_l", 4, "low 4 bits of the 8 sub-block scales (stored + 32)"),
               FieldSpec("qs", 128, "256 codes of 4 bits; value = d x sc x table[code]")),
    Q.IQ2_XXS: (FieldSpec("d", 2, "scale (F16)"),
                FieldSpec("qs", 64, "per 32 values: 4 grid indices (8 values each), signs and a 4-bit scale")),
    Q.IQ2_XS: (FieldSpec("d", 2, "scale (F16)"),
               FieldSpec("qs", 64, "32 x 16 bits: a 9-bit grid index and 7 sign bits each"),
               FieldSpec("scales", 8, "16 sub-block scales of 4 bits")),
    Q.IQ2_S: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qs", 64, "low 8 bits of 32 grid indices, then 32 sign bytes"),
              FieldSpec("qh", 8, "high 2 bits of the grid indices"),
              FieldSpec("scales", 8, "16 sub-block scales of 4 bits")),
    Q.IQ3_XXS: (FieldSpec("d", 2, "scale (F16)"),
                FieldSpec("qs", 96, "64 grid indices (4 values each), then per 32 values signs and a 4-bit scale")),
    Q.IQ3_S: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qs", 64, "low 8 bits of 64 grid indices"),
              FieldSpec("qh", 8, "9th bit of the grid indices"), FieldSpec("signs", 32, "one sign bit per value"),
              FieldSpec("scales", 4, "8 sub-block scales of 4 bits")),
    Q.IQ1_S: (FieldSpec("d", 2, "scale (F16)"), FieldSpec("qs", 32, "low 8 bits of 32 grid indices"),
              FieldSpec("qh", 16, "8 x 16 bits: high index bits, a 3-bit scale and a delta sign")),
    Q.IQ1_M: (FieldSpec("qs", 32, "low 8 bits of 32 grid indices"),
              FieldSpec("qh", 16, "high index bits and delta signs"),
              FieldSpec("scales", 8, "3-bit sub-block scales; the F16 super-block scale is spread over their top bits")),
}


@dataclass(frozen=True)
class BitsPerWeight:
    """Where a type's bits per weight come from: its fields' bits spread over the block's values."""

    block_size: int
    type_size: int
    by_field: dict[str, float]  # field name -> bits per weight it contributes

    @property
    def total(self) -> float:
        return self.type_size * 8 / self.block_size

    def explain(self) -> str:
        """E.g. "d 16 + qs 128 bits = 144 bits / 32 values = 4.5 bits per weight"."""
        parts = " + ".join(f"{name} {round(bits * self.block_size):g}" for name, bits in self.by_field.items())
        return (f"{parts} bits = {self.type_size * 8} bits / {count(self.block_size, 'value')} = {self.total:g} bits per weight")


def layout(qtype: Q) -> tuple[FieldSpec, ...]:
    """The fields of one block of `qtype`, in storage order (KeyError if the type has no declared layout)."""
    return LAYOUTS[qtype]


def field_offsets(qtype: Q) -> dict[str, tuple[int, int]]:
    """Field name -> (first byte, one past the last byte) inside a block."""
    out, at = {}, 0
    for spec in LAYOUTS[qtype]:
        out[spec.name] = (at, at + spec.nbytes)
        at += spec.nbytes
    return out


def bits_per_weight(qtype: Q) -> BitsPerWeight:
    """The bits-per-weight arithmetic of `qtype` from its block size and its declared fields."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    fields = LAYOUTS.get(qtype, (FieldSpec("block", type_size, "packed block"),))
    return BitsPerWeight(block_size, type_size, {f.name: f.nbytes * 8 / block_size for f in fields})
