"""Quantized KV caches (Q8_0, Q4_0) as llama.cpp keeps and reads them.

llama.cpp turns q and k (runs of the largest power of 2 from 64 up dividing the key size) and v (runs of 64)
with a Walsh-Hadamard rotation before a quantized cache stores them, and the attention output back
(src/llama-kv-cache.cpp `attn_rot_k` / `attn_rot_v`; `ops.hadamard_rows` follows ggml's `fwht`); it stores rows
with the CPU's `quantize_row_q8_0` and reads them in flash attention's per-cell kernel (q to Q8_0, the cache
type's own dot, values summed in float32: `ops.flash_attention_quantized`). With exact products the engine
gives llama.cpp's numbers bit for bit: every op of a 24-token prefill and the logits of two decode passes, on
a random llama with 64-value heads and on SmolLM2 (Gemma 3's 256-value keys: test_gemma3_exact.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_support import both_engines, needs_llama, write_llama
from real_weights_support import find_smollm2, request_ids

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.model import Model
from walkthrough.inspect.gguf import open_gguf

PROMPT = 24


def _hadamard(n: int) -> np.ndarray:
    """The orthonormal Walsh-Hadamard matrix as llama.cpp builds it (`ggml_gen_hadamard`), float64."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_hadamard_rows_are_the_rotation_and_turn_back(n):
    x = np.random.default_rng(n).standard_normal((3, 2, 2 * n)).astype(np.float32)
    turned = ops.hadamard_rows(x, n)
    exact = (x.reshape(-1, n).astype(np.float64) @ _hadamard(n).T).reshape(x.shape)
    assert np.abs(turned - exact).max() < 1e-5
    assert np.abs(ops.hadamard_rows(turned, n) - x).max() < 1e-5


@pytest.mark.parametrize(("n_embd", "cache_type", "turns"), [(256, "q8_0", (64, 64)), (256, "q4_0", (64, 64)),
                                                            (256, "f16", (0, 0)), (512, "q8_0", (128, 64))])
def test_a_quantized_cache_turns_heads_of_64_and_more(tmp_path, n_embd, cache_type, turns):
    config = Model(open_gguf(write_llama(tmp_path / "l.gguf", n_embd=n_embd, n_ff=64, n_layers=1))).config
    assert config.head_k(0) == n_embd // 4
    assert KVCache(config, cache_type).rotation(0) == turns


def _assert_identical(path, kv_type: str) -> None:
    ids = request_ids(open_gguf(path))[:PROMPT]
    assert len(ids) == PROMPT
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = both_engines(path, ids, 2, kv_type=kv_type, flash=True)
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(PROMPT))
        first = op_diff.first_difference(diffs)
        assert first is None, f"layer {layer}: {first.describe()}"
    assert len(ours_logits) == len(theirs_logits) == 3
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


@needs_llama
@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_a_quantized_cache_gives_llama_cpps_numbers_bit_for_bit(tmp_path, kv_type):
    _assert_identical(write_llama(tmp_path / "l.gguf", n_embd=256, n_layers=2), kv_type)


@needs_llama
@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_smollm2_with_a_quantized_cache_gives_llama_cpps_numbers_bit_for_bit(kv_type):
    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2 Q4_1 is not on this machine (SMOLLM2_GGUF)")
    _assert_identical(path, kv_type)
