"""engine.quantdot: the stored blocks it unpacks, and its products against ggml's own kernels.

Unpacking is checked against gguf.quants' dequantization (an independent reading of the same
bytes). The products are checked against llama.cpp's CPU library itself when llama-cpp-python is
installed: `quantize_row_q8_*` and `ggml_vec_dot_*` called through ctypes on the same rows must
give the same float32 numbers, bit for bit.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from llama_support import put_block_scales

from walkthrough.engine.glassbox import kquant_low, kquant_tiled, quantdot

QK_K = quantdot.QK_K

TYPES = sorted(quantdot.SUPPORTED, key=lambda t: t.value)
# Byte offsets of each block's fp16 scale fields (ggml-common.h block layouts).
SCALE_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2],
                Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.Q2_K: [80, 82], Q.Q3_K: [108],
                Q.IQ4_NL: [0], Q.IQ4_XS: [0], Q.MXFP4: [], **{t: [0] for t in quantdot.GRID_TYPES},
                Q.IQ1_S: [0], Q.IQ1_M: [], Q.TQ1_0: [52], Q.TQ2_0: [64]}  # IQ1_M: d's bits are spread over its scale words (`put_block_scales`)
PARTNER = {Q.Q8_0: "q8_0", Q.Q4_0: "q8_0", Q.Q5_0: "q8_0", Q.Q4_1: "q8_1", Q.Q5_1: "q8_1",
           Q.Q4_K: "q8_K", Q.Q5_K: "q8_K", Q.Q6_K: "q8_K", Q.Q2_K: "q8_K", Q.Q3_K: "q8_K",
           Q.IQ4_NL: "q8_0", Q.IQ4_XS: "q8_K", Q.MXFP4: "q8_0", **dict.fromkeys(quantdot.GRID_TYPES, "q8_K"),
           **dict.fromkeys(quantdot.ONE_BIT, "q8_K"), **dict.fromkeys(quantdot.TERNARY, "q8_K")}
# Types whose products of 2+ tokens take another kernel than one token's `ggml_vec_dot_*` (another float order):
# IQ4_NL goes to tinyBLAS (one chain where vec_dot keeps two)
SECOND_KERNEL_FROM_2 = frozenset({Q.IQ4_NL})


def random_rows(qtype: Q, n_out: int, n_in: int, seed: int = 0) -> np.ndarray:
    """Random stored rows whose scales are finite, small fp16 numbers: [n_out, row bytes] uint8."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_out, n_in // block, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scales = rng.uniform(0.001, 0.05, size=raw.shape[:2]).astype(np.float16)
        raw[..., off : off + 2] = scales.view(np.uint8).reshape(*raw.shape[:2], 2)
    if qtype == Q.MXFP4:  # the E8M0 exponent byte: scales 2^-11 .. 2^-4
        raw[..., 0] = rng.integers(117, 125, size=raw.shape[:2], dtype=np.uint8)
    if qtype == Q.IQ1_M:
        put_block_scales(raw, qtype, rng.uniform(0.001, 0.05, size=raw.shape[:2]).astype(np.float16))
    return np.ascontiguousarray(raw.reshape(n_out, -1))


