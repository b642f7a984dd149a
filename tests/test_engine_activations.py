"""Rounding a product's input as llama.cpp's CPU backend does: Q8_0, Q8_K, BF16, and its effect on the logits."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox.activations import block_amax, code_sums, round_activations


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (4, n)).astype(np.float32)


def test_q8_0_agrees_with_the_gguf_reference_quantizer():
    x = _x(256)
    ours = round_activations(x, "q8_0")
    # gguf-py's Q8_0 (d = max/127, codes = round(x / d)) rounds half away from zero and keeps d in F16:
    # the same grid, so values agree except where x * 127 / max lands within an ulp of a .5 tie.
    theirs = quants.dequantize(quants.quantize(x, Q.Q8_0), Q.Q8_0)
    step = np.abs(x).reshape(4, -1, 32).max(-1, keepdims=True) / 127
    assert np.mean(ours == theirs) > 0.999
    assert np.all(np.abs(ours - theirs).reshape(4, -1, 32) <= step * 1.01)


def _q8_k_reference(block: np.ndarray) -> np.ndarray:
    """quantize_row_q8_K_ref (ggml-quants.c) then dequantize, one value at a time."""
    peak = max(block.tolist(), key=abs)
    if peak == 0:
        return np.zeros_like(block)
    iscale = np.float32(-127.0) / np.float32(peak)
    d = np.float32(1.0) / iscale  # block_q8_K.d; dequantize_row_q8_K gives d * code
    out = []
    for v in block:
        code = min(127, int(np.rint(np.float32(iscale * v))))
        out.append(d * np.float32(code))
    return np.array(out, np.float32)


def test_q8_k_follows_the_reference_loop():
    x = _x(512, seed=1)
    ours = round_activations(x, "q8_K")
    for row in range(4):
        for b in range(2):
            block = x[row, 256 * b : 256 * (b + 1)]
            assert np.allclose(ours[row, 256 * b : 256 * (b + 1)], _q8_k_reference(block), rtol=0, atol=0)


def test_bf16_is_the_nearest_bf16_value():
    x = _x(64, seed=2).ravel()
    ours = round_activations(x, "bf16")
    bits = ours.view(np.uint32)
    assert np.all(bits & 0xFFFF == 0)  # a BF16 value: the low 16 bits of the F32 pattern are zero
    down = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    up = ((x.view(np.uint32) & 0xFFFF0000) + 0x10000).view(np.float32)
    nearest = np.where(np.abs(x - down) <= np.abs(up - x), down, up)
    assert np.array_equal(ours, nearest)


def test_f16_and_f32():
    x = _x(32, seed=3)
    assert round_activations(x, "f32") is x
    assert np.array_equal(round_activations(x, "f16"), x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("width", [96, 1056])  # few blocks reduced directly, many through `block_amax`'s copy
def test_an_all_zero_block_rounds_to_zeros_without_warnings(width):
    import warnings

    from walkthrough.engine.glassbox import quantdot

    x = _x(width)
    x[:, 32:64] = 0.0  # the middle block of every row all zero
    x[1, 32:64] = -0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a divide by zero or 0 * inf would warn
        rounded = round_activations(x, "q8_0")
        values, error = quantdot.rounded_q8_1(x)
        codes, d, s = quantdot.quantize_q8(x)
    assert np.all(rounded[:, 32:64] == 0) and np.all(values[:, 32:64] == 0)
    assert np.all(codes[:, 1] == 0) and np.all(d[:, 1] == 0) and np.all(s[:, 1] == 0) and np.all(error[:, 1] == 0)
    assert np.all(rounded[:, :32] == values[:, :32]) and np.all(np.isfinite(values))


@pytest.mark.parametrize("shape", [(1, 18), (3, 5), (4, 18), (128, 18), (2, 64, 18)])
def test_block_helpers_give_numpy_s_own_maxima_and_exact_code_sums(shape):
    rng = np.random.default_rng(sum(shape))
    b = rng.standard_normal((*shape, 32)).astype(np.float32)
    b[..., 5] = -8.0  # a negative value has the largest magnitude
    assert np.array_equal(block_amax(b), np.abs(b).max(axis=-1))
    codes = np.rint(b * np.float32(127 / 8))
    exact = np.array([int(c) for c in codes.reshape(-1)]).reshape(codes.shape).sum(axis=-1)
    assert code_sums(codes).dtype == np.float32 and np.array_equal(code_sums(codes), exact)
