"""Dequantization of the commonest block types (Q4_0, Q4_1, Q8_0) in a few whole-array numpy operations.

The numpy engine decodes a weight again whenever its budget could not keep it
(`weights.Weights`), so decoding speed is what a model larger than the budget
runs at. `gguf.quants` decodes any type, at about 26 million values a second for
Q4_1 on this project's machine; these do the same arithmetic, in the same order
(so the same float32 values, bit for bit: tests/test_engine_weights.py), about
2.5 times as fast, by writing the nibbles straight into the float32 output and
scaling it in place. The k-quants are decoded the same way in `dequant_k`; every
other type goes to `gguf.quants`.

Blocks (ggml's block_q4_0, block_q4_1, block_q8_0): 32 values each, after an F16
scale d (and, for Q4_1, an F16 minimum m); 4-bit codes hold values 0-15 in the
low nibbles of 16 bytes and 16-31 in the high ones.
    Q4_0: x = (q - 8) * d    Q4_1: x = q * d + m    Q8_0: x = q * d (q signed)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox.dequant_k import K_FAST

BLOCK = 32  # values per block of these three types


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[N, 16] uint8 -> [N, 32] float32: low nibbles then high nibbles, as values 0-15."""
    out = np.empty((qs.shape[0], BLOCK), np.float32)
    np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
    return out


def _scales(blocks: np.ndarray, n: int) -> np.ndarray:
    """[N, bytes] -> [N, n] float32: the block's first n F16 values (d, then m)."""
    return np.ascontiguousarray(blocks[:, : 2 * n]).view(np.float16).astype(np.float32)


def q4_0(blocks: np.ndarray) -> np.ndarray:
    """[N, 18] uint8 -> [N, 32] float32"""
    out = _nibbles(blocks[:, 2:])
    out -= np.float32(8)
    out *= _scales(blocks, 1)
    return out


def q4_1(blocks: np.ndarray) -> np.ndarray:
    """[N, 20] uint8 -> [N, 32] float32"""
    dm = _scales(blocks, 2)  # [N, 2]: d, m
    out = _nibbles(blocks[:, 4:])
    out *= dm[:, :1]
    out += dm[:, 1:]
    return out


def q8_0(blocks: np.ndarray) -> np.ndarray:
    """[N, 34] uint8 -> [N, 32] float32"""
    out = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).astype(np.float32)
    out *= _scales(blocks, 1)
    return out


FAST: dict[Q, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {  # type -> (bytes per block, decoder)
    Q.Q4_0: (18, q4_0),
    Q.Q4_1: (20, q4_1),
    Q.Q8_0: (34, q8_0),
    **K_FAST,
}


def dequantize_fast(raw: np.ndarray, ggml_type: Q) -> np.ndarray | None:
    """Stored bytes (whole blocks) -> flat float32 values, or None for a type decoded elsewhere."""
    found = FAST.get(ggml_type)
    if found is None:
        return None
    size, decode = found
    return decode(raw.reshape(-1, size)).reshape(-1)