def activations(n: int, n_in: int, seed: int = 1) -> np.ndarray:
    """Rows with a few large outliers, as real activations have."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n_in)) * np.where(rng.random(n_in) < 0.02, 40, 1)).astype(np.float32)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_unpacked_blocks_are_what_gguf_dequantizes(qtype):
    n_out, n_in = 6, 512
    raw = random_rows(qtype, n_out, n_in)
    codes, d, m, sub = quantdot.unpack(raw, qtype, n_in)
    block = GGML_QUANT_SIZES[qtype][0]
    c = codes.reshape(n_out, n_in // block, block).astype(np.float64)
    if qtype in (Q.Q4_K, Q.Q5_K):
        sc, mn = sub[:, :, 0, :, None], sub[:, :, 1, :, None]  # [o, nb, 8, 1]
        ours = d[..., None, None] * sc * c.reshape(n_out, -1, 8, 32) - m[..., None, None] * mn
    elif qtype == Q.Q6_K:
        ours = d[..., None, None] * sub[..., None] * (c.reshape(n_out, -1, 16, 16) - 32)
    elif qtype == Q.Q2_K:
        sc, mn = sub[:, :, 0, :, None], sub[:, :, 1, :, None]  # [o, nb, 16, 1]
        ours = d[..., None, None] * sc * c.reshape(n_out, -1, 16, 16) - m[..., None, None] * mn
    elif qtype == Q.Q3_K:
        ours = d[..., None, None] * sub[..., None] * c.reshape(n_out, -1, 16, 16)
    elif qtype == Q.IQ4_XS:
        ours = d[..., None, None] * sub[..., None] * c.reshape(n_out, -1, 8, 32)
    elif qtype in quantdot.GRID_TYPES:  # grid values times 2 ls + 1 (per 32 or 16) times the constant
        per, constant = quantdot.GRID_TYPES[qtype]
        ours = d[..., None, None] * sub[..., None] * constant * c.reshape(n_out, -1, QK_K // per, per)
    elif qtype in quantdot.ONE_BIT:  # (grid value + sign / 8) times 2 ls + 1 (per 32 or 16) times d
        per, _ = quantdot.ONE_BIT[qtype]
        values = (c.reshape(n_out, -1, QK_K) + m / 8).reshape(n_out, -1, QK_K // per, per)
        ours = d[..., None, None] * sub[..., None] * values
    elif qtype in quantdot.TERNARY:  # codes 0, 1, 2 for -1, 0, 1
        ours = d[..., None] * (c.reshape(n_out, -1, QK_K) - 1)
    else:
        ours = d[..., None] * c + (m[..., None] if m is not None else 0)
    ref = quants.dequantize(raw, qtype).reshape(n_out, n_in)
    np.testing.assert_allclose(ours.reshape(n_out, n_in), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_rows_do_not_depend_on_the_other_rows(qtype):
    """Each row's product is the same whatever rows share its pass, within one of ggml's kernels: alone
    (vec_dot) against 3 together; 17 together against 8 then 9 (k-quants: the tiled kernel, `kquant_tiled`)."""
    raw, x = random_rows(qtype, 40, 512), activations(17, 512)
    packed = quantdot.pack(raw, qtype, 512)
    singles = np.concatenate([quantdot.matmul(x[i : i + 1], packed) for i in range(3)])
    if qtype in SECOND_KERNEL_FROM_2:  # rows of 2+ tokens agree among themselves, not with one token's kernel
        three = quantdot.matmul(x[:3], packed)
        assert np.array_equal(three, np.concatenate([quantdot.matmul(x[:2], packed), quantdot.matmul(x[1:3], packed)[1:]]))
        np.testing.assert_allclose(three, singles, rtol=1e-5, atol=1e-6 * np.abs(singles).max())
        assert not np.array_equal(three, singles)
    else:
        assert np.array_equal(quantdot.matmul(x[:3], packed), singles)
    together = quantdot.matmul(x, packed)
    assert np.array_equal(together, np.concatenate([quantdot.matmul(x[:8], packed), quantdot.matmul(x[8:], packed)]))
    if qtype in kquant_low.TYPES or kquant_tiled.applies(qtype, len(x)):  # another float order than the per-row kernel, the same integer sums
        alone = np.concatenate([quantdot.matmul(x[i : i + 1], packed) for i in range(len(x))])
        np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6 * np.abs(alone).max())
        assert not np.array_equal(together, alone)


@pytest.fixture(scope="module")
def ggml_cpu():
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: no ggml to compare with")
    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so"))
    lib.ggml_cpu_init()  # fills ggml's fp16 tables
    return lib


def ggml_products(lib, qtype: Q, raw: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[n, n_in] x stored rows -> [n, n_out] from ggml's quantize_row and vec_dot, one dot at a time."""
    partner = PARTNER[qtype]
    block, size = GGML_QUANT_SIZES[Q[partner.upper()]]
    quantize = getattr(lib, f"quantize_row_{partner}")
    quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    name = f"ggml_vec_dot_{qtype.name.lower()}_{partner}".replace("_k_", "_K_")
    dot = getattr(lib, name)
    dot.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    n_in = x.shape[1]
    out = np.zeros((len(x), len(raw)), dtype=np.float32)
    s = ctypes.c_float()
    for i, row in enumerate(np.ascontiguousarray(x)):
        q = np.zeros(n_in // block * size, dtype=np.uint8)
        quantize(row.ctypes.data, q.ctypes.data, n_in)
        for o in range(len(raw)):
            dot(n_in, ctypes.byref(s), 0, raw[o].ctypes.data, 0, q.ctypes.data, 0, 1)
            out[i, o] = s.value
    return out


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_products_are_ggmls_bit_for_bit(ggml_cpu, qtype):
    raw, x = random_rows(qtype, 48, 1536), activations(4, 1536)
    packed = quantdot.pack(raw, qtype, 1536)
    ours = np.concatenate([quantdot.matmul(x[i : i + 1], packed) for i in range(len(x))])  # one token: vec_dot
    assert np.array_equal(ours, ggml_products(ggml_cpu, qtype, raw, x))
    if qtype not in SECOND_KERNEL_FROM_2 and not kquant_tiled.applies(qtype, len(x)):
        assert np.array_equal(quantdot.matmul(x, packed), ours)


FLOAT_ROWS = {"f16": ("ggml_vec_dot_f16", np.float16), "bf16": ("ggml_vec_dot_bf16", None)}


@pytest.mark.parametrize("kind", sorted(FLOAT_ROWS))
@pytest.mark.parametrize("k", [64, 80, 1536, 1544])
def test_half_precision_row_dots_are_ggmls_bit_for_bit(ggml_cpu, kind, k):
    """`ggml_math.vec_dot_f16` / `vec_dot_bf16` against ggml's own kernels on rows of F16 / BF16 values, with and
    without k % 32 values left over (each reduces its 8 lanes in another order: the bf16 one was measured)."""
    from walkthrough.engine.glassbox import ggml_math
    from walkthrough.engine.glassbox.activations import round_activations

    name, dtype = FLOAT_ROWS[kind]
    x, w = round_activations(activations(6, k), kind), round_activations(activations(40, k, seed=2), kind)
    if dtype is None:  # BF16 bits: the float32's top half
        stored = lambda a: np.ascontiguousarray((a.view(np.uint32) >> 16).astype(np.uint16))
    else:
        stored = lambda a: np.ascontiguousarray(a.astype(dtype))
    dot = getattr(ggml_cpu, name)
    dot.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p,
                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    theirs = np.zeros((len(x), len(w)), np.float32)
    s = ctypes.c_float()
    xs, ws = stored(x), stored(w)
    for i in range(len(x)):
        for o in range(len(w)):
            dot(k, ctypes.byref(s), 0, ws[o].ctypes.data, 0, xs[i].ctypes.data, 0, 1)
            theirs[i, o] = s.value
    ours = ggml_math.ROW_DOTS[kind](w[None], x[:, None])
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("qtype", sorted({*quantdot.GRID_TYPES, *quantdot.ONE_BIT, *quantdot.TERNARY},
                                         key=lambda t: t.value), ids=lambda t: t.name)
def test_types_read_through_gguf_take_blocks_whose_scale_is_not_finite(ggml_cpu, qtype):
    """A hostile file's NaN or infinite block scale leaves no codes in gguf's values: the weight still packs, its
    other rows keep ggml's bits, and a row with a NaN scale gives NaN as ggml's does (an infinite one: not finite)."""
    raw = random_rows(qtype, 8, 512)
    blocks = raw.reshape(8, 2, -1)
    put_block_scales(blocks[0:1, 0:1], qtype, np.array([[np.nan]], np.float16))
    put_block_scales(blocks[1:2, 1:2], qtype, np.array([[np.inf]], np.float16))
    x = activations(2, 512)
    packed = quantdot.pack(raw, qtype, 512)
    ours = np.concatenate([quantdot.matmul(x[i : i + 1], packed) for i in range(2)])
    theirs = ggml_products(ggml_cpu, qtype, raw, x)
    assert np.isnan(ours[:, 0]).all() and np.isnan(theirs[:, 0]).all()
    assert not np.isfinite(ours[:, 1]).any() and not np.isfinite(theirs[:, 1]).any()
    assert np.array_equal(ours[:, 2:], theirs[:, 2:])


def test_the_tiled_kernels_types_name_every_grid_and_one_bit_type():
    """`kquant_tiled.TAKES` spells its types out (it cannot read quantdot's sets at import); llama.cpp's tiled kernel
    takes every grid and one-bit type, and no ternary one."""
    assert {*quantdot.GRID_TYPES, *quantdot.ONE_BIT} <= kquant_tiled.TAKES
    assert not set(quantdot.TERNARY) & kquant_tiled.TAKES
