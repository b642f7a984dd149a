"""How llama.cpp's CPU backend rounds the input of a matrix product, by the weight's stored type.

ggml multiplies a quantized weight by an activation only after converting the
activation to the weight's "vec_dot type" (`type_traits_cpu[...].vec_dot_type`
in ggml/src/ggml-cpu/ggml-cpu.c): F16 weights meet F16 activations, Q4_0/Q5_0/
Q8_0 meet Q8_0 activations (blocks of 32 with an F16 scale), Q4_1/Q5_1 meet
Q8_1 (the same codes), the k-quants and most IQ types meet Q8_K (blocks of 256
with an F32 scale), BF16 meets BF16, F32 stays F32. The integer dot product
that follows equals, up to float summation order, the float product of the
dequantized weight with the rounded activation, so rounding the activation the
same way reproduces llama.cpp's numbers (about 1e-6 on the reference models,
instead of up to 0.1 for a plain float product).

The rounding rules follow the x86 code llama.cpp runs (ggml-cpu/arch/x86/quants.c
`quantize_row_q8_0`, `quantize_row_q8_1`; ggml-quants.c `quantize_row_q8_K_ref`):
Q8_0/Q8_1: d = max|x| / 127, codes = round-half-even(x * 127 / max|x|), value
= code x fp16(d); Q8_K: iscale = -127 / x_max (x_max the value of largest
magnitude), codes = min(127, round-half-even(iscale x)), value = code / iscale.

Example: a Q8_0 block whose largest value is 2.54 has d = 0.02; 0.013 becomes
code 1 (0.013 x 50 = 0.65 rounds to 1), i.e. 0.02 after rounding.
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox.ggml_math import MANY

# Activation format per weight type (type_traits_cpu in ggml-cpu.c). Q8_1 (for Q4_1, Q5_1) holds the
# same codes and scale as Q8_0, plus a sum used for the weights' offset, so it rounds as "q8_0".
VEC_DOT_FORMAT: dict[Q, str] = {
    Q.F16: "f16",
    Q.BF16: "bf16",
    **dict.fromkeys((Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.IQ4_NL, Q.MXFP4), "q8_0"),
    **dict.fromkeys((Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
                     Q.IQ1_S, Q.IQ1_M, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0), "q8_K"),
}


def vec_dot_format(weight_type: Q) -> str:
    """The activation format ggml's CPU backend uses against a weight of this type ("f32" if not listed)."""
    return VEC_DOT_FORMAT.get(weight_type, "f32")


def block_amax(b: np.ndarray) -> np.ndarray:
    """[..., 32] float32 blocks -> [...] the largest magnitude in each.

    The maximum is exact in any order, so many blocks go through a transposed copy, reduced across it: numpy then
    compares whole rows of blocks at once instead of making one short reduction per block (over a 128-token
    prefill's 2,304 blocks: 87 against 139 us, measured here). Fewer than MANY values reduce directly."""
    a = np.abs(b)
    if a.size < MANY:
        return np.maximum.reduce(a, axis=-1)
    across = np.ascontiguousarray(a.reshape(-1, a.shape[-1]).T)  # [32, blocks]
    return np.maximum.reduce(across, axis=0).reshape(a.shape[:-1])


def q8_inverse(amax: np.ndarray) -> np.ndarray:
    """[...] block maxima -> 127 / max, as Q8_0/Q8_1's rounding multiplies by it (`quantize_row_q8_0`). An all-zero
    block gets 127 (any finite inverse gives its codes of 0), without the warning or the cost of a guarded divide."""
    return np.float32(127) / (amax + (amax == 0))


def code_sums(codes: np.ndarray) -> np.ndarray:
    """[..., 32] float32 integer codes (|code| <= 127) -> [...] float32 their sums, exact in any order (at most
    4,064 in magnitude), so taken as one matrix-vector product (over 2,304 blocks: 9 against 66 us for numpy's
    reduction, measured here); fewer than MANY values (a decode row) take numpy's reduction."""
    if codes.size < MANY:
        return np.add.reduce(codes, axis=-1, dtype=np.float32)
    return (codes.reshape(-1, codes.shape[-1]) @ np.ones(codes.shape[-1], np.float32)).reshape(codes.shape[:-1])


def _blocks_q8_0(x: np.ndarray) -> np.ndarray:
    """[..., d] -> [..., d] through Q8_0 (32-value blocks, F16 scale); d must be a multiple of 32."""
    b = x.reshape(*x.shape[:-1], -1, 32)
    amax = block_amax(b)[..., None]
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    return (np.rint(b * q8_inverse(amax)) * d).reshape(x.shape)


def _blocks_q8_k(x: np.ndarray) -> np.ndarray:
    """[..., d] -> [..., d] through Q8_K (256-value blocks, F32 scale); d must be a multiple of 256."""
    b = x.reshape(*x.shape[:-1], -1, 256)
    at = np.argmax(np.abs(b), axis=-1)[..., None]
    peak = np.take_along_axis(b, at, axis=-1)  # the value of largest magnitude, with its sign
    iscale = np.divide(np.float32(-127), peak, out=np.zeros_like(peak), where=peak != 0)
    scale = np.divide(np.float32(1), iscale, out=np.zeros_like(iscale), where=iscale != 0)
    return (np.minimum(np.rint(b * iscale), 127) * scale).reshape(x.shape)


def round_activations(x: np.ndarray, fmt: str) -> np.ndarray:
    """x [..., d] float32 as llama.cpp's CPU backend hands it to a matrix product in format `fmt`."""
    if fmt == "f32":
        return x
    if fmt == "f16":
        return x.astype(np.float16).astype(np.float32)
    if fmt == "bf16":
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even, as ggml does
        return rounded.astype(np.uint32).view(np.float32)
    if fmt == "q8_0":
        return _blocks_q8_0(x)
    if fmt == "q8_K":
        return _blocks_q8_k(x)
    raise ValueError(f"unknown activation format {fmt!r}")
